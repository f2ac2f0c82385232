"""The ``fast`` engine: the discrete-event simulator's answers without simulating every message.

The DES (``commsim.sim.engine``) runs every rank as a process and every ring step as messages, so
a ring all-reduce over p ranks costs O(p²) events per tensor.  This engine computes the same event
times directly, with numpy over ranks, from the recurrences the DES obeys:

1. Compute.  A rank's forward/backward/optimizer (and, with ``sync_every`` k, the k-1 local steps
   before them) are jobs of ``work x straggler factor`` on its host's processor-sharing CPU;
   alone they run at rate a = min(1, cores/threads).
2. Collectives (``commsim.sim.fast_collectives``).  Every algorithm is walked step by step over
   all its ranks at once: a message is delivered at max(sender posts, receiver posts) + its
   cost (rendezvous), reductions run on the rank's Gloo thread.  Groups (``group_size``) are
   rows of independent collectives.  Ring all-reduce needs more, as it has 2(p-1) steps:
       D_i = max(R_i, R_{i+1}) + c_i,   E_i = max(D_i, D_{i-1}),   R_i' = E_i + g_i
   (g_i the reduction of reduce-scatter, 0 in all-gather): a max-plus linear system.
   * Aggregated steps: once one step moves every rank of a ring by the same λ, the state is a
     max-plus eigenvector and stays one: the remaining steps of the phase are one addition.
   * Uncontended phases in one go (``RingPaths``): R after k steps is the best k-step walk
     into each rank, which stays at one vertex; with equal edges a sliding-window max,
     max R within k + k·(c + g), and a sweep per rank beside a slower link or, on shared
     hosts, window maxima with penalties for the cheaper loopback edges.  O(p) per phase
     where stepping was O(p²) (slow links, stragglers on shared hosts).
   * Symmetry: with no straggler and no slow link, ranks repeat with period ranks_per_host (the
     world ring is simulated on one period: a ring of length q behaves like the p-ring it
     tiles), groups with period lcm(group_size, ranks_per_host), hierarchical's hosts alike.
3. DDP overlap.  The Gloo thread's reductions share the host's cores with backward (processor
   sharing: both slow to r = min(1, cores/(threads+1))).  Each rank keeps B, the time backward
   would end if nothing more competed; a reduction of w at time E either runs after backward
   (w/b), fully inside it (w/r; B grows by w/r - w/a), or straddles its end.  Buckets start at
   max(ready, previous bucket's end), ready being when backward's progress reaches the bucket.
   Ring steps are aggregated as above while every rank stays in the same regime, and for at
   most as many steps as keep every overlapping rank's backward running; while every
   backward outlasts the next steps' posts, they are plain max-plus with reductions at r
   (``RingPaths``).  fp16 compression adds the two casts as reductions around an all-reduce
   of half the bytes.  With calibrated contention (one rank per host, ``_contended_ring``)
   backward runs at the calibrated compute speed inside a collective (B rescaled as each rank
   enters and leaves) and a ring edge with a computing end costs the contended bandwidth.
4. Lockstep worlds (``commsim.sim.fast_lockstep``).  Where jobs share a CPU beyond 3.'s
   regimes (a pool of cores, an efficiency curve, calibrated contention, too few cores) on a
   uniform cluster of one rank per host or of one host, with a ring (or doubling over a power
   of two) that treats every rank alike, or of two ranks per host in a ring, every rank acts
   at the same instants: one rank's events, its CPU carrying its twins' jobs, give them all.
   A tree's ranks, and a doubling algorithm's over a number that is not a power of two (its
   fold) or with stragglers or slow links, and rings of groups with stragglers or slow
   links, act by class (``fast_lockstep.place_classes``: for a tree over a power of two, the
   place's trailing zero bits; a straggler or a slow link and the ranks its delay reaches
   part), one rank of each class simulated, on one rank per host or one host (a tree also on
   two ranks a host sharing one pool).
5. Root-centred sync (ps linear, dp).  The root's receive direction serves the messages sent
   to it in the order they are matched (FIFO; work-conserving, so its last delivery is
   max_k(a_k + Σ_{a_j >= a_k} s_j) + α over the match times a and transfer times s); its sends
   leave its transmit direction in rank order (the receivers have posted before).
   O(p log p) per tensor.  With every rank on one pool of cores (or with no latency ranks
   beside each other on a host's cores), the ranks that have their share of the last scatter
   step while the root still sends, loading the cores under its later messages: an event loop
   over starts, deliveries and steps (``_last_scatter_by_events``).
   Out of step on shared CPUs (stragglers on a pool, or on hosts short of cores), linear ps's
   first gather is the only other place compute meets a message: per CPU, the classes of ranks
   of one compute factor, an event per class's job end; and the messages in match order, a
   host's one after another on its transmit direction, at the busier end's load when each
   starts, ranks that post at one instant in the order their CPUs' timers were set
   (``_first_gather_shared``; where that does not tell, two classes of one CPU, the first
   tensor is replayed); from its mean on, the recurrences.  Binomial ps on one pool: the
   schedules from the first tensor's mean to the last gather; the last scatter, whose ranks
   step on the pool as they get their shares, and with stragglers the compute and first tensor,
   replayed by classes of ranks acting together (``fast_classes``).  dp on a pool is an event
   loop over device 0's serial phases, the jobs on the pool and the deliveries
   (``_data_parallel_in_pool``), with its stretches that are sums in bulk: the parameter
   broadcast while each forward runs alone (``_forward_alone``), the gradient gather once
   nothing computes (``_gathered_alone``).
6. A world ring of stragglers on one pool, one or two ranks a host, or on one host
   (``commsim.sim.fast_runs``): runs of consecutive ranks in one state, one rank's events
   standing for its run's; only a run's end ranks can part from it, and runs that go on
   together join again.  O(p) events an iteration, most of them a straggler's staircase (a run
   parting from, or taking in, its end ranks a step at a time), taken outside the loop's
   batches (``_Ring._glide``), whole steps of the runs in step at once (``_Ring._stride``).
   A ring per tensor of two ranks a host on each host's cores goes by runs too, a CPU for
   each host a run's end shares with another run (O(p^2) events there: to about 230 ranks).
   Beyond, and wherever the runs part, a ring per tensor beside stragglers whose first
   all-reduce leaves every rank alike goes on as the cluster without them
   (``_first_tensor_then_in_step``: that all-reduce replayed over every rank, O(p^2)
   messages, the rest one period's recurrences).

Where this is exact (agreement with the DES to float rounding, ~1e-12; see tests): every
strategy, algorithm and ``predict`` option (sync_every, group_size, fp16, no_overlap, buffer
broadcast on or off), any node count, stragglers, slow links, ranks_per_host > 1.  Jobs that
share a CPU beyond the recurrences' rates (a pool of cores, an efficiency curve, calibrated
contention, more runnable threads than cores) are exact where the ranks of a CPU keep in step
(``_in_step``: equal jobs running together), on lockstep worlds (4.), for the linear parameter
server and dp on a pool (5.), for a world ring of stragglers on a pool (6.) or settled after
its first tensor, and elsewhere
replayed with the DES's processor sharing: every rank's
process through the NIC queues and ``fast_queues.SharedCpus`` (``_cpu_reason``,
``_replays_cpu``; ``_sync_replayed`` with ``Run.sharing``, ``_linear_ps_replayed``,
``_binomial_ps_replayed``, ``_data_parallel_replayed``).  Where it is not exact,
``unsupported`` says why, or the run raises ``NotExact`` when it finds out on the way, and
``--engine auto`` uses the DES instead:
* jobs sharing a CPU out of step where the replay would hold more than
  ``_REPLAY_MESSAGES_COMPILED`` messages (``_REPLAY_MESSAGES`` in the Python loop, on one pool
  at most ``_REPLAY_POOL_STEPS`` messages x ranks; the compiled loop stops a pool's replay past
  ``_REPLAY_POOL_VISITS`` visits of its groups of jobs) (a world ring on a pool with a slow link:
  2p(p-1) a collective, beyond about 1,150 ranks with DDP's three buckets,
  every rank's every step at a time of its own; hierarchical's ring of hosts likewise,
  its trees inside hosts replayed with it over a row of every rank); ``auto`` then runs the
  DES only within ``simulate.AUTO_DES_MESSAGES`` (``des_messages`` counts them).  Those are
  auto's budgets (``SECONDS``); asked for by name (``MEMORY``) the replay goes on for as long
  as its messages fit in the memory free;
* ranks_per_host > 1 where two messages would share a NIC direction at once and the
  engine cannot follow simpy's event order there: rarely, where the replay starts after
  DDP's buffer broadcast on one period of a uniform cluster and the order its ranks leave the
  broadcast in decides their queue (``fast_collectives.replay``).  Elsewhere messages that
  meet (trees, recursive doubling, rabenseifner, binomial ps, rings of groups cutting across
  hosts, whose hosts carry several ring edges) queue as in the DES: every rank's process,
  from the start of the iteration, is replayed through FIFO NIC directions and the hosts'
  CPU timers with simpy's tie order (``_sync_replayed``,
  ``commsim.sim.fast_queues``; dp's devices on shared hosts likewise,
  ``_data_parallel_replayed``), over two hosts where a power of two of alike hosts run a
  doubling algorithm.  That replay is an event simulation of its own (about 1 us an event):
  a uniform cluster of a power of two of hosts takes 0.1 s at 65,536 ranks; an uneven one,
  or one whose doubling algorithm folds, 0.15-0.4 s at 1,024 ranks with DDP's few buckets
  and 0.5-1.7 s with a collective per tensor, replayed a tensor at a time and once for each
  state a tensor of its size starts from (``_tensor_by_tensor``; ``bench/scale.py
  --combos``), except where a
  straggler is late to the first tensor only and the ranks leave it alike: two hosts stand
  for all from there (``_replayed_then_alike``), and over a power of two of hosts its first
  tensor goes by class (``_wave``: recursive doubling on 2 log2(hosts) + 2 hosts,
  Rabenseifner on log2(hosts)^2 + log2(hosts) + 2), as do DDP's buckets with two ranks a
  host, each bucket alone (``_wave_buckets``).  Beside one slow link over a power of two of
  hosts, doubling goes by class too: recursive doubling a tensor or a bucket at a time
  (``_slow_link_by_tensor``, ``_slow_link_buckets``), Rabenseifner through every tensor or
  bucket at once, one host a class and stand-ins for the hosts a class meets that are not
  replayed (``_slow_link_stand_ins``, ``commsim.sim.fast_stand_ins``), beside several slow
  links too (the classes beside each at once).  The
  world ring and hierarchical keep one rank per NIC direction; linear ps's senders on one
  host queue behind each other, but only the root's last delivery counts, which queueing in
  front of its work-conserving receive direction does not change;
* a recorded timeline (the engine keeps times, not intervals).
Exact ties between events (e.g. zero reduction cost, or two ranks matched with the dp or ps
root at the same instant) may be ordered differently from simpy's event queue; the engine
orders such ties by rank, which is simpy's order where the tied events come from the same
kind of step, and the times it reports do not depend on that order except in such ties.
"""
from __future__ import annotations

import gc
import itertools
import math
from collections import Counter
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, replace

import numpy as np

from commsim.costs import CostInputs, cpu_load, job_rate
from commsim.sim import fast_classes, fast_lockstep, fast_queues, fast_runs, fast_stand_ins
from commsim.sim.engine import finished
from commsim.sim.fast_collectives import (ALLREDUCE, SCHEDULES, Block, NotExact, Replay, Run,
                                          binomial_broadcast, binomial_broadcast_schedule,
                                          cpu_of, doubling_steps, efficiency_at,
                                          sharing_rate,
                                          binomial_gather_mean_scatter,
                                          binomial_gather_scatter_schedules, cpu_rate,
                                          host_bandwidths, intra_link, lcm, replay,
                                          uniform_cluster)
from commsim.spec import RunSpec
from commsim.strategies.base import Timing
from commsim.units import fmt_bytes

__all__ = ["MEMORY", "NotExact", "Reach", "SECONDS", "data_parallel", "des_messages",
           "parameter_server", "replay_fits", "replay_seconds", "ring_like", "run_fast",
           "unsupported"]


# The most messages a replay with the DES's processor sharing holds (about 0.3 KiB each):
# beyond, ``--engine auto`` runs the DES, which keeps none.  In the compiled loop about a
# microsecond a message (DDP at 1,024 ranks beside a slow link or a straggler, two ranks a
# host on one core or all on one pool: 6.3 million messages, 4-8 s and 0.7-0.8 GiB on a slow
# 2-core machine), so an all-reduce's replay there holds up to the seconds the DES's own reach
# takes (``simulate.AUTO_DES_MESSAGES``); the Python loop, the parameter server's and dp's a
# million.
_REPLAY_MESSAGES = 1_000_000
_REPLAY_MESSAGES_COMPILED = 8_000_000
# On one pool a job's end moves every job there: an event costs up to a step a rank.  The
# Python loop's replay on a pool holds at most this many messages x ranks, so that jobs that
# part keep it within seconds.
_REPLAY_POOL_STEPS = 10_000_000_000
# The compiled loop takes a pool's jobs of one work left as one group, and a group's visit
# costs about 5 ns (1,024 ranks each of its own speed on a pool beside a slow link, DDP: 1.7e9
# visits, 14 s against the 5 s of one speed); in the runs it replays it visits far fewer
# (3.7 million messages at 65,536 ranks on a pool: 7,310; DDP at 1,024 ranks beside a slow
# link: 4e7).  So it counts its visits as it goes, within seconds stopping at this many
# (``Run.visits``), where the Python loop's bound, a step a rank, would have refused those
# 65,536 ranks before they started.
_REPLAY_POOL_VISITS = 2_000_000_000


@dataclass(frozen=True)
class Reach:
    """How long a replay of every rank the fast engine takes on (``_within_reach``): with
    ``seconds`` (``--engine auto``'s, which must answer or refuse within seconds: a sweep's
    every cell) within the budgets above; without (``--engine fast`` asked for by name, as
    ``--engine des`` runs however long it takes) as long as its messages fit in the memory
    free (``_fits_in_memory``), where the DES would take hours: a ring per tensor on one pool
    beside a slow link at 1,024 ranks, 71 million messages, is half a minute."""
    seconds: bool = True


SECONDS, MEMORY = Reach(seconds=True), Reach(seconds=False)


def unsupported(spec: RunSpec, costs: CostInputs, *, timeline: bool = False,
                reach: Reach = SECONDS) -> str | None:
    """Why the fast engine cannot reproduce the DES exactly for ``spec`` within ``reach``, as
    far as the spec alone tells (a run may still raise ``NotExact``); None if it can."""
    from commsim.strategies import get_strategy

    strategy = get_strategy(spec.strategy)
    if timeline:
        return "it does not record a timeline"
    if not strategy.has_fast:
        return f"it does not model strategy {spec.strategy!r}"
    if (spec.group_size or spec.world_size) < spec.world_size \
            and spec.cluster.ranks_per_host > 1 and strategy.algorithm(spec) == "hierarchical":
        # (one rank a host: every rank is its host's first, and a group's all-reduce its ring)
        return "it does not model hierarchical all-reduces within groups of several ranks a host"
    reason = _cpu_reason(spec, costs)
    if (reason is None or fast_lockstep.covers(spec) or fast_runs.covers(spec)
            or _replays_cpu(spec, costs, reach)
            or _settles_after_first_tensor(spec, costs, reach)):
        return None     # every rank alike (one rank's events), or the DES's CPUs replayed
    return reason


def _replays_cpu(spec: RunSpec, costs: CostInputs, reach: Reach = SECONDS) -> bool:
    """Whether the run's processes can be replayed with the DES's processor sharing
    (``fast_queues.SharedCpus``): the parameter server, dp, and every all-reduce that is a
    schedule of messages, within ``_REPLAY_MESSAGES`` (an all-reduce's in the compiled loop
    within ``_REPLAY_MESSAGES_COMPILED``, on a pool within ``_visits``, its memory
    checked before it starts: ``_fits_in_memory``; a world ring of p uneven ranks sends
    2p(p-1) a collective)."""
    from commsim.strategies import get_strategy

    p = spec.world_size
    if spec.strategy == "ps":          # a gather and a scatter a tensor replayed
        binomial = get_strategy("ps").algorithm(spec) == "binomial"
        tensors = len(costs.param_bytes)
        if _quiet_after_first_tensor(spec, costs):     # the first and (binomial) the last
            tensors = 1 + (binomial and bool(spec.stragglers))
        return _within_python_reach(2 * (p - 1) * tensors, reach)
    if spec.strategy == "dp":          # five phases through device 0
        return (spec.cluster.shared_cpu_cores is not None and spec.cluster.ranks_per_host == 1
                or _within_python_reach(5 * (p - 1), reach))  # (the first: _data_parallel_in_pool)
    if spec.strategy not in ("ring", "ddp"):
        return False
    algorithm = get_strategy(spec.strategy).algorithm(spec) or "ring"
    if algorithm == "hierarchical" and spec.cluster.ranks_per_host == 1:
        algorithm = "ring"
    if algorithm not in SCHEDULES:
        return False
    if algorithm == "hierarchical":
        per_collective = _hierarchical_messages(spec)
    else:
        _, blocks = _blocks(spec, algorithm)
        per_collective = sum(blk.idx.shape[0] * _MESSAGES[algorithm](blk.size)
                             for blk in blocks)
    return _within_reach(spec, per_collective * _collectives(spec, costs), reach)


def _within_reach(spec: RunSpec, messages: int, reach: Reach = SECONDS) -> bool:
    """Whether a replay of an all-reduce's ``messages`` with the DES's processor sharing is
    within ``reach``: in seconds, ``_REPLAY_MESSAGES_COMPILED`` of them in the compiled loop
    (the Python loop, where no C compiler built it, is some ten times slower:
    ``_REPLAY_MESSAGES``, on one pool ``_REPLAY_POOL_STEPS`` messages x ranks; the compiled
    loop counts a pool's work as it goes, ``_visits``); else any (the replay checks its memory
    before it starts, and says how much it would need)."""
    if not reach.seconds:
        return True
    if fast_queues._replay is not None:  # (on a pool: its visits counted, ``_visits``)
        return messages <= _REPLAY_MESSAGES_COMPILED
    return messages <= _REPLAY_MESSAGES and (spec.cluster.shared_cpu_cores is None
                                             or messages * spec.world_size <= _REPLAY_POOL_STEPS)


def _visits(reach: Reach) -> float:
    """The most groups of jobs a replay's CPUs may visit (``Run.visits``) within ``reach``."""
    return _REPLAY_POOL_VISITS if reach.seconds else math.inf


def _within_python_reach(messages: int, reach: Reach) -> bool:
    """``_within_reach`` for the replays that run in the Python loop (the parameter server's,
    dp's, which do not check their memory as they start): ``_REPLAY_MESSAGES`` in seconds,
    else while they fit in the memory free."""
    return messages <= _REPLAY_MESSAGES if reach.seconds else replay_fits(messages)


def _settles_after_first_tensor(spec: RunSpec, costs: CostInputs,
                                reach: Reach = SECONDS) -> bool:
    """Whether ``_first_tensor_then_in_step`` may answer ``spec``: a world ring of every tensor
    after backward beside stragglers (no slow link: that stays) whose cluster without them
    keeps its CPUs' jobs in step (``_in_step``), the first tensor's all-reduce within a
    replay's reach (``_within_reach``)."""
    from commsim.strategies import get_strategy

    c = spec.cluster
    p = spec.world_size
    if (spec.strategy != "ring" or not spec.stragglers or c.slow_links_Bps
            or len(costs.param_bytes) < 2
            or (get_strategy(spec.strategy).algorithm(spec) or "ring") != "ring"
            or not _in_step(replace(spec, stragglers={}))):
        return False
    return _within_reach(spec, _MESSAGES["ring"](p), reach)


