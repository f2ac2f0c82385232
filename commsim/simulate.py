"""``simulate(run_spec, profile) -> Result``: the one entry point of the cost model.

Engines:
* ``des``: the discrete-event simulator (simpy): every rank a process, every NIC direction a
  resource, every message and reduction an event; handles uneven clusters.
* ``analytic``: the strategies' closed forms (``commsim.closed_form``); homogeneous clusters with
  one rank per host only.  The two agree exactly where both apply (tests).
* ``fast``: the DES's event times computed from its recurrences over classes of ranks
  (``commsim.sim.fast``): same answers, seconds at 65,536 ranks; refuses what it cannot do exactly.
  Asked for by name it replays every rank as long as the replay fits in memory (``fast.MEMORY``:
  minutes where the DES takes hours); within auto, only where that takes seconds.
* ``auto``: ``fast`` where it is exact, else ``des`` (where ``unsupported`` says so up front, or
  the fast engine raises ``NotExact`` on the way), unless the DES would move more than
  ``AUTO_DES_MESSAGES`` messages: then ``BeyondReach``, naming why, before any work.  The Result
  names the engine that ran.
No globals: everything the run needs is in its arguments.
"""
from __future__ import annotations

from commsim.costs import cost_inputs
from commsim.errors import BeyondReach, UserError
from commsim.profile import Profile
from commsim.result import Result, derive
from commsim.sim.context import SimContext
from commsim.sim.fast import (MEMORY, NotExact, des_messages, replay_fits, replay_seconds,
                              run_fast, unsupported)
from commsim.spec import RunSpec
from commsim.strategies import Timing, get_strategy
from commsim.units import fmt_roughly

ENGINES = ("des", "analytic", "fast", "auto")

# The most messages ``--engine auto`` lets the DES move: it moves some 20,000 to 40,000 a
# second on a 2-core machine, so this is 15-25 s; beyond, where the fast engine has no exact
# path, it would run for minutes to months, and auto says so instead.
AUTO_DES_MESSAGES = 500_000


def simulate(spec: RunSpec, profile: Profile, *, engine: str = "des",
             timeline: bool = False) -> Result:
    """Predict one iteration of ``spec`` with the costs measured in ``profile``."""
    if engine not in ENGINES:
        raise UserError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}")
    strategy = get_strategy(spec.strategy)
    strategy.check(spec)
    costs = cost_inputs(spec, profile)
    timing = None
    if engine == "auto":
        engine = "des"
        reason = unsupported(spec, costs, timeline=timeline)
        if reason is None:
            try:
                timing = run_fast(spec, costs)
                engine = "fast"
            except NotExact as exc:
                reason = exc.reason  # found on the way: e.g. ranks of one host queueing on its NIC
        messages = des_messages(spec, costs) if timing is None else 0
        if messages > AUTO_DES_MESSAGES:
            # (the DES's messages: what a replay of every rank holds, or a bound on it)
            replays = (unsupported(spec, costs, timeline=timeline, reach=MEMORY) is None
                       and replay_fits(messages))
            within = " within --engine auto's seconds" if replays else ""
            why = (f"the fast engine has no exact path{within} ({reason}), and "
                   f"{_beyond(messages, _most_answered(spec, costs, timeline), replays)}")
            raise BeyondReach(f"{spec.strategy} on {spec.world_size} ranks: {why}", why)
    if timing is None:
        timing = run_engine(spec, profile, engine=engine, timeline=timeline, costs=costs)
    baseline = None
    if spec.strategy != "single":
        baseline = _baseline_s(spec.single_baseline(), profile)
    return derive(strategy, spec, timing, engine=engine, baseline_iteration_s=baseline,
                  model_bytes=profile.model_bytes, buffer_bytes=profile.buffer_bytes)


def _beyond(messages: int, fewer: int | None = None, replays: bool = False) -> str:
    """The DES's work where it is more than ``--engine auto`` starts, and what to do, in
    words (``fewer``: the most ranks auto answers with the same options, where known;
    ``replays``: whether ``--engine fast`` would replay every rank, exactly, in its stead)."""
    times = messages / AUTO_DES_MESSAGES
    up_to = f" (up to about {fewer:,} with these options)" if fewer else ""
    fast = (f", --engine fast to replay them all, exactly (about "
            f"{fmt_roughly(replay_seconds(messages))} here; the DES takes 25 to 80 times as "
            f"long)" if replays else "")
    return (f"the DES would move about {messages:.2g} messages, {times:,.{int(times < 10)}f} "
            f"times the {AUTO_DES_MESSAGES:,} --engine auto starts; use fewer ranks{up_to}"
            f"{fast}, or --engine des to wait for it")


