"""Library calls behind the CLI: build a run spec from user-level options, predict, sweep.

Everything here takes SI numbers (bytes/s, seconds, bytes); the CLI parses text into them.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Iterable, Mapping

from commsim.costs import cost_inputs
from commsim.errors import BeyondReach, UserError
from commsim.limits import BUCKET_MIB, LATENCY_S, LINK_RATE_BPS, RANKS, SIZE_BYTES
from commsim.profile import Profile
from commsim.result import Result
from commsim.simulate import simulate
from commsim.spec import (DDP_BUCKET_BYTES, DEFAULT_GLOBAL_BATCH, MiB, RunSpec, Workload,
                          default_cluster)
from commsim.strategies import REGISTRY, get_strategy
from commsim.units import parse_rate_Bps, parse_time_s


@dataclass(frozen=True)
class Scenario(Workload):
    """A user's question, independent of strategy and node count (the sweep's fixed part): a
    ``Workload`` (batch, buckets, algorithm, aggregation, groups, compression, stragglers) plus
    the cluster what-ifs:

    bandwidth_Bps / latency_s: what-if link (None = the profile's fitted link).
    ranks_per_host, cores_per_host, shared_cpu_cores, threads_per_rank:
                         host layout (None = like calibrated).
    slow_links_Bps:      host -> NIC bandwidth.
    cpu_efficiency:      (busy threads, efficiency) points of a shared CPU (see ClusterSpec).
    """
    bandwidth_Bps: float | None = None
    latency_s: float | None = None
    ranks_per_host: int = 1
    cores_per_host: float | None = None
    shared_cpu_cores: float | None = None
    slow_links_Bps: Mapping[int, float] = field(default_factory=dict)
    cpu_efficiency: tuple = ()
    threads_per_rank: int | None = None


def run_spec(profile: Profile, strategy: str, nodes: int, scenario: Scenario) -> RunSpec:
    get_strategy(strategy)  # unknown names fail here, with the list of known ones
    cluster = default_cluster(profile, nodes, ranks_per_host=scenario.ranks_per_host,
                              bandwidth_Bps=scenario.bandwidth_Bps, latency_s=scenario.latency_s,
                              cores_per_host=scenario.cores_per_host,
                              shared_cpu_cores=scenario.shared_cpu_cores,
                              slow_links_Bps=scenario.slow_links_Bps,
                              cpu_efficiency=scenario.cpu_efficiency,
                              threads_per_rank=scenario.threads_per_rank)
    workload = scenario.workload()
    if scenario.batch_per_rank:  # weak scaling wins over the default global batch
        workload["global_batch"] = None
    workload["stragglers"] = dict(scenario.stragglers)
    return RunSpec(strategy=strategy, cluster=cluster, **workload)


def scenario(*, global_batch: int | None = None, batch_per_rank: int | None = None,
             bucket_mb: float | None = None, bandwidth=None, latency=None,
             ranks_per_host: int = 1, cores_per_host: float | None = None,
             shared_cpu_cores: float | None = None, straggler=None, slow_link=None,
             no_overlap: bool = False, algorithm: str | None = None, sync_every: int = 1,
             group_size: int | None = None, compress: str | None = None,
             no_buffer_broadcast: bool = False, compute_scale: float = 1.0,
             threads_per_rank: int | None = None) -> Scenario:
    """A ``Scenario`` from the options as a user gives them, by their CLI names: rates and
    times as text with units (``"10gbit"``, ``"50us"``) or numbers in bytes/s and seconds;
    ``straggler`` and ``slow_link`` as ``{rank: factor}`` / ``{host: rate}`` or the CLI's
    ``"RANK:FACTOR"`` strings.  The CLI and ``commsim.predict`` build their question here."""
    if global_batch is not None and batch_per_rank is not None:
        raise UserError("give --global-batch or --batch-per-rank, not both")
    cap = None if bucket_mb is None else max(1, round(BUCKET_MIB.check(bucket_mb) * MiB))
    for name, value in (("--cores-per-host", cores_per_host),
                        ("--shared-cpu-cores", shared_cpu_cores)):
        if value is not None and (not value > 0 or value == float("inf")):
            raise UserError(f"{name} must be positive, got {value}")
    return Scenario(
        global_batch=None if batch_per_rank else (global_batch or DEFAULT_GLOBAL_BATCH),
        batch_per_rank=batch_per_rank, bucket_bytes=cap or DDP_BUCKET_BYTES,
        first_bucket_bytes=cap,
        bandwidth_Bps=None if bandwidth is None else _quantity(bandwidth, parse_rate_Bps),
        latency_s=None if latency is None else _quantity(latency, parse_latency_s),
        ranks_per_host=ranks_per_host, cores_per_host=cores_per_host,
        shared_cpu_cores=shared_cpu_cores,
        stragglers=_pairs(straggler, "straggler", _factor),
        slow_links_Bps=_pairs(slow_link, "slow-link", lambda v: _quantity(v, parse_rate_Bps)),
        overlap=not no_overlap, algorithm=algorithm, sync_every=sync_every,
        group_size=group_size, compression=compress,
        broadcast_buffers=not no_buffer_broadcast, compute_scale=compute_scale,
        threads_per_rank=threads_per_rank)


def parse_latency_s(text: str) -> float:
    """A latency: like ``parse_time_s``, and zero may be written without a unit."""
    if str(text).strip() in ("0", "0s", "0us", "0ms"):
        return 0.0
    return parse_time_s(text)


def _quantity(value, parse) -> float:
    """Text with a unit goes through ``parse``; a number is already in SI units."""
    if isinstance(value, str):
        return parse(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UserError(f"expected a number or text with a unit, got {value!r}")
    return float(value)


def _pairs(values, what: str, parse_value) -> dict[int, float]:
    if isinstance(values, Mapping):
        return {int(k): parse_value(v) for k, v in values.items()}
    if isinstance(values, str):    # one "INDEX:VALUE", not a sequence of its characters
        values = [values]
    out: dict[int, float] = {}
    for text in values or ():
        key, sep, value = str(text).partition(":")
        if not sep or not key.strip().isdigit():
            raise UserError(f"--{what} takes INDEX:VALUE, got {text!r}")
        index = int(key)
        if index in out:           # (which one was meant? neither is dropped silently)
            raise UserError(f"--{what} names {index} twice")
        out[index] = parse_value(value)
    return out


def _factor(text) -> float:
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise UserError(f"straggler factor must be a number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise UserError(f"straggler factor must be positive and finite, got {text!r}")
    return value


def predict(profile: Profile, strategy: str, nodes: int, scenario: Scenario = Scenario(), *,
            engine: str = "auto", timeline: bool = False) -> Result:
    return simulate(run_spec(profile, strategy, nodes, scenario), profile, engine=engine,
                    timeline=timeline)


def sweep(profile: Profile, strategies: Iterable[str], nodes: Iterable[int],
          scenario: Scenario = Scenario(), *, engine: str = "auto",
          skipped: list | None = None) -> list[Result]:
    """Every strategy at every node count; ``single`` only at one node (it is the baseline).

    Strong scaling cannot split a global batch over more ranks than samples, and ``auto``
    declines a cell no engine answers in reasonable time (``BeyondReach``): those cells are
    left out and, when ``skipped`` is a list, named there as (strategy, nodes, why).
    """
    out = []
    for strategy in strategies:
        for n in nodes:
            ranks = n * scenario.ranks_per_host
            if strategy == "single" and ranks != 1:
                continue
            why = None
            if scenario.batch_per_rank is None and scenario.global_batch < ranks:
                why = (f"global batch {scenario.global_batch} cannot be split over more ranks "
                       "than samples (use --batch-per-rank for weak scaling)")
            else:
                try:
                    out.append(predict(profile, strategy, n, scenario, engine=engine))
                except BeyondReach as exc:
                    if skipped is None:
                        raise
                    why = exc.why
            if why is not None and skipped is not None:
                skipped.append((strategy, n, why))
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