def _first_tensor_then_in_step(spec: RunSpec, costs: CostInputs,
                               reach: Reach = SECONDS) -> Timing:
    """``ring_like`` for a world ring of every tensor after backward beside stragglers, where
    the first tensor's all-reduce leaves every rank alike: that all-reduce replayed over every
    rank with the DES's processor sharing, the rest as the cluster without stragglers runs
    it, one period of its ranks standing for all; ``NotExact`` where the ranks are not alike.

    A straggler is late only to the first all-reduce, which makes every rank wait for every
    other; the ring leaves every rank at one instant there (two ranks a host on one core each
    beside a straggler, 1,000 and 1,024 ranks: to the bit), its hosts' CPUs idle and their NIC
    directions free.  From there the cluster is a uniform one's, whose ranks sharing a CPU
    reduce in step (``_in_step``): the remaining tensors' all-reduces are ``_sync``'s over a
    period, and the optimizer steps share each CPU from that instant (``shared_ends``: the
    straggler's longer).  Where the ranks come out a rounding apart (a straggler on one pool
    at 1,024 ranks; two ranks a host at 32), the run is left to the others.  The replay is
    O(p^2) messages (the ring's 2p(p-1)), against the DES's O(p^2) a tensor."""
    p = spec.world_size
    ranks = np.arange(p)
    run = Run(spec, costs, ranks)
    run.replays = run.sharing = True
    run.visits = _visits(reach)
    start = np.zeros(p)
    synced, _, _ = _sync_replayed(run, [Block(ranks[None], p)], "ring", False, start,
                                  tensors=1)
    t = float(synced[0])
    if np.any(synced != t) or (run.nics is not None
                               and any(np.any(x > t) for x in run.nics.free)):
        raise NotExact("the ranks are still uneven after the first tensor's all-reduce")
    uniform = replace(spec, stragglers={})
    period, blocks = _blocks(uniform, "ring")
    twin = Run(uniform, costs, period)
    synced, later = np.full(period.size, t), np.zeros(period.size)
    for nbytes in costs.param_bytes[1:]:
        end = _allreduce(twin, blocks, "ring", synced, nbytes)
        later, synced = later + (end - synced), end
    _add_tiled(run, twin)
    synced = _tile(synced, p)
    cores, sharers = cpu_of(spec)
    finish = shared_ends(synced.reshape(-1, sharers),
                         (costs.optimizer_s * run.factor).reshape(-1, sharers),
                         costs.threads_per_rank, cores, spec.cluster.cpu_efficiency,
                         tuple((x, sp) for x, _, sp in costs.contention)).ravel()
    compute = run.compute_s[-p:] + (finish - synced)
    comm = run.comm_s[-p:] + _tile(later, p)
    return _timing(p, finish, compute, comm, run.sent, run.received,
                   _hosts_of(spec, run.nic_sent), _hosts_of(spec, run.nic_received))


# A whole replay's memory a message, at its peak: its seven columns, its rows in the actions'
# table, the replay's state (peak resident memory over the start's, per message, with
# Rabenseifner and two ranks a host: 148 B beside a slow link, a ring per tensor at 1,024 and
# 4,096 ranks; 252-260 B under DDP beside a straggler or a slow link at 65,536 ranks, whose
# 131,072 processes add their own; a margin above that).
_REPLAY_BYTES_PER_MESSAGE = 280


# A replay's seconds a message, about: the compiled loop's (0.4-2 us measured on a slow
# 2-core machine, a pool's at 1,024 and 65,536 ranks), the Python loop some ten times more.
_REPLAY_S_PER_MESSAGE = 1e-6


def replay_seconds(messages: int) -> float:
    """About how long a replay of every rank's ``messages`` takes here: what ``--engine fast``
    by name would cost, within a factor of two or so."""
    return messages * _REPLAY_S_PER_MESSAGE * (10 if fast_queues._replay is None else 1)


def replay_fits(messages: int) -> bool:
    """Whether a replay of ``messages`` fits in the memory this machine has free (or how much
    is free is not known)."""
    return _memory_short(messages) is None


def _fits_in_memory(messages: int) -> None:
    """NotExact where a replay of ``messages`` would need more memory than this machine has
    free: a refusal that says so, not the kernel's out-of-memory kill minutes later."""
    short = _memory_short(messages)
    if short is not None:
        raise NotExact(short, instead="use fewer ranks")


def _memory_short(messages: int) -> str | None:
    """Why a replay of ``messages`` would not fit in the memory free, or None."""
    need, free = messages * _REPLAY_BYTES_PER_MESSAGE, _available_memory()
    if free is not None and need > free:
        return (f"a replay of every rank would hold about {messages:,} messages "
                f"({fmt_bytes(need)}), more than the {fmt_bytes(free)} of memory this machine "
                f"has free")
    return None


def _replayed_messages(spec: RunSpec, algorithm: str, blocks) -> int:
    """Messages one all-reduce moves among the ranks a replay holds: each position of a block
    (a period of a uniform ring, a plan's hosts standing for classes) a rank's share."""
    if algorithm == "hierarchical":
        return _hierarchical_messages(spec)
    return round(sum(blk.idx.size * _MESSAGES[algorithm](blk.size) / blk.size
                     for blk in blocks if blk.size > 1))


