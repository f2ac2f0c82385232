"""Options shared by the commands that predict (predict, sweep, trace, report): parsed here once."""
from __future__ import annotations

import functools
import inspect
import json
import typing
from pathlib import Path
from typing import List, Optional

import typer

from commsim.api import Scenario
from commsim.errors import UserError
from commsim.limits import HOSTS
from commsim.profile import Profile, load, load_default
from commsim.spec import DEFAULT_GLOBAL_BATCH

ProfileOpt = typer.Option(None, "--profile", help="Profile JSON from 'commsim calibrate' "
                          "(default: the bundled profile).", dir_okay=False,
                          readable=False)  # commsim.files reads it: exit 1 when unreadable
GlobalBatchOpt = typer.Option(None, "--global-batch", min=1,
                              help="Samples per iteration over all ranks (strong scaling; "
                                   f"default {DEFAULT_GLOBAL_BATCH}).")
BatchPerRankOpt = typer.Option(None, "--batch-per-rank", min=1,
                               help="Samples per rank per iteration (weak scaling).")
BucketOpt = typer.Option(25.0, "--bucket-mb", help="DDP bucket cap in MiB (bucket_cap_mb).")
# Predictions mirror DDP's own default: 25 MiB buckets after a 1 MiB first bucket, while an
# explicit bucket_cap_mb caps the first bucket too (torch 2.13, DistributedDataParallel).
PredictBucketOpt = typer.Option(
    None, "--bucket-mb", help="DDP bucket cap in MiB, as DDP(bucket_cap_mb=...): it also caps "
    "the first bucket (default: DDP's own, 25 MiB after a 1 MiB first bucket).")
BandwidthOpt = typer.Option(None, "--bandwidth", help="What-if link rate, tc spelling: "
                            "1gbit, 100mbit, 125MBps (default: the profile's fitted link).")
LatencyOpt = typer.Option(None, "--latency", help="What-if one-way latency: 50us, 0.2ms.")
RanksPerHostOpt = typer.Option(1, "--ranks-per-host", min=1,
                               help="Ranks per host; they share its cores and NIC.")
CoresOpt = typer.Option(None, "--cores-per-host", help="Cores per host (default: the threads "
                        "each rank was calibrated with plus one for its Gloo thread, times ranks "
                        "per host).")
SharedCoresOpt = typer.Option(None, "--shared-cpu-cores", help="All ranks share one pool of "
                              "this many cores (a cluster emulated on one machine).")
ThreadsOpt = typer.Option(None, "--threads-per-rank", min=1, help="Compute threads each rank "
                          "runs (default: as calibrated); another count keeps the calibrated "
                          "compute's thread-seconds, as more emulated nodes on the same cores "
                          "give each rank fewer.")
StragglerOpt = typer.Option(None, "--straggler", help="RANK:FACTOR, rank computes FACTOR times "
                            "slower (repeatable).")
SlowLinkOpt = typer.Option(None, "--slow-link", help="HOST:RATE, that host's NIC runs at RATE "
                           "(repeatable).")
NoOverlapOpt = typer.Option(False, "--no-overlap", help="DDP what-if: launch every bucket after "
                            "backward instead of overlapping.")
AlgorithmOpt = typer.Option(None, "--algorithm", help="Collective algorithm: ring, "
                            "recursive_doubling, rabenseifner, tree, hierarchical (ring/ddp); "
                            "linear, binomial (ps).")
SyncEveryOpt = typer.Option(1, "--sync-every", min=1, help="Local gradient aggregation: "
                            "accumulate k iterations, sync once (Horovod "
                            "backward_passes_per_step, DDP no_sync).")
GroupSizeOpt = typer.Option(None, "--group-size", min=1, help="Average within groups of g ranks "
                            "(2: pairwise) instead of all.")
CompressOpt = typer.Option(None, "--compress", help="DDP gradient compression: fp16.")
ComputeScaleOpt = typer.Option(1.0, "--compute-scale", help="Every rank computes F times as "
                               "long as calibrated (0.5: nodes twice as fast); the single-rank "
                               "baseline too.")
NoBufferOpt = typer.Option(False, "--no-buffer-broadcast", help="DDP what-if: "
                           "broadcast_buffers=False (no batch-norm statistics each forward).")
