"""``commsim calibrate``: measure compute and Gloo collectives on N ranks, fit, write a profile.

1. ``run`` validates the options (``options``), refuses to overwrite the profile without
   ``--force``, opens the samples log ``<out>.samples.jsonl`` (``samples``; ``--resume`` reuses
   the records of an interrupted run with the same settings), brings the emulated cluster up if
   ``--emulate`` asks for it, then launches ``phases.loop.calibrate_rank`` on every rank (or runs
   it in-process under torchrun).
2. Every rank runs the measurement phases (``phases``: compute alone, contended, oversubscribed,
   the reduction cost, the collectives, contention); rank 0 logs each record as it is taken.
3. The records are fitted into the profile (``assemble``), which gets the run's metadata.
"""
from __future__ import annotations

import json
import platform
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, TYPE_CHECKING

from commsim.calibrate.assemble import profile_from_records, refit_profile
from commsim.calibrate.launch import cpu_cores, default_threads, from_env, launch, run_from_env
from commsim.calibrate.models import build_model
from commsim.calibrate.options import CalibrateOptions, public_command
from commsim.calibrate.phases.oversubscribed import OVERSUBSCRIBE
from commsim.calibrate.samples import open_samples, samples_path
from commsim.errors import UserError
from commsim.files import check_output
from commsim.profile import Profile, save

if TYPE_CHECKING:
    from commsim.calibrate.cluster import ClusterInfo

WORKER = "commsim.calibrate.phases.loop:calibrate_rank"

# What ``commsim calibrate`` callers import from here (bench, tests, the CLI).
__all__ = ["CalibrateOptions", "WORKER", "cpu_model", "profile_from_records", "public_command",
           "refit_profile", "run", "samples_path"]


def cpu_model() -> str:
    """The processor's name, as the profile records it."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _validate(opts: CalibrateOptions) -> None:
    if opts.nodes < 2:
        raise UserError(f"--nodes must be >= 2 (collectives need two ranks), got {opts.nodes}")
    if any(b < 1 for b in opts.batches) or list(opts.batches) != sorted(set(opts.batches)):
        raise UserError(f"--batch-sizes must be increasing positive integers, got "
                        f"{','.join(map(str, opts.batches))}")
    if len(opts.input_shape) < 1 or any(d < 1 for d in opts.input_shape):
        raise UserError(f"--input-shape must be positive integers, got {opts.input_shape}")
    if opts.timeout_s <= 0:
        raise UserError(f"--timeout must be > 0, got {opts.timeout_s}")
    if opts.compute_reps is not None and opts.compute_reps < 1:
        raise UserError(f"--compute-reps must be >= 1, got {opts.compute_reps}")
    build_model(opts.model)  # fail fast (one line) on a bad --model, before any rank starts


def run(opts: CalibrateOptions, progress: IO[str] | None = None) -> Profile | None:
    """Calibrate and write the profile; returns it (None on torchrun ranks other than 0)."""
    env = from_env()
    if env is not None and opts.emulate_Bps is not None:
        raise UserError("--emulate cannot be used under torchrun (the job already has its ranks)")
    world = env.world_size if env is not None else opts.nodes
    is_writer = env is None or env.rank == 0
    if env is not None and env.world_size < 2:
        raise UserError("calibrate needs WORLD_SIZE >= 2 under torchrun")
    _validate(opts if env is None else replace(opts, nodes=world))
    if is_writer:  # before minutes of measuring: is the profile (and its log) writable?
        check_output(opts.out, force=opts.force)
    done = open_samples(opts, world) if is_writer else []
    info = None
    if opts.emulate_Bps is not None:
        from commsim.calibrate import cluster

        if progress is not None and cluster.status(opts.cluster_prefix) is None:
            print(f"[calibrate] bringing up an emulated cluster of {opts.nodes} nodes",
                  file=progress, flush=True)
        info = cluster.ensure(opts.nodes, opts.emulate_Bps, prefix=opts.cluster_prefix)
    ranks_per_host = env.local_world_size if env is not None else opts.nodes
    threads = opts.threads_per_rank or default_threads(ranks_per_host)
    config = {"model": opts.model, "input_shape": list(opts.input_shape),
              "batch_sizes": list(opts.batches), "sizes_bytes": list(opts.sizes),
              "samples_path": str(samples_path(opts.out).resolve()), "done": done,
              "collective_timeout_s": opts.collective_timeout_s,
              "compute": opts.compute,
              "oversubscribe": (opts.oversubscribe if opts.oversubscribe is not None
                                else 0.0 if opts.quick else OVERSUBSCRIBE),
              "collectives": {"reps": 3, "slow_reps": 2} if opts.quick else {},
              # The host-side phase takes the emulated links' shaping off for a few seconds.
              "cluster": json.loads(info.to_json()) if info is not None else None,
              "quick": opts.quick}
    work = opts.out.parent / f".{opts.out.name}.ranks"
    if env is not None:
        results = [run_from_env(WORKER, config, env, collective_timeout_s=opts.collective_timeout_s,
                                threads_per_rank=threads)]
        if env.rank != 0:
            return None
    else:
        results = launch(WORKER, config, nodes=opts.nodes, emulate=info, timeout_s=opts.timeout_s,
                         out_dir=work, threads_per_rank=threads,
                         collective_timeout_s=opts.collective_timeout_s, progress=progress)
    head = results[0]
    metadata = _metadata(opts, head, world=world, torchrun=env is not None, cluster=info)
    profile = profile_from_records(head["records"], model=opts.model,
                                   input_shape=opts.input_shape, world_size=world,
                                   metadata=metadata)
    save(profile, opts.out, force=opts.force)
    return profile


def _metadata(opts: CalibrateOptions, head: dict, *, world: int, torchrun: bool,
              cluster: "ClusterInfo | None") -> dict:
    """What the profile records about how it was measured (rank 0's result is ``head``)."""
    runtime = head["runtime"]
    metadata = {
        "source": "commsim calibrate", "command": opts.command,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": runtime["host"], "cpu": cpu_model(), "cores": cpu_cores(),
        "nodes": world, "ranks_per_host": head["ranks_per_host"],
        "threads_per_rank": runtime["torch_threads"],
        "omp_num_threads": runtime["omp_num_threads"],
        "torch_version": _torch_version(), "backend": "gloo",
        "interface": runtime["interface"] or "default",
        "emulated_rate_Bps": opts.emulate_Bps, "quick": opts.quick,
        "launch": "torchrun" if torchrun else ("emulated" if cluster else "local"),
    }
    if cluster is not None:
        metadata["shared_cpu_cores"] = cpu_cores()
        metadata["emulated_cluster"] = {"qdisc": cluster.qdisc,
                                        "burst_bytes": cluster.burst_bytes,
                                        "limit_bytes": cluster.limit_bytes,
                                        "gso_max_bytes": cluster.gso_max_bytes,
                                        "tcp_congestion": cluster.tcp_congestion,
                                        "addresses": list(cluster.addresses[:world])}
    elif not torchrun:
        metadata["shared_cpu_cores"] = cpu_cores()
    return metadata


def _torch_version() -> str:
    import torch

    return torch.__version__
