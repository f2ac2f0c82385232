"""Cluster and run specifications: frozen dataclasses, validated on construction.

A *cluster* is hosts with NICs on one non-blocking switch: each host has ``ranks_per_host`` ranks
that share its cores and its full-duplex NIC.  A *run* is one strategy on one cluster with one
batch configuration.  Units are in the field names; conversion from user text happens in the CLI.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from typing import Mapping

from commsim.errors import UserError
from commsim.limits import (COMPUTE_FACTOR, CORES, HOSTS, LATENCY_S, LINK_RATE_BPS, RANKS,
                            RANKS_PER_HOST, SAMPLES, SIZE_BYTES, SYNC_EVERY)
from commsim.profile import PHASES, Profile

MiB = 1024 * 1024
CIFAR10_TRAIN_SAMPLES = 50_000
DEFAULT_GLOBAL_BATCH = 256          # the seed assignment's total batch
DEFAULT_MODEL = "commsim.calibrate.models:vgg11_cifar"   # its VGG-11 for CIFAR-10
DDP_BUCKET_BYTES = 25 * MiB         # DistributedDataParallel's bucket_cap_mb default
DDP_FIRST_BUCKET_BYTES = 1 * MiB    # its first bucket, with the default cap


@dataclass(frozen=True)
class ClusterSpec:
    """Hosts on a non-blocking switch.

    hosts:                number of machines (``--nodes``).
    ranks_per_host:       training processes per machine; they share its cores and NIC.
    cores_per_host:       cores one host gives its ranks' compute and Gloo threads.
    nic_bandwidth_Bps:    per direction (full duplex) bandwidth of every NIC.
    nic_latency_s:        one-way latency of a message between two hosts.
    intra_host_*:         a message between ranks of one host (loopback, shared memory).
    shared_cpu_cores:     if set, every rank of every host shares ONE pool of this many cores
                          (an emulated cluster on one machine); cores_per_host is then ignored.
    slow_links_Bps:       host -> NIC bandwidth for hosts whose link is slower (what-if).
    cpu_efficiency:       (busy threads, efficiency) points: beyond processor sharing, how much
                          slower every thread runs when that many are busy on one pool (memory
                          bandwidth, caches, SMT), linear in between; () = 1.  Measured by
                          calibration (all co-located ranks computing at once vs one alone).
    threads_per_rank:     compute threads each rank runs; None = as calibrated.  Another count
                          keeps the calibrated compute's thread-seconds (``costs.cost_inputs``).
    """
    hosts: int
    nic_bandwidth_Bps: float
    nic_latency_s: float
    cores_per_host: float
    ranks_per_host: int = 1
    intra_host_bandwidth_Bps: float | None = None
    intra_host_latency_s: float | None = None
    shared_cpu_cores: float | None = None
    slow_links_Bps: Mapping[int, float] = field(default_factory=dict)
    cpu_efficiency: tuple[tuple[float, float], ...] = ()
    threads_per_rank: int | None = None

    def __post_init__(self):
        if self.threads_per_rank is not None:
            _check_int("--threads-per-rank", self.threads_per_rank, 1)
        for threads, eff in self.cpu_efficiency:
            _check_pos("CPU efficiency threads", threads)
            if not 0 < eff <= 1:
                raise UserError(f"CPU efficiency must be in (0, 1], got {eff!r}")
        _check_int("nodes", self.hosts, 1)
        _check_int("ranks per host", self.ranks_per_host, 1)
        HOSTS.check(self.hosts, "--nodes")
        RANKS_PER_HOST.check(self.ranks_per_host, "--ranks-per-host")
        RANKS.check(self.world_size, "ranks (--nodes x --ranks-per-host)")
        _check_pos("bandwidth", self.nic_bandwidth_Bps)
        _check_nonneg("latency", self.nic_latency_s)
        _check_pos("cores per host", self.cores_per_host)
        if self.shared_cpu_cores is not None:
            _check_pos("shared CPU cores", self.shared_cpu_cores)
        for host, bw in self.slow_links_Bps.items():
            if not 0 <= host < self.hosts:
                raise UserError(f"slow link names host {host}, but the cluster has hosts "
                                f"0..{self.hosts - 1}")
            LINK_RATE_BPS.check(bw, f"--slow-link rate of host {host}")

    @property
    def world_size(self) -> int:
        return self.hosts * self.ranks_per_host

    def host_of(self, rank: int) -> int:
        return rank // self.ranks_per_host

    def bandwidth_of(self, host: int) -> float:
        return self.slow_links_Bps.get(host, self.nic_bandwidth_Bps)

    @property
    def homogeneous(self) -> bool:
        return not self.slow_links_Bps


@dataclass(frozen=True)
class Workload:
    """What one iteration does, on whatever cluster: the part of the user's question that a
    ``RunSpec`` (one strategy on one cluster) and an ``api.Scenario`` (a what-if across strategies
    and node counts) share.  Declared once; both inherit it.

    global_batch:         samples per iteration over all ranks (strong scaling, default 256).
    batch_per_rank:       samples per rank per iteration (weak scaling); a RunSpec takes exactly
                          one of the two, a Scenario lets this one win.
    bucket_bytes:         DDP bucket cap (PyTorch's bucket_cap_mb, default 25 MiB).
    first_bucket_bytes:   DDP's first (earliest-ready) bucket cap; None = PyTorch's 1 MiB, what
                          DDP uses with its default cap (PyTorch 2.13 caps the first bucket at
                          ``bucket_cap_mb`` too when that is given explicitly).
    overlap:              DDP only: False launches every bucket after backward ends (what-if).
    algorithm:            the collective algorithm (None: the strategy's default; ring/ddp:
                          ring, recursive_doubling, rabenseifner, tree, hierarchical; ps:
                          linear, binomial).
    sync_every:           local gradient aggregation (Horovod backward_passes_per_step, DDP
                          no_sync): gradients are accumulated over k iterations and synchronised
                          (and applied) once; per-iteration figures are the k-iteration cycle / k.
    group_size:           average within consecutive groups of g ranks instead of all of them
                          (g = 2: pairwise); None = all ranks.
    compression:          DDP gradient compression: None or "fp16" (PyTorch's fp16_compress_hook).
    broadcast_buffers:    DDP broadcasts the model's buffers (batch-norm statistics) from rank 0
                          before every forward (PyTorch's default, True).
    stragglers:           rank -> compute slowdown factor (> 1 is slower).
    compute_scale:        every rank's compute (and the single-rank baseline's) times this
                          factor: "my nodes are twice as fast" is 0.5.
    """
    global_batch: int | None = DEFAULT_GLOBAL_BATCH
    batch_per_rank: int | None = None
    bucket_bytes: int = DDP_BUCKET_BYTES
    first_bucket_bytes: int | None = None
    overlap: bool = True
    algorithm: str | None = None
    sync_every: int = 1
    group_size: int | None = None
    compression: str | None = None
    broadcast_buffers: bool = True
    stragglers: Mapping[int, float] = field(default_factory=dict)
    compute_scale: float = 1.0

    def workload(self) -> dict:
        """The shared fields and their values (to build one layer from the other)."""
        return {f.name: getattr(self, f.name) for f in fields(Workload)}

    @property
    def first_bucket_cap(self) -> int:
        return self.first_bucket_bytes or DDP_FIRST_BUCKET_BYTES


@dataclass(frozen=True, kw_only=True)
class RunSpec(Workload):
    """One strategy on one cluster: a ``Workload`` plus

    strategy:             registered name (``single``, ``ps``, ``ring``, ``ddp``, ``dp``).
    cluster:              the hosts, NICs and cores.
    dataset_samples:      samples in one epoch (CIFAR-10 train: 50,000).
    """
    strategy: str
    cluster: ClusterSpec
    dataset_samples: int = CIFAR10_TRAIN_SAMPLES

    def __post_init__(self):
        if (self.global_batch is None) == (self.batch_per_rank is None):
            raise UserError("give exactly one of --global-batch and --batch-per-rank")
        if self.global_batch is not None:
            _check_int("global batch", self.global_batch, 1)
            SAMPLES.check(self.global_batch, "--global-batch")
            if self.global_batch < self.cluster.world_size:
                raise UserError(f"global batch {self.global_batch} is smaller than the "
                                f"{self.cluster.world_size} ranks it is split over")
        if self.batch_per_rank is not None:
            _check_int("batch per rank", self.batch_per_rank, 1)
            SAMPLES.check(self.batch_per_rank, "--batch-per-rank")
        _check_int("bucket size", self.bucket_bytes, 1)
        _check_int("first bucket size", self.first_bucket_cap, 1)
        SIZE_BYTES.check(self.bucket_bytes, "--bucket-mb")
        SIZE_BYTES.check(self.first_bucket_cap, "first bucket size")
        _check_int("dataset samples", self.dataset_samples, 1)
        _check_int("--sync-every", self.sync_every, 1)
        SYNC_EVERY.check(self.sync_every)
        if self.group_size is not None:
            _check_int("--group-size", self.group_size, 1)
            if self.group_size > self.world_size:
                raise UserError(f"--group-size {self.group_size} is larger than the "
                                f"{self.world_size} ranks")
        if self.compression not in (None, "fp16"):
            raise UserError(f"--compress: unknown compression {self.compression!r}; "
                            "choose fp16")
        for rank, factor in self.stragglers.items():
            if not 0 <= rank < self.cluster.world_size:
                raise UserError(f"straggler names rank {rank}, but the run has ranks "
                                f"0..{self.cluster.world_size - 1}")
            COMPUTE_FACTOR.check(factor, f"--straggler factor of rank {rank}")
        COMPUTE_FACTOR.check(self.compute_scale, "--compute-scale")

    @property
    def world_size(self) -> int:
        return self.cluster.world_size

    @property
    def per_rank_batch(self) -> int:
        """Samples each rank computes per iteration (strong scaling floors the split)."""
        if self.batch_per_rank is not None:
            return self.batch_per_rank
        return self.global_batch // self.world_size

    @property
    def effective_global_batch(self) -> int:
        return self.per_rank_batch * self.world_size

    @property
    def requested_global_batch(self) -> int:
        return self.global_batch if self.global_batch is not None else self.effective_global_batch

    @property
    def homogeneous(self) -> bool:
        return self.cluster.homogeneous and not self.stragglers

    def single_baseline(self) -> "RunSpec":
        """The one-rank run that processes the same global batch (the speedup reference)."""
        one_host = replace(self.cluster, hosts=1, ranks_per_host=1, slow_links_Bps={})
        return replace(self, strategy="single", cluster=one_host,
                       global_batch=self.requested_global_batch, batch_per_rank=None,
                       stragglers={}, algorithm=None, sync_every=1, group_size=None,
                       compression=None)

    def group_of(self, rank: int) -> tuple[int, ...]:
        """The ranks ``rank`` averages with: everyone, or its consecutive group."""
        g = self.group_size or self.world_size
        start = rank // g * g
        return tuple(range(start, min(start + g, self.world_size)))


def default_cluster(profile: Profile, hosts: int, *, ranks_per_host: int = 1,
                    bandwidth_Bps: float | None = None, latency_s: float | None = None,
                    cores_per_host: float | None = None,
                    shared_cpu_cores: float | None = None,
                    slow_links_Bps: Mapping[int, float] | None = None,
                    cpu_efficiency: tuple = (), threads_per_rank: int | None = None
                    ) -> ClusterSpec:
    """A cluster of ``hosts`` machines like the calibrated one, with what-if overrides.

    By default each rank gets the cores its compute was measured with plus one for its Gloo
    thread: a multi-core host running a rank with ``threads_per_rank`` compute threads (torchrun
    sets one) has cores to spare, so DDP's reductions do not take CPU from backward there.  What
    the calibration measured on cores that were all busy (``network.contention_*``) then does not
    apply; ``cores_per_host`` models a host without the spare core.  The link is the profile's
    fitted point-to-point link.
    """
    net = profile.network
    # What-if values are bounded; the profile's own fits are whatever calibration measured.
    for bound, value, option in ((LINK_RATE_BPS, bandwidth_Bps, "--bandwidth"),
                                 (LATENCY_S, latency_s, "--latency"),
                                 (CORES, cores_per_host, "--cores-per-host"),
                                 (CORES, shared_cpu_cores, "--shared-cpu-cores")):
        if value is not None:
            bound.check(value, option)
    if cores_per_host is None:
        cores_per_host = ((threads_per_rank or profile.compute.threads_per_rank) + 1) \
            * ranks_per_host
    return ClusterSpec(
        hosts=hosts, ranks_per_host=ranks_per_host,
        nic_bandwidth_Bps=net.bandwidth_Bps if bandwidth_Bps is None else bandwidth_Bps,
        nic_latency_s=net.latency_s if latency_s is None else latency_s,
        cores_per_host=cores_per_host,
        intra_host_bandwidth_Bps=net.intra_host_bandwidth_Bps,
        intra_host_latency_s=net.intra_host_latency_s,
        shared_cpu_cores=shared_cpu_cores,
        slow_links_Bps=dict(slow_links_Bps or {}), cpu_efficiency=tuple(cpu_efficiency),
        threads_per_rank=threads_per_rank)


def measured_cpu_efficiency(profile: Profile,
                            batch: float | None = None) -> tuple[tuple[float, float], ...]:
    """Efficiency points from calibration: every co-located rank computing at once (contended)
    against one alone, beyond what processor sharing of the host's cores explains, at the
    per-rank ``batch`` (caches and memory bandwidth make it depend on the batch), or pooled over
    the measured batch sizes when None; and, where the calibration ran co-runners beside the
    ranks (``compute.oversubscribed``), the same at their number of busy threads."""
    comp = profile.compute
    cores = profile.metadata.get("shared_cpu_cores") or profile.metadata.get("cores")
    t = comp.threads_per_rank
    measured = []
    if comp.contended and comp.contended.get("batch_sizes"):
        measured.append((comp.contended.get("ranks", 1) * t, comp.contended))
    if comp.oversubscribed and comp.oversubscribed.get("batch_sizes"):
        measured.append((comp.oversubscribed["busy_threads"], comp.oversubscribed))
    points = [(float(busy), eff) for busy, m in measured if cores and busy > t
              and (eff := _efficiency(profile, m, cores / busy, batch)) is not None]
    if not points:
        return ()
    first_busy, first_eff = points[0]
    out = [(float(t), 1.0)]
    if t < cores < first_busy:
        # The loss comes from every core being busy (shared caches, memory bandwidth, SMT
        # siblings): it is there as soon as the threads fill the cores, not only at ``busy``.
        out.append((float(cores), first_eff))
    for busy, eff in points:
        if busy > out[-1][0]:
            out.append((busy, eff))
    return tuple(out)


def _efficiency(profile: Profile, measured, sharing: float, batch: float | None) -> float | None:
    """Alone over ``measured`` compute time, divided by what sharing the cores explains."""
    from commsim.profile import interpolate
    sizes = tuple(measured["batch_sizes"])
    alone = loaded = 0.0
    for b in sizes if batch is None else (batch,):
        for phase in PHASES:
            alone += profile.compute.time_s(phase, b)
            loaded += interpolate(sizes, tuple(measured[f"{phase}_s"]), b)
    if not (alone > 0 and loaded > 0):
        return None
    return min(1.0, (alone / loaded) / min(1.0, sharing))


def _check_int(what: str, value, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise UserError(f"{what} must be an integer >= {minimum}, got {value!r}")


def _check_pos(what: str, value) -> None:
    if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise UserError(f"{what} must be a positive finite number, got {value!r}")


def _check_nonneg(what: str, value) -> None:
    if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise UserError(f"{what} must be a non-negative finite number, got {value!r}")
