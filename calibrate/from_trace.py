"""A profile from a PyTorch profiler trace of the user's own training (``calibrate --from-trace``).

A user whose model and hardware commsim never calibrated usually already has a trace:
``torch.profiler`` exported with ``export_chrome_trace`` (the Kineto JSON that HTA and Perfetto
read), recorded on CPU or on a GPU.  This reads a few iterations of one rank from it and turns
them into the compute half of a profile; the network half comes from a calibration
(``--network PROFILE``) or from ``--bandwidth``/``--latency``.  No torch is needed.

Steps, per trace:
1. Iterations: each ends with the optimizer's step (``Optimizer.step#...`` annotation, which
   torch.optim records); an iteration starts where the previous one ended, so the first is
   dropped (it has no start, and it is the warm-up).
2. Phases on the host timeline: backward is the span of the autograd engine's
   ``evaluate_function`` events; forward is from the iteration's start to backward's start,
   without ``zero_grad`` and without data loading (``enumerate(DataLoader)...``, kept apart as
   the data phase); the optimizer phase is ``Optimizer.step`` plus ``zero_grad``.
3. On a GPU trace, each phase is instead the span of the kernels its host events launched
   (matched by the ``correlation`` id the runtime's launch and the kernel share), because the
   host runs ahead of the device.
4. Gradient-ready times: one ``torch::autograd::AccumulateGrad`` event per parameter and
   backward; a gradient is ready when its event ends (GPU: when the last kernel launched by
   then ends).  Its fraction of backward is what DDP's buckets wait for.  The parameters'
   shapes come from the events' ``Input Dims`` (record the trace with ``record_shapes=True``),
   listed in reverse ready order, the order autograd produces them: registration order for a
   plain feed-forward model, which is what DDP's buckets follow.
5. Batch size and classes come from the loss's input dims (``nll_loss``/``cross_entropy``),
   the input shape from the first forward op; each phase is the median over the iterations.
Several traces at different batch sizes give the compute table several points.
With ``--network PROFILE`` the profile also takes from that calibration how much co-located
ranks slowed each other's compute there (``host_sharing``, CPU traces only) and where it ran (the
emulated rate, the cores its ranks shared).
"""
from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from commsim.errors import UserError
from commsim.files import read_json
from commsim.profile import (PHASES, SCHEMA_VERSION, CollectiveFit, ComputeTable, NetworkFit,
                             ParamSpec, Profile, interpolate)

STEP_PREFIX = "Optimizer.step#"
ZERO_PREFIX = "Optimizer.zero_grad#"
DATA_PREFIX = "enumerate(DataLoader)"
BACKWARD_PREFIX = "autograd::engine::evaluate_function:"
ACCUMULATE = "torch::autograd::AccumulateGrad"
LOSS_OPS = ("aten::nll_loss", "aten::nll_loss_nd", "aten::cross_entropy_loss",
            "aten::nll_loss2d")
DTYPE_BYTES = {"float": 4, "c10::Half": 2, "c10::BFloat16": 2, "double": 8}
MAX_TRACE_BYTES = 1024 ** 3


@dataclass(frozen=True)
class Span:
    start: float   # seconds, on the trace's clock
    end: float

    @property
    def s(self) -> float:
        return self.end - self.start


@dataclass(frozen=True)
class TracedStep:
    """What one traced iteration holds, in seconds."""
    data_s: float
    forward_s: float
    backward_s: float
    optimizer_s: float
    ready_fraction: tuple[float, ...]     # per gradient, in ready order


@dataclass(frozen=True)
class TracedRun:
    """A trace's iterations and what they say about the model."""
    path: str
    device: str                          # "cpu" or "cuda"
    batch_size: int
    classes: int
    input_shape: tuple[int, ...]
    grads: tuple[tuple[tuple[int, ...], int], ...]   # (shape, bytes a value), in ready order
    steps: tuple[TracedStep, ...]

    def median(self, field: str) -> float:
        return statistics.median(getattr(s, field) for s in self.steps)

    def ready_fraction(self) -> tuple[float, ...]:
        return tuple(statistics.median(s.ready_fraction[i] for s in self.steps)
                     for i in range(len(self.grads)))


