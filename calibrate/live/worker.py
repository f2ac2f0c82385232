"""One live rank: train as the config says and report what every phase took (``live_worker``).

Per rank:
1. Pin torch threads (``max(1, cores // ranks on this host)``) and seed torch with the same seed on
   every rank *before* building the model, so every rank starts from identical parameters.
2. With ``group_size`` g, every rank creates every group of g consecutive ranks (in the same
   order: ``dist.new_group`` is collective) and keeps its own: gradients are averaged within it.
3. Build the model from ``config.model`` ("module:function"), SGD(lr 0.1, momentum 0.9,
   weight decay 1e-4; the assignment's base script).  ``ddp`` wraps it in
   DistributedDataParallel(bucket_cap_mb, the rank's group) with a comm hook that runs PyTorch's
   allreduce_hook (or fp16_compress_hook) and timestamps every bucket (launch → completion) so
   its in-flight time can be reported.
4. Partition the training set with DistributedSampler (``set_epoch`` per epoch); each rank takes
   ``batch_per_rank`` samples an iteration, so the union of all ranks' iteration-i batches is
   exactly the iteration-i batch of single-process training with the same sampler seed.
5. Run ``iterations / sync_every + 1`` cycles (``train_cycle``) of k = ``sync_every``
   iterations: k-1 forward+backward passes that only accumulate gradients, one more, the sync
   (strategy), the optimizer step at the schedule's learning rate (``LrSchedule``), all timed
   with ``perf_counter``; the first cycle is discarded (warm-up, as the seed documents do).
   Interface byte counters are read after the first cycle and after the last.
   With ``trace_cycle``, the ranks first measure their clocks' offsets from rank 0's
   (``timing.clock_offset``), and that timed cycle records its timeline (``timing.Recorder``):
   its phases, its collectives or DDP buckets, on rank 0's clock, in the result's "timeline".
6. ``ddp`` only: compute and communication overlap inside backward, so additionally time
   a cycle of a communication-free copy of the model (all ranks at once, so the CPU contention
   matches) and report exposed sync = iteration − that compute.
7. With a data directory or learnable synthetic data, evaluate the test set split over the
   ranks and all-reduce the sums.

An *iteration* is one forward+backward pass over a batch, as in the simulator: with
``sync_every`` k every time, byte count and the iteration count are per iteration, a k-iteration
cycle's divided by k (``commsim.result``'s convention); only the learning-rate schedule counts
optimizer steps (one per cycle).
"""
from __future__ import annotations

import contextlib
import os
import statistics
from dataclasses import replace
from typing import Any, Callable

import torch
import torch.distributed as dist
import torch.nn as nn

from commsim.calibrate.launch.settings import set_threads
from commsim.calibrate.live.config import LiveConfig
from commsim.calibrate.live.groups import averaging_group
from commsim.calibrate.live.hooks import BucketTimer, comm_hook, timed_hook, union_s
from commsim.calibrate.live.loop import evaluate, new_optimizer, probe_compute, train_cycle
from commsim.calibrate.live.schedule import lr_schedule
from commsim.calibrate.live.timing import Recorder, clock_offset, watch_gradients
from commsim.calibrate.live.workload import batches, has_test_set, live_model, load_data
from commsim.progress import rank_progress
from commsim.strategies import get_strategy


