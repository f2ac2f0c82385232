"""Library calls behind the CLI: build a run spec from user-level options, predict, sweep.

Everything here takes SI numbers (bytes/s, seconds, bytes); the CLI parses text into them.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Iterable, Mapping

from commsim.costs import cost_inputs
from commsim.limits import LATENCY_S, LINK_RATE_BPS, RANKS, SIZE_BYTES
from commsim.profile import Profile
from commsim.result import Result
from commsim.simulate import simulate
from commsim.spec import MiB, RunSpec, default_cluster
from commsim.strategies import REGISTRY, get_strategy


@dataclass(frozen=True)
class Scenario:
    """A user's question, independent of strategy and node count (the sweep's fixed part).

    global_batch / batch_per_rank: strong (default 256 over all ranks) or weak scaling.
    bucket_bytes:        DDP bucket cap.
    first_bucket_bytes:  cap of DDP's first (earliest-ready) bucket; None = PyTorch's 1 MiB, what
                         DDP uses with its default cap.  PyTorch 2.13 caps the first bucket at
                         ``bucket_cap_mb`` too when that is given explicitly.
    bandwidth_Bps / latency_s: what-if link (None = the profile's fitted link).
    ranks_per_host, cores_per_host, shared_cpu_cores: host layout (None = like calibrated).
    stragglers:          rank -> compute slowdown factor.
    slow_links_Bps:      host -> NIC bandwidth.
    overlap:             DDP overlaps communication with backward (False: what-if without).
    algorithm:           collective algorithm (None: the strategy's default).
    sync_every:          local gradient aggregation: sync every k iterations.
    group_size:          average within groups of g ranks (None: all).
    compression:         DDP gradient compression (None or "fp16").
    broadcast_buffers:   DDP broadcasts batch-norm buffers before every forward.
    cpu_efficiency:      (busy threads, efficiency) points of a shared CPU (see ClusterSpec).
    """
    global_batch: int | None = 256
    batch_per_rank: int | None = None
    bucket_bytes: int = 25 * MiB
    first_bucket_bytes: int | None = None
    bandwidth_Bps: float | None = None
    latency_s: float | None = None
    ranks_per_host: int = 1
    cores_per_host: float | None = None
    shared_cpu_cores: float | None = None
    stragglers: Mapping[int, float] = field(default_factory=dict)
    slow_links_Bps: Mapping[int, float] = field(default_factory=dict)
    overlap: bool = True
    algorithm: str | None = None
    sync_every: int = 1
    group_size: int | None = None
    compression: str | None = None
    broadcast_buffers: bool = True
    cpu_efficiency: tuple = ()


def run_spec(profile: Profile, strategy: str, nodes: int, scenario: Scenario) -> RunSpec:
    get_strategy(strategy)  # unknown names fail here, with the list of known ones
    cluster = default_cluster(profile, nodes, ranks_per_host=scenario.ranks_per_host,
                              bandwidth_Bps=scenario.bandwidth_Bps, latency_s=scenario.latency_s,
                              cores_per_host=scenario.cores_per_host,
                              shared_cpu_cores=scenario.shared_cpu_cores,
                              slow_links_Bps=scenario.slow_links_Bps,
                              cpu_efficiency=scenario.cpu_efficiency)
    return RunSpec(strategy=strategy, cluster=cluster,
                   global_batch=None if scenario.batch_per_rank else scenario.global_batch,
                   batch_per_rank=scenario.batch_per_rank, bucket_bytes=scenario.bucket_bytes,
                   first_bucket_bytes=scenario.first_bucket_bytes or RunSpec.first_bucket_bytes,
                   overlap=scenario.overlap, algorithm=scenario.algorithm,
                   sync_every=scenario.sync_every, group_size=scenario.group_size,
                   compression=scenario.compression,
                   broadcast_buffers=scenario.broadcast_buffers,
                   stragglers=dict(scenario.stragglers))


def predict(profile: Profile, strategy: str, nodes: int, scenario: Scenario = Scenario(), *,
            engine: str = "auto", timeline: bool = False) -> Result:
    return simulate(run_spec(profile, strategy, nodes, scenario), profile, engine=engine,
                    timeline=timeline)


def sweep(profile: Profile, strategies: Iterable[str], nodes: Iterable[int],
          scenario: Scenario = Scenario(), *, engine: str = "auto",
          skipped: list | None = None) -> list[Result]:
    """Every strategy at every node count; ``single`` only at one node (it is the baseline).

    Strong scaling cannot split a global batch over more ranks than samples: those cells are
    left out and, when ``skipped`` is a list, named there.
    """
    out = []
    for strategy in strategies:
        for n in nodes:
            ranks = n * scenario.ranks_per_host
            if strategy == "single" and ranks != 1:
                continue
            if scenario.batch_per_rank is None and scenario.global_batch < ranks:
                if skipped is not None:
                    skipped.append((strategy, n))
                continue
            out.append(predict(profile, strategy, n, scenario, engine=engine))
    return out


def strategy_names() -> list[str]:
    return list(REGISTRY)


def rank_allreduce_algorithms(profile: Profile, nbytes: float, ranks: int, *,
                              bandwidth_Bps: float | None = None,
                              latency_s: float | None = None) -> list[dict]:
    """Closed-form time of one all-reduce of ``nbytes`` over ``ranks`` (one per host) for every
    algorithm, fastest first: which algorithm to pick for a tensor of that size."""
    from commsim import closed_form as cf
    SIZE_BYTES.check(nbytes, "--size")
    RANKS.check(ranks, "--nodes")
    alpha = (profile.network.latency_s if latency_s is None
             else LATENCY_S.check(latency_s, "--latency"))
    beta = 1.0 / (profile.network.bandwidth_Bps if bandwidth_Bps is None
                  else LINK_RATE_BPS.check(bandwidth_Bps, "--bandwidth"))
    fit = profile.collective("all_reduce")
    rows = [{"algorithm": a, "bytes": nbytes, "ranks": ranks,
             "time_s": cf.allreduce_s(a, nbytes, ranks, alpha, beta, fit.reduction_s_per_B,
                                      fit.overhead_s)}
            for a in cf.ALLREDUCE_ALGORITHMS if a != "hierarchical"]
    return sorted(rows, key=lambda r: (r["time_s"], r["algorithm"]))


TUNE_BUCKETS_MB = (0.25, 0.5, 1, 2, 4, 8, 16, 25, 32, 64, 128, 256)


def tune_buckets(profile: Profile, nodes: int, scenario: Scenario = Scenario(), *,
                 candidates_mb: Iterable[float] = TUNE_BUCKETS_MB,
                 engine: str = "auto") -> list[dict]:
    """Predict DDP at every candidate bucket cap, two ways, fastest first:

    * ``ddp``: PyTorch's layout, a 1 MiB first bucket then the cap (``bucket_cap_mb``);
    * ``fusion``: Horovod-style tensor fusion, every buffer up to the same threshold.
    Like Horovod's autotune, but from the model in seconds instead of from training steps.
    """
    rows = []
    for mb in candidates_mb:
        cap = max(1, round(mb * MiB))
        for mode in ("ddp", "fusion"):
            spec = run_spec(profile, "ddp", nodes, replace(scenario, bucket_bytes=cap))
            if mode == "fusion":
                spec = replace(spec, first_bucket_bytes=cap)
            r = simulate(spec, profile, engine=engine)
            rows.append({"mode": mode, "bucket_mb": mb, "buckets": len(
                cost_inputs(spec, profile).buckets), "iteration_s": r.iteration_s,
                "exposed_comm_s": r.exposed_comm_s, "overlap_fraction": r.overlap_fraction})
    return sorted(rows, key=lambda row: (row["iteration_s"], row["mode"], row["bucket_mb"]))
