"""Live data-parallel training: measure what ``commsim predict`` predicts, on real training.

One process per rank trains VGG-11 (or any model factory) exactly as the seed assignment does, and
reports per-iteration time split into compute and synchronisation, bytes on the rank's interface,
training loss and, with real or learnable synthetic data, test loss/accuracy.  It runs the
simulator's what-ifs with the simulator's semantics (``commsim.spec.RunSpec``): local gradient
aggregation (``sync_every``), averaging within groups (``group_size``), DDP's fp16 compression,
and, for large batches, the linear learning-rate scaling rule with warm-up.

Algorithm, per rank (``live_worker``):

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
6. ``ddp`` only: compute and communication overlap inside backward, so additionally time
   a cycle of a communication-free copy of the model (all ranks at once, so the CPU contention
   matches) and report exposed sync = iteration − that compute.
7. With a data directory or learnable synthetic data, evaluate the test set split over the
   ranks and all-reduce the sums.

An *iteration* is one forward+backward pass over a batch, as in the simulator: with
``sync_every`` k every time, byte count and the iteration count are per iteration, a k-iteration
cycle's divided by k (``commsim.result``'s convention); only the learning-rate schedule counts
optimizer steps (one per cycle).

``aggregate`` then combines the per-rank results into one record whose field names match
``commsim predict --json``: times are the slowest rank's medians (a synchronous step waits for the
slowest rank), bytes the mean over ranks (``*_max``: the busiest rank), with
``rank_mean``/``rank_max`` alongside.
"""
from __future__ import annotations

import contextlib
import copy
import math
import os
import statistics
import time
from dataclasses import asdict, dataclass, fields, replace
from typing import TYPE_CHECKING, Any, Callable

import torch
import torch.distributed as dist
import torch.nn as nn

from commsim.calibrate.cifar import SYNTHETIC_KINDS, load_dataset
from commsim.calibrate.models import SGD_LR, build_model, sgd
from commsim.calibrate.launch.settings import set_threads
from commsim.errors import UserError
from commsim.spec import DEFAULT_GLOBAL_BATCH, DEFAULT_MODEL
from commsim.strategies import get_strategy, live_strategy_names

if TYPE_CHECKING:
    from commsim.calibrate.cluster import ClusterInfo

WORKER = "commsim.calibrate.live:live_worker"
# The linear scaling rule's reference batch: lr = SGD_LR x batch / 256 (Goyal et al. 2017).
LR_REFERENCE_BATCH = 256
LR_SCALINGS = ("linear",)


