"""The calibration profile: a frozen, versioned, JSON-serialised record of what was measured.

A profile is data, not code: it is written by ``commsim calibrate`` (or, for tests, built in
Python), read by the cost model, and never pickled.  Every field carries its unit in its name;
loading converts nothing because the file already stores SI base units (seconds, bytes, bytes/s).

Schema (version 1), top level::

    schema            "commsim.profile"
    schema_version    1
    metadata          {source, created, host, cpu, cores, nodes, ranks_per_host, threads_per_rank,
                       torch_version, backend, interface, emulated_rate_Bps, command, ...}
    model             {name, input_shape, dtype_bytes, params: [{name, numel, bytes}, ...],
                       [buffers: [{name, numel, bytes}, ...]]  (batch-norm statistics etc.)}
    compute           {threads_per_rank, batch_sizes, forward_s, backward_s, optimizer_s,
                       [forward_spread_s, backward_spread_s, optimizer_spread_s],
                       [data_s, data_spread_s]  (loading a batch before forward),
                       [contended: {ranks, batch_sizes, forward_s, backward_s, optimizer_s}],
                       [oversubscribed: {ranks, busy_threads, batch_sizes, forward_s, ...}]}
    grad_ready        {batch_size, fraction: [one per param, registration order, 0..1 of backward]}
    network           {latency_s, bandwidth_Bps, [intra_host_latency_s, intra_host_bandwidth_Bps],
                       [contention_load, contention_bandwidth_Bps, contention_compute_speed]}
    collectives       {name: {latency_s, bandwidth_Bps, reduction_s_per_B, overhead_s,
                              world_size, [ci95: {...}], [r2]}}
    samples           free-form raw measurements (kept for reports and re-fitting)

``network`` is the point-to-point link (what one message costs: latency_s + bytes/bandwidth_Bps).
``collectives`` are fits of whole Gloo calls at the calibrated world size; the simulator takes the
per-call overhead and the reduction cost (seconds per byte reduced) from them and composes the
rest from the link, so that it can predict any world size.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

from commsim.errors import UserError
from commsim.files import atomic_write_text, parse_json, read_text

SCHEMA = "commsim.profile"
SCHEMA_VERSION = 1
SUPPORTED_VERSIONS = (1,)


class ProfileError(ValueError):
    """A profile that cannot be used; the message names the offending field."""


# ----------------------------------------------------------------------------------------------
# Dataclasses
# ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ParamSpec:
    """One parameter tensor of the model, in registration (``model.parameters()``) order."""
    name: str
    numel: int
    bytes: int


# The phases of one training step the compute table times, in order.
PHASES = ("forward", "backward", "optimizer")


@dataclass(frozen=True)
class ComputeTable:
    """Forward/backward/optimizer seconds per per-rank batch size, measured alone: ``commsim
    calibrate`` stores its robust fit (affine plus a quadratic term) over all repetitions where
    the sweep follows it within noise (the raw medians and residuals are in
    ``samples.compute_fit``), else each size's median.

    Times between measured batch sizes are interpolated linearly; beyond the ends the end
    segment is extended (a rank's compute is close to affine in its batch size on CPUs).
    """
    threads_per_rank: int
    batch_sizes: tuple[int, ...]
    forward_s: tuple[float, ...]
    backward_s: tuple[float, ...]
    optimizer_s: tuple[float, ...]
    forward_spread_s: tuple[float, ...] = ()
    backward_spread_s: tuple[float, ...] = ()
    optimizer_spread_s: tuple[float, ...] = ()
    contended: Mapping[str, Any] | None = None
    # The same with co-runners beside the ranks: {ranks, busy_threads, batch_sizes, <phase>_s}
    # (``calibrate.corunner``): what more busy threads than cores cost.
    oversubscribed: Mapping[str, Any] | None = None
    # Loading one batch (DataLoader + augmentation) before forward; empty when not measured.
    data_s: tuple[float, ...] = ()
    data_spread_s: tuple[float, ...] = ()

    def time_s(self, phase: str, batch: float) -> float:
        ys = {"forward": self.forward_s, "backward": self.backward_s,
              "optimizer": self.optimizer_s, "data": self.data_s}[phase]
        return interpolate(self.batch_sizes, ys, batch) if ys else 0.0


@dataclass(frozen=True)
class NetworkFit:
    """The point-to-point link: one message of n bytes costs latency_s + n / bandwidth_Bps.

    ``contention_load``/``contention_bandwidth_Bps`` (optional, same length, loads increasing):
    the bus bandwidth a large all-reduce reached while the ranks' CPUs also ran compute threads.
    Load is compute threads per core on a rank's CPU; the first point (load 0) is the collective
    alone.  On shared
    cores Gloo's threads wait for the scheduler at every step of a ring, so communication
    overlapped with backward can run far slower than the link allows; on a slow link the link
    still limits first.  ``contention_compute_speed`` (same length, optional): the fraction of
    its speed the compute kept while the all-reduce ran (1 at the first point: no compute).
    """
    latency_s: float
    bandwidth_Bps: float
    intra_host_latency_s: float | None = None
    intra_host_bandwidth_Bps: float | None = None
    contention_load: tuple[float, ...] = ()
    contention_bandwidth_Bps: tuple[float, ...] = ()
    contention_compute_speed: tuple[float, ...] = ()

    def __post_init__(self):
        if len(self.contention_load) != len(self.contention_bandwidth_Bps):
            raise ProfileError("fields 'network.contention_load' and "
                               "'network.contention_bandwidth_Bps' must have the same length")
        if list(self.contention_load) != sorted(set(self.contention_load)):
            raise ProfileError("field 'network.contention_load' must be strictly increasing")
        if self.contention_compute_speed and (
                len(self.contention_compute_speed) != len(self.contention_load)
                or not all(0 < v <= 1 for v in self.contention_compute_speed)):
            raise ProfileError("field 'network.contention_compute_speed' must hold one value "
                               "in (0, 1] per contention load")


@dataclass(frozen=True)
class CollectiveFit:
    """A fit of one Gloo collective at ``world_size`` ranks.

    ``latency_s`` and ``bandwidth_Bps`` are the α and 1/β of the α-β model for the collective's
    underlying messages, ``reduction_s_per_B`` the γ (CPU seconds per byte reduced) and
    ``overhead_s`` the fixed cost of one call (Python, dispatch, Gloo's bookkeeping).
    ``host_bandwidth_Bps`` (optional) is the host side: the rate the collective reaches with
    the link out of the way (copies, the TCP stack, reductions on the CPUs); a link what-if
    faster than the calibrated one cannot take the collective past it (``costs.wire_factors``).
    """
    latency_s: float
    bandwidth_Bps: float
    reduction_s_per_B: float = 0.0
    overhead_s: float = 0.0
    world_size: int = 2
    r2: float | None = None
    ci95: Mapping[str, Any] | None = None
    host_bandwidth_Bps: float | None = None


@dataclass(frozen=True)
class Profile:
    schema_version: int
    metadata: Mapping[str, Any]
    model_name: str
    input_shape: tuple[int, ...]
    params: tuple[ParamSpec, ...]
    compute: ComputeTable
    grad_ready_fraction: tuple[float, ...]
    grad_ready_batch_size: int
    network: NetworkFit
    collectives: Mapping[str, CollectiveFit]
    samples: Mapping[str, Any] = field(default_factory=dict)
    dtype_bytes: int = 4
    buffers: tuple[ParamSpec, ...] = ()

    @property
    def buffer_bytes(self) -> int:
        return sum(b.bytes for b in self.buffers)

    @property
    def model_bytes(self) -> int:
        return sum(p.bytes for p in self.params)

    @property
    def model_numel(self) -> int:
        return sum(p.numel for p in self.params)

    def collective(self, name: str) -> CollectiveFit:
        """The fit for ``name``; a collective that was not calibrated costs no overhead."""
        fit = self.collectives.get(name)
        if fit is None:
            return CollectiveFit(latency_s=self.network.latency_s,
                                 bandwidth_Bps=self.network.bandwidth_Bps)
        return fit

    def with_network(self, *, bandwidth_Bps: float | None = None,
                     latency_s: float | None = None) -> "Profile":
        """What-if: the same profile on a different link."""
        net = self.network
        if bandwidth_Bps is not None:
            net = replace(net, bandwidth_Bps=bandwidth_Bps)
        if latency_s is not None:
            net = replace(net, latency_s=latency_s)
        return replace(self, network=net)

    # -- serialisation ---------------------------------------------------------------------------
    def to_json_dict(self) -> dict[str, Any]:
        c = self.compute
        compute: dict[str, Any] = {
            "threads_per_rank": c.threads_per_rank,
            "batch_sizes": list(c.batch_sizes),
            "forward_s": list(c.forward_s),
            "backward_s": list(c.backward_s),
            "optimizer_s": list(c.optimizer_s),
        }
        for name in ("forward_spread_s", "backward_spread_s", "optimizer_spread_s", "data_s",
                     "data_spread_s"):
            if getattr(c, name):
                compute[name] = list(getattr(c, name))
        for name in ("contended", "oversubscribed"):
            if getattr(c, name) is not None:
                compute[name] = dict(getattr(c, name))
        network = {k: (list(v) if isinstance(v, tuple) else v)
                   for k, v in asdict(self.network).items() if v not in (None, ())}
        collectives = {}
        for name, fit in sorted(self.collectives.items()):
            collectives[name] = {k: (dict(v) if isinstance(v, Mapping) else v)
                                 for k, v in asdict(fit).items() if v is not None}
        return {
            "schema": SCHEMA,
            "schema_version": self.schema_version,
            "metadata": dict(self.metadata),
            "model": {
                "name": self.model_name,
                "input_shape": list(self.input_shape),
                "dtype_bytes": self.dtype_bytes,
                "params": [asdict(p) for p in self.params],
                "buffers": [asdict(b) for b in self.buffers],
            },
            "compute": compute,
            "grad_ready": {"batch_size": self.grad_ready_batch_size,
                           "fraction": list(self.grad_ready_fraction)},
            "network": network,
            "collectives": collectives,
            "samples": dict(self.samples),
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json_dict(), indent=1, sort_keys=True, allow_nan=False) + "\n"


# ----------------------------------------------------------------------------------------------
# Interpolation (a pure function: the compute cost model)
# ----------------------------------------------------------------------------------------------

def interpolate(xs: tuple[float, ...], ys: tuple[float, ...], x: float) -> float:
    """Piecewise-linear through (xs, ys), extended linearly past both ends, never below 0."""
    if len(xs) == 1:
        return ys[0] * x / xs[0]  # one point: proportional to batch
    if x <= xs[0]:
        i = 0
    elif x >= xs[-1]:
        i = len(xs) - 2
    else:
        i = next(k for k in range(len(xs) - 1) if xs[k] <= x <= xs[k + 1])
    x0, x1, y0, y1 = xs[i], xs[i + 1], ys[i], ys[i + 1]
    y = y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    # Far below the smallest measured batch the line may cross zero: keep a proportional floor.
    return max(y, ys[0] * x / xs[0] if x < xs[0] else 0.0, 0.0)


# ----------------------------------------------------------------------------------------------
# Loading and validation
# ----------------------------------------------------------------------------------------------

class _V:
    """Tiny validator that names the JSON path of whatever is wrong."""

    @staticmethod
    def get(obj: Any, key: str, path: str, kind: type | tuple[type, ...], required: bool = True):
        if not isinstance(obj, dict):
            raise ProfileError(f"field '{path}' must be an object")
        if key not in obj:
            if required:
                raise ProfileError(f"missing field '{path}.{key}'" if path else
                                   f"missing field '{key}'")
            return None
        value = obj[key]
        full = f"{path}.{key}" if path else key
        if kind is float:
            kind = (int, float)
        if isinstance(value, bool) and kind in ((int, float), int):
            raise ProfileError(f"field '{full}' must be a number, got {value!r}")
        if not isinstance(value, kind):
            raise ProfileError(f"field '{full}' has the wrong type: expected "
                               f"{_kind_name(kind)}, got {type(value).__name__}")
        return value


def _kind_name(kind) -> str:
    names = {dict: "object", list: "array", str: "string", int: "integer", float: "number"}
    if isinstance(kind, tuple):
        return " or ".join(sorted({names.get(k, k.__name__) for k in kind}))
    return names.get(kind, kind.__name__)


def _num(value: Any, path: str, *, positive: bool = False, nonneg: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ProfileError(f"field '{path}' must be a finite number, got {value!r}")
    if positive and value <= 0:
        raise ProfileError(f"field '{path}' must be > 0, got {value!r}")
    if nonneg and value < 0:
        raise ProfileError(f"field '{path}' must be >= 0, got {value!r}")
    return float(value)


def _int(value: Any, path: str, *, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ProfileError(f"field '{path}' must be an integer, got {value!r}")
    if value < minimum:
        raise ProfileError(f"field '{path}' must be >= {minimum}, got {value!r}")
    return value


def _nums(values: Any, path: str, n: int | None = None, **kw) -> tuple[float, ...]:
    if not isinstance(values, list):
        raise ProfileError(f"field '{path}' must be an array of numbers")
    if n is not None and len(values) != n:
        raise ProfileError(f"field '{path}' must have {n} entries (one per batch size), "
                           f"has {len(values)}")
    return tuple(_num(v, f"{path}[{i}]", **kw) for i, v in enumerate(values))


def profile_from_dict(data: Any) -> Profile:
    """Validate a decoded JSON document and build a Profile, or raise ProfileError."""
    g = _V.get
    if not isinstance(data, dict):
        raise ProfileError("a profile must be a JSON object")
    schema = g(data, "schema", "", str)
    if schema != SCHEMA:
        raise ProfileError(f"field 'schema' must be {SCHEMA!r}, got {schema!r}")
    version = g(data, "schema_version", "", int)
    if version not in SUPPORTED_VERSIONS:
        raise ProfileError(f"field 'schema_version' is {version}; this commsim reads versions "
                           f"{', '.join(map(str, SUPPORTED_VERSIONS))}")
    metadata = g(data, "metadata", "", dict)

    model = g(data, "model", "", dict)
    name = g(model, "name", "model", str)
    input_shape = tuple(_int(v, f"model.input_shape[{i}]")
                        for i, v in enumerate(g(model, "input_shape", "model", list)))
    dtype_bytes = _int(g(model, "dtype_bytes", "model", int, required=False) or 4,
                       "model.dtype_bytes")
    raw_params = g(model, "params", "model", list)
    if not raw_params:
        raise ProfileError("field 'model.params' must list at least one parameter")
    params = _tensor_specs(raw_params, "model.params", minimum=1)
    buffers = _tensor_specs(g(model, "buffers", "model", list, required=False) or [],
                            "model.buffers", minimum=0)

    comp = g(data, "compute", "", dict)
    sizes_raw = g(comp, "batch_sizes", "compute", list)
    if not sizes_raw:
        raise ProfileError("field 'compute.batch_sizes' must not be empty")
    sizes = tuple(_int(v, f"compute.batch_sizes[{i}]") for i, v in enumerate(sizes_raw))
    if list(sizes) != sorted(set(sizes)):
        raise ProfileError("field 'compute.batch_sizes' must be strictly increasing")
    n = len(sizes)
    spreads = {}
    for key in ("forward_spread_s", "backward_spread_s", "optimizer_spread_s", "data_s",
                "data_spread_s"):
        raw = g(comp, key, "compute", list, required=False)
        spreads[key] = _nums(raw, f"compute.{key}", n, nonneg=True) if raw is not None else ()
    contended = g(comp, "contended", "compute", dict, required=False)
    oversubscribed = g(comp, "oversubscribed", "compute", dict, required=False)
    compute = ComputeTable(
        threads_per_rank=_int(g(comp, "threads_per_rank", "compute", int),
                              "compute.threads_per_rank"),
        batch_sizes=sizes,
        forward_s=_nums(g(comp, "forward_s", "compute", list), "compute.forward_s", n,
                        positive=True),
        backward_s=_nums(g(comp, "backward_s", "compute", list), "compute.backward_s", n,
                         positive=True),
        optimizer_s=_nums(g(comp, "optimizer_s", "compute", list), "compute.optimizer_s", n,
                          nonneg=True),
        contended=contended, oversubscribed=oversubscribed, **spreads)

    ready = g(data, "grad_ready", "", dict)
    fractions = _nums(g(ready, "fraction", "grad_ready", list), "grad_ready.fraction",
                      len(params), nonneg=True)
    if any(f > 1 for f in fractions):
        raise ProfileError("field 'grad_ready.fraction' must hold values in [0, 1]")
    ready_batch = _int(g(ready, "batch_size", "grad_ready", int), "grad_ready.batch_size")

    net = g(data, "network", "", dict)
    network = NetworkFit(
        latency_s=_num(g(net, "latency_s", "network", float), "network.latency_s", nonneg=True),
        bandwidth_Bps=_num(g(net, "bandwidth_Bps", "network", float), "network.bandwidth_Bps",
                           positive=True),
        intra_host_latency_s=_opt_num(net, "intra_host_latency_s", nonneg=True),
        intra_host_bandwidth_Bps=_opt_num(net, "intra_host_bandwidth_Bps", positive=True),
        **_contention(net))

    colls = {}
    for cname, fit in g(data, "collectives", "", dict).items():
        path = f"collectives.{cname}"
        colls[cname] = CollectiveFit(
            latency_s=_num(g(fit, "latency_s", path, float), f"{path}.latency_s", nonneg=True),
            bandwidth_Bps=_num(g(fit, "bandwidth_Bps", path, float), f"{path}.bandwidth_Bps",
                               positive=True),
            reduction_s_per_B=_num(g(fit, "reduction_s_per_B", path, float, required=False)
                                   or 0.0, f"{path}.reduction_s_per_B", nonneg=True),
            overhead_s=_num(g(fit, "overhead_s", path, float, required=False) or 0.0,
                            f"{path}.overhead_s", nonneg=True),
            world_size=_int(g(fit, "world_size", path, int, required=False) or 2,
                            f"{path}.world_size"),
            r2=g(fit, "r2", path, float, required=False),
            ci95=g(fit, "ci95", path, dict, required=False),
            host_bandwidth_Bps=_opt_num(fit, "host_bandwidth_Bps", where=path, positive=True))
    samples = g(data, "samples", "", dict, required=False) or {}
    return Profile(schema_version=version, metadata=metadata, model_name=name,
                   input_shape=input_shape, params=params, compute=compute,
                   grad_ready_fraction=fractions, grad_ready_batch_size=ready_batch,
                   network=network, collectives=colls, samples=samples, dtype_bytes=dtype_bytes,
                   buffers=buffers)


def _tensor_specs(raw: list, where: str, minimum: int) -> tuple[ParamSpec, ...]:
    out = []
    for i, t in enumerate(raw):
        path = f"{where}[{i}]"
        out.append(ParamSpec(name=_V.get(t, "name", path, str),
                             numel=_int(_V.get(t, "numel", path, int), f"{path}.numel",
                                        minimum=minimum),
                             bytes=_int(_V.get(t, "bytes", path, int), f"{path}.bytes",
                                        minimum=minimum)))
    return tuple(out)


def _contention(net: dict) -> dict:
    loads_raw = _V.get(net, "contention_load", "network", list, required=False) or []
    # load 0 is the collective alone: non-negative, not positive
    bw_raw = _V.get(net, "contention_bandwidth_Bps", "network", list, required=False) or []
    if len(loads_raw) != len(bw_raw):
        raise ProfileError("fields 'network.contention_load' and "
                           "'network.contention_bandwidth_Bps' must have the same length")
    speed_raw = _V.get(net, "contention_compute_speed", "network", list, required=False) or []
    return {"contention_load": _nums(loads_raw, "network.contention_load", nonneg=True),
            "contention_bandwidth_Bps": _nums(bw_raw, "network.contention_bandwidth_Bps",
                                              positive=True),
            "contention_compute_speed": _nums(speed_raw, "network.contention_compute_speed",
                                              positive=True)}


def _opt_num(obj: dict, key: str, where: str = "network", **kw) -> float | None:
    return None if obj.get(key) is None else _num(obj[key], f"{where}.{key}", **kw)


def loads(text: str) -> Profile:
    try:
        data = parse_json(text, "profile")
    except UserError as exc:
        raise ProfileError(str(exc).removeprefix("profile: ")) from None
    return profile_from_dict(data)


def load(path: str | os.PathLike) -> Profile:
    """Read and validate a profile file.  Errors name the file and the field; a file that is
    too large or nested too deeply is refused before parsing."""
    p = Path(path)
    try:
        text = read_text(p, "profile")
    except UserError as exc:
        raise ProfileError(str(exc)) from None
    try:
        return loads(text)
    except ProfileError as exc:
        raise ProfileError(f"profile {p}: {exc}") from None


def default_profile_path() -> Path:
    return Path(__file__).with_name("data") / "default_profile.json"


def load_default() -> Profile:
    return load(default_profile_path())


def save(profile: Profile, path: str | os.PathLike, *, force: bool = False) -> None:
    atomic_write_text(path, profile.dumps(), force=force)
