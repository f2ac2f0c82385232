"""Compute calibration: forward, backward and SGD step times per batch size, and when each
parameter's gradient becomes ready during backward.

A sweep of batch sizes (``interleaved``):
1. build inputs of the model's input shape and labels in range of its output width;
2. ``warmup`` untimed iterations of each size (allocator, thread pool, first-touch), then timed
   ones in interleaved rounds (every size once a round, as many rounds as it has repetitions),
   each split into forward (+ loss), backward and ``optimizer.step()`` (SGD, lr 0.1,
   momentum 0.9, weight decay 1e-4: the CS744 base script's optimiser);
3. during every backward a post-accumulate-grad hook on each parameter stamps the time its
   gradient is ready; stamps become fractions 0..1 of that backward's duration (registration
   order), the shape DDP's bucketing overlaps communication with.
``merge_rounds`` makes one record per size of the rounds' records; ``measure_batch`` times one
size back to back (every rank at once: ``phases.contended.measure_together``).
For CIFAR-shaped models the calibration also times loading one batch the way ``commsim live``
does (``measure_data``: DataLoader over the CIFAR dataset with crop/flip augmentation, in the
training process): the ``data`` phase, which a live iteration spends before its forward.
``summarize`` turns the repetitions into medians and inter-quartile ranges (``fit.fit_compute``
then smooths them across batch sizes).
``measure_reduction`` times ``a.add_(b)`` on one thread (Gloo reduces on one thread) over
buffer sizes: the reduction cost γ (seconds per byte) of the all-reduce model; and the
parameter server's mean on the root as the seeds' listing computes it (p zero buffers to gather
into, ``torch.stack``, ``torch.mean``), several times γ per byte because it copies.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np
import torch
from torch import nn

from commsim.calibrate.models import sgd
from commsim.profile import PHASES

CIFAR_SHAPE = (3, 32, 32)


@dataclass(frozen=True)
class ComputeSpec:
    """What to time: the model (factory ``module:function``), its input shape and the sweep."""
    model: str
    input_shape: tuple[int, ...]
    batch_sizes: tuple[int, ...]
    warmup: int = 1
    reps: int = 3
    # Past this many seconds per iteration, use ``min_reps`` repetitions (keeps the sweep short).
    slow_iteration_s: float = 2.0
    min_reps: int = 2
    # Fast sizes get more repetitions, up to ``max_reps``, until they fill this many seconds:
    # a median of 3 repetitions of ±25% noise is ±10% off, and the smallest sizes cost least.
    min_measure_s: float = 2.0
    max_reps: int = 8


class ComputeBench:
    """A model, its optimiser and loss, and hooks that stamp gradient-ready times."""

    def __init__(self, factory: Callable[[], nn.Module], input_shape: tuple[int, ...],
                 seed: int = 0):
        torch.manual_seed(seed)
        self.model = factory()
        self.model.train()
        self.input_shape = tuple(input_shape)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = sgd(self.params)
        self.loss_fn = nn.CrossEntropyLoss()
        with torch.no_grad():
            out = self.model(torch.zeros(2, *self.input_shape))
        self.num_outputs = int(out.shape[-1]) if out.dim() > 1 else 1
        self._stamps = np.zeros(len(self.params))
        for i, p in enumerate(self.params):
            p.register_post_accumulate_grad_hook(self._stamp_hook(i))

    def _stamp_hook(self, index: int):
        def hook(_param: torch.Tensor) -> None:
            self._stamps[index] = time.perf_counter()
        return hook

    def iteration(self, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float, float, np.ndarray]:
        """One training step: (forward_s, backward_s, optimizer_s, ready fractions)."""
        self.optimizer.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        loss = self.loss_fn(self.model(x), y)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        self.optimizer.step()
        t3 = time.perf_counter()
        fractions = np.clip((self._stamps - t1) / max(t2 - t1, 1e-12), 0.0, 1.0)
        return t1 - t0, t2 - t1, t3 - t2, fractions

    def batch(self, batch_size: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(batch_size, *self.input_shape, generator=g)
        y = torch.randint(0, self.num_outputs, (batch_size,), generator=g)
        return x, y


def planned_reps(first_s: float, spec: "ComputeSpec") -> int:
    """Timed repetitions for a size whose last warm-up iteration took ``first_s``: ``reps``,
    or ``min_reps`` past ``slow_iteration_s``; fast sizes more, up to ``max_reps``, so that
    they fill ``min_measure_s``."""
    if first_s > spec.slow_iteration_s:
        return max(spec.min_reps, 1)
    if spec.min_measure_s > 0 and first_s > 0:
        return max(spec.reps, min(spec.max_reps, math.ceil(spec.min_measure_s / first_s)))
    return spec.reps


def round_slots(reps: int, rounds: int) -> set[int]:
    """The rounds (0..rounds-1) in which a size with ``reps`` repetitions runs: spread evenly,
    so that each size's repetitions span the whole sweep."""
    return {i * rounds // reps for i in range(reps)}


class RoundSweep:
    """An interleaved sweep's plan (see ``interleaved``): every size warmed up, its last warm-up
    setting its repetitions (``planned_reps``) unless ``planned`` has them (a resumed sweep: the
    plan its saved rounds were taken in, whatever the machine's speed now), and the (size,
    round) ``slots`` in timing order: round by round, every size once in the rounds
    ``round_slots`` gives it."""

    def __init__(self, bench: ComputeBench, spec: "ComputeSpec", batch_sizes=None,
                 planned: dict | None = None):
        self.bench, self.spec = bench, spec
        sizes = tuple(spec.batch_sizes if batch_sizes is None else batch_sizes)
        self.inputs = {b: bench.batch(b) for b in sizes}
        self.planned = {}
        for b in sizes:
            first = 0.0
            for _ in range(spec.warmup):
                f, bw, o, _ = bench.iteration(*self.inputs[b])
                first = f + bw + o
            self.planned[b] = (planned or {}).get(b) or planned_reps(first, spec)
        rounds = max(self.planned.values(), default=0)
        given = {b: round_slots(n, rounds) for b, n in self.planned.items()}
        self.slots = [(b, r) for r in range(rounds) for b in sizes if r in given[b]]

    def measure(self, batch_size: int, round: int) -> dict:
        """One timed iteration of ``batch_size`` in ``round``: its record."""
        f, bw, o, fractions = self.bench.iteration(*self.inputs[batch_size])
        return {"batch_size": batch_size, "round": round, "of": self.planned[batch_size],
                "warmup": self.spec.warmup, "forward_s": [f], "backward_s": [bw],
                "optimizer_s": [o], "grad_ready": np.asarray(fractions).round(5).tolist()}


def interleaved(bench: ComputeBench, spec: "ComputeSpec", batch_sizes=None, *,
                done: frozenset = frozenset()) -> Iterator[dict]:
    """Time every batch size in interleaved rounds; yields one record per (size, round).

    Why: the machine's speed drifts by 10-30% within a minute here (a 4-node calibration timed
    batch 256 at 15.3 ms a sample and batch 512, half a minute later, at 20 ms, each within 1%
    over its repetitions), and a sweep that times one size after the other turns that drift
    into a batch-size curve no smooth fit follows.  In rounds, every size sees the same drift.
    1. ``warmup`` untimed iterations of each size; the last one plans its repetitions
       (``planned_reps``);
    2. rounds 0..R-1 (R the most repetitions planned): each size runs one timed iteration in
       the rounds ``round_slots`` gives it, skipping (size, round) pairs in ``done`` (resume).
    The calibration's alone phase walks a ``RoundSweep`` itself, so that its own loop skips
    what a resumed run has.
    """
    sweep = RoundSweep(bench, spec, batch_sizes)
    for b, r in sweep.slots:
        if (b, r) not in done:
            yield sweep.measure(b, r)


def merge_rounds(records: list[dict]) -> list[dict]:
    """Per-round records (``interleaved``) and each size's ``data`` record -> one record per
    batch size (repetitions in round order, the median gradient-ready fractions, ``rounds``);
    records of one size measured back to back pass through."""
    rounds: dict[int, list[dict]] = {}
    data: dict[int, list[float]] = {}
    out = []
    for r in records:
        if "round" in r:
            rounds.setdefault(r["batch_size"], []).append(r)
        elif r.get("mode") == "data":
            data[r["batch_size"]] = r["data_s"]
        else:
            out.append(r)
    for b, rs in sorted(rounds.items()):
        rs = sorted(rs, key=lambda r: r["round"])
        merged = {k: v for k, v in rs[0].items() if k not in ("round", "of")}
        merged.update({"reps": len(rs), "rounds": [r["round"] for r in rs],
                       **{f"{ph}_s": [x for r in rs for x in r[f"{ph}_s"]] for ph in PHASES},
                       "grad_ready": np.median(np.asarray([r["grad_ready"] for r in rs]),
                                               axis=0).round(5).tolist()})
        if b in data:
            merged["data_s"] = data[b]
        out.append(merged)
    return sorted(out, key=lambda r: r["batch_size"])


def measure_batch(bench: ComputeBench, batch_size: int, *, warmup: int, reps: int) -> dict:
    """``warmup`` untimed, then ``reps`` timed iterations of one size, back to back (a
    JSON-able sample record)."""
    spec = ComputeSpec(model="", input_shape=bench.input_shape, batch_sizes=(batch_size,),
                       warmup=warmup, reps=reps, slow_iteration_s=float("inf"),
                       min_measure_s=0.0)
    return merge_rounds(list(interleaved(bench, spec)))[0]


def measure_data(batch_size: int, reps: int) -> list[float]:
    """Seconds to load one training batch as ``commsim live`` does (synthetic images through
    the CIFAR dataset with augmentation and a DataLoader in this process), ``reps`` times after
    one untimed batch."""
    from torch.utils.data import DataLoader

    from commsim.calibrate.cifar import CifarDataset, synthetic_cifar

    dataset = CifarDataset(*synthetic_cifar(batch_size * (reps + 1)), augment=True)
    batches = iter(DataLoader(dataset, batch_size=batch_size, shuffle=True, drop_last=True))
    next(batches)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        next(batches)
        times.append(time.perf_counter() - t0)
    return times


def median_iqr(values: list[float]) -> tuple[float, float]:
    q1, med, q3 = np.percentile(np.asarray(values, dtype=float), [25, 50, 75])
    return float(med), float(q3 - q1)


def summarize(records: list[dict]) -> dict:
    """Records (any order) -> per-phase median and IQR lists, sorted by batch size."""
    records = sorted(records, key=lambda r: r["batch_size"])
    out: dict = {"batch_sizes": [r["batch_size"] for r in records]}
    with_data = ("data",) if all("data_s" in r for r in records) else ()
    for phase in PHASES + with_data:
        stats = [median_iqr(r[f"{phase}_s"]) for r in records]
        out[f"{phase}_s"] = [m for m, _ in stats]
        out[f"{phase}_spread_s"] = [s for _, s in stats]
    return out


def measure_reduction(sizes_bytes: tuple[int, ...] = (1 << 16, 1 << 20, 1 << 22, 1 << 24),
                      reps: int = 5, world: int = 2) -> dict:
    """Median seconds of ``a.add_(b)`` on float32 buffers, single-threaded, per size; and of
    the parameter server's mean of ``world`` such buffers (``mean_times_s``)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        times, mean_times = [], []
        for n in sizes_bytes:
            a = torch.ones(max(1, n // 4))
            b = torch.ones_like(a)
            a.add_(b)  # first touch
            times.append(_median_time(lambda: a.add_(b), reps))
            mean_times.append(_median_time(lambda: _ps_mean(a, world), reps))
    finally:
        torch.set_num_threads(previous)
    return {"sizes_bytes": list(sizes_bytes), "times_s": times, "world": world,
            "mean_times_s": mean_times}


def _ps_mean(grad: torch.Tensor, world: int) -> torch.Tensor:
    """What rank 0 computes in the seeds' parameter server (live ``sync_ps``): buffers for
    every rank's gradient, then the mean of them stacked."""
    gathered = [torch.zeros_like(grad) for _ in range(world)]
    return torch.mean(torch.stack(gathered), dim=0)


def _median_time(fn: Callable[[], object], reps: int) -> float:
    fn()  # first touch / allocator
    runs = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t0)
    return float(np.median(runs))
