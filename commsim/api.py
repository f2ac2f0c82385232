"""Library calls behind the CLI: build a run spec from user-level options, predict, sweep.

Everything here takes SI numbers (bytes/s, seconds, bytes); the CLI parses text into them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

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
    bandwidth_Bps / latency_s: what-if link (None = the profile's fitted link).
    ranks_per_host, cores_per_host, shared_cpu_cores: host layout (None = like calibrated).
    stragglers:          rank -> compute slowdown factor.
    slow_links_Bps:      host -> NIC bandwidth.
    overlap:             DDP overlaps communication with backward (False: what-if without).
    """
    global_batch: int | None = 256
    batch_per_rank: int | None = None
    bucket_bytes: int = 25 * MiB
    bandwidth_Bps: float | None = None
    latency_s: float | None = None
    ranks_per_host: int = 1
    cores_per_host: float | None = None
    shared_cpu_cores: float | None = None
    stragglers: Mapping[int, float] = field(default_factory=dict)
    slow_links_Bps: Mapping[int, float] = field(default_factory=dict)
    overlap: bool = True


def run_spec(profile: Profile, strategy: str, nodes: int, scenario: Scenario) -> RunSpec:
    get_strategy(strategy)  # unknown names fail here, with the list of known ones
    cluster = default_cluster(profile, nodes, ranks_per_host=scenario.ranks_per_host,
                              bandwidth_Bps=scenario.bandwidth_Bps, latency_s=scenario.latency_s,
                              cores_per_host=scenario.cores_per_host,
                              shared_cpu_cores=scenario.shared_cpu_cores,
                              slow_links_Bps=scenario.slow_links_Bps)
    return RunSpec(strategy=strategy, cluster=cluster,
                   global_batch=None if scenario.batch_per_rank else scenario.global_batch,
                   batch_per_rank=scenario.batch_per_rank, bucket_bytes=scenario.bucket_bytes,
                   overlap=scenario.overlap, stragglers=dict(scenario.stragglers))


def predict(profile: Profile, strategy: str, nodes: int, scenario: Scenario = Scenario(), *,
            engine: str = "des", timeline: bool = False) -> Result:
    return simulate(run_spec(profile, strategy, nodes, scenario), profile, engine=engine,
                    timeline=timeline)


def sweep(profile: Profile, strategies: Iterable[str], nodes: Iterable[int],
          scenario: Scenario = Scenario(), *, engine: str = "des") -> list[Result]:
    """Every strategy at every node count; ``single`` only at one node (it is the baseline)."""
    out = []
    for strategy in strategies:
        for n in nodes:
            if strategy == "single" and n * scenario.ranks_per_host != 1:
                continue
            out.append(predict(profile, strategy, n, scenario, engine=engine))
    return out


def strategy_names() -> list[str]:
    return list(REGISTRY)