@dataclass(frozen=True)
class LiveConfig:
    """Everything one live run needs; travels to the ranks as a plain dict (``to_dict``).

    ``global_batch`` is split evenly over the ranks (floored; the batch actually used is
    reported) unless ``batch_per_rank`` is given.  ``threads_per_rank`` 0 keeps the launcher's
    ``max(1, cores // ranks per host)``.  ``gather`` makes rank 0 collect every rank's result
    (torchrun, where no parent process reads them).  ``exit_rank``/``exit_iteration`` inject a crash
    (``os._exit(3)`` on that rank at that step) so tests can prove a dead rank fails the run;
    ``return_params`` adds the final parameters to each rank's result (small models only);
    ``augment`` False turns off the crop/flip augmentation (equality tests need it off).
    ``sync_every``, ``group_size`` and ``compression`` are the simulator's what-ifs
    (``commsim.spec.RunSpec``), refused where the simulator refuses them; ``lr_scaling``
    "linear" with ``warmup_iters`` is the large-batch schedule (``LrSchedule``); ``synthetic``
    is "random" (timing) or "learnable" (accuracy) when there is no ``data_dir``.
    """
    strategy: str = "ring"
    global_batch: int = DEFAULT_GLOBAL_BATCH
    batch_per_rank: int | None = None
    iterations: int = 20
    bucket_mb: float = 25.0
    data_dir: str | None = None
    synthetic_size: int = 50000
    test_samples: int | None = None
    model: str = DEFAULT_MODEL
    track_running_stats: bool = True
    seed: int = 0
    threads_per_rank: int = 0
    emulated: bool = False
    # DDP's compute is timed on a communication-free copy: the median of 5 cycles, not 3 (two
    # ranks' 3-cycle probes of the same run differed by 15%: 2.16 vs 1.85 s at batch 128).
    compute_probe_iterations: int = 5
    exit_rank: int | None = None
    exit_iteration: int | None = None
    return_params: bool = False
    augment: bool = True
    gather: bool = False
    sync_every: int = 1
    group_size: int | None = None
    compression: str | None = None
    lr_scaling: str | None = None
    warmup_iters: int = 0
    synthetic: str = "random"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "LiveConfig":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise UserError(f"live config: unknown field(s) {', '.join(unknown)}")
        return cls(**data)

    def validate(self, world_size: int) -> None:
        """Raise UserError naming the argument that makes this run impossible."""
        if self.strategy not in live_strategy_names():
            raise UserError(f"--strategy: {self.strategy!r} is not one of "
                            f"{', '.join(live_strategy_names())}")
        if world_size < 1:
            raise UserError(f"--nodes: must be >= 1, got {world_size}")
        if self.strategy == "single" and world_size != 1:
            raise UserError(f"--nodes: strategy 'single' runs on one rank, got {world_size}")
        if self.iterations < 1:
            raise UserError(f"--iterations: must be >= 1, got {self.iterations}")
        if self.bucket_mb <= 0:
            raise UserError(f"--bucket-mb: must be > 0, got {self.bucket_mb}")
        if self.batch_per_rank is not None and self.batch_per_rank < 1:
            raise UserError(f"--batch-per-rank: must be >= 1, got {self.batch_per_rank}")
        if self.batch_per_rank is None and self.global_batch < world_size:
            raise UserError(f"--global-batch: {self.global_batch} is smaller than the "
                            f"{world_size} ranks it is split over")
        steps_needed = self.rank_batch(world_size) * world_size
        if self.data_dir is None and self.synthetic_size < steps_needed:
            raise UserError(f"synthetic_size: {self.synthetic_size} samples cannot fill one "
                            f"global batch of {steps_needed}")
        if self.synthetic not in SYNTHETIC_KINDS:
            raise UserError(f"--synthetic: {self.synthetic!r} is not one of "
                            f"{', '.join(SYNTHETIC_KINDS)}")
        if self.lr_scaling is not None and self.lr_scaling not in LR_SCALINGS:
            raise UserError(f"--lr-scaling: {self.lr_scaling!r} is not one of "
                            f"{', '.join(LR_SCALINGS)}")
        if self.warmup_iters < 0:
            raise UserError(f"--warmup-iters: must be >= 0, got {self.warmup_iters}")
        if self.warmup_iters and self.lr_scaling is None:
            raise UserError("--warmup-iters: warm-up ramps to the scaled learning rate; add "
                            "--lr-scaling linear")
        self.check_what_ifs(world_size)
        if self.iterations % self.sync_every:
            raise UserError(f"--iterations: {self.iterations} is not a whole number of "
                            f"--sync-every {self.sync_every} cycles")

    def check_what_ifs(self, world_size: int) -> None:
        """Refuse, in the simulator's words, what the simulator refuses: a live run measures
        only what ``commsim predict`` can predict (e.g. fp16 compression is DDP's comm hook, and
        ps averages over every rank through rank 0)."""
        from commsim.spec import ClusterSpec, RunSpec

        nominal = ClusterSpec(hosts=world_size, nic_bandwidth_Bps=1e9, nic_latency_s=0.0,
                              cores_per_host=1.0)  # the checks never look at the link or cores
        spec = RunSpec(strategy=self.strategy, cluster=nominal, global_batch=None,
                       batch_per_rank=self.rank_batch(world_size), sync_every=self.sync_every,
                       group_size=self.group_size, compression=self.compression)
        get_strategy(self.strategy).check(spec)

    def rank_batch(self, world_size: int) -> int:
        if self.batch_per_rank is not None:
            return self.batch_per_rank
        return max(1, self.global_batch // world_size)


# ----------------------------------------------------------------------------------------------
# Whom a rank averages with.  How it averages is its strategy's ``live_sync``
# (``commsim.strategies``).
# ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Comm:
    """Whom a rank averages its gradients with: ``group`` (None: every rank, the default
    process group) of ``size`` ranks; ``rank`` is the rank's global rank."""
    rank: int
    size: int
    group: Any = None


def averaging_group(group_size: int | None, rank: int, world_size: int) -> Comm:
    """This rank's ``Comm`` for averaging within consecutive groups of ``group_size`` ranks
    (``RunSpec.group_of``; the last group is smaller when g does not divide the world).

    ``dist.new_group`` is collective over the whole world, so every rank creates every group,
    in the same order, and keeps its own."""
    g = group_size or world_size
    if g >= world_size:
        return Comm(rank, world_size)
    mine = Comm(rank, 1)
    for start in range(0, world_size, g):
        ranks = list(range(start, min(start + g, world_size)))
        group = dist.new_group(ranks)
        if rank in ranks:
            mine = Comm(rank, len(ranks), group)
    return mine


def sync_none(model: nn.Module, comm: Comm) -> None:
    """Nothing to synchronise: the compute probe's communication-free copy of the model."""


class BucketTimer:
    """DDP comm hook state: the hook it times (PyTorch's ``allreduce_hook``, what DDP's built-in
    reducer does, or ``fp16_compress_hook``), the process group it runs on (None: every rank),
    and the (launch, completion) perf_counter pairs of every bucket.  Timing a hook does not
    change its arithmetic."""

    def __init__(self, hook: Callable, group: Any = None):
        self.hook = hook
        self.group = group
        self.intervals: list[tuple[float, float]] = []

    def take(self) -> list[tuple[float, float]]:
        out, self.intervals = self.intervals, []
        return out


def comm_hook(compression: str | None) -> Callable:
    """PyTorch's hook for ``compression``: divide by the group size and all-reduce, in fp32 or
    cast to fp16 and back (what the simulator's ddp models)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    return {None: default_hooks.allreduce_hook,
            "fp16": default_hooks.fp16_compress_hook}[compression]


def timed_hook(state: BucketTimer, bucket):  # no annotation: DDP checks it literally
    # The start is before the hook's divide (and fp16 cast): the simulator counts both as
    # communication time.
    start = time.perf_counter()
    fut = state.hook(state.group, bucket)

    def done(f):
        # Runs when Gloo completes the work (and the cast back): the end of the time in flight.
        state.intervals.append((start, time.perf_counter()))
        return f.value()

    return fut.then(done)


def union_s(intervals: list[tuple[float, float]]) -> float:
    """Total length covered by possibly overlapping intervals (buckets in flight together)."""
    total, end = 0.0, -math.inf
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


# ----------------------------------------------------------------------------------------------
# Models and data
# ----------------------------------------------------------------------------------------------

def small_cnn(num_classes: int = 10, track_running_stats: bool = True) -> nn.Module:
    """A tiny conv net (conv-BN-ReLU-pool, linear) for fast tests and CI-sized live runs."""
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8, track_running_stats=track_running_stats),
        nn.ReLU(), nn.MaxPool2d(4),
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(4),
        nn.Flatten(), nn.Linear(16 * 2 * 2, num_classes))


def small_mlp(num_classes: int = 10, track_running_stats: bool = True) -> nn.Module:
    """A tiny model without batch norm: data-parallel training equals single-process training
    on the same global batch exactly (up to float reassociation)."""
    return nn.Sequential(nn.AvgPool2d(4), nn.Flatten(), nn.Linear(3 * 8 * 8, 32), nn.ReLU(),
                         nn.Linear(32, num_classes))


def live_model(cfg: LiveConfig) -> nn.Module:
    """The run's model: keywords go only to a factory that accepts them (``build_model``)."""
    return build_model(cfg.model, num_classes=10, track_running_stats=cfg.track_running_stats)


def load_data(cfg: LiveConfig, train: bool):
    """CIFAR-10 from ``cfg.data_dir`` or synthetic images (``cfg.synthetic``); crop/flip on
    training data if ``cfg.augment``."""
    return load_dataset(cfg.data_dir, train=train, synthetic_size=cfg.synthetic_size,
                        seed=cfg.seed, augment=train and cfg.augment, synthetic=cfg.synthetic)


def has_test_set(cfg: LiveConfig) -> bool:
    """Real data, or synthetic data whose labels can be learnt: test accuracy means something."""
    return cfg.data_dir is not None or cfg.synthetic == "learnable"


# ----------------------------------------------------------------------------------------------
# Learning rate
# ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LrSchedule:
    """The learning rate of every optimizer step.

    ``base`` is the base script's LR.  ``peak`` is ``base`` x ``update_batch`` / 256 under the
    linear scaling rule (Goyal et al. 2017), else ``base``; ``update_batch`` is the number of
    samples one step's gradient averages over: batch per rank x ranks averaged (the group) x
    ``sync_every``.  Warm-up (Goyal's gradual warm-up): the rate ramps linearly from ``base`` at
    iteration 0 to ``peak`` at iteration ``warmup_iters``, then stays; optimizer step u ends a
    cycle of ``sync_every`` iterations and uses the rate of the cycle's first iteration, u x k.
    """
    base: float
    peak: float
    update_batch: int
    rule: str = "constant"
    warmup_iters: int = 0
    sync_every: int = 1

    def lr(self, update: int) -> float:
        iteration = update * self.sync_every
        if iteration >= self.warmup_iters:
            return self.peak
        return self.base + (self.peak - self.base) * iteration / self.warmup_iters

    def to_dict(self, updates: int) -> dict[str, Any]:
        """The schedule and the rate of each of the first ``updates`` optimizer steps."""
        return {**asdict(self), "lrs": [self.lr(u) for u in range(updates)]}


def lr_schedule(cfg: LiveConfig, world_size: int) -> LrSchedule:
    averaged = min(cfg.group_size or world_size, world_size)
    update_batch = cfg.rank_batch(world_size) * averaged * cfg.sync_every
    if cfg.lr_scaling == "linear":
        return LrSchedule(base=SGD_LR, peak=SGD_LR * update_batch / LR_REFERENCE_BATCH,
                          update_batch=update_batch, rule="linear",
                          warmup_iters=cfg.warmup_iters, sync_every=cfg.sync_every)
    return LrSchedule(base=SGD_LR, peak=SGD_LR, update_batch=update_batch,
                      sync_every=cfg.sync_every)


def batches(dataset, rank: int, world_size: int, batch: int, seed: int):
    """Endless iterator over this rank's DistributedSampler partition, ``set_epoch`` per epoch."""
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler

    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True,
                                 seed=seed)
    loader = DataLoader(dataset, batch_size=batch, sampler=sampler, drop_last=True)
    epoch = 0
    while True:
        sampler.set_epoch(epoch)
        yield from loader
        epoch += 1