def live_worker(rank: int, world_size: int, config: dict) -> dict:
    """Train on this rank and return its measurements (a JSON-able dict).

    The process group (Gloo) is already initialised by the launcher for world_size > 1.
    """
    cfg = LiveConfig.from_dict(config)
    cfg.validate(world_size)
    strategy = get_strategy(cfg.strategy)
    threads = pin_threads(cfg)
    batch = cfg.rank_batch(world_size)
    k = cfg.sync_every
    comm = averaging_group(cfg.group_size, rank, world_size)
    schedule = lr_schedule(cfg, world_size)

    torch.manual_seed(cfg.seed)  # before the model: identical initial parameters on every rank
    model = live_model(cfg)
    # Augmentation draws from the global generator: give each rank its own stream so ranks do
    # not crop and flip their (different) samples in lock-step.
    torch.manual_seed(cfg.seed + 1 + rank)
    net: nn.Module = model
    timer = None
    no_sync: Callable = contextlib.nullcontext
    if strategy.wraps_ddp:
        from torch.nn.parallel import DistributedDataParallel

        net = DistributedDataParallel(model, bucket_cap_mb=cfg.bucket_mb,
                                      process_group=comm.group)
        # "In flight" = from the hook taking the bucket to its completion, including time
        # queued behind earlier buckets in Gloo's work threads.
        timer = BucketTimer(comm_hook(cfg.compression), comm.group)
        net.register_comm_hook(timer, timed_hook)
        no_sync = net.no_sync
    optimizer = new_optimizer(net.parameters())
    criterion = nn.CrossEntropyLoss()
    train_set = load_data(cfg, train=True)
    stream = batches(train_set, rank, world_size, batch, cfg.seed)

    cycles, comm_in_flight, losses = [], [], []
    counters_before = None
    n_cycles = cfg.iterations // k + 1
    # Rank 0's progress: every cycle, then the compute probe and the test set where they run.
    shown = rank_progress("live", rank == 0)
    units = n_cycles + int(strategy.wraps_ddp) + int(has_test_set(cfg))
    shown.update(0, units, f"{cfg.strategy} on {world_size} rank(s), batch {batch} per rank")
    traced = None if cfg.trace_cycle is None else 1 + cfg.trace_cycle % (n_cycles - 1)
    clock = clock_offset(rank, world_size) if traced is not None else (0.0, 0.0)
    timeline = None
    recorder = None
    if traced is not None:
        watch_gradients(model, lambda: recorder)   # where backward's compute ends
    for i in range(n_cycles):
        if cfg.exit_rank == rank and cfg.exit_iteration == i:
            os._exit(3)  # fault injection (tests): die without any goodbye to the peers
        batches_k = [next(stream) for _ in range(k)]
        recorder = Recorder(split_backward=strategy.wraps_ddp) if i == traced else None
        cycle = train_cycle(net, optimizer, criterion, batches_k, strategy.live_sync,
                            replace(comm, recorder=recorder), schedule.lr(i), no_sync, recorder)
        losses += cycle.pop("losses")
        cycles.append(cycle)
        if recorder is not None:
            for index, nbytes, start, end in (timer.buckets if timer is not None else ()):
                recorder.add("comm", f"bucket {index}", start, end, bytes=nbytes)
            timeline = recorder.to_dict(rank, i - 1, *clock)
        if timer is not None:
            comm_in_flight.append(union_s(timer.take()) / k)
        if i == 0:
            counters_before = interface_bytes() if cfg.emulated else None
        which = ("warm-up (not timed)" if i == 0 else f"iteration {i} of {cfg.iterations}"
                 if k == 1 else f"iterations {(i - 1) * k + 1}-{i * k} of {cfg.iterations}")
        shown.update(i + 1, units, f"{which}: {cycle['iteration_s']:.3f} s")
    counters_after = interface_bytes() if cfg.emulated else None
    timed = cycles[1:]

    phase = {key: summary([c[key] for c in timed])
             for key in ("forward_s", "backward_s", "sync_s", "step_s", "iteration_s")}
    iteration = phase["iteration_s"]
    result: dict[str, Any] = {
        "rank": rank, "world_size": world_size, "strategy": cfg.strategy,
        "batch_per_rank": batch, "threads": threads, "sync_every": k,
        "group_size": comm.size, "compression": cfg.compression,
        "iteration_s": iteration["median"], "iteration_s_mean": iteration["mean"],
        "iteration_s_spread": iteration["spread"],
        "iterations_s": [c["iteration_s"] for c in timed],
        # Every timed iteration's phases: synchronous training waits each iteration for the
        # slowest rank of that iteration, which the per-rank medians do not show.
        "per_iteration": {key: [c[key] for c in timed] for key in phase},
        "phases": phase, "loss": losses, "train_samples": len(train_set),
        "lr_schedule": schedule.to_dict(len(cycles)),
    }
    if timeline is not None:
        result["timeline"] = timeline
    if strategy.wraps_ddp:
        # Sync runs inside backward, overlapped: compute is measured on a comm-free twin.
        compute = probe_compute(model, batches_k, cfg.compute_probe_iterations, world_size,
                                schedule.lr(len(cycles)))
        shown.update(n_cycles + 1, units, f"compute probe: {compute:.3f} s")
        result.update(compute_s=compute,
                      comm_s=statistics.median(comm_in_flight[1:]),
                      exposed_comm_s=max(0.0, iteration["median"] - compute),
                      compute_note="compute_s measured on a communication-free copy of the "
                                   "model; comm_s is the union of bucket all-reduces in flight")
    else:
        compute = statistics.median(c["iteration_s"] - c["sync_s"] for c in timed)
        sync = phase["sync_s"]["median"]
        result.update(compute_s=compute, comm_s=sync, exposed_comm_s=sync)

    if counters_before is not None and counters_after is not None:
        result["bytes_sent_per_rank"] = (counters_after["tx_bytes"]
                                         - counters_before["tx_bytes"]) / cfg.iterations
        result["bytes_received_per_rank"] = (counters_after["rx_bytes"]
                                             - counters_before["rx_bytes"]) / cfg.iterations
    else:
        result["bytes_sent_per_rank"] = result["bytes_received_per_rank"] = None
        result["bytes_note"] = ("not measured: ranks share the host's loopback, there is no "
                                "per-rank interface (use --emulate)")
    if has_test_set(cfg):
        result.update(evaluate(model, cfg, rank, world_size))
        shown.update(units, units, f"test accuracy {result['test_accuracy']:.1%}")
    else:
        result.update(test_loss=None, test_accuracy=None)
    result["params_checksum"] = float(sum(p.detach().double().sum() for p in model.parameters()))
    if cfg.return_params:  # tests compare whole parameter vectors across ranks
        result["params"] = [p.detach().flatten().tolist() for p in model.parameters()]
    shown.close()
    if cfg.gather and world_size > 1:
        gathered = [None] * world_size if rank == 0 else None
        dist.gather_object(result, gathered, dst=0)
        if rank == 0:
            result = {**result, "gathered": gathered}
    return result


