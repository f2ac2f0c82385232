"""Binomial ps's replays on one pool of cores by classes of ranks, for the fast engine.

``fast._binomial_ps_in_parts`` replays two stretches of binomial ps on shared CPUs rank by rank
(``fast_queues.simulate``): with stragglers, the compute and the first tensor (the ranks reach
the gather out of step, while others still compute), and always the last scatter (the ranks
take their optimizer steps as they get their shares, while messages still flow).  On one pool
every job's speed and every message's cap depend on the whole pool's load, so each stretch was
O(p) events: seconds at 65,536 ranks.  Yet the ranks act by class: over a power of two every
sender of one mask starts at one instant, so the ranks with the same trailing zero bits receive,
forward and step together (log2 p + 1 classes); a straggler parts the ranks its delay reaches
in the gather, and the places beside missing subtrees part (other sizes), a few dozen classes.
One rank of each class is enough:

1. Classes (``classes``): the stretch timed with generic seconds (each message's latency,
   bytes and mask weighted so that unequal paths do not tie; a rank's compute by its factor),
   the ranks grouped by their start, factor, and the time and bytes of each of their messages.
2. The replay (``replay``): one rank of each class, its CPU jobs counting on the pool for its
   whole class.  Its partners in the messages of its program are ranks of other classes (or
   its own): a partner that is replayed posts its side itself; for one that is not, the
   replayed rank of its class posts that side (``fast_queues.GHOST``) just before it posts
   its own side of the same step of its program, which is when the partner would post it
   (its ranks act together).
3. The check: a message starts when both its sides are posted and then takes what the pool's
   load at that instant gives (one rank a host: no NIC carries two ranks' messages).  So if,
   for every message of the tree, the instant it would start from its classes' posts is the
   instant at which the replayed ranks of both its classes start theirs of that step (and its
   bytes are theirs), every rank acts as its class's replayed rank: the replay is the DES's.
   Otherwise (generic times that tied by chance) ``NotExact``, and the caller replays every
   rank.

O(classes x log p) events: tens at 65,536 ranks over a power of two.
"""
from __future__ import annotations

import numpy as np

from commsim.sim import fast_queues
from commsim.sim.fast_collectives import NotExact, Run
from commsim.sim.fast_lockstep import grouped

# Generic weights of a message's latency, its busy seconds and its mask, and of compute, in
# the class timing.
_LATENCY, _BUSY, _MASK, _COMPUTE = 0.6180, 1.3713, 0.0137, 7.3891

_PARTED = "the ranks of a class of binomial ps would act at different instants"


def covers(run: Run) -> bool:
    """Whether binomial ps's replays go by class: every rank on the one pool, a host each (no
    NIC carries two ranks' messages)."""
    c = run.spec.cluster
    return (c.shared_cpu_cores is not None and c.ranks_per_host == 1
            and run.ranks.size == run.p > 2)


def classes(begin, factor, messages, phases) -> np.ndarray:
    """Per rank, its class: ranks that act alike when the stretch is timed with generic
    seconds.  ``begin`` and ``factor``: per rank, when it starts and its compute factor (its
    jobs' work scales with it).  ``phases``, in order (``Schedule.added``'s): ("messages",
    first, end) for one step's messages (ids first..end-1, each done when both its sides are
    posted, a rank done with the step when all its messages of it are), or ("work", seconds
    per rank) for CPU work."""
    messages = fast_queues.columns_of(messages)
    src, dst = np.asarray(messages[0]), np.asarray(messages[1])
    lat, busy = np.asarray(messages[2], dtype=float), np.asarray(messages[3], dtype=float)
    clock = np.asarray(begin, dtype=float).copy()
    columns = [clock.copy(), np.asarray(factor, dtype=float)]
    for phase in phases:
        if phase[0] == "work":
            clock = clock + _COMPUTE * phase[1]
            columns.append(np.asarray(phase[1], dtype=float))
            continue
        _, a, b = phase
        s, d = src[a:b], dst[a:b]
        done = np.maximum(clock[s], clock[d]) + (
            _LATENCY * lat[a:b] + _BUSY * busy[a:b] + _MASK * np.sqrt(np.abs(d - s) + 2.0))
        role = np.zeros(clock.size)
        np.add.at(role, s, 1.0)
        np.add.at(role, d, 1000.0)
        after = np.zeros(clock.size)
        np.maximum.at(after, s, done)
        np.maximum.at(after, d, done)
        moved = role > 0
        clock[moved] = after[moved]
        columns += [role, np.where(moved, clock, 0.0)]
    return grouped(np.column_stack(columns))