def _events(data: Any, where: str) -> list[dict]:
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise UserError(f"{where}: not a Chrome trace (no traceEvents list)")
    return [e for e in events if isinstance(e, dict) and e.get("ph") == "X"
            and isinstance(e.get("ts"), (int, float)) and isinstance(e.get("dur"), (int, float))]


def _span(e: dict) -> Span:
    return Span(e["ts"] * 1e-6, (e["ts"] + e["dur"]) * 1e-6)


def _within(spans: list[Span], window: Span) -> list[Span]:
    return [s for s in spans if s.start >= window.start and s.end <= window.end]


class _Device:
    """Host span -> device span through the kernels it launched (a GPU trace), or itself."""

    def __init__(self, events: list[dict]):
        kernels = {}
        for e in events:
            if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
                corr = (e.get("args") or {}).get("correlation")
                if corr is not None:
                    kernels[corr] = _span(e)
        self.launches = sorted(
            (_span(e).start, kernels[(e.get("args") or {}).get("correlation")])
            for e in events if e.get("cat") == "cuda_runtime"
            and (e.get("args") or {}).get("correlation") in kernels)
        self.gpu = bool(self.launches)

    def span(self, host: Span) -> Span | None:
        """The kernels launched inside ``host``: first start to last end (None: none)."""
        if not self.gpu:
            return host
        ks = [k for t, k in self.launches if host.start <= t <= host.end]
        return Span(min(k.start for k in ks), max(k.end for k in ks)) if ks else None

    def done_by(self, t: float, floor: float) -> float:
        """When the device finished everything launched by host time ``t``."""
        if not self.gpu:
            return t
        ends = [k.end for launched, k in self.launches if launched <= t]
        return max(ends, default=floor)


def _dims(e: dict) -> list:
    return (e.get("args") or {}).get("Input Dims") or []


def read_trace(path: str | Path) -> TracedRun:
    """One trace file -> its iterations (see the module docstring)."""
    where = f"--from-trace {path}"
    events = _events(read_json(path, "--from-trace"), where)
    steps = sorted((e for e in events if str(e.get("name", "")).startswith(STEP_PREFIX)),
                   key=lambda e: e["ts"])
    if len(steps) < 2:
        raise UserError(f"{where}: {len(steps)} optimizer step(s) in the trace; record at least "
                        "two training iterations (the first one is dropped)")
    device = _Device(events)
    by_name = lambda prefix: sorted((_span(e) for e in events  # noqa: E731
                                     if str(e.get("name", "")).startswith(prefix)),
                                    key=lambda s: s.start)
    backward_ops = by_name(BACKWARD_PREFIX)
    zero = by_name(ZERO_PREFIX)
    data = by_name(DATA_PREFIX)
    accumulate = sorted((e for e in events if e.get("name") == ACCUMULATE),
                        key=lambda e: e["ts"])
    loss = [e for e in sorted(events, key=lambda e: e["ts"]) if e.get("name") in LOSS_OPS
            and len(_dims(e)) >= 1 and len(_dims(e)[0]) == 2]
    if not loss:
        raise UserError(f"{where}: no loss op ({', '.join(LOSS_OPS)}) with input dims: record "
                        "the trace with record_shapes=True, training with a classification loss")
    batch, classes = (int(x) for x in _dims(loss[0])[0])
    first_op = next((e for e in sorted(events, key=lambda e: e["ts"])
                     if e.get("cat") == "cpu_op" and _dims(e) and _dims(e)[0]
                     and _dims(e)[0][0] == batch and len(_dims(e)[0]) >= 2), None)
    input_shape = tuple(int(x) for x in _dims(first_op)[0][1:]) if first_op else (classes,)

    out, grads = [], None
    for prev, step in zip(steps, steps[1:]):
        it = Span(_span(prev).end, _span(step).end)
        bwd = _within(backward_ops, it)
        acc = [e for e in accumulate if it.start <= e["ts"] * 1e-6 <= it.end]
        if not bwd or not acc:
            raise UserError(f"{where}: an iteration without backward or AccumulateGrad events; "
                            "is it a training loop (loss.backward(), optimizer.step())?")
        host_bwd = Span(min(s.start for s in bwd), max(s.end for s in bwd))
        zeros = _within(zero, it)
        loads = _within(data, it)
        host_fwd = Span(max([it.start] + [s.end for s in zeros + loads if s.end <= host_bwd.start]),
                        host_bwd.start)
        phase = {name: device.span(s) for name, s in (("forward", host_fwd),
                                                       ("backward", host_bwd))}
        if phase["forward"] is None or phase["backward"] is None:
            raise UserError(f"{where}: a GPU trace whose forward or backward launched no kernel")
        backward = Span(phase["backward"].start,
                        max(phase["backward"].end, phase["forward"].end))
        host_opt = [_span(step)] + zeros
        opt_spans = [device.span(s) for s in host_opt]
        optimizer_s = sum(s.s for s in opt_spans if s is not None)
        ready = [(device.done_by(_span(e).end, backward.start) - backward.start) / backward.s
                 for e in acc]
        shapes = []
        for e in acc:
            dims, types = _dims(e), (e.get("args") or {}).get("Input type") or []
            if not dims:
                raise UserError(f"{where}: AccumulateGrad events carry no shapes: record the "
                                "trace with record_shapes=True")
            shapes.append((tuple(int(x) for x in dims[0]),
                           DTYPE_BYTES.get(types[0] if types else "float", 4)))
        if grads is None:
            grads = tuple(shapes)
        elif tuple(shapes) != grads:
            raise UserError(f"{where}: iterations accumulate different gradients; trace a "
                            "steady training loop")
        out.append(TracedStep(data_s=sum(s.s for s in loads), forward_s=phase["forward"].s,
                              backward_s=backward.s, optimizer_s=optimizer_s,
                              ready_fraction=tuple(min(1.0, max(0.0, r)) for r in ready)))
    return TracedRun(path=str(path), device="cuda" if device.gpu else "cpu", batch_size=batch,
                     classes=classes, input_shape=input_shape, grads=grads, steps=tuple(out))