def pin_threads(cfg: LiveConfig) -> int:
    """Threads this rank computes with: ``cfg.threads_per_rank`` if set, else what the launcher
    pinned (``max(1, cores // ranks per host)``, so co-located ranks do not oversubscribe)."""
    if cfg.threads_per_rank:
        set_threads(cfg.threads_per_rank)
    return torch.get_num_threads()


def interface_bytes() -> dict[str, int] | None:
    """rx/tx bytes summed over this network namespace's interfaces other than ``lo``.

    Under ``--emulate`` each rank lives in its own namespace, so these are the rank's own
    counters; on the host (loopback shared by every rank) there is no per-rank interface and
    this returns None.
    """
    try:
        with open("/proc/self/net/dev") as fh:
            lines = fh.read().splitlines()[2:]
    except OSError:
        return None
    rx = tx = 0
    found = False
    for line in lines:
        name, _, rest = line.partition(":")
        if name.strip() == "lo":
            continue
        cols = rest.split()
        rx += int(cols[0])
        tx += int(cols[8])
        found = True
    return {"rx_bytes": rx, "tx_bytes": tx} if found else None


def summary(values: list[float]) -> dict[str, float]:
    """Median, mean, spread (sample standard deviation), min and max of a timing series."""
    return {"median": statistics.median(values), "mean": statistics.fmean(values),
            "spread": statistics.stdev(values) if len(values) > 1 else 0.0,
            "min": min(values), "max": max(values)}