EngineOpt = typer.Option("auto", "--engine", help="auto (fast where it is exact, else des, "
                         "within seconds), fast (the DES's answers, in seconds at any scale; "
                         "where it must replay every rank, for as long as memory holds), des "
                         "(discrete-event, every message) or analytic (closed forms, homogeneous "
                         "clusters only).")


def load_profile(path: Optional[Path]) -> Profile:
    return load_default() if path is None else load(path)


def scenario(**options) -> Scenario:
    """The shared options as one ``Scenario`` (``commsim.api.scenario`` parses them)."""
    from commsim.api import scenario as build

    return build(**options)


def parse_nodes(text: str) -> list[int]:
    """'1,2,4,8', '1-4' (every integer) or 'pow2:64' (1, 2, 4, ..., 64)."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        try:
            if part.startswith("pow2:"):
                top = HOSTS.check(int(part[5:]), "--nodes")
                k = 1
                while k <= top:
                    out.append(k)
                    k *= 2
            elif "-" in part[1:]:
                lo, hi = part.split("-", 1)
                out.extend(range(HOSTS.check(int(lo), "--nodes"),
                                 HOSTS.check(int(hi), "--nodes") + 1))
            else:
                out.append(HOSTS.check(int(part), "--nodes"))
        except UserError:
            raise
        except ValueError:
            raise UserError(f"cannot read node count {part!r} in --nodes {text!r}; use e.g. "
                            "1,2,4,8 or 1-4 or pow2:64") from None
    if not out:
        raise UserError(f"--nodes {text!r} must list node counts >= 1")
    return sorted(set(out))


def dumps(obj) -> str:
    return json.dumps(obj, indent=2, sort_keys=True, allow_nan=False)


# The scenario options commands share: parameter name -> (type, typer option).
SCENARIO_OPTIONS = {
    "global_batch": (Optional[int], GlobalBatchOpt),
    "batch_per_rank": (Optional[int], BatchPerRankOpt),
    "bucket_mb": (Optional[float], PredictBucketOpt),
    "bandwidth": (Optional[str], BandwidthOpt),
    "latency": (Optional[str], LatencyOpt),
    "ranks_per_host": (int, RanksPerHostOpt),
    "cores_per_host": (Optional[float], CoresOpt),
    "shared_cpu_cores": (Optional[float], SharedCoresOpt),
    "threads_per_rank": (Optional[int], ThreadsOpt),
    "straggler": (Optional[List[str]], StragglerOpt),
    "slow_link": (Optional[List[str]], SlowLinkOpt),
    "no_overlap": (bool, NoOverlapOpt),
    "algorithm": (Optional[str], AlgorithmOpt),
    "sync_every": (int, SyncEveryOpt),
    "group_size": (Optional[int], GroupSizeOpt),
    "compress": (Optional[str], CompressOpt),
    "no_buffer_broadcast": (bool, NoBufferOpt),
    "compute_scale": (float, ComputeScaleOpt),
}
HOMOGENEOUS = tuple(n for n in SCENARIO_OPTIONS if n not in ("straggler", "slow_link",
                                                               "no_overlap"))


def with_scenario(names=tuple(SCENARIO_OPTIONS), **fixed):
    """Decorator: add the shared scenario options ``names`` to a typer command, which then
    receives them as one ``scenario`` (a ``commsim.api.Scenario``); ``fixed`` gives values for
    scenario fields the command sets itself.  One definition of every option, for every command.
    """
    def decorate(fn):
        sig = inspect.signature(fn)
        own = [p for p in sig.parameters.values() if p.name != "scenario"]
        shared = [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY,
                                    default=SCENARIO_OPTIONS[n][1],
                                    annotation=SCENARIO_OPTIONS[n][0]) for n in names]

        @functools.wraps(fn)
        def command(**kwargs):
            chosen = {n: kwargs.pop(n) for n in names}
            kwargs["scenario"] = scenario(**{**fixed, **chosen})
            return fn(**kwargs)

        command.__signature__ = sig.replace(
            parameters=[p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own] + shared)
        hints = {k: v for k, v in typing.get_type_hints(fn).items()
                 if k not in ("scenario", "return")}
        hints.update({n: SCENARIO_OPTIONS[n][0] for n in names})
        command.__annotations__ = hints
        return command
    return decorate