def network_from(*, network: Profile | None, bandwidth_Bps: float | None,
                 latency_s: float | None) -> tuple[NetworkFit, dict]:
    """The network half: a calibration's link and collective fits, or a plain alpha-beta link
    (every collective at the link's rate, no per-call overhead, no reduction cost)."""
    if network is not None:
        net = network.network
        if bandwidth_Bps is not None or latency_s is not None:
            net = network.with_network(bandwidth_Bps=bandwidth_Bps, latency_s=latency_s).network
        return net, dict(network.collectives)
    if bandwidth_Bps is None:
        raise UserError("--from-trace needs the network: --network PROFILE (a calibration) or "
                        "--bandwidth RATE [--latency TIME]")
    net = NetworkFit(latency_s=latency_s or 0.0, bandwidth_Bps=bandwidth_Bps)
    fits = {op: CollectiveFit(latency_s=net.latency_s, bandwidth_Bps=bandwidth_Bps)
            for op in ("send_recv", "all_reduce", "gather", "scatter", "broadcast")}
    return net, fits


# What a network calibration's metadata says about where it ran, carried into the profile.
HOST_METADATA = ("emulated_rate_Bps", "cores", "shared_cpu_cores")


def host_sharing(network: Profile, traced: ComputeTable) -> dict:
    """The calibration's co-located compute tables (every rank of a host computing at once, and
    with co-runners: ``ComputeTable.contended``/``oversubscribed``) carried onto the traced
    compute, as ratios: at each traced batch size, each phase's traced time times what sharing
    the host cost the calibrated model at that size (interpolated over its sizes).

    Why: how much co-located ranks slow each other is a property of the hosts (cores, caches,
    memory bandwidth), which only a calibration on them measures; a trace of one process cannot.
    Without it, ranks that share cores were predicted at processor sharing's speed, far faster
    than they ran.  Only for a CPU trace: a GPU's compute does not share the host's cores."""
    out = {}
    alone = network.compute
    for name in ("contended", "oversubscribed"):
        table = getattr(alone, name)
        if not table or not table.get("batch_sizes"):
            continue
        sizes = tuple(table["batch_sizes"])
        scaled = {}
        for phase in PHASES:
            ratios = tuple(t / alone.time_s(phase, b) if alone.time_s(phase, b) > 0 else 1.0
                           for b, t in zip(sizes, table[f"{phase}_s"]))
            scaled[f"{phase}_s"] = [traced.time_s(phase, b) * _ratio_at(sizes, ratios, b)
                                    for b in traced.batch_sizes]
        out[name] = {**{k: v for k, v in table.items() if k not in scaled},
                     "batch_sizes": list(traced.batch_sizes), **scaled}
    return out