def _available_memory() -> int | None:
    """Bytes of memory free for new work (Linux's MemAvailable), None where not known."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


# Messages an all-reduce over g ranks moves (the doubling ones at most: a fold adds a few).
_MESSAGES = {"ring": lambda g: 2 * g * (g - 1), "tree": lambda g: 2 * (g - 1),
             "recursive_doubling": lambda g: g * (g.bit_length() + 2),
             "rabenseifner": lambda g: g * (2 * g.bit_length() + 2)}


def _hierarchical_messages(spec: RunSpec) -> int:
    """Messages a hierarchical all-reduce moves: inside each host, and a ring of the hosts'
    first ranks; within groups, each group's on its own hosts."""
    p, rph = spec.world_size, spec.cluster.ranks_per_host
    g = spec.group_size or p
    ranks = np.arange(p)
    # Per group, the hosts it spans (a group's ranks are consecutive: its (group, host) pairs).
    pairs = np.unique(ranks // g * spec.cluster.hosts + ranks // rph)
    h = np.bincount(pairs // spec.cluster.hosts)
    return int(2 * (p - h.sum()) + (2 * h * (h - 1)).sum())


def _collectives(spec: RunSpec, costs: CostInputs) -> int:
    """All-reduces an iteration runs: one per bucket (DDP) or per tensor."""
    return len(costs.buckets) if spec.strategy == "ddp" else len(costs.param_bytes)


def des_messages(spec: RunSpec, costs: CostInputs) -> int:
    """About how many messages the DES moves in one iteration of ``spec`` (sends and receives
    counted once each side): what its time grows with.  A world ring moves 2p(p-1) an
    all-reduce, the parameter server 2(p-1) a tensor, dp 5(p-1)."""
    from commsim.strategies import get_strategy

    p = spec.world_size
    if p == 1 or spec.strategy == "single":
        return 0
    if spec.strategy == "ps":
        return 2 * (p - 1) * len(costs.param_bytes)
    if spec.strategy == "dp":
        return 5 * (p - 1)
    algorithm = get_strategy(spec.strategy).algorithm(spec) or "ring"
    g = spec.group_size or p
    if algorithm == "hierarchical":
        per_collective = _hierarchical_messages(spec)
    else:
        per_collective = p // g * _MESSAGES[algorithm](g)
    return per_collective * _collectives(spec, costs)


def _cpu_reason(spec: RunSpec, costs: CostInputs) -> str | None:
    """Why jobs sharing a CPU keep the recurrences of ``ring_like`` and ``parameter_server``
    from the DES's times (``unsupported``'s CPU part); None if they do not."""
    from commsim.strategies import get_strategy

    c = spec.cluster
    strategy = get_strategy(spec.strategy)
    in_step = _in_step(spec)
    if c.cpu_efficiency and not in_step:
        return ("it does not model a CPU efficiency curve (busy threads slow each other beyond "
                "processor sharing, at event granularity)")
    if c.shared_cpu_cores is not None and not in_step:
        return "ranks sharing one CPU pool interleave at event granularity"
    if c.ranks_per_host > 1:
        # At most one compute job and (DDP) one Gloo reduction per rank run at a time.
        per_rank = max(costs.threads_per_rank, 1) + (1 if strategy.overlaps_backward else 0)
        if c.ranks_per_host * per_rank > c.cores_per_host and not in_step:
            return (f"{c.ranks_per_host} ranks per host can oversubscribe its "
                    f"{c.cores_per_host:g} cores")
    # The most compute threads per core while a message is in flight: DDP ranks compute and
    # communicate at once; the others do one or the other, so only co-located ranks' compute
    # can overlap a message (none with one rank per host, nor in a ring whose ranks of a host
    # keep in step).
    threads = max(costs.threads_per_rank, 1)
    cores, sharers = cpu_of(spec)
    others = sharers if strategy.overlaps_backward else sharers - 1
    if in_step and (spec.strategy in ("ring", "single")
                    or (c.shared_cpu_cores is None and c.ranks_per_host == 2)
                    or (spec.strategy == "ps" and c.shared_cpu_cores is not None)):
        # (the parameter server's: ``_optimizer_beside_root``, ``_last_scatter_by_events``)
        others = 0
    runnable = others * threads + sharers   # plus one communicating thread per rank
    peak = others * threads / cores if runnable > cores else 0.0
    fastest = max([c.nic_bandwidth_Bps, *(c.slow_links_Bps or {}).values()])
    if (costs.contended_Bps(peak) < fastest or costs.compute_speed(peak) < 1.0) \
            and not _contended_ring(spec, costs):
        return "communication slowed by compute on the same cores (calibrated contention)"
    return None


def _contended_ring(spec: RunSpec, costs: CostInputs) -> bool:
    """DDP's ring (or rings of groups) with one rank per host and calibrated contention beside
    backward: ``_sync`` takes it (``Run.contended``), whatever the stragglers and slow links."""
    from commsim.strategies import get_strategy

    c = spec.cluster
    strategy = get_strategy(spec.strategy)
    return (strategy.overlaps_backward and c.ranks_per_host == 1 and c.hosts > 1
            and c.shared_cpu_cores is None and not c.cpu_efficiency and bool(costs.contention)
            and (strategy.algorithm(spec) or "ring") in ("ring", "hierarchical"))


def _in_step(spec: RunSpec) -> bool:
    """Whether the ranks sharing a CPU (a host's, or the one pool of ``shared_cpu_cores``) keep
    their jobs in step, so that its cores (and its efficiency curve) are shared exactly by
    equal jobs running together (or, for the parameter server's last step, by
    ``shared_ends``): a uniform cluster whose ranks compute at the same instants and, in a
    world ring, reduce at the same instants.  The ring's ranks post
    together when each has one edge to another host (two ranks per host: a host's first rank
    receives from the previous host, its second sends to the next) or none (one host); the
    linear parameter server's ranks only compute (the root's mean runs while the ranks beside
    it wait)."""
    from commsim.strategies import get_strategy

    c = spec.cluster
    algorithm = get_strategy(spec.strategy).algorithm(spec)
    if spec.strategy == "ps" and not spec.stragglers:
        return algorithm != "binomial"     # a slow link only delays messages
    if spec.stragglers or c.slow_links_Bps:
        return False
    return (spec.strategy in ("ring", "single") and (algorithm or "ring") == "ring"
            and spec.group_size in (None, spec.world_size)
            and (c.ranks_per_host <= 2 or c.hosts == 1))


def run_fast(spec: RunSpec, costs: CostInputs, reach: Reach = SECONDS) -> Timing:
    """One iteration of ``spec``, per rank and per host, as the DES would time it.  Raises
    ``NotExact`` (a UserError) where it cannot within ``reach``."""
    reason = unsupported(spec, costs, reach=reach)
    if reason is not None:
        raise NotExact(reason)
    from commsim.strategies import get_strategy

    # The engines make and drop millions of small objects while their programs and runs
    # (millions more) stay alive, and each of the collector's passes walks those: a third of
    # a replay's time at 1,000 ranks, growing with the ranks.  The cycles they drop (the runs
    # engine's runs and jobs, a replay's closures) wait for the collector's next pass; a
    # replay's peak memory is its programs, the same either way.
    with _collector_paused():
        return get_strategy(spec.strategy).fast(spec, costs, reach)


@contextmanager
def _collector_paused():
    """Python's cycle collector off for the body, then as it was."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


# -- shared pieces --------------------------------------------------------------------------------

def _factors(spec: RunSpec) -> np.ndarray:
    """Every rank's compute factor (stragglers > 1)."""
    factor = np.ones(spec.world_size)
    for rank, f in spec.stragglers.items():
        factor[rank] = f
    return factor


def _compute_rate(spec: RunSpec, costs: CostInputs) -> float:
    """A rank's compute rate while every rank sharing its CPU computes (they start together)."""
    return sharing_rate(spec, cpu_of(spec)[1] * costs.threads_per_rank)


def _accumulation(spec: RunSpec, costs: CostInputs, factor, a: float):
    """When each rank is done with the k-1 local steps of ``accumulate`` (all compute)."""
    return (spec.sync_every - 1) * (costs.forward_s * factor / a + costs.backward_s * factor / a)


def _hosts_of(spec: RunSpec, per_rank) -> np.ndarray:
    """Per host, the sum of a per-rank quantity over its ranks."""
    c = spec.cluster
    return np.bincount(np.arange(spec.world_size) // c.ranks_per_host, weights=per_rank,
                       minlength=c.hosts)


def _tile(x, p: int) -> np.ndarray:
    """Per-rank values from one period of them (the simulated ranks repeat p / size times)."""
    x = np.asarray(x, dtype=float)
    return x if x.size == p else np.tile(x, p // x.size)


def _timing(p: int, finish, compute, comm, sent, received, nic_tx, nic_rx) -> Timing:
    def per_rank(x):
        return tuple(_tile(x, p).tolist())
    return Timing(finish_s=per_rank(finish), compute_s=per_rank(compute), comm_s=per_rank(comm),
                  sent_bytes=per_rank(sent), received_bytes=per_rank(received),
                  nic_tx_bytes=tuple(np.asarray(nic_tx, dtype=float).tolist()),
                  nic_rx_bytes=tuple(np.asarray(nic_rx, dtype=float).tolist()))


def _blocks(spec: RunSpec, algorithm: str) -> tuple[np.ndarray, list[Block]]:
    """The ranks to simulate (0..n-1, n dividing p: the rest repeat them) and the collectives
    among them."""
    c = spec.cluster
    p, rph = spec.world_size, c.ranks_per_host
    if p == 1:
        return np.arange(1), []
    uniform = not spec.stragglers and not c.slow_links_Bps
    if algorithm == "hierarchical":
        rows = 1 if uniform else c.hosts          # every host alike, or each its own
        return np.arange(rows * rph), [Block(np.arange(rows * rph).reshape(rows, rph), p)]
    g = spec.group_size or p
    if algorithm == "ring" and g == p and uniform:
        q = 1 if c.hosts == 1 else rph            # every ring edge inside the one host
        return np.arange(q), [Block(np.arange(q)[None], p, 1)]
    if (algorithm in ("recursive_doubling", "rabenseifner") and uniform and rph > 1
            and g & (g - 1) == 0 and g % (2 * rph) == 0 and p % g == 0):
        # Power-of-two groups of whole hosts, every host alike: two hosts stand for them all.
        return np.arange(2 * rph), [Block(np.arange(2 * rph)[None], g, alike=True)]
    n = p
    if uniform and p % lcm(g, rph) == 0:
        n = lcm(g, rph)                           # groups and hosts repeat together
    full = n // g
    blocks = [Block(np.arange(full * g).reshape(full, g), g)] if full else []
    if n > full * g:
        blocks.append(Block(np.arange(full * g, n)[None], n - full * g))
    return np.arange(n), blocks


def _allreduce(run: Run, blocks, algorithm: str, start, nbytes: float, *, fp16: bool = False):
    """Each block's collectives from per-rank ``start``: when each rank leaves.  A group of one
    calls nothing.  ``fp16``: DDP's fp16_compress_hook (cast, all-reduce of half the bytes
    without dividing, cast back), on the Gloo thread."""
    end = start.copy()
    reduce = ALLREDUCE[algorithm]
    cast = nbytes * run.costs.gamma_s_per_B
    for blk in blocks:
        if blk.size <= 1:
            continue
        t = start[blk.idx]
        if fp16:
            t = run.gloo(blk.idx, t, cast)
            t = reduce(run, blk, t, nbytes / 2, average=False)
            t = run.gloo(blk.idx, t, cast)
        else:
            t = reduce(run, blk, t, nbytes)
        end[blk.idx] = t
    return end


def _broadcasts(spec: RunSpec, costs: CostInputs) -> bool:
    """Whether DDP's buffer broadcast moves anything."""
    return spec.broadcast_buffers and spec.world_size > 1 and costs.buffer_bytes > 0


class _BroadcastOnce:
    """DDP's buffer broadcast for an engine that learns when its ranks start it as it goes:
    called with their starts, when it ends (``_buffer_broadcast``); ``add`` puts its bytes on
    an iteration's (sent, received, NIC transmit, NIC receive)."""

    def __init__(self, spec: RunSpec, costs: CostInputs):
        self.spec, self.costs, self.run = spec, costs, None

    def __call__(self, start):
        end, self.run = _buffer_broadcast(self.spec, self.costs, start)
        return end

    def add(self, sent, received, tx, rx):
        run, spec = self.run, self.spec
        if run is None:
            return sent, received, tx, rx
        return (sent + run.sent, received + run.received, tx + _hosts_of(spec, run.nic_sent),
                rx + _hosts_of(spec, run.nic_received))


def _buffer_broadcast(spec: RunSpec, costs: CostInputs, start):
    """DDP's buffer broadcast (``collectives.broadcast_buffers``) from per-rank ``start``: a
    binomial tree from rank 0, every rank leaving when the last one is done.  Returns (that
    time, the Run holding its bytes), or (None, None) when there is none.  Its messages are
    over before anything else starts, so their NIC intervals are checked on their own."""
    p, n = spec.world_size, float(costs.buffer_bytes)
    if not _broadcasts(spec, costs):
        return None, None
    run = Run(spec, costs, np.arange(p))
    post = (start + costs.overhead("broadcast"))[None]
    done = binomial_broadcast(run, Block(np.arange(p)[None], p), post, n, "broadcast")
    return float(done.max()), run


# -- strategies ------------------------------------------------------------------------------------

def ring_like(spec: RunSpec, costs: CostInputs, *, buckets: bool,
              broadcast_buffers: bool = False, reach: Reach = SECONDS) -> Timing:
    """All-reduces (any algorithm, within groups): every tensor after backward (single, ring),
    or with ``buckets`` DDP's buckets overlapping backward, after the buffer broadcast when
    ``broadcast_buffers``."""
    from commsim.strategies import get_strategy

    c = spec.cluster
    p = spec.world_size
    shares_cpu = _cpu_reason(spec, costs) is not None
    if shares_cpu and fast_lockstep.covers(spec):
        try:
            return _lockstep(spec, costs, buckets)
        except NotExact:
            if not _replays_cpu(spec, costs, reach):     # classes parted: every rank
                raise
    refused = None
    if shares_cpu and fast_runs.covers(spec):
        try:
            return _runs(spec, costs, buckets, broadcast_buffers)
        except NotExact as parted:                 # the runs kept parting
            refused = parted
    if shares_cpu and not buckets and _settles_after_first_tensor(spec, costs, reach):
        try:
            return _first_tensor_then_in_step(spec, costs, reach)
        except NotExact as uneven:                 # still uneven after the first tensor
            refused = refused or uneven
    if refused is not None and not _replays_cpu(spec, costs, reach):  # else every rank
        raise refused
    algorithm = get_strategy(spec.strategy).algorithm(spec) or "ring"
    if algorithm == "hierarchical" and c.ranks_per_host == 1:
        algorithm = "ring"     # every host's ring rank is the host: the same messages
    factor = _factors(spec)
    a = _compute_rate(spec, costs)
    begin = _accumulation(spec, costs, factor, a)
    comm = np.zeros(p)
    start = begin
    bcast = None
    if broadcast_buffers:
        end, bcast = _buffer_broadcast(spec, costs, begin)
        if end is not None:
            comm = end - begin
            start = np.full(p, end)

    if shares_cpu and algorithm == "hierarchical":     # replayed: one row of every host
        ranks, blocks = np.arange(p), [Block(np.arange(p)[None], p)]
    else:
        ranks, blocks = _blocks(spec, algorithm)
    f, start, comm, begin = factor[ranks], start[ranks], comm[ranks], begin[ranks]
    forward = start + costs.forward_s * f / a
    backward_work = costs.backward_s * f
    backward_end = forward + backward_work / a
    optimizer = costs.optimizer_s * f / a
    run = Run(spec, costs, ranks)
    run.replays = True
    if shares_cpu:
        # Jobs share a CPU beyond the recurrences' rates: the DES's processor sharing, replayed.
        run.sharing, run.visits = True, _visits(reach)
        n = ranks.size
        _, _, finish = _sync_replayed(run, blocks, algorithm, buckets, start)
        compute, talking = run.compute_s[-n:], run.comm_s[-n:]
        if buckets:
            talking = talking + run.comm_s[:n]
        if bcast is not None and n < p:       # replayed from the broadcast's end
            compute, talking = compute + begin, talking + comm
        comm = talking
    else:
        try:
            synced, synced_comm, backward_end = _sync(run, blocks, algorithm, buckets, forward,
                                                      backward_work, backward_end, a)
        except Replay:             # messages would queue on a NIC: every collective at once
            by_class = None
            for by_bucket in (_wave_buckets, _slow_link_buckets) if buckets else ():
                by_class = by_class or by_bucket(spec, costs, algorithm, forward,
                                                 backward_work, backward_end, a)
            if by_class is None and buckets:
                by_class = _slow_link_stand_ins(Run(spec, costs, ranks), algorithm, True, start)
            if by_class is None and buckets:
                by_class = _first_bucket_replayed(Run(spec, costs, ranks), blocks, algorithm,
                                                  start, forward, backward_work, backward_end, a)
            if by_class is None:
                by_class = _replayed_then_alike(Run(spec, costs, ranks), blocks, algorithm,
                                                buckets, start)
            run, synced, synced_comm = by_class
        finish = synced + optimizer
        compute = begin + (forward - start) + (backward_end - forward) + optimizer
        comm = comm + synced_comm

    sent, received = _tile(run.sent, p), _tile(run.received, p)
    tx, rx = _hosts_of(spec, _tile(run.nic_sent, p)), _hosts_of(spec, _tile(run.nic_received, p))
    if bcast is not None:
        sent, received = sent + bcast.sent, received + bcast.received
        tx, rx = tx + _hosts_of(spec, bcast.nic_sent), rx + _hosts_of(spec, bcast.nic_received)
    return _timing(p, finish, compute, comm, sent, received, tx, rx)


def _lockstep(spec: RunSpec, costs: CostInputs, buckets: bool) -> Timing:
    """``ring_like`` where jobs share the CPU beyond ``_sync``'s recurrences, on a world whose
    ranks all act at the same instants, or (trees) whose classes of ranks do
    (``fast_lockstep``): one rank's events stand for its class."""
    p = spec.world_size
    broadcast = _BroadcastOnce(spec, costs)
    ranks_class, finish, compute, comm, sent, received, nic_sent, nic_received = \
        fast_lockstep.iteration(spec, costs, buckets=buckets,
                                broadcast_end=lambda begin: broadcast(np.full(p, begin)))
    of = np.asarray(ranks_class)
    finish, compute, comm, sent, received, nic_sent, nic_received = (
        np.asarray(x, dtype=float)[of]
        for x in (finish, compute, comm, sent, received, nic_sent, nic_received))
    c = spec.cluster
    if of.max() > 0:
        # By class: each class counts the bytes of its messages that leave its host.
        crossing_tx, crossing_rx = nic_sent, nic_received
    else:
        # Each host's last rank sends over its NIC (and its first receives over it), unless
        # the rings stay inside hosts.
        last = np.arange(p) % c.ranks_per_host == c.ranks_per_host - 1
        crosses = c.hosts > 1 and (spec.group_size or p) > c.ranks_per_host
        crossing_tx = crossing_rx = np.where(last, sent, 0.0) if crosses else np.zeros(p)
    tx, rx = _hosts_of(spec, crossing_tx), _hosts_of(spec, crossing_rx)
    return _timing(p, finish, compute, comm, *broadcast.add(sent, received, tx, rx))


def _runs(spec: RunSpec, costs: CostInputs, buckets: bool, broadcast_buffers: bool) -> Timing:
    """``ring_like`` for a world ring of stragglers on one pool of cores, by runs of ranks
    alike (``fast_runs``)."""
    p = spec.world_size
    broadcast = _BroadcastOnce(spec, costs)
    finish, compute, comm, sent, received = fast_runs.iteration(
        spec, costs, buckets=buckets, broadcast=broadcast_buffers and _broadcasts(spec, costs),
        broadcast_end=broadcast)
    # A rank's messages to the next rank cross its NIC where they leave its host, and the
    # next rank receives them over its own.
    out = fast_runs.crosses(spec)
    tx = _hosts_of(spec, np.where(out, sent, 0.0))
    rx = _hosts_of(spec, np.where(np.roll(out, 1), received, 0.0))
    return _timing(p, finish, compute, comm, *broadcast.add(sent, received, tx, rx))


def _sync(run: Run, blocks, algorithm: str, buckets: bool, forward, backward_work,
          backward_end, a: float, allreduce=None):
    """``ring_like``'s all-reduces, collective by collective over all ranks at once: when
    each rank is synchronised, its time in them, and when its backward ends.  Raises
    ``Replay`` where their messages would queue on a NIC.  ``allreduce(launch, nbytes)``: when
    each rank leaves a DDP bucket's collective launched at ``launch`` (by default, the
    blocks')."""
    spec, costs = run.spec, run.costs
    comm = np.zeros(backward_end.size)
    if not buckets:
        synced = backward_end
        for nbytes in costs.param_bytes:
            end = _allreduce(run, blocks, algorithm, synced, nbytes)
            comm = comm + (end - synced)
            synced = end
        return synced, comm, backward_end
    fp16 = spec.compression == "fp16"
    if allreduce is None:
        def allreduce(launch, nbytes):
            return _allreduce(run, blocks, algorithm, launch, nbytes, fp16=fp16)
    # Reductions compete with backward only if they can start before it ends.
    if spec.overlap and run.r < run.a:
        run.backward_end = backward_end.copy()
    # Calibrated contention: inside a collective, backward slows to the calibrated speed and
    # a message with a computing end is held to the contended bandwidth (``Run.contended``).
    # ``run.backward_end`` is kept at the rate of the moment: rescaled as each rank enters
    # and leaves its collective.
    contention = run.backward_end is not None and _contended_ring(spec, costs)
    if contention:
        load = costs.threads_per_rank / spec.cluster.cores_per_host
        run.speed = costs.compute_speed(load)
        run.slowest_s_per_B = 1.0 / costs.contended_Bps(load)
    end = forward
    for bucket in costs.buckets:
        backward_end = backward_end if run.backward_end is None else run.backward_end
        if spec.overlap:   # when backward's progress reaches the bucket's last gradient
            ready = backward_end - backward_work * (1.0 - bucket.ready_fraction) / a
        else:
            ready = backward_end
        launch = np.maximum(ready, end)
        if contention:
            _rescale_backward(run, launch, 1.0 / run.speed)
            run.contended = True
        end = allreduce(launch, bucket.bytes)
        if contention:
            _rescale_backward(run, end, run.speed)
            run.contended = False
        comm = comm + (end - launch)
    backward_end = backward_end if run.backward_end is None else run.backward_end
    return np.maximum(backward_end, end), comm, backward_end


def _rescale_backward(run: Run, t, stretch: float) -> None:
    """Each rank's backward still running at ``t`` now goes ``stretch`` times slower (or
    faster): its end moves accordingly."""
    B = run.backward_end
    run.backward_end = np.where(B > t, t + (B - t) * stretch, B)


def _replayed_then_alike(run: Run, blocks, algorithm: str, buckets: bool, start):
    """``_sync_replayed``'s answer (the run that counted the bytes, when each rank is
    synchronised, its time in the collectives), but where only the first tensor's all-reduce
    is uneven, two hosts stand for all after it.

    With every tensor all-reduced after backward (no buckets), a straggler is late to the
    first all-reduce only; a doubling algorithm over a power of two makes every rank wait for
    every other, so the ranks may all leave it at one instant per place in their host, with
    every NIC direction as free as every other.  Where they do (checked to the bit), the rest
    is a uniform cluster's: two alike hosts' ranks (``Block.alike``) from there, each
    collective replayed alone where its messages queue, and declined if its times depend on the
    order in which the DES resumes ranks due at one instant (that order comes from the uneven
    first tensor, not from rank order).  The first tensor itself goes by class where one
    straggler's delay travels through the hosts as a wave (``_wave``), else every rank is
    replayed.  Elsewhere every tensor is replayed."""
    spec, costs = run.spec, run.costs
    tail = None if buckets or len(costs.param_bytes) < 2 else _alike_block(spec, algorithm)
    if tail is None:
        if not buckets:
            by_class = (_slow_link_by_tensor(run, blocks, algorithm, start)
                        or _slow_link_stand_ins(run, algorithm, False, start))
            if by_class is not None:
                return by_class
            return _tensor_by_tensor(run, blocks, algorithm, start)
        synced, comm, _ = _sync_replayed(run, blocks, algorithm, buckets, start)
        return run, synced, comm
    first = _wave(spec, costs, algorithm)
    if first is None:
        synced, comm, _ = _sync_replayed(run, blocks, algorithm, buckets, start, tensors=1)
        pair = _alike_state(run, synced, tail.idx.size)
    else:
        synced, comm, pair = first
    try:
        if pair is None:
            raise NotExact("the ranks are still uneven")
        twin = Run(spec, costs, np.arange(tail.idx.size))
        twin.nics, twin.order_known = pair, False
        if first is not None:              # its bytes, as every rank of a uniform cluster's
            SCHEDULES[algorithm](twin, tail).account(costs.param_bytes[0])
        t = synced[:tail.idx.size]
        later = np.zeros(tail.idx.size)
        for nbytes in costs.param_bytes[1:]:
            end = _allreduce(twin, [tail], algorithm, t, nbytes)
            later, t = later + (end - t), end
    except NotExact:                       # every tensor, from the start
        return _tensor_by_tensor(Run(spec, costs, run.ranks), blocks, algorithm, start)
    p = spec.world_size
    _add_tiled(run, twin)
    return run, _tile(t, p), comm + _tile(later, p)


def _first_bucket_replayed(run: Run, blocks, algorithm: str, start, forward, backward_work,
                           backward_end, a: float):
    """``_sync``'s answer for DDP's buckets (the run that counted the bytes, when each rank is
    synchronised, its time in the collectives) where only the first bucket is uneven: every
    rank replayed up to its end, two alike hosts from there; None where that does not hold.

    A straggler holds the first bucket back on its host alone, and the doubling all-reduce
    makes every rank wait for every other, so where the links are the bottleneck every rank
    leaves it at one instant per place in its host, its host's NIC directions as every
    other's, and the straggler's backward reaches the next buckets before the collectives
    do: from there the cluster is uniform (``_alike_block``).  Steps: the iteration replayed
    up to the first bucket's end (``_sync_replayed``, every rank: its compute and the
    buffer broadcast order the ranks that launch it at one instant); where every rank and
    every host leave it alike (``_alike_state``, to the bit), each later bucket launched as
    ``_sync`` launches it (when backward reaches it, after the last) and, where every rank
    launches it as its place in every host does, all-reduced on two hosts standing for all
    (``Run.order_known`` false: the order in which the DES resumes ranks due at one instant
    descends from the uneven first bucket, so the times must not depend on it).  The first
    bucket alone is a third of VGG-11's messages: a rank's halving and doubling are as many
    messages in every bucket."""
    spec, costs = run.spec, run.costs
    tail = _alike_block(spec, algorithm)
    if tail is None or len(costs.buckets) < 2 or run.r < run.a:
        return None
    width, p = tail.idx.size, spec.world_size
    try:
        first_end, first_comm, _ = _sync_replayed(run, blocks, algorithm, True, start,
                                                  tensors=1)
    except NotExact:
        return None
    pair = _alike_state(run, first_end, width)
    if pair is None:
        return None
    twin = Run(spec, costs, np.arange(width))
    twin.nics, twin.order_known = pair, False
    fp16 = spec.compression == "fp16"
    replayed = iter([first_end])

    def allreduce(launch, nbytes):
        end = next(replayed, None)
        if end is not None:                 # the first bucket, as the replay left it
            if not np.allclose(launch, end - first_comm, rtol=1e-12, atol=0.0):
                raise NotExact("the replay launched the first bucket elsewhere")
            return end
        if np.any(launch.reshape(-1, run.rph) != launch[:run.rph]):
            raise NotExact("a later bucket is launched unevenly")
        return _tile(_allreduce(twin, [tail], algorithm, launch[:width], nbytes, fp16=fp16), p)

    try:
        synced, comm, _ = _sync(run, blocks, algorithm, True, forward, backward_work,
                                backward_end, a, allreduce=allreduce)
    except NotExact:
        return None
    _add_tiled(run, twin)
    return run, synced, comm


def _tensor_by_tensor(run: Run, blocks, algorithm: str, start):
    """``_sync_replayed``'s answer for every tensor all-reduced after backward (the run that
    counted the bytes, when each rank is synchronised, its time in the collectives), one
    all-reduce replayed at a time, and once for each state it starts from.

    The first tensor is replayed with the iteration's compute; each next one alone
    (``Schedule.run``) from when each rank left the last, with the NIC directions as the
    last left them (a request before or at an earlier collective's last release on its
    direction is NotExact: in the DES it queues or ties with that message in an event order
    a replay alone does not hold) and the ranks due at one instant started in the order they
    left it (``Run.start_order``: the DES's event order, in which a rank leaving an
    all-reduce goes on to the next).  An all-reduce is then a function of its bytes and of
    the state it starts from as seen from its first start (each rank's start, each
    direction's free and requested instants, that order) as long as its times stay in one
    binade (``_binade``), and a state seen before with a tensor of a size seen before gives
    the earlier answer shifted: between tensors the ranks stand at a few instants, and
    VGG-11's layers end in three small tensors of one size, the third starting from the
    state the second did (1,000 ranks, two a host, recursive doubling: 8 of the 33 after
    the first answered so).  Where a replay is NotExact the tensors from the last one on are
    replayed at once (``_rest_replayed``), every tensor from the start where it is the
    first."""
    spec, costs = run.spec, run.costs
    n = run.ranks.size
    run.sequence = []
    run.after_release = True
    try:
        synced, comm, _ = _sync_replayed(run, blocks, algorithm, False, start, tensors=1)
        # (each rank's marks: the tensor's launch, its end, the next's launch)
        order = _in_order_of(run.sequence, n, passes=1)
        seen: dict = {}
        counted = (run.sent, run.received, run.nic_sent, run.nic_received)
        t = synced
        sizes = list(costs.param_bytes)
        last = None                        # the state the last tensor started from
        for i, nbytes in enumerate(sizes[1:], 1):
            before = [x.copy() for x in counted]
            state = (i, t, order, run.nics.copy(), before, comm)
            base = float(t.min())
            nics = run.nics
            # (the order matters only among ranks that start at one instant; a direction
            # freed and asked for before the first start is free for every request after it,
            # as one never used)
            key = (nbytes, None if order is None else np.lexsort((order, t)).tobytes(),
                   *_relative(t, (*nics.free, *nics.requested), base))
            known = _recalled(seen, key, base)
            if known is None:
                run.start_order, run.sequence, run.left = order, [], t
                try:
                    end = _allreduce(run, blocks, algorithm, t, nbytes)
                except NotExact:
                    if last is None:
                        raise
                    # (the last tensor's messages still queue where this one's ask: a slow
                    # host behind stays behind, so from the last one on, all at once)
                    i, t, order, run.nics, bytes_, comm = last
                    for total, saved in zip(counted, bytes_):
                        total[:] = saved
                    run.start_order, run.sequence, run.left = order, None, t
                    end, more = _rest_replayed(run, blocks, algorithm, sizes[i:], t)
                    return run, end, comm + more
                # (no replay, no queue: the next starts as the cluster's ranks would)
                order = _in_order_of(run.sequence, n, passes=0) if run.sequence else None
                nics = run.nics
                _remember(seen, key, base, float(end.max()),
                          (end - base, order, tuple(x - base for x in (*nics.free,
                                                                       *nics.requested)),
                           [x - y for x, y in zip(counted, before)]))
            else:
                shifted, order, directions, bytes_ = known
                end = base + shifted
                nics.free = tuple(base + x for x in directions[:2])
                nics.requested = tuple(base + x for x in directions[2:])
                for total, more in zip(counted, bytes_):
                    total += more
            comm = comm + (end - t)
            t = end
            last = state
    except NotExact:
        fresh = Run(spec, costs, run.ranks)
        synced, comm, _ = _sync_replayed(fresh, blocks, algorithm, False, start)
        return fresh, synced, comm
    finally:
        run.start_order = run.sequence = run.left = None
    return run, t, comm


def _touched(base: float) -> float:
    """The earliest time a replay from ``base`` compares with it (``fast_queues.simulate``
    takes times within its touch as one instant)."""
    return base - 2 * fast_queues.TOUCH_RTOL * max(1.0, abs(base))


def _relative(t, directions, base: float) -> list:
    """A state's times as a replay's memo keys them: the ranks' starts and the directions'
    instants less ``base`` (its first start) as bytes, a direction freed before it (beyond the
    clock's touch) as one never used."""
    return [(np.asarray(t) - base).tobytes(),
            *(np.where(x < _touched(base), -np.inf, x - base).tobytes() for x in directions)]


def _binade(lo: float, hi: float) -> int | None:
    """The binary exponent of every time in [lo, hi] (positive), None where they span two.
    Times of one binade lie on one grid, so a shift by the difference of two of them moves
    every sum and difference a replay makes by exactly that much: its ties and the order of
    its events are the same, and its answer is the earlier one shifted to the bit.  Across
    binades rounding differs, and a tie the DES breaks by its event order may come or go (a
    memo that shifted answers anywhere was 1.5 s off in one rank of 20, a slow link at 100
    Mbit/s beside four ranks a host, from 9.6 s to 14.2 s)."""
    e = math.frexp(lo)[1]
    return e if lo > 0 and math.frexp(hi)[1] == e else None


def _remember(seen: dict, key, base: float, last: float, answer) -> None:
    """Keeps a replay's ``answer`` (times less ``base``) for its state's ``key``, where every
    time it made, ``base`` (less the clock's touch) to ``last``, lies in one binade."""
    e = _binade(_touched(base), last)
    if e is not None:
        seen[key, e] = (last - base, answer)


def _recalled(seen: dict, key, base: float):
    """The answer kept for ``key`` that holds from ``base``: one made in the binade that
    this replay's times would all lie in; None where there is none."""
    lo = _touched(base)
    e = math.frexp(lo)[1]
    kept = seen.get((key, e)) if lo > 0 else None
    if kept is None or _binade(lo, base + kept[0]) != e:
        return None
    return kept[1]


def _rest_replayed(run: Run, blocks, algorithm: str, sizes, start):
    """The all-reduces of ``sizes`` one after another, replayed at once from ``start`` (the
    run's NIC directions and start order as the last all-reduce before them left them): when
    each rank leaves the last, and its time in them."""
    messages = fast_queues.Messages()
    programs = _collective_programs(run, blocks, algorithm, sizes, False, messages)
    _, marks = replay(run, messages, programs, start, order_known=run.start_order is not None
                      or uniform_cluster(run.spec), left=run.left)
    marks = np.array(marks)                    # per rank: each all-reduce's launch and end
    return marks[:, -1], (marks[:, 1::2] - marks[:, 0::2]).sum(axis=1)


def _in_order_of(sequence: list, n: int, passes: int) -> np.ndarray:
    """Per process of n, its place in the order ``sequence`` (``fast_queues.simulate``'s)
    takes them at their entry number ``passes``; those without one after all."""
    order = n + np.arange(n)
    count = [0] * n
    place = 0
    for k in sequence:
        if count[k] == passes:
            order[k] = place
            place += 1
        count[k] += 1
    return order


@dataclass(frozen=True)
class _Wave:
    """The hosts a straggler's doubling all-reduce is replayed on by class (``_wave_plan``).

    ranks:  the replayed ranks, host by host (global numbers).
    block:  the collective among them, its partners those of the plan.
    alike:  alike(released): whether, in a replay of one collective (each message's release
            instant by its number), the straggler's host h0 and each class's host left the
            steps checked at the same instants, message for message.
    first, last: the position of h0's first rank and of the class host that meets h0 last
            (recursive doubling's R_(n-1), Rabenseifner's R_0) among ``ranks``; h0, h_last:
            those hosts.
    rph:    ranks per host.
    """
    rph: int
    ranks: np.ndarray
    block: Block
    alike: Callable[[dict], bool]
    first: int
    last: int
    h0: int
    h_last: int

    def leaving(self, nics: fast_queues.NicState, hosts: int) -> fast_queues.NicState:
        """``hosts`` hosts' NIC directions as every host leaves the collective just replayed
        (h0's instants; the later of the two requests)."""
        return fast_queues.NicState.alike(hosts, [x[self.h0] for x in nics.free],
                                          [max(x[self.h0], x[self.h_last])
                                           for x in nics.requested])

    def spread(self, x, hosts: int) -> np.ndarray:
        """Per rank of every host, a per-replayed-rank quantity: h0's ranks their own, every
        other rank that of its place on h_last."""
        rph = self.rph
        out = np.tile(x[self.last:self.last + rph], hosts)
        out[self.h0 * rph:(self.h0 + 1) * rph] = x[self.first:self.first + rph]
        return out


def _wave_plan(spec: RunSpec, algorithm: str) -> _Wave | None:
    """The hosts on which a recursive doubling all-reduce over a power of two of hosts whose
    only uneven rank is one straggler goes by class, and its checks; None where this does
    not apply.

    The steps between hosts flip the host's bits from the lowest.  Before the step that flips
    bit k, the straggler's host h0 has met exactly the hosts that differ from it in bits
    0 .. k-1 (its block); a host whose difference from h0 has k as its highest bit (class k)
    has met only hosts of its class, which started alike: its class acts alike.  At step k
    every block host meets a class-k host; if the pair (h0, h0 ^ 2^k) leaves that step alike
    (each of its messages released its directions at the same instant as its mirror; checked
    to the bit), every block host and every class-k host do, and the block grows by class k.
    After the last bit everyone is in the block.

    The steps inside a host come first, so the straggler's host's ranks leave them together,
    and from there a host's ranks are at most a step apart (its ranks' messages of a step
    queue on its NIC in one order, the first rank's next one behind the others').  So the
    hosts below that stand in for others past their use (whose times then differ from any
    host's) are two steps on before their messages could share a NIC with one whose times
    are used.  Not so for Rabenseifner, whose halving starts between hosts: the straggler's
    host's other ranks run steps ahead of it, and there this replay by class missed the DES's
    times by 2.2 ms (64 ranks, a 9.4 MB tensor first) with every check passed; Rabenseifner
    has hosts of its own (``_halving_plan``).

    At most two ranks a host.  The checks compare times, but the DES also breaks ties by its
    event order, which descends from the ranks' order at the start through every host met;
    with four ranks a host it parts hosts of one class by the order in which their ranks'
    messages take the NIC (the last rank of a host faster, 32 hosts: some hosts' ranks left
    the first tensor in another order than h0's, 8.3 ms off the DES, every check passed; 25
    of 570 drawn cases).  Two ranks a host: 0 of 12,701 drawn cases off (either algorithm,
    ring and DDP, stragglers 0.5-2x anywhere, 8-64 hosts).  And the replayed hosts stand for
    others, so their order at one instant must not matter (``replay`` checks, as for every
    replay by class).

    Steps: one process per rank of 2n+2 hosts (n = log2 hosts): h0; per class k a host R_k
    (h0 ^ 2^k) and a twin (R_k ^ 1) standing for the class-k hosts it meets before step k;
    a spare.  Step k pairs h0 with R_k and each other R_j with its twin; class k's
    twin, past its use, with the spare, and classes already in the block with their twins
    (their own hosts and NICs only, their times unused: no host is in their states after
    it, so a replay by class covers one all-reduce from hosts alike but for h0).
    """
    if algorithm not in ("recursive_doubling", "rabenseifner"):
        return None
    c = spec.cluster
    p, rph, hosts = spec.world_size, c.ranks_per_host, c.hosts
    n = hosts.bit_length() - 1
    if len(spec.stragglers) != 1 or (spec.group_size or p) != p or rph > 2:
        return None
    straggler, = spec.stragglers
    h0 = straggler // rph
    if algorithm == "rabenseifner":
        return _halving_plan(p, rph, hosts, h0)
    if 2 * n + 2 >= hosts:
        return None
    rep = [h0 ^ (1 << k) for k in range(n)]
    twin = [None] + [rep[k] ^ 1 for k in range(1, n)]
    spare = (h for h in range(hosts) if h not in {h0, *rep, *twin})
    twin[0], extra = next(spare), next(spare)

    def mates(step: int, k: int) -> tuple:
        """Each host's partner at the step flipping bit k, and the hosts to check there."""
        other = {h0: rep[k], rep[k]: h0, extra: twin[k], twin[k]: extra}
        for j in range(n):
            if j != k:
                other[rep[j]], other[twin[j]] = twin[j], rep[j]
        return other, (rep[k],)

    return _planned(p, rph, h0, rep[-1], [h0, extra, *rep, *twin], mates)


def _halving_plan(p: int, rph: int, hosts: int, h0: int) -> _Wave | None:
    """``_wave_plan`` for Rabenseifner (over a power of two of hosts, one straggler on h0).

    Its halving flips the hosts' bits from the highest, so the block (the hosts h0 has met,
    directly or not) before the step flipping bit k is the hosts that differ from h0 only in
    bits above k, and a host whose difference from h0 has k as its lowest bit (class k) has
    met only hosts of its class (alike) until that step, where it meets a block host: the
    mirror of recursive doubling.  But a block host's ranks do not stay within a step of each
    other: the rank the straggler's delay reached waits for it while the others go on through
    their steps with hosts still alike, so each of them sends beside its host's late rank.
    A class-k host's step with the block thus depends on the other steps its host's other
    ranks take after it, with hosts of class j < k as they are before their own step with the
    block.  So each class-k host R_k (h0 ^ 2^k) is replayed with real partners through every
    step: before step k its twin T_k (alike, for the class-k hosts it meets then), at step k
    h0, at each step j < k a host P_kj alike until then (a class-j host as R_k meets it),
    itself met before that by a twin Q_kj.  By induction every block host leaves every step
    as h0 does, which the replay checks to the bit: h0 and each R_k in the block release every
    message of every halving step at the same instants.  The doubling that follows starts
    from hosts all alike, where h0 and R_0 stand for all (``Block.alike``).  Hosts past their
    use (T_k from step k, each Q_kj from step j, and one spare so that every step pairs them
    all) pair among themselves, on hosts of their own.

    n^2 + n + 2 hosts (n = log2 hosts): 92 at 512 hosts, 242 at 32,768."""
    n = hosts.bit_length() - 1
    if n < 2 or n * n + n + 2 > hosts:
        return None
    rep = [h0 ^ (1 << k) for k in range(n)]
    spare = (h for h in range(hosts) if h != h0 and h not in rep)
    twin = [next(spare) for _ in range(n)]
    pair = {(k, j): (next(spare), next(spare)) for k in range(n) for j in range(k)}
    extra = next(spare)

    def mates(step: int, k: int) -> tuple:
        """Each host's partner at the ``step`` flipping bit k, and the hosts to check there."""
        if step >= p.bit_length() - 1:             # the doubling: every host alike
            other = {h0: rep[0], rep[0]: h0, twin[0]: extra, extra: twin[0]}
            for j in range(1, n):
                other[rep[j]], other[twin[j]] = twin[j], rep[j]
            for a, b in pair.values():
                other[a], other[b] = b, a
            return other, (rep[0],)
        other = {h0: rep[k], rep[k]: h0}
        free = [twin[j] for j in range(k, n)] + [extra]
        for j in range(k):
            other[rep[j]], other[twin[j]] = twin[j], rep[j]
        for (i, j), (a, b) in pair.items():
            if j == k:                              # R_i meets P_ik; Q_ik is past its use
                other[rep[i]], other[a] = a, rep[i]
                free.append(b)
            else:
                other[a], other[b] = b, a
        for a, b in zip(free[::2], free[1::2]):
            other[a], other[b] = b, a
        return other, tuple(rep[k:])

    return _planned(p, rph, h0, rep[0], [h0, extra, *rep, *twin, *itertools.chain(
        *pair.values())], mates)


def _planned(p: int, rph: int, h0: int, h_last: int, hosts, mates) -> _Wave:
    """The ``_Wave`` of a plan on ``hosts``: ``mates(step, k)`` gives, at the schedule's
    ``step`` (its number among the steps between hosts and inside them) flipping host bit k,
    each host's partner and the hosts whose messages must leave that step as h0's do."""
    slots = sorted(hosts)
    at = {h: i for i, h in enumerate(slots)}
    width = len(slots) * rph
    position = np.arange(width)
    slot, local = position // rph, position % rph
    checked = []        # per step, as the schedule takes them: the hosts checked against h0

    def partners():
        checked.clear()

        def partner(d: int) -> np.ndarray:
            if d < rph:                               # inside each host
                checked.append(())
                return slot * rph + (local ^ d)
            other, check = mates(len(checked), (d // rph).bit_length() - 1)
            checked.append(check)
            return np.array([at[other[h]] for h in slots])[slot] * rph + local
        return partner

    ranks = np.array([h * rph + i for h in slots for i in range(rph)])

    def alike(released: dict) -> bool:
        # Each step's messages are numbered by position, one step after another.
        for i, check in enumerate(checked):
            mine = i * width + at[h0] * rph
            for h in check:
                theirs = i * width + at[h] * rph
                if any(released.get(mine + j) != released.get(theirs + j) for j in range(rph)):
                    return False
        return True

    return _Wave(rph, ranks, Block(position[None], p, partners=partners), alike, at[h0] * rph,
                 at[h_last] * rph, h0, h_last)


def _wave(spec: RunSpec, costs: CostInputs, algorithm: str):
    """The first tensor's doubling all-reduce over a power of two of hosts whose only uneven
    rank is one straggler, by class (``_wave_plan``): when each rank is
    synchronised, its time in the all-reduce, and two hosts' NIC directions as every host
    leaves them (a ``NicState``); None where this does not apply or a check fails.  The
    compute and the first tensor are replayed from the start of the iteration
    (``_sync_replayed``, the messages' release times noted), and every rank takes h0's
    synchronisation instant for its place in the host."""
    plan = _wave_plan(spec, algorithm)
    if plan is None:
        return None
    rph, hosts = plan.rph, spec.cluster.hosts
    run = Run(spec, costs, plan.ranks)
    run.replays = True
    run.released = {}
    # (the hosts stand for others, whose order at one instant is not theirs: it must not
    # matter, as ``replay`` checks)
    run.order_known, run.hosts_in_order = False, True
    try:
        synced, comm, _ = _sync_replayed(run, [plan.block], algorithm, False,
                                         np.zeros(plan.ranks.size), tensors=1)
    except NotExact:
        return None
    first, last = plan.first, plan.last
    if not plan.alike(run.released) or np.any(synced[first:first + rph]
                                              != synced[last:last + rph]):
        return None
    return (np.tile(synced[first:first + rph], hosts), plan.spread(comm, hosts),
            plan.leaving(run.nics, 2))


def _wave_buckets(spec: RunSpec, costs: CostInputs, algorithm: str, forward, backward_work,
                  backward_end, a: float):
    """``_sync``'s answer for DDP's buckets (the run that counted the bytes, when each rank
    is synchronised, its time in the collectives) where each bucket's all-reduce goes by class
    (``_wave_plan``), two ranks a host; None where it does not apply or a check fails.

    The straggler's backward holds every bucket back anew, so every bucket starts with its
    host h0 uneven, as a straggler's first tensor does; if every host leaves a bucket alike
    (the plan's checks), the next one starts so again.  The hosts standing for classes end a
    bucket in states no host has, so each bucket is replayed alone (``Schedule.run``) from
    ``_sync``'s launch instants, every replayed host taking h0's state where it left the last
    bucket (its end, its NIC directions).  At the start of a bucket the ranks of a host due
    at one instant resume in rank order, as they ended the last bucket or reached it in
    backward (the broadcast's tree, too, leaves a host's two ranks so: the first's last send
    is to the second); the order of hosts must not matter (``replay`` checks)."""
    c = spec.cluster
    tail = _alike_block(spec, algorithm)
    plan = _wave_plan(spec, algorithm) if c.ranks_per_host == 2 and tail is not None else None
    if plan is None:
        return None
    rph, hosts, ranks = plan.rph, c.hosts, plan.ranks
    run = Run(spec, costs, ranks)
    run.order_known, run.hosts_in_order = False, True
    run.released_ok = plan.alike
    first, last = plan.first, plan.last
    fp16 = spec.compression == "fp16"

    def allreduce(launch, nbytes):
        run.released = {}
        end = _allreduce(run, [plan.block], algorithm, launch, nbytes, fp16=fp16)
        # (A replay has checked the plan's classes, ``released_ok``; none ran if nothing
        # queued, and then nothing went by class.)
        if not run.released or np.any(end[first:first + rph] != end[last:last + rph]):
            raise NotExact("a straggler's bucket does not go by class")
        run.nics = plan.leaving(run.nics, hosts)
        return np.tile(end[first:first + rph], ranks.size // rph)

    done = _by_bucket(run, plan.block, tail, algorithm, forward, backward_work, backward_end,
                      a, allreduce)
    if done is None:
        return None
    whole, synced, comm = done
    return whole, plan.spread(synced, hosts), plan.spread(comm, hosts)


def _by_bucket(run: Run, block: Block, tail: Block, algorithm: str, forward, backward_work,
               backward_end, a: float, allreduce):
    """``_sync`` over DDP's buckets on a plan's ranks (``run``'s, ``block`` among them), each
    bucket's all-reduce by ``allreduce(launch, nbytes)``: a run of every rank holding the
    bytes a uniform cluster's ranks send (``tail``'s, tiled), and per replayed rank when it
    is synchronised and its time in the collectives; None where a class parts."""
    spec, costs, ranks = run.spec, run.costs, run.ranks
    try:
        synced, comm, _ = _sync(run, [block], algorithm, True, forward[ranks],
                                backward_work[ranks], backward_end[ranks], a,
                                allreduce=allreduce)
    except (NotExact, Replay):
        return None
    whole = Run(spec, costs, np.arange(spec.world_size))
    _account_alike(whole, tail, algorithm, [b.bytes for b in costs.buckets],
                   spec.compression == "fp16")
    return whole, synced, comm


@dataclass(frozen=True)
class _SlowWave:
    """The hosts a recursive doubling all-reduce beside one slow link is replayed on by class
    (``_slow_link_plan``).

    n:         the hosts' bits; the classes are n + 1 rows (0: the slow host h0; j + 1: the
               hosts whose lowest bit apart from h0 is j).
    wave:      the plan's hosts and block (``_planned``; its own checks unused).
    hosts:     per track (a replayed host), its host; track 0 is h0.
    slots:     per track, its host's place among the plan's (``wave.ranks`` holds them so).
    begins:    per track, the class row whose state it starts from.
    ends:      per class row, the track that ends the all-reduce as that class does.
    checks:    per step between hosts, the groups of tracks that must release its messages
               alike.
    horizon:   per track, the last step between hosts whose messages are used (its program
               ends there; -1: none; len(exchanges): every step, to the end).
    exchanges: per step between hosts, its place among the schedule's exchanges.
    """
    h0: int
    n: int
    wave: _Wave
    hosts: list
    slots: list
    begins: list
    ends: list
    checks: list
    horizon: list
    exchanges: list


def _low_bit(v) -> np.ndarray:
    """Per value, its lowest set bit (-1: none)."""
    return np.where(v == 0, -1, np.log2(np.maximum(v & -v, 1)).astype(np.int64))


def _slow_classes(hosts: int, h0: int) -> np.ndarray:
    """Per host, its class beside the slow host h0: the lowest bit in which it differs from
    h0 (-1: h0 itself)."""
    return _low_bit(np.arange(hosts) ^ h0)


def _slow_link_plan(spec: RunSpec, algorithm: str) -> _SlowWave | None:
    """The tracks (replayed hosts) on which recursive doubling over a power of two of hosts,
    several ranks a host, whose only uneven host is one slow link's h0, goes by class; None
    where this does not apply.

    Between tensors the hosts stand in classes by the lowest bit of z = h ^ h0 (9 at 512
    hosts, seen in the DES).  The steps between hosts flip their bits from the lowest, so
    before the step flipping bit k a host outside h0's block (z >= 2^k) has met only the
    hosts of its block of 2^k, which started alike but for their corner (the block's host
    whose low k bits are h0's), and stands where the corner's class puts it: its key is the
    lowest bit of z from k up (E_k(c)).  At step k a block whose corner has class c > k meets
    one whose corner has class k, and both become E_(k+1)(c); h0 meets its corner 2^k away;
    every host of h0's block stands by the lowest bit of its z and meets a host of E_k(k).
    ``_keyed_plan`` counts the tracks from these keys (70 at 512 hosts, 188 at 32,768) and
    the replay checks that every track of a key meeting one key releases the step's
    messages alike.

    Not for Rabenseifner, whose keys are as regular (its halving flips bits from the
    highest: a host whose z has a bit at k or below has met only hosts of its class, h0's
    block stands by the highest bit of z; its doubling mirrors that) but whose halving
    starts between hosts: a host's first rank to leave a tensor asks for its NIC while its
    other rank's last message still holds it, and a tensor replayed alone is then NotExact
    (``fast_queues.simulate``'s ``after_release``)."""
    if algorithm != "recursive_doubling":
        return None
    c = spec.cluster
    p, rph, hosts = spec.world_size, c.ranks_per_host, c.hosts
    slow = c.slow_links_Bps or {}
    if (len(slow) != 1 or spec.stragglers or (spec.group_size or p) != p or rph < 2
            or rph & (rph - 1) or hosts & (hosts - 1) or hosts < 4):
        return None
    h0, = slow
    n = hosts.bit_length() - 1
    z = np.arange(hosts) ^ h0
    rows = _slow_classes(hosts, h0) + 1
    # (h0's block by its z's lowest bit, 1 .. n; the others by the corner's, n + 1 .. 2n)
    keys = [rows, *(np.where(z == 0, 0, np.where(z < 1 << k, rows, 1 + n + _low_bit(z >> k << k)))
                    for k in range(1, n)), rows]
    local = rph.bit_length() - 1                 # (the exchanges inside a host come first)
    return _keyed_plan(p, rph, hosts, h0, list(range(n)), keys, [local + k for k in range(n)])


def _keyed_plan(p: int, rph: int, hosts: int, h0: int, bits, keys, exchanges):
    """The ``_SlowWave`` for hosts that stand, before each step between hosts (flipping host
    bit ``bits[s]``), where ``keys[s]`` puts them (per host; ``keys[-1]``: after the last,
    ``keys[0]`` and ``keys[-1]`` the class rows, 0 for h0 alone); None where the keys are not
    a function of the last step's (a host's and its partner's) or the tracks would not be
    fewer than the hosts.

    The tracks are counted back from the end, one per class row: a key needed after a step
    is made by pairs of the keys that make it (the fewest pairs, a pair making two of a key
    where its two sides do), and those pairs' keys are needed before it.  Forward, the tracks
    take the keys the count gave the start, pair at each step as counted and take their new
    keys; one made but not needed is past its use there, its program ending with that step.
    Tracks past their use pair among themselves (a spare making the count even), and the
    tracks in use of one key meeting one key must release the step's messages alike."""
    every = np.arange(hosts)
    tables = []
    for s, k in enumerate(bits):
        m = int(max(keys[s].max(), keys[s + 1].max())) + 1
        seen = np.unique((keys[s] * m + keys[s][every ^ (1 << k)]) * m + keys[s + 1])
        table = {}
        for mine, theirs, after in zip(*(x.tolist() for x in (seen // m // m, seen // m % m,
                                                               seen % m))):
            if table.setdefault((mine, theirs), after) != after:
                return None
        tables.append(table)
    # Back from the end: per step, the pairs (key, key) it needs, and the keys needed before.
    need = Counter(dict.fromkeys(keys[-1].tolist(), 1))
    pairs = []
    for table in reversed(tables):
        made = {}                                # (a, b), a <= b -> (a's key after, b's)
        for (a, b) in table:
            if a <= b:
                made[a, b] = (table[a, b], table[b, a])
        left, chosen = Counter(need), Counter()
        for key in sorted(need, key=lambda x: (-need[x], x)):
            if left[key] <= 0:
                continue
            count, pair = max((outs.count(key), pair) for pair, outs in made.items()
                              if key in outs)
            m = -(-left[key] // count)
            chosen[pair] += m
            for out in made[pair]:
                left[out] -= m
        pairs.append(chosen)
        need = Counter()
        for (a, b), m in chosen.items():
            need[a] += m
            need[b] += m
    pairs.reverse()
    if need[0] != 1 or sum(need.values()) + 1 >= hosts:
        return None
    # Forward: the tracks (track 0 h0's), their keys, partners and horizons.
    begins = [0] + sorted(key for key, m in need.items() for _ in range(m) if key != 0)
    if len(begins) % 2:
        begins.append(begins[-1])                # (a spare, past its use from the start)
    count, total = len(begins), sum(need.values())
    key = list(begins)
    alive = [i < total for i in range(count)]
    horizon = [-1] * count
    partner, checks = [], []
    for s, chosen in enumerate(pairs):
        mate = [None] * count
        by_key: dict = {}
        for i in range(count):
            if alive[i]:
                by_key.setdefault(key[i], []).append(i)
        used: dict = {}                          # (key, partner's key) -> its tracks
        after = list(key)
        for (a, b), m in chosen.items():
            for _ in range(m):
                i = by_key[a].pop()
                j = by_key[b].pop()
                mate[i], mate[j] = j, i
                after[i], after[j] = tables[s][a, b], tables[s][b, a]
                used.setdefault((a, b), []).append(i)
                used.setdefault((b, a), []).append(j)
                horizon[i] = horizon[j] = s
        checks.append([group for group in used.values() if len(group) > 1])
        for group in by_key.values():            # (made at the last step, not needed now)
            for i in group:
                alive[i] = False
        rest = [i for i in range(count) if mate[i] is None]
        for i, j in zip(rest[::2], rest[1::2]):
            mate[i], mate[j] = j, i
        key = after
        partner.append(mate)
    ends = {}
    for i in range(count):
        if alive[i]:
            ends.setdefault(key[i], i)
            horizon[i] = len(bits)
    n = hosts.bit_length() - 1
    track_hosts = [h0] + [h for h in range(hosts) if h != h0][:count - 1]
    step_of = {e: s for s, e in enumerate(exchanges)}

    def mates(step: int, k: int) -> tuple:
        mate = partner[step_of[step]]
        return {track_hosts[i]: track_hosts[j] for i, j in enumerate(mate)}, ()

    wave = _planned(p, rph, h0, h0, track_hosts, mates)
    slot = {h: i for i, h in enumerate(sorted(track_hosts))}
    return _SlowWave(h0, n, wave, track_hosts, [slot[h] for h in track_hosts], begins,
                     [ends[row] for row in range(n + 1)], checks, horizon, exchanges)


def _slow_link_by_tensor(run: Run, blocks, algorithm: str, start):
    """``_tensor_by_tensor``'s answer where recursive doubling goes by class beside one slow
    link (``_slow_link_plan``): every tensor on the plan's tracks, the first with the compute
    (alike on every host), each next one from its classes' states, once per state and binade
    (``_remember``); None, ``run`` untouched, where the plan does not apply or a class
    parts."""
    spec, costs = run.spec, run.costs
    plan = _slow_link_plan(spec, algorithm)
    if plan is None or len(costs.param_bytes) < 2:
        return None
    c = spec.cluster
    rph, hosts, p = c.ranks_per_host, c.hosts, spec.world_size
    cls = _slow_classes(hosts, plan.h0) + 1            # (0: h0's; j + 1: class j's)
    seen: dict = {}
    replayed = Run(spec, costs, plan.wave.ranks)   # (its schedule built once)
    try:
        ends, directions, comm = _slow_link_replay(replayed, plan, algorithm,
                                                   costs.param_bytes[0], start=start)
        comm = comm[cls].reshape(-1)
        for nbytes in costs.param_bytes[1:]:
            if np.any(ends[:, 1:] == ends[:, :-1]):
                # (a host's ranks due at one instant: their order is the last replay's)
                raise NotExact("the ranks of a host beside a slow link start together")
            base = float(ends.min())
            key = (nbytes, *_relative(ends, directions, base))
            known = _recalled(seen, key, base)
            if known is None:
                later, moved, _ = _slow_link_replay(replayed, plan, algorithm, nbytes, ends,
                                                    directions)
                known = (later - base, tuple(x - base for x in moved))
                _remember(seen, key, base, float(later.max()), known)
            shifted, moved = known
            comm = comm + (base + shifted - ends)[cls].reshape(-1)
            ends, directions = base + shifted, tuple(base + x for x in moved)
    except NotExact:
        return None
    run.nics = fast_queues.NicState(hosts)
    run.nics.free = tuple(x[cls] for x in directions[:2])
    run.nics.requested = tuple(x[cls] for x in directions[2:])
    _account_alike(run, Block(np.arange(2 * rph)[None], p, alike=True), algorithm,
                   costs.param_bytes, False)
    return run, ends[cls].reshape(-1), comm


def _slow_link_buckets(spec: RunSpec, costs: CostInputs, algorithm: str, forward,
                       backward_work, backward_end, a: float):
    """``_sync``'s answer for DDP's buckets (the run that counted the bytes, when each rank
    is synchronised, its time in the collectives) where each bucket's recursive doubling goes
    by class beside one slow link (``_slow_link_plan``); None where it does not apply or a
    class parts.

    Backward is alike on every host, so a bucket launches on every host at once unless the
    last bucket holds it back, which it does by class: each bucket is replayed on the plan's
    tracks, each from its class's state (when its ranks left the last bucket, or are ready,
    and its host's NIC directions), and every rank takes its class's answer.  A host's ranks
    launched at one instant resume in rank order, as the replay takes them: where backward
    launched both (its signals come in rank order), or the last bucket held both back and
    they left it in rank order (the replay's order); otherwise it is declined.  So is a
    bucket whose first ranks use their host's NIC or cores while another is still in the last
    (``fast_queues.simulate``'s ``left``): with fp16 every bucket that its last held back, as
    the cast comes at once."""
    plan = _slow_link_plan(spec, algorithm)
    if plan is None or spec.compression == "fp16":
        return None
    c = spec.cluster
    rph, hosts, p = c.ranks_per_host, c.hosts, spec.world_size
    wave = plan.wave
    ranks = wave.ranks
    width = ranks.size
    cls = _slow_classes(hosts, plan.h0) + 1            # (0: h0's; j + 1: class j's)
    # Per class row, the track that starts from it (its ranks' places among ``ranks``).
    first = {}
    for i, row in enumerate(plan.begins):
        first.setdefault(row, plan.slots[i])
    at = np.array([[first[row] * rph + r for r in range(rph)] for row in range(plan.n + 1)])
    rows = np.array(plan.begins)
    track_at = np.array([[s * rph + r for r in range(rph)] for s in plan.slots])
    replayed = Run(spec, costs, ranks)             # (its schedule built once)
    never = np.full(plan.n + 1, -np.inf)
    # Per class row: its host's directions, its ranks' ends of the last bucket, and whether
    # each of its ranks left it before the next.
    last = {"state": (never,) * 4, "ends": np.full(at.shape, -np.inf),
            "in_order": np.ones((plan.n + 1, rph - 1), dtype=bool)}

    def allreduce(launch, nbytes):
        times = launch[at]
        if np.any(launch[track_at] != times[rows]):
            raise NotExact("a class's tracks launch a bucket apart")
        held = times == last["ends"]             # (launched as it left the last bucket)
        ties = times[:, 1:] == times[:, :-1]
        mixed = held[:, 1:] != held[:, :-1]
        if np.any(ties & (mixed | held[:, 1:] & ~last["in_order"])):
            raise NotExact("a class's ranks launch a bucket together, not as backward or "
                           "the last bucket left them in rank order")
        replayed.sequence = []
        ends, last["state"], _ = _slow_link_replay(replayed, plan, algorithm, nbytes, times,
                                                   last["state"], left=last["ends"])
        order = _in_order_of(replayed.sequence, width, passes=0)[at]
        last["ends"], last["in_order"] = ends, order[:, 1:] > order[:, :-1]
        replayed.sequence = None
        out = np.empty(width)
        out[track_at] = ends[rows]
        return out

    done = _by_bucket(Run(spec, costs, ranks), wave.block,
                      Block(np.arange(2 * rph)[None], p, alike=True), algorithm, forward,
                      backward_work, backward_end, a, allreduce)
    if done is None:
        return None
    whole, synced, comm = done
    return whole, synced[at][cls].reshape(-1), comm[at][cls].reshape(-1)


def _slow_link_replay(replayed: Run, plan: _SlowWave, algorithm: str, nbytes: float,
                      times=None, state=None, start=None, left=None):
    """One all-reduce on the plan's tracks (``replayed``, a run of their ranks, its NICs and
    notes set anew), each from its class's state (``times``: per class row, its ranks'
    starts; ``state``: its host's directions' free and requested instants, tx and rx), or
    with ``start`` (per rank) the iteration's first, the compute before it (alike on every
    host).  ``left``: per class row, when its ranks left the last all-reduce, where not at
    ``times`` (DDP's buckets, launched by backward).
    Per class row: its ranks' ends, its host's directions (free tx, rx, requested tx, rx), and
    its ranks' seconds in the all-reduce.  NotExact where the tracks of a class part."""
    spec, costs = replayed.spec, replayed.costs
    rph, hosts = spec.cluster.ranks_per_host, spec.cluster.hosts
    wave = plan.wave
    width = wave.ranks.size
    track_slot = plan.slots
    replayed.nics = fast_queues.NicState(hosts)
    replayed.released, replayed.after_release = {}, True

    def alike(released: dict) -> bool:
        for e, groups in zip(plan.exchanges, plan.checks):
            offset = e * width                   # (an exchange's messages, by position)
            for group in groups:
                sent = [[released.get(offset + track_slot[i] * rph + r) for r in range(rph)]
                        for i in group]
                if sent[0][0] is None or any(x != sent[0] for x in sent[1:]):
                    return False
        return True

    replayed.released_ok = alike
    messages = fast_queues.Messages()
    if start is None:
        t, gone = np.empty(width), np.empty(width)
        for i, h in enumerate(plan.hosts):
            src = plan.begins[i]                   # (the class's row)
            t[track_slot[i] * rph:(track_slot[i] + 1) * rph] = times[src]
            gone[track_slot[i] * rph:(track_slot[i] + 1) * rph] = (times if left is None
                                                                    else left)[src]
            for mine, real in zip((*replayed.nics.free, *replayed.nics.requested), state):
                mine[h] = real[src]
        programs = [[] for _ in range(width)]
        begin = t + costs.overhead("all_reduce")
    else:
        programs, begin, _ = _compute_programs(replayed, False, messages, False,
                                               start[wave.ranks])
        for k, program in enumerate(programs):
            program += [(fast_queues.COMPUTE, costs.backward_s * replayed.factor[k]),
                        (fast_queues.MARK,), (fast_queues.ENTER,),
                        (fast_queues.WAIT, costs.overhead("all_reduce"))]
    # (tuples: each track's are cut below)
    body = SCHEDULES[algorithm](replayed, wave.block).added(nbytes, messages, rows=False)
    # Each track's steps up to its last in use (those past it would only keep it paired, and
    # their messages could queue on its NIC ahead of ones in use): its actions up to that
    # exchange and the reduction after it; those of the classes' tracks to the end, a mark
    # after.  (Every position's actions come in one pattern.)
    actions = body[0]
    exchange_at = [i for i, action in enumerate(actions) if action[0] == fast_queues.EXCHANGE]
    cut = [exchange_at[plan.exchanges[0]]]
    for e in plan.exchanges:
        i = exchange_at[e] + 1
        cut.append(i + (i < len(actions) and actions[i][0] == fast_queues.GLOO))
    for i, h in enumerate(plan.horizon):
        for r in range(rph):
            k = track_slot[i] * rph + r
            if h < len(plan.exchanges):
                programs[k] += body[k][:cut[h + 1]]
            else:
                programs[k] += [*body[k], (fast_queues.EXIT,), (fast_queues.MARK,)]
    _, marks = replay(replayed, messages, programs, begin, order_known=False,
                      hosts_in_order=True, left=None if start is not None else gone)
    classes = plan.ends                          # the track of each class row
    at = [track_slot[i] * rph + r for i in classes for r in range(rph)]
    ends = np.array([marks[k][-1] for k in at]).reshape(-1, rph)
    launched = np.array([marks[k][0] for k in at]).reshape(-1, rph) if start is not None \
        else np.array(times)
    directions = tuple(np.array([x[plan.hosts[i]] for i in classes])
                       for x in (*replayed.nics.free, *replayed.nics.requested))
    return ends, directions, ends - launched


# A replay by class beside a slow link splits the classes that acted apart and replays again
# (``_slow_link_stand_ins``) while its rounds together replay fewer hosts than this share of
# the cluster's (a replay of every rank replays them all, once); then every rank is replayed.
_REFINED_SHARE = 0.25


def _slow_link_stand_ins(run: Run, algorithm: str, buckets: bool, start):
    """``_sync_replayed``'s answer (``run``, every rank, with its bytes counted; when each rank
    is synchronised; its time in the collectives) where a doubling all-reduce over a power of
    two of hosts, several ranks a host, goes by class beside slow links
    (``fast_stand_ins``): the whole iteration (every tensor, or DDP's buckets beside backward)
    replayed on one host a class, stand-ins for the hosts each meets that are not replayed;
    None where that does not apply or the classes part.

    The buckets cannot be replayed one at a time by class as recursive doubling's are
    (``_slow_link_buckets``): Rabenseifner's halving starts between hosts, so a host's first
    rank to leave a bucket asks for its NIC while its other rank's last message still holds
    it.  A replay of all of them at once holds that, and the classes are few (121 host
    timelines at 32,768 hosts).  Where some hosts act apart from their class's replayed host
    (``fast_stand_ins.parted``), they are split off and the whole replayed again, while the
    rounds together replay fewer hosts than ``_REFINED_SHARE`` of the cluster's."""
    spec, costs = run.spec, run.costs
    c = spec.cluster
    p, rph, hosts = spec.world_size, c.ranks_per_host, c.hosts
    slow = c.slow_links_Bps or {}
    if (algorithm not in ("recursive_doubling", "rabenseifner") or not slow
            or spec.stragglers or (spec.group_size or p) != p or rph < 2 or rph & (rph - 1)
            or hosts & (hosts - 1) or hosts < 4 or run.ranks.size != p
            or run.sharing or run.r < run.a):
        return None
    if buckets and rph > 2 and _broadcasts(spec, costs):
        # (the buffers' binomial tree leaves a host's ranks in rank order only with two a
        # host: the first's last send is to the second; replayed apart from it, the order of
        # ranks due at one instant would be guessed)
        return None
    cls = fast_stand_ins.classes(hosts, *slow)
    steps = doubling_steps(algorithm, p, costs.gamma_s_per_B)
    replayed = 0                             # (hosts replayed so far, in every round)
    while True:
        reps = np.unique(cls, return_index=True)[1]
        replayed += reps.size
        if reps.size == hosts or replayed > _REFINED_SHARE * hosts:
            return None                      # (no cheaper than replaying every rank)
        ranks = (reps[:, None] * rph + np.arange(rph)).reshape(-1)
        quotient = Run(spec, costs, ranks)
        plan = fast_stand_ins.plan(quotient, cls, steps)
        if plan is None:
            return None
        leads, parts = [], []

        def bodies(nbytes, messages, average):
            return fast_stand_ins.added(plan, nbytes, messages, leads, parts, average)

        # (the broadcast of DDP's buffers, if any, is over before: every class starts after
        # it, a host's ranks in rank order, as the binomial tree reaches them)
        quotient.lead = leads
        quotient.hosts_in_order = True
        try:
            synced, comm, _ = _sync_replayed(quotient, [], algorithm, buckets, start[ranks],
                                             bodies=bodies)
        except NotExact:
            return None
        apart = fast_stand_ins.parted(quotient.grants, np.concatenate(leads))
        if apart.size == 0:
            break
        cls = fast_stand_ins.refined(cls, np.concatenate(parts, axis=1)[:, apart])
    sizes = [b.bytes for b in costs.buckets] if buckets else list(costs.param_bytes)
    _account_alike(run, Block(np.arange(2 * rph)[None], p, alike=True), algorithm, sizes,
                   buckets and spec.compression == "fp16")
    at = cls[np.arange(p) // rph] * rph + np.arange(p) % rph
    return run, synced[at], comm[at]


def _account_alike(run: Run, tail: Block, algorithm: str, sizes, fp16: bool) -> None:
    """Adds to ``run`` (every rank) the bytes of a doubling all-reduce of each of ``sizes``
    (halved with ``fp16``), as every rank of a uniform cluster sends and receives them: those
    of two alike hosts (``tail``), tiled."""
    spec, costs = run.spec, run.costs
    twin = Run(spec, costs, np.arange(tail.idx.size))
    sched = SCHEDULES[algorithm](twin, tail)
    for nbytes in sizes:
        sched.account(nbytes / 2 if fp16 else nbytes)
    _add_tiled(run, twin)


def _add_tiled(run: Run, twin: Run) -> None:
    """Adds to ``run`` (every rank) the bytes that ``twin``'s ranks sent and received, as
    every period of them does (``_tile``)."""
    for name in ("sent", "received", "nic_sent", "nic_received"):
        setattr(run, name, getattr(run, name) + _tile(getattr(twin, name), run.spec.world_size))


def _alike_block(spec: RunSpec, algorithm: str) -> Block | None:
    """The block of two alike hosts that stands for a uniform cluster's doubling all-reduces
    (``_blocks``), where a straggler (not a slow link: that stays) leaves the cluster uniform
    once it has caught up; None where there is none."""
    c = spec.cluster
    p, rph, g = spec.world_size, c.ranks_per_host, spec.group_size or spec.world_size
    if (algorithm not in ("recursive_doubling", "rabenseifner") or c.slow_links_Bps
            or rph < 2 or g & (g - 1) or g % (2 * rph) or p % g):
        return None
    return Block(np.arange(2 * rph)[None], g, alike=True)


def _alike_state(run: Run, synced, width: int):
    """Two hosts' NIC directions (a ``NicState``) where every rank of ``run`` (the whole
    world) is synchronised at the same instant as its place in every other host, and every
    host's NIC directions were freed and last requested at the same instants; else None."""
    rph = run.rph
    if np.any(synced.reshape(-1, rph) != synced[:rph]):
        return None
    nics = run.nics
    for x in (*nics.free, *nics.requested):
        if np.any(x != x[0]):
            return None
    return fast_queues.NicState.alike(width // rph, [x[0] for x in nics.free],
                                      [x[0] for x in nics.requested])


def _sync_replayed(run: Run, blocks, algorithm: str, buckets: bool, after_broadcast,
                   tensors: int | None = None, bodies=None):
    """``_sync`` where messages queue on a NIC: every rank's processes as the DES runs them,
    from the start of the iteration (whose CPU events order the ranks that reach a collective
    at one instant), replayed through the NIC queues and the hosts' CPUs
    (``fast_collectives.replay``).

    A rank's process: its compute (local steps, forward, backward: CPU jobs); DDP's buffer
    broadcast where its ranks are all replayed (begin, overhead, tree, everyone together,
    end); then per tensor (or DDP bucket, once backward has reached it) the collective
    begins, its overhead, its schedule (with the divide), it ends, with fp16 the casts going
    around a schedule of half the bytes, and a group of one calling nothing; then the
    optimizer step.  With DDP the collectives are a process of their own, started after
    forward by the rank's compute process, which computes backward bucket by bucket
    (signalling each bucket ready), waits for the collectives, then steps.  When each rank
    is synchronised, its time in the collectives, and when its step ends (with
    ``run.sharing``, its compute seconds are ``run.compute_s``, the compute processes' last).
    ``tensors``: only the first so many tensors' all-reduces (or DDP buckets': backward goes
    on to its end, signalling every bucket), synchronised after them (with buckets: when
    each rank leaves the last of them), and no optimizer step (in the DES the next tensor
    follows, not a job on the host's CPU beside its other ranks' last reductions).  The
    ranks due at one instant start in rank order unless the run says it is not theirs
    (``Run.order_known``, ``hosts_in_order``: its hosts stand for others).  ``bodies``: the
    all-reduces' steps by other means than ``blocks`` (``_collective_programs``)."""
    spec, costs = run.spec, run.costs
    n = run.ranks.size
    sizes = ([b.bytes for b in costs.buckets] if buckets else list(costs.param_bytes))[:tensors]
    messages = fast_queues.Messages()
    collectives = _collective_programs(run, blocks, algorithm, sizes, buckets, messages,
                                       bodies)
    alike = bool(blocks) and blocks[0].alike       # (one rank: no collective, no block)
    computes, begin, known = _compute_programs(run, buckets, messages, alike, after_broadcast)
    backward = {}           # (per compute factor: a few, for every rank of a large world)
    for k, (program, f) in enumerate(zip(computes, run.factor.tolist())):
        if buckets:
            if f not in backward:
                backward[f] = [(fast_queues.SPAWN,),
                               *_backward_by_bucket(spec, costs, f),
                               (fast_queues.JOIN,)]
            program += backward[f]
        else:
            program += [(fast_queues.COMPUTE, costs.backward_s * f)]
            program += collectives[k]
        program.append((fast_queues.MARK,))
        if tensors is None:         # (after some tensors the iteration goes on to the next)
            program.append((fast_queues.COMPUTE, costs.optimizer_s * f))
    together = n if spec.broadcast_buffers and buckets else 0
    if not buckets:
        ends, marks = replay(run, messages, computes, begin,
                             order_known=known and run.order_known,
                             hosts_in_order=run.hosts_in_order, together=together)
        marks = np.array(marks)[:, :-1]          # per tensor: launched, done
        return marks[:, -1], (marks[:, 1::2] - marks[:, 0::2]).sum(axis=1), ends
    ends, marks = replay(run, messages, collectives + computes, begin, np.arange(n, 2 * n),
                         pairs=n, order_known=known and run.order_known,
                         hosts_in_order=run.hosts_in_order, together=together)
    done, synced = np.array(marks[:n]), np.array(marks[n:])[:, 0]
    if tensors is not None:
        synced = done[:, -1]
    return synced, (done[:, 1::2] - done[:, 0::2]).sum(axis=1), ends[n:]


def _collective_programs(run: Run, blocks, algorithm: str, sizes, buckets: bool,
                         messages, bodies=None) -> list:
    """Per rank, its all-reduces of ``sizes`` one after another as ``_sync_replayed`` replays
    them (each between a mark at its launch and one at its end; DDP's each after its bucket is
    ready, with fp16 the casts around it), their messages appended to ``messages``, their
    bytes counted; declined where they would not fit in memory.  ``bodies(nbytes, messages,
    average)``, where given (``blocks`` then empty), makes each rank's steps of one
    all-reduce (its bytes not counted: the caller counts them)."""
    costs = run.costs
    fp16 = buckets and run.spec.compression == "fp16"
    if bodies is None:
        _fits_in_memory(len(sizes) * _replayed_messages(run.spec, algorithm, blocks))
    collectives = [[] for _ in range(run.ranks.size)]
    overhead = costs.overhead("all_reduce")
    # (the actions alike in every rank's program are one tuple each, shared: a replay of
    # 65,536 ranks holds some millions)
    mark, enter, leave = (fast_queues.MARK,), (fast_queues.ENTER,), (fast_queues.EXIT,)
    used = set()
    for i, nbytes in enumerate(sizes):
        launch = [(fast_queues.READY, i), mark] if buckets else [mark]
        for program in collectives:
            program += launch
        cast = [(fast_queues.GLOO, nbytes * costs.gamma_s_per_B)] if fp16 else []
        before, after = [enter, *cast, (fast_queues.WAIT, overhead)], [*cast, leave]
        if bodies is not None:
            for program, body in zip(collectives, bodies(nbytes / 2 if fp16 else nbytes,
                                                         messages, not fp16)):
                program += [*before, *body, *after]
        for blk in blocks:
            if blk.size <= 1:
                continue
            sched = SCHEDULES[algorithm](run, blk, average=not fp16)
            used.add(sched)
            steps = sched.replayed(nbytes / 2 if fp16 else nbytes, messages, rows=True)
            for k, body in zip(blk.idx.ravel().tolist(), steps):
                collectives[k] += [*before, *body, *after]
        for program in collectives:
            program.append(mark)
    for sched in used:         # (the messages and the rows are made: the replay holds them)
        sched.shed()
    return collectives


def _compute_programs(run: Run, buckets: bool, messages, alike: bool, after_broadcast):
    """Each rank's process from the start of the iteration up to backward: the local steps
    (forward and backward jobs), DDP's buffer broadcast (its messages added to ``messages``),
    forward; and when it starts.  Where the broadcast happens among ranks of which only some
    are replayed (one period of a uniform cluster's), the processes start after it
    (``after_broadcast``), with forward.  And whether the ranks reaching their collectives at
    one instant are then replayed in simpy's order: not after such a broadcast, whose tree
    leaves them in another order than rank order, unless two alike hosts stand for all."""
    spec, costs = run.spec, run.costs
    n, p = run.ranks.size, spec.world_size
    steps = [[(fast_queues.COMPUTE, costs.forward_s * f), (fast_queues.COMPUTE,
                                                           costs.backward_s * f)]
             * (spec.sync_every - 1) for f in run.factor]
    broadcast = buckets and spec.broadcast_buffers and costs.buffer_bytes > 0 and p > 1
    known = True
    if broadcast and n == p:
        blk = Block(np.arange(p)[None], p)
        tree = binomial_broadcast_schedule(run, blk, "broadcast").added(
            float(costs.buffer_bytes), messages)
        before = [(fast_queues.ENTER,), (fast_queues.WAIT, costs.overhead("broadcast"))]
        after = [(fast_queues.TOGETHER,), (fast_queues.EXIT,)]      # (shared by every rank)
        for program, body in zip(steps, tree):
            program += [*before, *body, *after]
    elif broadcast:
        steps = [[] for _ in range(n)]        # the local steps are over before it
        known = alike
    forward = {}
    for program, f in zip(steps, run.factor.tolist()):
        if f not in forward:
            forward[f] = (fast_queues.COMPUTE, costs.forward_s * f)
        program.append(forward[f])
    begin = after_broadcast if broadcast and n < p else np.zeros(n)
    return steps, begin, known


def _backward_by_bucket(spec: RunSpec, costs: CostInputs, factor: float):
    """DDP's backward (``strategies.ddp``) of a rank computing ``factor`` times as long: with
    overlap, a job per bucket up to its ready point, each bucket signalled ready after it,
    then the rest; without, the whole backward, then every bucket.  (Each job's work in the
    DES's arithmetic: its share of backward, then times the factor, as ``SimContext.compute``
    slows it.)"""
    program, done = [], 0.0
    for i, bucket in enumerate(costs.buckets):
        if spec.overlap:
            segment = (bucket.ready_fraction - done) * costs.backward_s
            if segment > 0:
                program.append((fast_queues.COMPUTE, segment * factor))
            done = max(done, bucket.ready_fraction)
            program.append((fast_queues.SIGNAL, i))
    if done < 1.0:
        program.append((fast_queues.COMPUTE, (1.0 - done) * costs.backward_s * factor))
    if not spec.overlap:
        program += [(fast_queues.SIGNAL, i) for i in range(len(costs.buckets))]
    return program


def shared_ends(start, work, threads: float, cores: float, efficiency: tuple = (),
                speed: tuple = ()):
    """Jobs sharing a CPU's cores (processor sharing, as the DES's CPU): row h holds the jobs
    of CPU h, each of ``work`` seconds at full speed from ``start`` with ``threads`` threads;
    while the busy threads exceed the cores every job runs at cores / busy threads, times the
    ``efficiency`` curve at the busy threads.  A job not yet started is a rank still in its
    collective: while one is and the threads (one per such rank) exceed the cores, the jobs
    run at the calibrated ``speed`` curve at the load, compute threads per core
    (``ProcessorSharingCPU.load``).  When each ends.

    Steps, for all hosts at once: from the earliest start, repeatedly advance every host to
    its next event (the next job to start, or the running job closest to its end at the
    current rate), taking the work done meanwhile off the running jobs; a host's events are
    at most two per job."""
    rows, k = start.shape
    left = np.array(work, dtype=float)
    end = np.full((rows, k), np.inf)
    now = start.min(axis=1)
    waiting = np.ones((rows, k), dtype=bool)
    running = np.zeros((rows, k), dtype=bool)
    for _ in range(2 * k):
        arrived = waiting & (start <= now[:, None])
        running |= arrived
        waiting &= ~arrived
        busy = running.sum(axis=1) * threads
        rate = np.where(busy > cores, cores / np.maximum(busy, 1e-300), 1.0) \
            * efficiency_at(efficiency, busy)
        talking = waiting.sum(axis=1)
        load = np.where(busy + talking > cores, busy / cores, 0.0)
        rate = rate * np.where(talking > 0, efficiency_at(speed or (), load), 1.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            due = np.where(running, left / rate[:, None], np.inf).min(axis=1)
        upcoming = np.where(waiting, start, np.inf).min(axis=1)
        step = np.minimum(due, upcoming - now)
        if not np.isfinite(step).any():
            break
        step = np.where(np.isfinite(step), step, 0.0)
        left = np.where(running, left - step[:, None] * rate[:, None], left)
        now = now + step
        done = running & (left <= _DONE_S * np.maximum(1.0, np.abs(left)))
        end = np.where(done, now[:, None], end)
        running &= ~done
    return end


# Work below this (seconds) is done: float residue, as the DES's CPU guards it.
_DONE_S = 1e-15


def _fifo(arrive, serve):
    """A single server (a NIC direction) taking requests in the given order, each at its
    ``arrive`` time for ``serve`` seconds: when each leaves it.  E_k = max(E_k-1, a_k) + s_k
    = S_k + max_{j<=k}(a_j - S_j-1), S the running sum of s."""
    total = np.cumsum(serve)
    return total + np.maximum.accumulate(arrive - (total - serve))


def _root_s_per_B(spec: RunSpec, costs: CostInputs, collective: str) -> np.ndarray:
    """Seconds a byte of ``collective`` holds the link between the root's host and each other
    rank's (ranks 1..p-1; the slower end's rate), as the DES times a message between hosts."""
    c = spec.cluster
    bw = host_bandwidths(c)
    return costs.wire(collective) / np.minimum(bw[np.arange(1, spec.world_size)
                                                  // c.ranks_per_host], bw[0])


def _gather_to_root(spec: RunSpec, costs: CostInputs, post, nbytes: float):
    """``post[0]`` the root's and ``post[1:]`` the others' posting times of a gather of
    ``nbytes`` each to rank 0: when each sender's message is delivered (and the root has them
    all at the max).  Messages crossing the root's NIC queue on its receive direction in match
    order, ties by rank (the root posts its receives in rank order)."""
    c = spec.cluster
    inter = np.arange(1, spec.world_size) // c.ranks_per_host != 0
    intra_lat, intra_bw = intra_link(c)
    match = np.maximum(post[1:], post[0])
    delivered = match + intra_lat + nbytes / intra_bw
    if inter.any():
        arrive = match[inter]
        serve = nbytes * _root_s_per_B(spec, costs, "gather")[inter]
        order = np.argsort(arrive, kind="stable")
        ends = np.empty_like(arrive)
        ends[order] = _fifo(arrive[order], serve[order])
        delivered[inter] = ends + c.nic_latency_s
    return delivered


def _scatter_from_root(spec: RunSpec, costs: CostInputs, t: float, nbytes: float,
                       collective: str = "scatter", capped=None):
    """The root sends ``nbytes`` to every other rank at ``t``, all posted at once and every
    receive already posted: they leave its transmit direction in rank order.  When each is
    delivered (ranks 1..p-1).  ``capped``: (begin, end, seconds per byte) of a window in which
    a message that starts is held to that rate (calibrated contention at the root's CPU)."""
    c = spec.cluster
    inter = np.arange(1, spec.world_size) // c.ranks_per_host != 0
    intra_lat, intra_bw = intra_link(c)
    delivered = np.full(inter.size, t + intra_lat + nbytes / intra_bw)
    per_byte = _root_s_per_B(spec, costs, collective)[inter]
    if capped is None:
        delivered[inter] = t + np.cumsum(nbytes * per_byte) + c.nic_latency_s
        return delivered
    begin, end, slowest = capped
    ends = np.empty(per_byte.size)
    for k, rate in enumerate(per_byte.tolist()):   # each starts when the one before ends
        t += nbytes * (max(rate, slowest) if begin <= t < end else rate)
        ends[k] = t
    delivered[inter] = ends + c.nic_latency_s
    return delivered


def parameter_server(spec: RunSpec, costs: CostInputs) -> Timing:
    """Gather to rank 0, mean there, scatter, tensor by tensor: linear (``gather_mean_scatter``)
    or binomial (``binomial_gather_mean_scatter``)."""
    from commsim.strategies import get_strategy

    c = spec.cluster
    p = spec.world_size
    f = _factors(spec)
    a = _compute_rate(spec, costs)
    begin = _accumulation(spec, costs, f, a)
    forward = begin + costs.forward_s * f / a
    backward_end = forward + costs.backward_s * f / a
    optimizer = costs.optimizer_s * f / a
    compute = begin + (forward - begin) + (backward_end - forward) + optimizer
    t, entered, first, gathered = backward_end.copy(), backward_end, 0, None
    binomial = p > 1 and get_strategy(spec.strategy).algorithm(spec) == "binomial"
    if p > 1 and _cpu_reason(spec, costs) is not None:
        # Jobs share a CPU out of step: the DES's processor sharing, replayed.
        run = Run(spec, costs, np.arange(p))
        run.sharing = True
        if binomial:
            try:
                if not _quiet_after_first_tensor(spec, costs):
                    raise Replay
                finish = _binomial_ps_in_parts(run, t)
            except (Replay, NotExact):      # every tensor replayed at once
                run = Run(spec, costs, np.arange(p))
                run.sharing = True
                finish = _binomial_ps_replayed(run, Block(np.arange(p)[None], p))[1]
            return _timing(p, finish, run.compute_s, run.comm_s, run.sent, run.received,
                           _hosts_of(spec, run.nic_sent), _hosts_of(spec, run.nic_received))
        # The last scatter's recurrences beside the root hold for two ranks a host.
        if not _quiet_after_first_tensor(spec, costs) \
                or c.shared_cpu_cores is None and c.ranks_per_host > 2:
            finish = _linear_ps_replayed(run)
            return _ps_timing(spec, costs, finish, run.compute_s, run.comm_s)
        # Only the first tensor's gather can meet compute (a late rank's backward); from its
        # mean on nothing computes until the last scatter: the recurrences below, exact.
        try:
            entered, compute, gathered = _first_gather_shared(spec, costs)
            compute = compute + optimizer
        except NotExact:        # (simpy's order decides between ranks that post together)
            t, first = _linear_ps_replayed(run, tensors=1), 1
            entered = t - run.comm_s
            compute = run.compute_s + optimizer
    elif binomial:
        run = Run(spec, costs, np.arange(p))
        run.replays = True
        blk = Block(np.arange(p)[None], p)
        try:
            for n in costs.param_bytes:
                t = binomial_gather_mean_scatter(run, blk, t[None], n)[0]
        except Replay:         # messages would queue on a NIC: every tensor at once
            run = Run(spec, costs, np.arange(p))
            t, _ = _binomial_ps_replayed(run, blk)
        return _timing(p, t + optimizer, compute, t - backward_end, run.sent, run.received,
                       _hosts_of(spec, run.nic_sent), _hosts_of(spec, run.nic_received))
    b = sharing_rate(spec, 1)            # the root's mean, the ranks beside it waiting
    cores, sharers = cpu_of(spec)
    stepping = c.shared_cpu_cores is not None or _steps_meet_the_last_scatter(spec, costs)
    for i, n in enumerate(costs.param_bytes[first:] if p > 1 else (), start=first):
        if i > 0 or gathered is None:
            post = t + costs.overhead("gather")
            gathered = float(_gather_to_root(spec, costs, post, n).max())
        mean_work = p * n * costs.mean_s_per_B
        scatter = gathered + mean_work / b + costs.overhead("scatter")
        last = i == len(costs.param_bytes) - 1
        if last and stepping:
            t, finish = _last_scatter_by_events(spec, costs, scatter, n,
                                                costs.optimizer_s * f)
            break
        capped = _optimizer_beside_root(spec, costs, scatter, n, optimizer[1] * a) \
            if last and sharers > 1 else None
        delivered = _scatter_from_root(spec, costs, scatter, n, capped=capped)
        t = np.concatenate(([delivered.max()], delivered))
    else:
        finish = t + optimizer
    if sharers > 1 and not stepping:     # a host's ranks step at different times
        finish = shared_ends(t.reshape(-1, sharers), (optimizer * a).reshape(-1, sharers),
                             costs.threads_per_rank, cores, c.cpu_efficiency,
                             tuple((x, sp) for x, _, sp in costs.contention)).ravel()
    compute = compute + (finish - t - optimizer)          # the step's share of the cores
    return _ps_timing(spec, costs, finish, compute, t - entered)


def _ps_timing(spec: RunSpec, costs: CostInputs, finish, compute, comm) -> Timing:
    """Linear ps's timing, its bytes added: every rank sends and receives the model, the
    root (p-1) times."""
    p = spec.world_size
    model = float(costs.model_bytes) if p > 1 else 0.0
    sent = np.full(p, model)
    sent[0] = (p - 1) * model
    crossing = np.where(np.arange(p) // spec.cluster.ranks_per_host != 0, model, 0.0)
    nic = _hosts_of(spec, crossing)
    nic[0] = crossing.sum()
    return _timing(p, finish, compute, comm, sent, sent, nic, nic)


def _last_scatter_by_events(spec: RunSpec, costs: CostInputs, t: float, nbytes: float,
                            work):
    """The root's last scatter from ``t`` with every rank on one pool of cores (or, with no
    latency, on its host's cores: ``_steps_meet_the_last_scatter``): each rank steps (``work``
    seconds at full speed each) as soon as it has its share, while the root still sends to the
    others, so the load grows under the root's later messages (held to the calibrated
    contended rate at the busier end's load when they start) and the steps share the cores,
    slowed by the calibrated compute speed while ranks still wait in the scatter.  Returns (per
    rank: when it left the scatter, when its step ended).

    Steps: an event loop over the messages' starts (one after another on the root's transmit
    direction, in rank order; those to the root's host-mates need no NIC and arrive at once),
    the deliveries (the rank leaves the scatter and steps; after the last, the root) and the
    steps' ends, the CPUs the DES's processor sharing (``fast_queues.SharedCpus``, whose load
    also caps a message when it starts; a host's by each job's work left), each CPU's next end
    on a heap: O(p log p)."""
    import heapq

    c = spec.cluster
    p = spec.world_size
    host = np.arange(1, p) // c.ranks_per_host
    intra_lat, intra_bw = intra_link(c)
    per_byte = _root_s_per_B(spec, costs, "scatter").tolist()
    deliveries = [(t + intra_lat + nbytes / intra_bw, k) for k in range(1, p) if host[k - 1] == 0]
    heapq.heapify(deliveries)
    senders = [k for k in range(1, p) if host[k - 1] != 0]
    pool = c.shared_cpu_cores is not None      # (as ``fast_collectives.replay`` makes them)
    cpus = fast_queues.SharedCpus(
        [0] * p if pool else (np.arange(p) // c.ranks_per_host).tolist(),
        c.shared_cpu_cores if pool else c.cores_per_host, costs.threads_per_rank,
        c.cpu_efficiency, costs, per_job=not pool)
    for k in range(p):                 # every rank is inside the scatter
        cpus.communicating(k, t, 1)
    left = np.zeros(p)
    finish = np.empty(p)
    waiting = p - 1                    # ranks still to receive their share
    start, i = t, 0
    ends, version = [], {}             # (next end, CPU, its version): set where its jobs change

    def leave_and_step(k, now):
        left[k] = now
        cpus.communicating(k, now, -1)
        cpus.arrive(k, now, work[k], True)
        changed(cpus.cpu[k], now)

    def changed(cpu, now):
        version[cpu] = version.get(cpu, 0) + 1
        end = cpus.next_end(cpu, now)
        if end is not None:
            heapq.heappush(ends, (end, cpu, version[cpu]))

    while True:
        while ends and ends[0][2] != version[ends[0][1]]:
            heapq.heappop(ends)
        due = ends[0][0] if ends else np.inf
        arrival = deliveries[0][0] if deliveries else np.inf
        begin = start if i < len(senders) else np.inf
        now = min(due, arrival, begin)
        if now == np.inf:
            break
        # (a share delivered as the next message would start, with no latency, comes first:
        # in the DES its rank resumes and steps before that message has both directions)
        if now == begin and now != arrival:    # the next message takes the root's transmit side
            k = senders[i]
            start = now + cpus.message_s(0, k, nbytes, nbytes * per_byte[k - 1])
            heapq.heappush(deliveries, (start + c.nic_latency_s, k))
            i += 1
            continue
        if now == arrival:               # a rank has its share: it leaves and steps
            _, k = heapq.heappop(deliveries)
            leave_and_step(k, now)
            waiting -= 1
            if waiting == 0:             # the root's sends are all delivered: it steps too
                leave_and_step(0, now)
        else:
            cpu = heapq.heappop(ends)[1]
            for k in cpus.finish_due(cpu, now):
                finish[k] = now
            changed(cpu, now)
    return left, finish


def _optimizer_beside_root(spec: RunSpec, costs: CostInputs, t: float, nbytes: float,
                           work: float):
    """The root's last scatter from ``t``: rank 1, beside the root on its host, gets its share
    first and steps (``work`` seconds at full speed) while the root still sends, which loads the
    root's cores: (begin, end, seconds per byte) of the window in which the root's messages
    are held to the calibrated contended rate, or None where nothing binds.  (Rank 1 steps at
    the contended compute speed until the root's scatter ends; a message starting after that
    does not exist.  Elsewhere a rank steps only once the one beside it has its share: two
    ranks per host, ``_in_step``.)"""
    c = spec.cluster
    cores = c.cores_per_host
    threads = costs.threads_per_rank
    if not costs.contention or threads + 1 <= cores:
        return None
    load = threads / cores
    intra_lat, intra_bw = intra_link(c)
    begin = t + intra_lat + nbytes / intra_bw
    alone = sharing_rate(spec, threads) * costs.compute_speed(load)
    return begin, begin + work / alone, 1.0 / costs.contended_Bps(load)


def _steps_meet_the_last_scatter(spec: RunSpec, costs: CostInputs) -> bool:
    """Whether linear ps's last scatter meets the ranks' steps where its recurrences have it
    not: with no latency, a rank's share arrives at the instant the root's next message, to the
    rank beside it on its host, starts, and in the DES the rank resumes and steps first, so
    that message is held to the contended rate at their host's load.  The recurrences have
    host-mates step only once both have their shares (``_in_step``; ``_optimizer_beside_root``
    the root's own host): there too the last scatter then goes by the events of
    ``_last_scatter_by_events``, which keeps the DES's order."""
    c = spec.cluster
    return (c.nic_latency_s == 0 and c.shared_cpu_cores is None and c.ranks_per_host > 1
            and bool(costs.contention))


def _root_messages(run: Run, messages, src, dst, nbytes: float, collective: str) -> list:
    """One message between the root and every other rank (``src`` -> ``dst``, arrays over
    the others), appended to a replay's ``messages``: their ids."""
    lat, per_byte, inter = run.link(src, dst, collective)
    hs, hd = np.where(inter, src // run.rph, -1), np.where(inter, dst // run.rph, -1)
    first = messages.add([np.broadcast_to(values, src.shape)
                          for values in (src, dst, lat, nbytes * per_byte, hs, hd, nbytes)])
    return list(range(first, first + src.size))


def _quiet_after_first_tensor(spec: RunSpec, costs: CostInputs) -> bool:
    """Whether ps whose jobs share a CPU out of step, past its first tensor's mean, runs
    nothing but the root's means until the last scatter, at full speed with no cap on its
    messages: then ``parameter_server`` computes or replays the compute and the first tensor
    only (and, binomial, the last).  (Every rank is inside a collective from its first gather
    to its last scatter, the root's mean the one job on its CPU; with no compute thread the
    calibrated load is 0, where contention caps nothing.)"""
    return (len(costs.param_bytes) > 1 and costs.contended_Bps(0.0) == math.inf
            and costs.compute_speed(0.0) == 1.0)


def _first_gather_shared(spec: RunSpec, costs: CostInputs):
    """Linear ps out of step on shared CPUs (one pool of cores, or hosts whose ranks share
    theirs): the ranks' compute and the first tensor's gather.  Per rank, when it entered the
    gather and its seconds of compute; and when the root has every message.

    Steps:
    1. the compute, CPU by CPU (``_until_gather``): on one pool the classes of ranks of one
       compute factor; on hosts, each kind of host (its ranks' factors) once;
    2. the messages to the root: one from a rank beside it on its host takes the host's
       loopback, no NIC; the others request their host's transmit direction in match order (a
       rank's send matches when it and the root have posted: the root posts its receives at its
       entry in rank order, matching the ranks that posted before it; a later rank matches as
       it posts) and, once it is theirs, the root's receive direction, which they hold together
       for the bytes at the slower of the link and the contended bandwidth at the busier end's
       load when the message starts (``engine.Network._transfer``).  So a host's ranks reach
       the root one after another: its next message asks for the receive direction when the one
       before it is over.  Ranks that post at one instant do so in simpy's event order, which
       the instants their CPUs' timers were set give (``_set_before``).  An event per message,
       in the order the receive direction takes them: O(p log p)."""
    import bisect
    import heapq

    c = spec.cluster
    p = spec.world_size
    rph = c.ranks_per_host
    ranks = np.arange(p)
    factor = _factors(spec)
    entered, compute, label = np.empty(p), np.empty(p), np.empty(p, dtype=np.int64)
    history = {}       # label -> its CPU's timer settings before its ranks entered, latest first
    if c.shared_cpu_cores is not None:       # one CPU of every rank
        cores, kinds, cpu = c.shared_cpu_cores, factor[None], np.zeros(p // rph, dtype=np.int64)
    else:                                    # a CPU a host; alike hosts are one kind
        cores = c.cores_per_host
        kinds, cpu = np.unique(factor.reshape(-1, rph), axis=0, return_inverse=True)
        cpu = cpu.ravel()
    timelines = []
    for kind, row in enumerate(kinds):
        factors, cls = np.unique(row, return_inverse=True)
        ends, seconds, timeline = _until_gather(spec, costs, cores, factors,
                                                np.bincount(cls).tolist())
        mine = ranks[None] if c.shared_cpu_cores is not None else \
            np.flatnonzero(cpu == kind)[:, None] * rph + np.arange(rph)
        entered[mine], compute[mine] = ends[cls], seconds[cls]
        label[mine] = kind * row.size + cls
        timelines.append(timeline)
        for k, end in enumerate(ends.tolist()):
            history[kind * row.size + k] = _set_before(timeline[0], end)

    def capped_Bps(kind: int, at: float) -> float:
        times, loads = timelines[kind]
        return costs.contended_Bps(loads[bisect.bisect_right(times, at) - 1])

    # Posts within float rounding of each other are one instant.
    post = entered + costs.overhead("gather")
    by_time = np.argsort(post, kind="stable")
    apart = np.diff(post[by_time]) > fast_queues.TOUCH_RTOL * max(1.0, float(np.abs(post).max()))
    first = np.maximum.accumulate(np.where(np.concatenate(([True], apart)), ranks, 0))
    instant = np.empty(p)
    instant[by_time] = post[by_time][first]
    root = instant[0]
    # Ranks that post at one instant do so in simpy's event order: their CPUs' timers fire in
    # the order they were set (the latest setting first compared, then the one before: the
    # events that set them fired in that order), alike CPUs host by host, a CPU's ranks of one
    # class in rank order.  Ranks of two classes whose CPUs' timers were set alike (one pool;
    # or by chance) are in an order this does not follow: there the first tensor is replayed.
    histories = sorted(set(history.values()))
    setting = np.zeros(int(label.max()) + 1, dtype=np.int64)
    for k, settings in history.items():
        setting[k] = histories.index(settings)
    setting = setting[label]
    events = np.lexsort((ranks, ranks // rph, setting, instant))
    a, b = events[:-1], events[1:]
    if np.any((instant[a] == instant[b]) & (instant[b] >= root) & (setting[a] == setting[b])
              & (label[a] != label[b])):
        raise NotExact("ranks of different classes post to the root at one instant")
    position = np.empty(p, dtype=np.int64)
    position[events] = ranks
    # The root matches the ranks that posted before it in rank order, the others as they post.
    before = (instant < root) | ((instant == root) & (position < position[0]))
    others = ranks[1:]
    match = np.maximum(instant[1:], root)
    after = (~before[1:]).astype(int)
    asks = np.lexsort((np.where(after, position[1:], others), after, match))
    nbytes = float(costs.param_bytes[0])
    intra_lat, intra_bw = intra_link(c)
    delivered = match + intra_lat + nbytes / intra_bw   # (beside the root: its loopback)
    host = (others // rph).tolist()
    busy_s = (nbytes * _root_s_per_B(spec, costs, "gather")).tolist()
    match, cpu = match.tolist(), cpu.tolist()
    requests, behind = [], {}                          # (time, order, i); host -> later ones
    for order, i in enumerate(asks.tolist()):
        h = host[i]
        if h == 0:
            continue
        if h in behind:
            behind[h].append(i)
        else:
            behind[h] = []
            requests.append((match[i], order, i))
    behind = {h: iter(later) for h, later in behind.items()}
    heapq.heapify(requests)
    order, free = p, -np.inf
    while requests:
        asked, _, i = heapq.heappop(requests)
        start = max(free, asked)
        seconds = busy_s[i]
        if costs.contention:                           # (the busier end's cap)
            kind = cpu[host[i]]
            cap = capped_Bps(kind, start)
            if kind != cpu[0]:
                cap = min(cap, capped_Bps(cpu[0], start))
            seconds = max(seconds, fast_queues.capped_s(nbytes, cap))
        free = start + seconds
        delivered[i] = free + c.nic_latency_s
        j = next(behind[host[i]], None)
        if j is not None:                              # its host's transmit side is free
            heapq.heappush(requests, (max(match[j], free), order, j))
            order += 1
    return entered, compute, float(delivered.max())


def _set_before(times: list, t: float) -> tuple:
    """The instants of a CPU's events (``_until_gather``'s times) before ``t``, latest first:
    when its timer was set for an event at ``t``, and the settings before."""
    import bisect

    return tuple(reversed(times[:bisect.bisect_left(times, t)]))


def _until_gather(spec: RunSpec, costs: CostInputs, cores: float, factors, sizes):
    """The ranks of one CPU (``cores``) from the start of the iteration to their first
    gather: classes of ``sizes`` ranks of compute factor ``factors`` each, whose equal jobs
    start together and end together.  Per class, when it entered the gather and its seconds
    of compute (arrays); and the CPU's load as (times, loads), each load holding from its
    time on.

    An event per class's job end: every job runs at ``job_rate`` of the busy threads, slowed
    by the calibrated compute speed once a class is inside the gather; a class that ends its
    backward enters the gather (its threads leave, its ranks talk).  The load, compute
    threads per core, changes at these events only: messages do not change it."""
    threads = costs.threads_per_rank
    work = [w for w in (costs.forward_s, costs.backward_s) * spec.sync_every if w > 0]
    n_cls = len(sizes)
    step = [0] * n_cls
    left = [work[0] * f for f in factors.tolist()] if work else []
    started = [0.0] * n_cls
    compute = [0.0] * n_cls
    entered = [0.0] * n_cls
    active = list(range(n_cls)) if work else []
    busy, talking, now = float(threads * sum(sizes)), 0, 0.0
    times, loads = [0.0], [cpu_load(cores, busy, talking)]
    while active:
        load = loads[-1]
        speed = costs.compute_speed(load) if talking and costs.contention else 1.0
        rate = job_rate(cores, busy, spec.cluster.cpu_efficiency, speed)
        dt = min(left[k] for k in active) / rate
        now += dt
        for k in active:
            left[k] -= dt * rate
        ended = finished({k: (left[k],) for k in active})   # the DES's residue rule
        for k in ended:
            compute[k] += now - started[k]
            step[k] += 1
            if step[k] < len(work):
                left[k], started[k] = work[step[k]] * factors[k], now
                continue
            active.remove(k)
            busy -= threads * sizes[k]
            talking += sizes[k]
            entered[k] = now
        times.append(now)
        loads.append(cpu_load(cores, busy, talking))
    return np.array(entered), np.array(compute), (times, loads)


def _linear_ps_replayed(run: Run, tensors: int | None = None):
    """Linear ps with jobs sharing a CPU out of step (``run.sharing``): every rank's process
    (``strategies.ps``, ``collectives.gather_mean_scatter``) replayed through the NIC queues
    and the DES's processor sharing: its compute; per tensor: begin, the gather's overhead, the
    ranks' sends to the root (which posts every receive at once, then takes the mean on its
    Gloo thread), the scatter's overhead, the root's sends to all posted at once, end; the
    optimizer step.  When each rank's step ends; with ``tensors`` = k, the first k tensors
    only: when each rank leaves the k-th."""
    spec, costs = run.spec, run.costs
    p = spec.world_size
    messages = fast_queues.Messages()
    programs, begin, _ = _compute_programs(run, False, messages, False, None)
    others = np.arange(1, p)
    root = np.zeros_like(others)
    enter, leave = (fast_queues.ENTER,), (fast_queues.EXIT,)
    gather, scatter = (fast_queues.WAIT, costs.overhead("gather")), \
        (fast_queues.WAIT, costs.overhead("scatter"))
    for program, f in zip(programs, run.factor):
        program.append((fast_queues.COMPUTE, costs.backward_s * f))
    for n in costs.param_bytes[:tensors]:
        up = _root_messages(run, messages, others, root, n, "gather")
        down = _root_messages(run, messages, root, others, n, "scatter")
        programs[0] += [enter, gather, (fast_queues.ALL, [], up),
                        (fast_queues.GLOO, p * n * costs.mean_s_per_B), scatter,
                        (fast_queues.ALL, down, []), leave]
        for k in others.tolist():
            programs[k] += [enter, gather, (fast_queues.SEND, up[k - 1]), scatter,
                            (fast_queues.RECV, down[k - 1]), leave]
    for program, f in zip(programs, run.factor if tensors is None else ()):
        program.append((fast_queues.COMPUTE, costs.optimizer_s * f))
    ends, _ = replay(run, messages, programs, begin)
    return np.array(ends)


def _data_parallel_replayed(spec: RunSpec, costs: CostInputs, inputs: float,
                            outputs: float, *, sharing: bool = False) -> Timing:
    """``data_parallel`` with devices sharing a host, whose messages queue behind each other
    on its NIC: every device's process (``strategies.dp``) replayed from the start through
    the NIC queues and the hosts' CPUs (``fast_collectives.replay``).  Device 0 posts its
    sends (or receives) to all at once in each phase; a phase of device 0, and each of the
    others' two, is a collective (its begin and end marked: the device's time in them)."""
    p = spec.world_size
    run = Run(spec, costs, np.arange(p))
    run.sharing = sharing          # devices on one pool of cores: the DES's processor sharing
    model = float(costs.model_bytes)
    others = np.arange(1, p)
    messages = fast_queues.Messages()

    def phase(src, dst, nbytes, collective):
        return _root_messages(run, messages, src, dst, nbytes, collective)

    root = np.zeros_like(others)
    data = phase(root, others, inputs, "scatter")
    weights = phase(root, others, model, "broadcast")
    out = phase(others, root, outputs, "gather")
    grads_back = phase(root, others, outputs, "scatter")
    grads = phase(others, root, model, "gather")
    o = {k: costs.overhead(k) for k in ("scatter", "broadcast", "gather")}
    enter, leave, mark = (fast_queues.ENTER,), (fast_queues.EXIT,), (fast_queues.MARK,)

    def collective(*body):
        return [mark, enter, *body, leave, mark]

    def compute(work, f):
        return (fast_queues.COMPUTE, work * f)

    f = run.factor
    programs = [[*collective((fast_queues.WAIT, o["scatter"]), (fast_queues.ALL, data, [])),
                 *collective((fast_queues.WAIT, o["broadcast"]), (fast_queues.ALL, weights, [])),
                 compute(costs.forward_s, f[0]),
                 *collective((fast_queues.WAIT, o["gather"]), (fast_queues.ALL, [], out)),
                 *collective((fast_queues.WAIT, o["scatter"]),
                             (fast_queues.ALL, grads_back, [])),
                 compute(costs.backward_s, f[0]),
                 *collective((fast_queues.WAIT, o["gather"]), (fast_queues.ALL, [], grads),
                             (fast_queues.GLOO, (p - 1) * model * costs.gamma_s_per_B)),
                 compute(costs.optimizer_s, f[0])]]
    for i, k in enumerate(others.tolist()):
        programs.append([
            *collective((fast_queues.WAIT, o["scatter"]), (fast_queues.RECV, data[i]),
                        (fast_queues.WAIT, o["broadcast"]), (fast_queues.RECV, weights[i])),
            compute(costs.forward_s, f[k]),
            *collective((fast_queues.WAIT, o["gather"]), (fast_queues.SEND, out[i]),
                        (fast_queues.WAIT, o["scatter"]), (fast_queues.RECV, grads_back[i])),
            compute(costs.backward_s, f[k]),
            *collective((fast_queues.WAIT, o["gather"]), (fast_queues.SEND, grads[i]))])
    finish, marks = replay(run, messages, programs, np.zeros(p))
    comm = np.array([sum(m[1::2]) - sum(m[0::2]) for m in marks])
    if sharing:
        compute_s = run.compute_s
    else:
        compute_s = (costs.forward_s + costs.backward_s) * f / run.a
        compute_s[0] += costs.optimizer_s * f[0] / run.a
    return _dp_timing(spec, costs, np.array(finish), compute_s, comm, inputs, outputs)


def _dp_timing(spec: RunSpec, costs: CostInputs, finish, compute_s, comm, inputs: float,
               outputs: float) -> Timing:
    """dp's timing, its bytes added: device 0 sends every other device its inputs, the
    model and its outputs' gradients, and receives their outputs and gradients."""
    p = spec.world_size
    model = float(costs.model_bytes)
    crossing = np.arange(p) // spec.cluster.ranks_per_host != 0
    root_sent = (p - 1) * (inputs + model + outputs)
    sent = np.concatenate(([root_sent], np.full(p - 1, outputs + model)))
    received = np.concatenate(([(p - 1) * (outputs + model)],
                               np.full(p - 1, inputs + model + outputs)))
    nic_sent = np.where(crossing, sent, 0.0)
    nic_received = np.where(crossing, received, 0.0)
    nic_sent[0] = crossing[1:].sum() * (inputs + model + outputs)
    nic_received[0] = crossing[1:].sum() * (outputs + model)
    return _timing(p, finish, compute_s, comm, sent, received, _hosts_of(spec, nic_sent),
                   _hosts_of(spec, nic_received))


def _data_parallel_in_pool(spec: RunSpec, costs: CostInputs, inputs: float,
                           outputs: float) -> tuple:
    """``data_parallel`` with every device on one pool of cores, one device per host: when
    each device ends, its compute and communication seconds.

    Device 0's phases are serial: each of its scatters (inputs, parameters, output
    gradients) takes its transmit direction message by message in rank order, and each of its
    gathers (outputs, gradients) its receive direction in match order (a device's send
    matches when device 0 has posted its receives: those posted before it in rank order,
    later ones as they come).  Every job is the DES's processor sharing on the one pool
    (``fast_queues.SharedCpus``, whose load also caps each message when it starts).  Steps:
    an event loop over the jobs' ends, the deliveries, the devices' posts after the gather's
    overhead, device 0's own timer and its direction's next message; at one instant in that
    order (a delivery's device acts before device 0, whose all-of resumes it after), but for a
    gather's next message at its instant, with no latency: in the DES it waits for the receive
    direction alone and takes it before the device whose message ended acts on its delivery."""
    from collections import deque

    c = spec.cluster
    p = spec.world_size
    f = _factors(spec).tolist()
    model = float(costs.model_bytes)
    lat = c.nic_latency_s
    o = {k: costs.overhead(k) for k in ("scatter", "broadcast", "gather")}

    def busy_s(nbytes, collective):          # per device (0: none), its message's seconds
        return [0.0, *(nbytes * _root_s_per_B(spec, costs, collective)).tolist()]

    cpus = fast_queues.SharedCpus([0] * p, c.shared_cpu_cores, costs.threads_per_rank,
                                  c.cpu_efficiency, costs)
    inf = math.inf
    finish = [inf] * p
    for k in range(p):
        cpus.communicating(k, 0.0, 1)
    # Inputs: nothing computes, so each message only waits for the one before.
    t = o["scatter"]
    sizes = busy_s(inputs, "scatter")
    for k in range(1, p):
        t += cpus.message_s(0, k, inputs, sizes[k])
    t += lat
    cpus.communicating(0, t, -1)
    cpus.communicating(0, t, 1)
    # The phases through device 0: (collective, bytes, gather?, the job a delivery starts).
    phases = [("broadcast", model, False, costs.forward_s),
              ("gather", outputs, True, None),
              ("scatter", outputs, False, costs.backward_s),
              ("gather", model, True, None)]
    root_job = [costs.forward_s, costs.backward_s]     # device 0's, after each scatter
    phase = 0
    root_at = t + o["broadcast"]                        # device 0 posts
    tx_next, tx_k, sizes = inf, 0, None                 # the scatter's next message
    rx_free, rx_queue = -inf, deque()                   # the gather's direction, its queue
    deliveries, posts, early = deque(), deque(), []     # (time, device); posted before 0
    delivered = 0
    gathering = False                                   # device 0 posted its receives
    jobs = {}                                           # device -> what its job is

    def start_job(k, now, work, what):
        if work <= 0:                                  # no job: on at once
            job_ended(k, now, what)
            return
        cpus.arrive(k, now, work, what != "reduce")
        jobs[k] = what

    def job_ended(k, now, what):
        nonlocal root_at
        if what == "optimizer":
            finish[0] = now
        elif what == "reduce":
            cpus.communicating(0, now, -1)
            start_job(0, now, costs.optimizer_s * f[0], "optimizer")
        else:                                  # forward or backward: into the next gather
            cpus.communicating(k, now, 1)
            if k == 0:
                root_at = now + o["gather"]
            else:
                posts.append((now + o["gather"], k))

    due = inf
    while finish[0] == inf:
        rx_next = max(rx_free, rx_queue[0][0]) if rx_queue else inf
        now = min(due, deliveries[0][0] if deliveries else inf, posts[0][0] if posts else inf,
                  root_at, tx_next, rx_next)
        if now == due:
            for k in cpus.finish_due(0, now):
                job_ended(k, now, jobs.pop(k))
            # The pool's timer, set again where its jobs or talking ranks change (only there:
            # it counts the work done from the last change).
            due = cpus.next_end(0, now) or inf
        elif deliveries and now == deliveries[0][0] and not (gathering and now == rx_next):
            # (a delivery, or with no latency the gather's next message first: see above)
            _, k = deliveries.popleft()
            delivered += 1
            collective, nbytes, gather, work = phases[phase]
            # An output delivered changes nothing on the CPU (its device waits on).
            changed = not gather or phase == 3 or delivered == p - 1
            if not gather:                     # the device leaves and computes
                cpus.communicating(k, now, -1)
                start_job(k, now, work * f[k], collective)
            elif phase == 3:                   # its gradients sent: the device is done
                cpus.communicating(k, now, -1)
                finish[k] = now
            if delivered == p - 1:             # device 0 has them all
                delivered, gathering = 0, False
                if phase == 3:                 # the sum, inside the collective
                    phase = 4
                    start_job(0, now, (p - 1) * model * costs.gamma_s_per_B, "reduce")
                elif gather:
                    cpus.communicating(0, now, -1)
                    cpus.communicating(0, now, 1)
                    phase += 1
                    root_at = now + o["scatter"]
                else:
                    cpus.communicating(0, now, -1)
                    phase += 1
                    start_job(0, now, root_job[phase // 2] * f[0], collective)
            if changed:
                due = cpus.next_end(0, now) or inf
        elif posts and now == posts[0][0]:
            _, k = posts.popleft()
            if gathering:
                rx_queue.append((now, k))
            else:                              # matched when device 0 posts
                early.append(k)
        elif now == root_at:
            root_at = inf
            collective, nbytes, gather, _ = phases[phase]
            sizes = busy_s(nbytes, collective)
            if gather:
                gathering = True
                rx_queue.extend((now, k) for k in sorted(early))
                early = []
            else:
                tx_next, tx_k = now, 1
                if phase == 0 and due == inf and not deliveries and not posts:
                    ahead = _forward_alone(cpus, now, sizes, nbytes, lat,
                                           costs.forward_s * np.array(f), o["gather"])
                    if ahead is not None:
                        tx_next, tx_k, delivered, moved, posted = ahead
                        deliveries.append(moved)
                        early += posted[0]
                        posts.extend(posted[1])
        elif now == tx_next:
            collective, nbytes, _, _ = phases[phase]
            tx_next = now + cpus.message_s(0, tx_k, nbytes, sizes[tx_k])
            deliveries.append((tx_next + lat, tx_k))
            tx_k += 1
            if tx_k == p:
                tx_next = inf
        else:
            _, nbytes, _, _ = phases[phase]
            if phase == 3 and due == inf and not posts and len(rx_queue) > 2 \
                    and cpus.computing[0] == 0.0:
                # Nothing computes and every device has posted: the rest in bulk.
                taken, rx_free = _gathered_alone(cpus, rx_queue, now, nbytes, sizes, lat,
                                                 finish)
                delivered += taken
                continue
            _, k = rx_queue.popleft()
            rx_free = now + cpus.message_s(k, 0, nbytes, sizes[k])
            deliveries.append((rx_free + lat, k))
    compute = [cpus.compute_s.get(k, 0.0) for k in range(p)]
    comm = [cpus.comm_s.get(k, 0.0) for k in range(p)]
    return np.array(finish), np.array(compute), np.array(comm)


def _forward_alone(cpus: fast_queues.SharedCpus, start: float, sizes: list, nbytes: float,
                   lat: float, forward, o_gather: float):
    """dp on one pool: device 0's parameter messages from ``start`` and the forward jobs they
    start, in bulk, while each job runs alone on the pool (where a forward is shorter than a
    message: each ends before the message after next begins, the next job starts after it).

    Device 0's transmit direction sends ``nbytes`` to device 1, 2, ... back to back; device k
    gets it a latency later, leaves the broadcast and computes ``forward[k]``, then posts
    into the output gather ``o_gather`` later (before device 0 posts its receives: it
    computes its own forward after the last message).  While no job runs as a message begins
    (the CPU's load caps it) and none as the next starts, every message takes the idle pool's
    time and every job its rate alone: a sum and an array.  The prefix where that holds is
    taken up to device J, whose message the loop starts: returns (when it begins, J, the
    deliveries so far, device J-1's delivery, (devices posted by then, later posts)), or
    None where fewer than three devices would go."""
    p = len(sizes)
    ks = np.arange(1, p)
    # Message i (device i + 1) runs begin[i] .. begin[i + 1].
    begin = _back_to_back(cpus, start, nbytes, sizes[1:], cpus.computing[0])
    got = begin[1:] + lat
    ends = cpus.ends_alone(0, 1, got, forward[1:])
    ok = forward[1:] > 0
    ok[1:] &= got[:-1] > begin[1:-1]              # the device before gets its own after it begins
    ok[2:] &= ends[:-2] <= begin[2:-1]            # the job two before has ended as it begins
    bad = np.flatnonzero(~ok)
    last = min(int(bad[0]) if bad.size else p - 1, p - 1)     # device J = last
    if last < 3:
        return None
    done = last - 2                               # devices 1 .. J-2 computed and posted
    cpus.ran_alone(0, ks[:done].tolist(), got[:done], ends[:done])
    post = ends[:done] + o_gather
    by_now = int(np.searchsorted(post, begin[last - 1], side="right"))
    return (float(begin[last - 1]), last, done, (float(got[last - 2]), last - 1),
            (ks[:by_now].tolist(), list(zip(post[by_now:].tolist(), ks[by_now:done].tolist()))))


def _back_to_back(cpus: fast_queues.SharedCpus, start: float, nbytes: float, busy,
                  computing: float) -> np.ndarray:
    """Messages of ``nbytes`` (``busy``: each one's seconds on its link) one after another on
    device 0's direction of one pool from ``start``, the pool's load the same as each begins
    (``computing`` threads of compute jobs; ``SharedCpus.message_s`` for each): when each
    begins, and after them when the last ends (the loop's running sum: ``np.cumsum`` adds
    in order)."""
    busy = np.asarray(busy, dtype=float)
    cap = cpus.costs and cpus.cap_at(computing, cpus.talking[0])
    message = np.maximum(busy, fast_queues.capped_s(nbytes, cap)) if cap else busy
    return np.cumsum(np.concatenate(([start], message)))


def _gathered_alone(cpus: fast_queues.SharedCpus, queue, start: float, nbytes: float,
                    sizes: list, lat: float, finish: list) -> tuple:
    """dp on one pool, the gradient gather once no job is left on the pool and every device
    has posted (``queue``: (posted, device) in match order): device 0's receive direction
    takes their messages back to back from ``start``, each at the idle pool's time (nothing
    computes: no load caps it), and each device is done, leaving the collective, as its
    message is in: a running sum.  All but the last message (whose delivery starts the sum)
    are taken off ``queue``, stopping before any posted after the direction frees (none is
    once every post is in; the first always goes); returns (how many, when it is free)."""
    ks = [k for _, k in queue][:-1]
    posted = np.array([t for t, _ in queue][:-1])
    # Message i runs free[i] .. free[i + 1], posted before.
    free = _back_to_back(cpus, start, nbytes, [sizes[k] for k in ks], 0.0)
    late = np.flatnonzero(posted > free[:-1])
    taken = int(late[0]) if late.size else len(ks)
    got = (free[1:taken + 1] + lat).tolist()
    for k, t in zip(ks[:taken], got):
        cpus.communicating(k, t, -1)
        finish[k] = t
    for _ in range(taken):
        queue.popleft()
    return taken, float(free[taken])


def _binomial_ps_in_parts(run: Run, backward_end):
    """Binomial ps with jobs sharing a CPU, whose first tensor's mean begins the quiet stretch
    (``_quiet_after_first_tensor``): the compute and the first tensor replayed where ranks
    compute out of step (else every rank ends backward together, at ``backward_end``; on
    one pool and one rank a host by class, ``fast_classes``, as the last scatter); the
    middle tensors and the last gather by the schedules, the root's mean alone on its CPU; the
    last scatter and the optimizer steps, which the ranks take as they get their shares while
    messages still flow, replayed from when each rank posts its share's receive (on one pool
    and one rank a host by class, ``fast_classes``, unless the classes part).  When each
    rank's step ends; the run's compute and communication seconds, summed over the parts.
    Raises ``Replay`` where the middle's messages would queue on a NIC, ``NotExact`` where the
    last replay would take a NIC direction ahead of an earlier request (the caller then
    replays every tensor)."""
    spec, costs = run.spec, run.costs
    p = spec.world_size
    blk = Block(np.arange(p)[None], p)
    last = len(costs.param_bytes) - 1
    if spec.stragglers:
        t, _ = _binomial_ps_replayed(run, blk, slice(0, 1), by_class=True)
        compute, comm, first = run.compute_s, run.comm_s, 1
    else:
        t, first = backward_end, 0
        compute, comm = backward_end.copy(), np.zeros(p)
    left = t
    run.b = sharing_rate(spec, 1)           # the root's mean runs alone
    run.replays = True                      # (messages that would queue on a NIC raise Replay)
    for n in costs.param_bytes[first:last]:
        t = binomial_gather_mean_scatter(run, blk, t[None], n)[0]
    # The last gather too (every rank posts its scatter receive before the root's mean ends,
    # so all are inside the collective while steps run); its scatter replayed.
    gather, _ = binomial_gather_scatter_schedules(run, blk)
    gathered = gather.run(t[None] + costs.overhead("gather"), costs.param_bytes[last])[0]
    begin = gathered + costs.overhead("scatter")
    leave, finish = _binomial_ps_replayed(run, blk, slice(last, None), begin=begin,
                                          scattered=True, by_class=True)
    run.compute_s = compute + run.compute_s
    run.comm_s = comm + (leave - left)
    return finish


def _binomial_ps_replayed(run: Run, blk: Block, tensors: slice = slice(None), begin=None,
                          scattered: bool = False, by_class: bool = False):
    """Binomial ps where messages queue on a NIC (or, with ``run.sharing``, jobs share a CPU):
    every rank's process from the start of the iteration (its compute; per tensor: begin, the
    gather's overhead and schedule with the root's mean, the scatter's, end; the optimizer
    step), replayed through the NIC queues and the hosts' CPUs.  When each rank is
    synchronised, and when its step ends.  ``tensors``: those replayed, from the first
    (after the compute) or, with ``begin``, from when each rank begins the first of them (with
    ``scattered``, its scatter: the gather is done, the scatter's overhead waited); the
    optimizer step follows the last tensor only.  ``by_class``: on one pool, one rank of each
    class of ranks acting together replayed (``fast_classes``), unless the classes part."""
    costs = run.costs
    gather, scatter = binomial_gather_scatter_schedules(run, blk)
    messages = fast_queues.Messages()
    by_class = by_class and fast_classes.covers(run)
    phases = [] if by_class else None   # its steps in order, for ``fast_classes``

    if begin is None:
        programs, begin, _ = _compute_programs(run, False, messages, False, None)
        for program, f in zip(programs, run.factor):
            program.append((fast_queues.COMPUTE, costs.backward_s * f))
        if by_class:
            phases.append(("work", run.factor))        # (generic: its compute)
    else:
        programs = [[] for _ in range(run.ranks.size)]
    last = tensors.indices(len(costs.param_bytes))[1] == len(costs.param_bytes)
    for i, n in enumerate(costs.param_bytes[tensors]):
        if i == 0 and scattered:
            for k, down in enumerate(scatter.replayed(n, messages, phases)):
                programs[k] += [(fast_queues.ENTER,), *down, (fast_queues.EXIT,)]
            continue
        parts = (gather.replayed(n, messages, phases), scatter.replayed(n, messages, phases))
        for k, (up, down) in enumerate(zip(*parts)):
            programs[k] += [(fast_queues.ENTER,), (fast_queues.WAIT, costs.overhead("gather")),
                            *up, (fast_queues.WAIT, costs.overhead("scatter")), *down,
                            (fast_queues.EXIT,)]
    for k, program in enumerate(programs):
        program += [(fast_queues.MARK,),
                    (fast_queues.COMPUTE, costs.optimizer_s * run.factor[k] if last else 0.0)]
    if by_class:
        cls = fast_classes.classes(begin, run.factor, messages, phases)
        try:
            ends, marks = fast_classes.replay(run, programs, messages, begin, cls)
            return np.array(marks)[:, 0], np.array(ends)
        except NotExact:                # the classes parted: every rank replayed
            pass
    ends, marks = replay(run, messages, programs, begin)
    return np.array(marks)[:, 0], np.array(ends)


def data_parallel(spec: RunSpec, costs: CostInputs, inputs: float, outputs: float) -> Timing:
    """torch.nn.DataParallel through device 0 (``strategies.dp``): scatter inputs, replicate,
    forward, gather outputs, scatter their gradients, backward, reduce gradients, optimizer on
    device 0.  ``inputs``/``outputs``: bytes of one device's share."""
    c = spec.cluster
    p = spec.world_size
    sharing = _cpu_reason(spec, costs) is not None
    if sharing and c.shared_cpu_cores is not None and c.ranks_per_host == 1 and p > 1:
        finish, compute, comm = _data_parallel_in_pool(spec, costs, inputs, outputs)
        return _dp_timing(spec, costs, finish, compute, comm, inputs, outputs)
    if (c.ranks_per_host > 1 or sharing) and p > 1:
        return _data_parallel_replayed(spec, costs, inputs, outputs, sharing=sharing)
    f = _factors(spec)
    a = _compute_rate(spec, costs)
    b = cpu_rate(c.cores_per_host, 1)
    fwd, bwd, opt = (costs.forward_s * f / a, costs.backward_s * f / a,
                     costs.optimizer_s * f / a)
    model = float(costs.model_bytes)
    if p == 1:
        finish = fwd + bwd + opt
        zero = np.zeros(1)
        return _timing(1, finish, finish, zero, zero, zero, zero, zero)
    o_sc, o_bc, o_g = (costs.overhead(k) for k in ("scatter", "broadcast", "gather"))
    # Device 0's three sends to all follow the end of what came before on it; every receive
    # was posted by then (a tie resolves with the receiver first: it resumed first).
    got_inputs = _scatter_from_root(spec, costs, o_sc, inputs)
    got_model = _scatter_from_root(spec, costs, got_inputs[-1] + o_bc, model, "broadcast")
    forward_end = np.concatenate(([got_model[-1]], got_model)) + fwd
    post = forward_end + o_g
    gathered = float(_gather_to_root(spec, costs, post, outputs).max())
    got_grads = _scatter_from_root(spec, costs, gathered + o_sc, outputs)
    backward_end = np.concatenate(([got_grads[-1]], got_grads)) + bwd
    post = backward_end + o_g
    reduced = _gather_to_root(spec, costs, post, model)
    root_end = float(reduced.max()) + (p - 1) * model * costs.gamma_s_per_B / b
    finish = np.concatenate(([root_end + opt[0]], reduced))
    compute = fwd + bwd
    compute[0] += opt[0]
    comm = np.concatenate(([got_model[-1]], got_model)) \
        + (np.concatenate(([got_grads[-1]], got_grads)) - forward_end) \
        + (np.concatenate(([root_end], reduced)) - backward_end)
    root_sent = (p - 1) * (inputs + model + outputs)
    sent = np.concatenate(([root_sent], np.full(p - 1, outputs + model)))
    received = np.concatenate(([(p - 1) * (outputs + model)],
                               np.full(p - 1, inputs + model + outputs)))
    return _timing(p, finish, compute, comm, sent, received, sent, received)