def _most_answered(spec: RunSpec, costs, timeline: bool) -> int | None:
    """The most ranks, on fewer hosts with the same options, for which ``--engine auto`` would
    not refuse as counted before any work (the fast engine's checks up front, the DES's
    messages): what to try instead.  Both grow with the hosts; a run too small for its options
    (a straggler's rank, a slow host, a group) is not one.  None where no smaller run is, or
    where the run passes the checks up front (refused on the way: the counts cannot tell).
    The costs are the run's: the counts depend on its tensors and buckets, not on its ranks."""
    from dataclasses import replace

    if unsupported(spec, costs, timeline=timeline) is None:
        return None

    def run(hosts: int) -> RunSpec | None:
        try:
            return replace(spec, cluster=replace(spec.cluster, hosts=hosts))
        except UserError:
            return None

    def answered(hosts: int) -> bool:
        smaller = run(hosts)
        return smaller is not None and (
            unsupported(smaller, costs, timeline=timeline) is None
            or des_messages(smaller, costs) <= AUTO_DES_MESSAGES)

    lo, hi = 1, spec.cluster.hosts - 1         # the fewest hosts a run of these options has
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if run(mid) is not None else (mid + 1, hi)
    if lo >= spec.cluster.hosts or not answered(lo):
        return None
    hi = spec.cluster.hosts - 1                # the most hosts auto answers
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if answered(mid) else (lo, mid - 1)
    return lo * spec.cluster.ranks_per_host


def _baseline_s(single: RunSpec, profile: Profile) -> float:
    """The reference iteration: one rank on one host like the run's, the whole global batch.
    The fast engine times its three compute jobs as the DES would (and the command then needs
    no DES at all, whose import is part of every start-up); the DES where it cannot."""
    costs = cost_inputs(single, profile)
    try:
        return run_fast(single, costs).finish_s[0]       # (NotExact where it cannot)
    except NotExact:
        return run_engine(single, profile, engine="des", timeline=False,
                          costs=costs).finish_s[0]


def run_engine(spec: RunSpec, profile: Profile, *, engine: str, timeline: bool,
               costs=None) -> Timing:
    strategy = get_strategy(spec.strategy)
    costs = cost_inputs(spec, profile) if costs is None else costs
    if engine == "analytic":
        if not spec.homogeneous or spec.cluster.ranks_per_host != 1:
            raise UserError("--engine analytic covers homogeneous clusters with one rank per "
                            "host; use --engine des for stragglers, slow links or shared hosts")
        if spec.cluster.shared_cpu_cores is not None:
            raise UserError("--engine analytic does not model shared CPU cores; use --engine des")
        return strategy.analytic(spec, costs)
    if engine == "fast":
        if timeline:
            raise UserError("--engine fast does not record a timeline; use --engine des")
        try:
            return run_fast(spec, costs, MEMORY)
        except NotExact as exc:
            messages = des_messages(spec, costs)
            if messages <= AUTO_DES_MESSAGES:
                raise
            # (--engine auto would decline it too: say what the DES would take)
            fewer = _most_answered(spec, costs, timeline)
            raise NotExact(exc.reason, instead=_beyond(messages, fewer)) from None
    ctx = SimContext(spec, costs, timeline=timeline)
    for rank in range(spec.world_size):
        ctx.env.process(strategy.rank_process(ctx, rank))
    ctx.env.run()
    rec = ctx.rec
    if any(depth for depth in rec._comm_depth):
        raise RuntimeError("simulation ended with a collective still in flight (deadlock)")
    return Timing(finish_s=tuple(rec.finish_s), compute_s=tuple(rec.compute_s),
                  comm_s=tuple(rec.comm_s), sent_bytes=tuple(rec.sent),
                  received_bytes=tuple(rec.received), nic_tx_bytes=tuple(rec.nic_tx_bytes),
                  nic_rx_bytes=tuple(rec.nic_rx_bytes), intervals=tuple(rec.intervals))
