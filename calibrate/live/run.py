"""Running a live job: launch its ranks of ``live_worker`` (on this host, one per emulated node,
or this process as a torchrun rank) and aggregate their results into one record.
"""
from __future__ import annotations

import os
from dataclasses import replace
from typing import TYPE_CHECKING

from commsim.calibrate.live.aggregate import aggregate
from commsim.calibrate.live.config import LiveConfig
from commsim.errors import UserError

if TYPE_CHECKING:
    from commsim.calibrate.cluster import ClusterInfo

WORKER = "commsim.calibrate.live.worker:live_worker"


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