def replay(run: Run, programs, messages, begin, cls):
    """``fast_queues.simulate`` of ``programs`` (one per rank: messages, CPU jobs, waits, a
    collective's ends, marks) from ``begin`` on the one pool, by the classes ``cls`` (see the
    module's docstring): per rank, when its process ends and its marks; ``run.compute_s`` and
    ``run.comm_s`` set per rank.  Raises ``NotExact`` where the classes part."""
    spec, costs = run.spec, run.costs
    c = spec.cluster
    n = len(programs)
    messages = fast_queues.columns_of(messages)
    src, dst = np.asarray(messages[0]), np.asarray(messages[1])
    count = int(cls.max()) + 1
    replayed = np.unique(cls, return_index=True)[1]        # the first rank of each class
    process = np.full(n, -1)                                 # (class i's is process i)
    process[replayed] = np.arange(count)

    # Each message's place among its sender's messages and among its receiver's (programs
    # list a rank's messages in the order of their ids).
    ends = np.concatenate([src, dst])
    ids = np.tile(np.arange(src.size), 2)
    order = np.lexsort((ids, ends))
    place = np.empty(ends.size, dtype=np.int64)
    first = np.searchsorted(ends[order], np.arange(n))
    place[order] = np.arange(ends.size) - first[ends[order]]
    at_src, at_dst = place[:src.size], place[src.size:]

    # The replayed ranks' programs: a mark as each posts a message (the place of that
    # message among its own), the ghost sides it posts for the ranks of its class just
    # before; their messages renumbered.
    mine = sorted({m for k in replayed.tolist() for action in programs[k]
                   if action[0] in _SIDES for m in action[1:]})
    number = {m: i for i, m in enumerate(mine)}
    ghosts: dict = {}                                 # (class, place) -> the sides it posts
    for m in mine:
        for rank, at in ((src[m], at_src[m]), (dst[m], at_dst[m])):
            if process[rank] < 0:
                ghosts.setdefault((cls[rank], at), []).append(number[m])
    bodies, roles = [], []                # roles: per mark, the places it posts, or None
    for i, k in enumerate(replayed.tolist()):
        body, role, j = [], [], 0
        for action in programs[k]:
            kind = action[0]
            if kind in _SIDES:
                slots = [(at_dst if side else at_src)[m]
                         for m, side in zip(action[1:], _SIDES[kind])]
                if sorted(slots) != list(range(j, j + len(slots))):
                    raise NotExact(_PARTED)         # (its messages out of their ids' order)
                extra = [g for at in slots for g in ghosts.get((i, at), ())]
                if extra:
                    body.append((fast_queues.GHOST, tuple(extra)))
                body += [(fast_queues.MARK,), (kind, *(number[m] for m in action[1:]))]
                role.append(slots)
                j += len(slots)
                continue
            if kind not in _TAKEN:
                raise NotExact(_PARTED)             # (a program this replay does not take)
            if kind == fast_queues.MARK:
                role.append(None)                     # the program's own
            body.append(action)
        bodies.append(body)
        roles.append(role)
    columns = [np.asarray(column)[np.asarray(mine, dtype=np.int64)] for column in messages]
    columns[0] = cls[columns[0]]                  # its class's process (its CPU: the pool)
    columns[1] = cls[columns[1]]

    cpus = fast_queues.SharedCpus([0] * count, c.shared_cpu_cores, costs.threads_per_rank,
                                  c.cpu_efficiency, costs,
                                  multiplicity=np.bincount(cls, minlength=count))
    finish, marks = fast_queues.simulate(
        np.asarray(begin, dtype=float)[replayed].tolist(), replayed.tolist(),
        (run.ranks[replayed] // run.rph).tolist(), bodies, columns, None,
        fast_queues.NicState(c.hosts), cpus=cpus)

    # The check (3.): when each message of the tree starts by its classes' posts; the
    # replayed ranks' own messages of each place must start then, with the same bytes.
    places = int(place.max()) + 1
    posted = np.full((count, places), np.nan)
    own = []
    for i, (stamps, role) in enumerate(zip(marks, roles)):
        own.append([t for t, slots in zip(stamps, role) if slots is None])
        for t, slots in zip(stamps, role):
            if slots is not None:
                posted[i, slots] = t
    start = np.maximum(posted[cls[src], at_src], posted[cls[dst], at_dst])
    lat, busy = (np.asarray(messages[x], dtype=float) for x in (2, 3))
    theirs = np.full((3, count, places), np.nan)       # start, latency, busy seconds
    mine = np.asarray(mine)
    for rank, at in ((src[mine], at_src[mine]), (dst[mine], at_dst[mine])):
        keep = process[rank] >= 0
        for row, values in zip(theirs, (start, lat, busy)):
            row[process[rank[keep]], at[keep]] = values[mine[keep]]
    for side, at in ((cls[src], at_src), (cls[dst], at_dst)):
        if not all(np.array_equal(row[side, at], values)
                   for row, values in zip(theirs, (start, lat, busy))):
            raise NotExact(_PARTED)
    run.compute_s = np.array([cpus.compute_s.get(i, 0.0) for i in range(count)])[cls]
    run.comm_s = np.array([cpus.comm_s.get(i, 0.0) for i in range(count)])[cls]
    return np.asarray(finish)[cls], [own[i] for i in cls.tolist()]


# The actions that post messages, and the side of each of their messages (0 sends, 1
# receives).  (An exchange, both, would go the same way; no replay by class has one.)
_SIDES = {fast_queues.SEND: (0,), fast_queues.RECV: (1,)}
# The actions besides messages a replayed rank's program may hold.
_TAKEN = frozenset((fast_queues.MARK, fast_queues.WAIT, fast_queues.ENTER, fast_queues.EXIT,
                    fast_queues.COMPUTE, fast_queues.GLOO))
