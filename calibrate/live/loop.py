"""The timed training loop of a live rank: one cycle of k iterations, a compute probe, a test.

``train_cycle`` is where time is split into forward, backward, sync and step;
``probe_compute`` times the same cycle on a communication-free copy of the model (DDP overlaps
sync with backward, so its compute cannot be read off the real loop); ``evaluate`` scores the
model on the test set, split over the ranks.
"""
from __future__ import annotations

import contextlib
import copy
import math
import statistics
import time
from typing import TYPE_CHECKING, Callable

import torch
import torch.distributed as dist
import torch.nn as nn

from commsim.calibrate.live.groups import Comm
from commsim.calibrate.live.workload import load_data
from commsim.calibrate.models import sgd

if TYPE_CHECKING:
    from commsim.calibrate.live.config import LiveConfig


def finite(x: float) -> float | None:
    """x, or None when it is NaN/inf (results travel as strict JSON; a diverged loss is null)."""
    x = float(x)
    return x if math.isfinite(x) else None


def barrier(world_size: int) -> None:
    if world_size > 1 and dist.is_initialized():
        dist.barrier()


def sync_none(model: nn.Module, comm: Comm) -> None:
    """Nothing to synchronise: the compute probe's communication-free copy of the model."""


def train_cycle(model, optimizer, criterion, batches_k, sync, comm: Comm, lr: float,
                no_sync: Callable = contextlib.nullcontext, recorder=None) -> dict:
    """One timed cycle of k = ``len(batches_k)`` iterations (local gradient aggregation).

    1. zero the gradients and set the optimizer's learning rate to ``lr``;
    2. k-1 forward+backward passes under ``no_sync`` (DDP's context that skips its all-reduce;
       ps and ring simply do not sync), accumulating into ``.grad``;
    3. forward+backward of the last batch (DDP all-reduces inside it), then ``sync``;
    4. optimizer step.
    Each pass's loss is divided by k, so the step applies the mean gradient of the k batches
    (one step on a k-times larger batch; k = 1 is the plain step, bit for bit).  Returns the
    phase times per iteration (the cycle's / k, the simulator's convention) and the k
    undivided losses.  With a ``recorder`` (``timing.Recorder``: the cycle ``commsim live
    --trace`` draws) every phase is also recorded with its start and end, and the cycle's
    span; the sync's collectives record themselves (``comm.recorder``, set by the caller).
    """
    k = len(batches_k)
    t0 = time.perf_counter()
    optimizer.zero_grad()
    for group in optimizer.param_groups:
        group["lr"] = lr
    forward = backward = 0.0
    losses = []
    for j, (data, target) in enumerate(batches_k):
        with no_sync() if j < k - 1 else contextlib.nullcontext():
            a = time.perf_counter()
            loss = criterion(model(data), target)
            b = time.perf_counter()
            (loss / k).backward()
            c = time.perf_counter()
            forward += b - a
            backward += c - b
        if recorder is not None:
            # The simulator numbers the k-1 passes before the synchronised one (local_step).
            step = {"local_step": j} if j < k - 1 else {}
            recorder.add("compute", "forward", a, b, **step)
            recorder.backward(b, c, **step)
        losses.append(finite(loss.item()))
    t2 = time.perf_counter()
    sync(model, comm)
    t3 = time.perf_counter()
    optimizer.step()
    t4 = time.perf_counter()
    if recorder is not None:
        recorder.add("compute", "optimizer", t3, t4)
        recorder.start_s, recorder.end_s = t0, t4
    return {"forward_s": forward / k, "backward_s": backward / k, "sync_s": (t3 - t2) / k,
            "step_s": (t4 - t3) / k, "iteration_s": (t4 - t0) / k, "losses": losses}


def new_optimizer(params) -> torch.optim.Optimizer:
    """The base script's SGD; the learning rate is set by every ``train_cycle``."""
    return sgd(params)


def probe_compute(model: nn.Module, batches_k: list, iterations: int, world_size: int,
                  lr: float) -> float:
    """Median per-iteration seconds of a cycle over ``batches_k`` of a communication-free copy
    of the model.

    All ranks run it at the same time (barriers around it) so the CPU sharing of co-located
    ranks is the same as in the real loop.  The copy's updates are thrown away.
    """
    twin = copy.deepcopy(model)
    opt = new_optimizer(twin.parameters())
    criterion = nn.CrossEntropyLoss()
    barrier(world_size)
    times = [train_cycle(twin, opt, criterion, batches_k, sync_none, Comm(0, 1),
                         lr)["iteration_s"] for _ in range(iterations + 1)][1:]
    barrier(world_size)
    return statistics.median(times)


def evaluate(model: nn.Module, cfg: "LiveConfig", rank: int, world_size: int) -> dict:
    """Test loss and accuracy; each rank takes every world_size-th sample, sums are reduced.

    With ``group_size`` the groups' models differ: each rank scores its own model on its share,
    so the figure is the mean over the ranks' models (each on 1/p of the test set), not one
    model's accuracy."""
    from torch.utils.data import DataLoader, Subset

    test = load_data(cfg, train=False)
    n = len(test) if cfg.test_samples is None else min(cfg.test_samples, len(test))
    loader = DataLoader(Subset(test, range(rank, n, world_size)), batch_size=500)
    criterion = nn.CrossEntropyLoss(reduction="sum")
    sums = torch.zeros(3, dtype=torch.float64)  # loss, correct, count
    model.eval()
    with torch.no_grad():
        for data, target in loader:
            out = model(data)
            sums += torch.tensor([criterion(out, target).item(),
                                  (out.argmax(1) == target).sum().item(), len(target)],
                                 dtype=torch.float64)
    model.train()
    if world_size > 1:
        dist.all_reduce(sums)
    return {"test_loss": sums[0].item() / sums[2].item(),
            "test_accuracy": sums[1].item() / sums[2].item()}
