"""Compute calibration: forward, backward and SGD step times per batch size, and when each
parameter's gradient becomes ready during backward.

For one batch size (``measure_batch``):
1. build inputs of the model's input shape and labels in range of its output width;
2. ``warmup`` untimed iterations (allocator, thread pool, first-touch), then ``reps`` timed
   ones, each split into forward (+ loss), backward and ``optimizer.step()`` (SGD, lr 0.1,
   momentum 0.9, weight decay 1e-4: the CS744 base script's optimiser);
3. during every backward a post-accumulate-grad hook on each parameter stamps the time its
   gradient is ready; stamps become fractions 0..1 of that backward's duration (registration
   order), the shape DDP's bucketing overlaps communication with.
For CIFAR-shaped models ``measure_batch`` also times loading one batch the way ``commsim live``
does (DataLoader over the CIFAR dataset with crop/flip augmentation, in the training process):
the ``data`` phase, which a live iteration spends before its forward.
``summarize`` turns the repetitions into medians and inter-quartile ranges (``fit.fit_compute``
then smooths them across batch sizes).
``measure_reduction`` times ``a.add_(b)`` on one thread (Gloo reduces on one thread) over
buffer sizes: the reduction cost γ (seconds per byte) of the all-reduce model; and the
parameter server's mean on the root as the seeds' listing computes it (p zero buffers to gather
into, ``torch.stack``, ``torch.mean``), several times γ per byte because it copies.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
from torch import nn

# The base script's optimiser (seeds: CS744 assignment 2, main.py).
SGD_LR = 0.1
SGD_MOMENTUM = 0.9
SGD_WEIGHT_DECAY = 1e-4
PHASES = ("forward", "backward", "optimizer")
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
        self.optimizer = torch.optim.SGD(self.params, lr=SGD_LR, momentum=SGD_MOMENTUM,
                                         weight_decay=SGD_WEIGHT_DECAY)
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


def measure_batch(bench: ComputeBench, batch_size: int, *, warmup: int, reps: int,
                  slow_iteration_s: float = float("inf"), min_reps: int = 1,
                  min_measure_s: float = 0.0, max_reps: int = 0) -> dict:
    """Raw repetitions for one batch size (a JSON-able sample record): ``reps``, or
    ``min_reps`` when the last warm-up iteration took over ``slow_iteration_s``; then more, up
    to ``max_reps``, while the repetitions so far add up to less than ``min_measure_s``."""
    x, y = bench.batch(batch_size)
    first = 0.0
    for _ in range(warmup):
        f, b, o, _ = bench.iteration(x, y)
        first = f + b + o
    if first > slow_iteration_s:
        reps = max(min_reps, 1)
    rows, spent = [], 0.0
    while len(rows) < reps or (spent < min_measure_s and len(rows) < max_reps):
        rows.append(bench.iteration(x, y))
        spent += sum(rows[-1][:3])
    reps = len(rows)
    record = {"batch_size": batch_size, "reps": reps, "warmup": warmup,
              "forward_s": [r[0] for r in rows], "backward_s": [r[1] for r in rows],
              "optimizer_s": [r[2] for r in rows],
              "grad_ready": np.median(np.stack([r[3] for r in rows]), axis=0).round(5).tolist()}
    if bench.input_shape == CIFAR_SHAPE:
        record["data_s"] = measure_data(batch_size, reps=max(reps, 3))
    return record


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