def _ratio_at(sizes: tuple, ratios: tuple, batch: float) -> float:
    """A measured ratio curve at ``batch``: linear between sizes, flat beyond them."""
    if batch <= sizes[0]:
        return ratios[0]
    if batch >= sizes[-1]:
        return ratios[-1]
    return interpolate(sizes, ratios, batch)


def profile_from_traces(paths: list[str | Path], *, network: Profile | None = None,
                        bandwidth_Bps: float | None = None, latency_s: float | None = None,
                        metadata: dict | None = None) -> Profile:
    """Traces of one model at one or more batch sizes, and the network -> a profile."""
    runs = sorted((read_trace(p) for p in paths), key=lambda r: r.batch_size)
    first = runs[0]
    for r in runs[1:]:
        if r.grads != first.grads:
            raise UserError(f"--from-trace {r.path}: not the model of {first.path} (other "
                            "gradients)")
    if len({r.batch_size for r in runs}) != len(runs):
        raise UserError("--from-trace: two traces of the same batch size; give one per size")
    net, fits = network_from(network=network, bandwidth_Bps=bandwidth_Bps, latency_s=latency_s)
    # Registration order is the reverse of the order autograd readies the gradients.
    order = list(range(len(first.grads)))[::-1]
    params = tuple(ParamSpec(name=f"grad{i}", numel=math.prod(first.grads[i][0]),
                             bytes=math.prod(first.grads[i][0]) * first.grads[i][1])
                   for i in order)
    ready_run = min(runs, key=lambda r: abs(r.batch_size - 64))
    fractions = ready_run.ready_fraction()
    compute = ComputeTable(
        threads_per_rank=1, batch_sizes=tuple(r.batch_size for r in runs),
        forward_s=tuple(r.median("forward_s") for r in runs),
        backward_s=tuple(r.median("backward_s") for r in runs),
        optimizer_s=tuple(r.median("optimizer_s") for r in runs),
        data_s=tuple(r.median("data_s") for r in runs) if any(
            r.median("data_s") for r in runs) else ())
    if network is not None and first.device == "cpu":
        compute = replace(compute, **host_sharing(network, compute))
    meta = {"source": "commsim calibrate --from-trace", "device": first.device,
            "traces": [Path(r.path).name for r in runs],
            "iterations": [len(r.steps) for r in runs],
            "network_from": (network.metadata.get("command", "a profile") if network
                             else "--bandwidth/--latency (no collective overheads)"),
            # Where the network was measured: the emulated rate and the cores its ranks shared
            # (how ``validate`` describes the cluster the live cells ran on).
            **({k: network.metadata[k] for k in HOST_METADATA if k in network.metadata}
               if network is not None else {}),
            **(metadata or {})}
    return Profile(schema_version=SCHEMA_VERSION, metadata=meta,
                   model_name=f"traced:{Path(first.path).stem}",
                   input_shape=first.input_shape, params=params, compute=compute,
                   grad_ready_fraction=tuple(fractions[i] for i in order),
                   grad_ready_batch_size=ready_run.batch_size, network=net, collectives=fits,
                   samples={"traces": [{"path": Path(r.path).name, "batch_size": r.batch_size,
                                        "device": r.device,
                                        "steps": [asdict(s) | {"ready_fraction":
                                                             list(s.ready_fraction)}
                                                  for s in r.steps]} for r in runs]})