# ----------------------------------------------------------------------------------------------
# Measurement helpers
# ----------------------------------------------------------------------------------------------

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


def finite(x: float) -> float | None:
    """x, or None when it is NaN/inf (results travel as strict JSON; a diverged loss is null)."""
    x = float(x)
    return x if math.isfinite(x) else None


def summary(values: list[float]) -> dict[str, float]:
    """Median, mean, spread (sample standard deviation), min and max of a timing series."""
    return {"median": statistics.median(values), "mean": statistics.fmean(values),
            "spread": statistics.stdev(values) if len(values) > 1 else 0.0,
            "min": min(values), "max": max(values)}


def barrier(world_size: int) -> None:
    if world_size > 1 and dist.is_initialized():
        dist.barrier()


def pin_threads(cfg: LiveConfig) -> int:
    """Threads this rank computes with: ``cfg.threads_per_rank`` if set, else what the launcher
    pinned (``max(1, cores // ranks per host)``, so co-located ranks do not oversubscribe)."""
    if cfg.threads_per_rank:
        set_threads(cfg.threads_per_rank)
    return torch.get_num_threads()


def train_cycle(model, optimizer, criterion, batches_k, sync, comm: Comm, lr: float,
                no_sync: Callable = contextlib.nullcontext) -> dict:
    """One timed cycle of k = ``len(batches_k)`` iterations (local gradient aggregation).

    1. zero the gradients and set the optimizer's learning rate to ``lr``;
    2. k-1 forward+backward passes under ``no_sync`` (DDP's context that skips its all-reduce;
       ps and ring simply do not sync), accumulating into ``.grad``;
    3. forward+backward of the last batch (DDP all-reduces inside it), then ``sync``;
    4. optimizer step.
    Each pass's loss is divided by k, so the step applies the mean gradient of the k batches
    (one step on a k-times larger batch; k = 1 is the plain step, bit for bit).  Returns the
    phase times per iteration (the cycle's / k, the simulator's convention) and the k
    undivided losses.
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
            forward += b - a
            backward += time.perf_counter() - b
        losses.append(finite(loss.item()))
    t2 = time.perf_counter()
    sync(model, comm)
    t3 = time.perf_counter()
    optimizer.step()
    t4 = time.perf_counter()
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


def evaluate(model: nn.Module, cfg: LiveConfig, rank: int, world_size: int) -> dict:
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


# ----------------------------------------------------------------------------------------------
# The worker
# ----------------------------------------------------------------------------------------------

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
    for i in range(cfg.iterations // k + 1):
        if cfg.exit_rank == rank and cfg.exit_iteration == i:
            os._exit(3)  # fault injection (tests): die without any goodbye to the peers
        batches_k = [next(stream) for _ in range(k)]
        cycle = train_cycle(net, optimizer, criterion, batches_k, strategy.live_sync, comm,
                            schedule.lr(i), no_sync)
        losses += cycle.pop("losses")
        cycles.append(cycle)
        if timer is not None:
            comm_in_flight.append(union_s(timer.take()) / k)
        if i == 0:
            counters_before = interface_bytes() if cfg.emulated else None
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
    if strategy.wraps_ddp:
        # Sync runs inside backward, overlapped: compute is measured on a comm-free twin.
        compute = probe_compute(model, batches_k, cfg.compute_probe_iterations, world_size,
                                schedule.lr(len(cycles)))
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
    else:
        result.update(test_loss=None, test_accuracy=None)
    result["params_checksum"] = float(sum(p.detach().double().sum() for p in model.parameters()))
    if cfg.return_params:  # tests compare whole parameter vectors across ranks
        result["params"] = [p.detach().flatten().tolist() for p in model.parameters()]
    if cfg.gather and world_size > 1:
        gathered = [None] * world_size if rank == 0 else None
        dist.gather_object(result, gathered, dst=0)
        if rank == 0:
            result = {**result, "gathered": gathered}
    return result


# ----------------------------------------------------------------------------------------------
# Aggregation and the driver
# ----------------------------------------------------------------------------------------------

RANK_METRICS = ("iteration_s", "iteration_s_mean", "iteration_s_spread", "compute_s", "comm_s",
                "exposed_comm_s", "bytes_sent_per_rank", "bytes_received_per_rank")


def aggregate(per_rank: list[dict], cfg: LiveConfig) -> dict:
    """One record for the run; field names match ``commsim predict --json``.

    Times are the maximum over ranks (a synchronous step waits for the slowest rank); bytes per
    rank are the mean over ranks and ``bytes_*_max`` the busiest rank (rank 0 in ``ps``), as
    ``commsim predict`` defines them; ``rank_mean``/``rank_max`` give both for every metric.
    Per iteration, with ``sync_every`` k: a k-iteration cycle's figure / k.  ``epoch_s`` is
    iteration_s x ``iterations_per_epoch`` (the training set over the global batch, rounded
    up).  ``loss`` is the per-iteration mean of the ranks' local losses (equal shard sizes, so
    it is the global-batch loss); it has ``iterations + k`` entries, the first k from the
    discarded warm-up cycle.
    """
    per_rank = sorted(per_rank, key=lambda r: r["rank"])
    nodes = len(per_rank)
    rank_max, rank_mean = {}, {}
    for key in RANK_METRICS:
        vals = [r[key] for r in per_rank]
        if any(v is None for v in vals):
            rank_max[key] = rank_mean[key] = None
        else:
            rank_max[key], rank_mean[key] = max(vals), statistics.fmean(vals)
    batch = per_rank[0]["batch_per_rank"]
    losses = [None if None in col else statistics.fmean(col)
              for col in zip(*(r["loss"] for r in per_rank))]
    first = per_rank[0]
    train_samples = first.get("train_samples")
    per_epoch = None if train_samples is None else math.ceil(train_samples / (batch * nodes))
    out = {"strategy": cfg.strategy, "nodes": nodes, "global_batch": batch * nodes,
           "batch_per_rank": batch, **rank_max,
           "bytes_sent_per_rank": rank_mean["bytes_sent_per_rank"],
           "bytes_received_per_rank": rank_mean["bytes_received_per_rank"],
           "bytes_sent_max": rank_max["bytes_sent_per_rank"],
           "bytes_received_max": rank_max["bytes_received_per_rank"],
           "iterations_per_epoch": per_epoch,
           "epoch_s": None if per_epoch is None else per_epoch * rank_max["iteration_s"],
           "sync_every": cfg.sync_every, "group_size": cfg.group_size,
           "compression": cfg.compression, "lr_schedule": first.get("lr_schedule"),
           "synthetic": None if cfg.data_dir else cfg.synthetic,
           "iterations": cfg.iterations, "threads_per_rank": first["threads"],
           "seed": cfg.seed,  # with the config, the run can be repeated exactly
           "loss": losses, "test_loss": first["test_loss"],
           "test_accuracy": first["test_accuracy"],
           "rank_max": rank_max, "rank_mean": rank_mean, "per_rank": per_rank}
    if cfg.batch_per_rank is None and batch * nodes != cfg.global_batch:
        out["requested_global_batch"] = cfg.global_batch
    for note in ("bytes_note", "compute_note"):
        if note in per_rank[0]:
            out[note] = per_rank[0][note]
    return out


def run_live(cfg: LiveConfig, *, nodes: int, emulate: "ClusterInfo | None" = None,
             timeout_s: float = 900.0, out_dir: str | os.PathLike | None = None,
             progress=None, collective_timeout_s: float | None = None) -> dict:
    """Launch ``nodes`` ranks of ``live_worker`` (local, or one per node of the emulated
    cluster ``emulate``) and aggregate their results.  A dead or hung rank raises RunFailed
    naming it (from the launcher)."""
    import tempfile

    from commsim.calibrate.launch import DEFAULT_COLLECTIVE_TIMEOUT_S, launch

    cfg = replace(cfg, emulated=emulate is not None)
    cfg.validate(nodes)
    with tempfile.TemporaryDirectory(prefix="commsim-live-") as tmp:
        per_rank = launch(WORKER, cfg.to_dict(), nodes=nodes, emulate=emulate,
                          timeout_s=timeout_s, out_dir=out_dir or tmp, progress=progress,
                          threads_per_rank=cfg.threads_per_rank or None,
                          collective_timeout_s=collective_timeout_s
                          or DEFAULT_COLLECTIVE_TIMEOUT_S)
    return aggregate(per_rank, cfg)


def run_live_torchrun(cfg: LiveConfig, *, out_dir: str | os.PathLike | None = None,
                      collective_timeout_s: float | None = None) -> dict | None:
    """Join the torchrun job described by RANK/WORLD_SIZE/MASTER_*: train as this rank.

    Returns the aggregate on rank 0 (which gathers every rank's result) and None elsewhere."""
    from commsim.calibrate.launch import from_env, run_from_env

    env = from_env()
    if env is None:
        raise UserError("not under torchrun: RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT "
                        "must all be set")
    cfg = replace(cfg, gather=True)
    cfg.validate(env.world_size)
    kwargs = {} if collective_timeout_s is None else {"collective_timeout_s": collective_timeout_s}
    result = run_from_env(WORKER, cfg.to_dict(), env, out_dir=out_dir,
                          threads_per_rank=cfg.threads_per_rank or None, **kwargs)
    if env.rank != 0:
        return None
    return aggregate(result.get("gathered") or [result], cfg)
