"""Join a torchrun job: the current process is the rank, described by torchrun's variables.

``from_env`` reads RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT/LOCAL_WORLD_SIZE (None when they are not
all set: not under torchrun); ``run_from_env`` runs the worker in this process, as ``launch``'s
children do.  torchrun itself watches and kills the ranks, so there is no launcher here.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from commsim.calibrate.launch.settings import DEFAULT_COLLECTIVE_TIMEOUT_S, default_threads
from commsim.errors import UserError


@dataclass(frozen=True)
class EnvRank:
    """This process's place in a torchrun (env://) job."""
    rank: int
    world_size: int
    master_addr: str
    master_port: int
    local_world_size: int


def from_env(environ: dict[str, str] | None = None) -> EnvRank | None:
    """The torchrun rank described by RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, or None."""
    env = os.environ if environ is None else environ
    keys = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    if not all(env.get(k) for k in keys):
        return None
    try:
        rank, world, port = int(env["RANK"]), int(env["WORLD_SIZE"]), int(env["MASTER_PORT"])
        local = int(env.get("LOCAL_WORLD_SIZE") or 1)
    except ValueError:
        raise UserError("RANK, WORLD_SIZE, MASTER_PORT and LOCAL_WORLD_SIZE must be integers "
                        f"(got RANK={env['RANK']!r} WORLD_SIZE={env['WORLD_SIZE']!r} "
                        f"MASTER_PORT={env['MASTER_PORT']!r})") from None
    if not 0 <= rank < world or not 0 < port < 65536:
        raise UserError(f"RANK={rank} must be in 0..WORLD_SIZE-1={world - 1} and MASTER_PORT="
                        f"{port} in 1..65535")
    return EnvRank(rank, world, env["MASTER_ADDR"], port, local)


def run_from_env(worker: str, config: dict, env: EnvRank, *, out_dir: str | Path | None = None,
                 collective_timeout_s: float = DEFAULT_COLLECTIVE_TIMEOUT_S,
                 threads_per_rank: int | None = None) -> dict:
    """Run ``worker`` as this torchrun rank; torchrun itself watches and kills the ranks."""
    from commsim.calibrate.launch.worker import run_rank

    threads = threads_per_rank or int(os.environ.get("OMP_NUM_THREADS") or 0) \
        or default_threads(env.local_world_size)
    return run_rank(worker, config, rank=env.rank, world_size=env.world_size,
                    master_addr=env.master_addr, master_port=env.master_port,
                    timeout_s=collective_timeout_s, threads=threads, out_dir=out_dir)
