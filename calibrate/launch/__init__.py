"""Launch one process per rank (locally, in an emulated cluster, or join a torchrun job).

Used by ``commsim calibrate`` and by live training.  One module per concern:
  ``spawn``      ``launch``: start every rank, watch them, kill them all on any failure;
  ``placement``  where ranks run and how they reach rank 0 (this host, or emulated nodes);
  ``torchrun``   ``from_env``/``run_from_env``: under torchrun the current process is the rank;
  ``worker``     the rank itself (``python -m commsim.calibrate.launch.worker SPEC``);
  ``settings``   threads per rank and the collective timeout;
  ``heartbeat``  waiting on each other for minutes while noticing a dead peer in seconds.
``worker`` is not imported here: it runs as ``-m``, which warns when its package imported it.
"""
from commsim.calibrate.launch.placement import free_port
from commsim.calibrate.launch.settings import (DEFAULT_COLLECTIVE_TIMEOUT_S, cpu_cores,
                                               default_threads)
# _Child and _failure: how a failed run names its cause is tested on its own.
from commsim.calibrate.launch.spawn import _Child, _failure, launch  # noqa: F401
from commsim.calibrate.launch.torchrun import EnvRank, from_env, run_from_env

__all__ = ["DEFAULT_COLLECTIVE_TIMEOUT_S", "EnvRank", "cpu_cores", "default_threads", "free_port",
           "from_env", "launch", "run_from_env"]
