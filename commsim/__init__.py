"""commsim: predict, measure and explain the communication cost of data-parallel training.

Data flows one way: calibrate -> profile JSON -> cost model -> simulator -> analysis.  This core
package imports neither torch nor matplotlib; the commands that need them import them lazily.

In a notebook, three calls answer most questions (options as ``commsim predict`` takes them,
by their Python names: ``bandwidth="10gbit"``, ``latency="50us"``, ``global_batch=512``,
``batch_per_rank=64``, ``bucket_mb=50``, ``sync_every=4``, ``group_size=2``,
``compress="fp16"``, ``algorithm="tree"``, ``straggler={3: 1.5}``, ``slow_link={2: "100mbit"}``,
``ranks_per_host``, ``cores_per_host``, ``shared_cpu_cores``, ``no_overlap``,
``no_buffer_broadcast``):

>>> import commsim
>>> r = commsim.predict("ddp", nodes=8, bandwidth="10gbit")
>>> r.strategy, r.nodes, r.link_bandwidth_Bps * 8 / 1e9
('ddp', 8, 10.0)
>>> r.iteration_s < commsim.predict("ddp", nodes=8, bandwidth="1gbit").iteration_s
True
>>> rows = commsim.sweep(["ring", "ddp"], nodes=[2, 4, 8])   # pandas.DataFrame(rows) as is
>>> [(row["strategy"], row["nodes"]) for row in rows][:3]
[('ring', 2), ('ring', 4), ('ring', 8)]
>>> prof = commsim.load_profile()                 # the bundled one; or a path
>>> commsim.predict("ring", nodes=4, profile=prof).world_size
4
"""
from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__", "load_profile", "predict", "sweep"]


def load_profile(path=None):
    """A profile from ``commsim calibrate`` (``path``), or the bundled one (None)."""
    from commsim.profile import load, load_default

    return load_default() if path is None else load(path)


def predict(strategy: str, nodes: int, *, profile=None, engine: str = "auto", **options):
    """One iteration of ``strategy`` on ``nodes`` hosts: a ``commsim.result.Result``
    (``iteration_s``, ``speedup``, ``exposed_comm_s``, ``link_utilization``, ...; ``to_dict()``).

    ``profile``: a Profile, a path, or None for the bundled one; ``options`` as in the module
    docstring (the CLI's what-if options)."""
    from commsim import api

    return api.predict(_profile(profile), strategy, nodes, api.scenario(**options),
                       engine=engine)


def sweep(strategies=None, nodes=(1, 2, 3, 4, 8, 16), *, profile=None, engine: str = "auto",
          **options) -> list[dict]:
    """Every strategy (default: the seed documents' single, ps, ring, ddp) at every node count,
    as rows: one dict per cell, the fields of ``commsim predict --json``."""
    from commsim import api
    from commsim.strategies import SEED_STRATEGIES

    results = api.sweep(_profile(profile), strategies or SEED_STRATEGIES, nodes,
                        api.scenario(**options), engine=engine)
    return [r.to_dict() for r in results]


def _profile(profile):
    from commsim.profile import Profile

    return profile if isinstance(profile, Profile) else load_profile(profile)
