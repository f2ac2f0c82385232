"""Binomial ps's last scatter on one pool of cores, by classes of ranks, for the fast engine.

``fast._binomial_ps_in_parts`` times every tensor but the last scatter by its schedules; the
last scatter it replays (``fast_queues.simulate``), since there the ranks take their optimizer
steps on the pool as they get their shares while messages still flow: the pool's load moves
every later message's cap and every job's rate.  Replaying all p ranks is O(p) events (seconds
at 65,536 ranks).  Yet the ranks act by class: over a power of two every sender starts its
message of one mask at one instant (the root's and every forwarder's), so the ranks with the
same trailing zero bits receive, forward and step together (log2 p + 1 classes); over other
sizes the ranks beside the missing subtrees part, and on a slower link or with a straggler's
step, so do they.  One rank of each class is enough:

1. Classes (``classes``): the scatter timed with generic seconds per message (its latency,
   bytes and mask, weighted so that unequal paths do not tie), the ranks grouped by when they
   receive, their compute factor, and per mask the message each sends (bytes and link).
2. The replayed ranks: each class's first rank and its ancestors, so that every replayed rank
   receives from a replayed parent (a handful per class); each counts on the pool for the
   ranks of its class that it stands for.  A child of a replayed rank that is not replayed
   only posts its receive (its class counted by another).
3. The check: a rank receives when its parent's send of its mask ends.  So if, for every
   (parent class, mask, class) of the tree, the replayed send ends when the class's replayed
   rank receives, and every replayed rank acts as its class's first, then every rank acts as
   its class's first, by induction from the root, and the pool carried what the DES's does.
   Otherwise (generic times that tied by chance) ``NotExact``, and the caller replays every
   rank.

O(classes x log p) events: tens at 65,536 ranks over a power of two.
"""
from __future__ import annotations

import numpy as np

from commsim.sim import fast_queues
from commsim.sim.fast_collectives import NotExact, Run, Schedule
from commsim.sim.fast_lockstep import grouped

# Generic weights of a message's latency, its busy seconds and its mask in the class timing.
_LATENCY, _BUSY, _MASK = 0.6180, 1.3713, 0.0137

_PARTED = "the ranks of a class of the last scatter would act at different instants"


def covers(run: Run) -> bool:
    """Whether the last scatter goes by class: every rank on the one pool, a host each (no
    NIC carries two ranks' messages)."""
    c = run.spec.cluster
    return c.shared_cpu_cores is not None and c.ranks_per_host == 1 and run.ranks.size > 2


def classes(messages, factor) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per position of a scatter whose ``messages`` (``Schedule.program``'s columns, each
    position receiving one, sent in the schedule's order of masks) go down a tree from
    position 0: its class, its parent (-1 for the root) and the level (log2 of the mask) of
    the message it receives."""
    src, dst = np.asarray(messages[0]), np.asarray(messages[1])
    lat, busy = np.asarray(messages[2], dtype=float), np.asarray(messages[3], dtype=float)
    n = factor.size
    level = np.zeros(n, dtype=np.int64)
    level[dst] = np.log2(dst - src).astype(np.int64)
    parent = np.full(n, -1, dtype=np.int64)
    parent[dst] = src
    levels = int(level.max()) + 1
    # When each position receives, sends going out in order (the root's at 0, every post
    # before): the sends of one mask are one step.
    clock = np.zeros(n)
    generic = _LATENCY * lat + _BUSY * busy + _MASK * np.sqrt(level[dst] + 2.0)
    for step in range(levels - 1, -1, -1):
        at = np.flatnonzero(level[dst] == step)
        clock[dst[at]] = clock[src[at]] + generic[at]
        clock[src[at]] = clock[dst[at]]
    received = np.zeros(n)
    received[dst] = clock[dst]
    received[0] = -1.0
    rows = np.zeros((n, 2 + 2 * levels))
    rows[:, 0], rows[:, 1] = received, factor
    sends = 2 + 2 * level[dst]
    rows[src, sends] = busy
    rows[src, sends + 1] = lat
    return grouped(rows), parent, level


def last_scatter(run: Run, scatter: Schedule, begin, nbytes: float, optimizer_work):
    """The scatter of ``nbytes`` from ``begin`` (per rank: when it begins it, the gather over
    and the scatter's overhead waited), then each rank's optimizer step of
    ``optimizer_work``, by class.  When each rank leaves the scatter and ends its step; the
    run's bytes counted and ``run.compute_s`` set (each rank's optimizer seconds).  Raises
    ``NotExact`` where the classes part."""
    spec, costs = run.spec, run.costs
    c = spec.cluster
    p = run.ranks.size
    begin = np.asarray(begin, dtype=float)
    if begin[1:].max() >= begin[0]:
        # Every rank must be inside the scatter (talking, on the pool) before anything
        # runs; the root begins last, after its mean.
        raise NotExact(_PARTED)
    programs, messages = scatter.program(nbytes)
    cls, parent, level = classes(messages, run.factor)
    count = int(cls.max()) + 1
    size = np.bincount(cls, minlength=count)
    first = np.unique(cls, return_index=True)[1]

    replayed = set()
    for k in first.tolist():
        while k >= 0 and k not in replayed:
            replayed.add(k)
            k = int(parent[k])
    replayed = sorted(replayed)
    dst = messages[1]
    sent = {m: dst[m] for k in replayed for action, m in programs[k]
            if action == fast_queues.SEND}
    phantoms = sorted(set(sent.values()) - set(replayed))
    ranks = replayed + phantoms
    process = {k: i for i, k in enumerate(ranks)}
    used = sorted(sent)               # (every replayed rank's parent is replayed)
    number = {m: i for i, m in enumerate(used)}
    columns = [[column[m] for m in used] for column in messages]
    columns[0] = [process[k] for k in columns[0]]
    columns[1] = [process[k] for k in columns[1]]

    # Each replayed rank counts on the pool for the ranks of its class that no other
    # replayed rank stands for; a phantom only posts its receive.
    weight, bodies = [], []
    counted = np.bincount(cls[replayed], minlength=count)
    carrier = set(first.tolist())
    for k in replayed:
        weight.append(size[cls[k]] - counted[cls[k]] + 1 if k in carrier else 1)
        body = [(fast_queues.ENTER,)]
        for action, m in programs[k]:
            body += [(action, number[m]), (fast_queues.MARK,)]
        bodies.append(body + [(fast_queues.EXIT,), (fast_queues.MARK,),
                              (fast_queues.COMPUTE, optimizer_work[k])])
    for k in phantoms:
        weight.append(0)
        bodies.append([(fast_queues.RECV, number[programs[k][0][1]])])

    cpus = fast_queues.SharedCpus([0] * len(ranks), c.shared_cpu_cores, costs.threads_per_rank,
                                  c.cpu_efficiency, costs, multiplicity=weight)
    finish, marks = fast_queues.simulate(
        begin[ranks].tolist(), ranks, (np.asarray(ranks) // run.rph).tolist(), bodies, columns,
        None, fast_queues.NicState(c.hosts), cpus=cpus)

    # The check (3.): per class, when its first rank receives, and when its send of each
    # level ends; every (parent class, level, class) of the tree must agree.
    received = np.full(count, -np.inf)
    sends = np.full((count, int(level.max()) + 1), np.nan)
    for i, k in enumerate(replayed):
        if k in carrier:
            at = iter(marks[i])
            for action, m in programs[k]:
                t = next(at)
                if action == fast_queues.RECV:
                    received[cls[k]] = t
                else:
                    sends[cls[k], level[dst[m]]] = t
    child = np.arange(1, p)
    want, got = sends[cls[parent[child]], level[child]], received[cls[child]]
    of = {int(cls[k]): i for i, k in enumerate(replayed) if k in carrier}
    alike = all(np.allclose(marks[i] + [finish[i]], marks[j] + [finish[j]], rtol=1e-12, atol=0.0)
                for i, j in ((i, of[int(cls[k])]) for i, k in enumerate(replayed)))
    if not (alike and np.allclose(want, got, rtol=1e-12, atol=0.0)):
        raise NotExact(_PARTED)
    scatter.account(nbytes)
    by_class = np.array([of[k] for k in range(count)])[cls]
    run.compute_s = np.array([cpus.compute_s.get(i, 0.0) for i in range(len(replayed))])[
        by_class]
    leave = np.array([marks[i][-1] for i in range(len(replayed))])[by_class]
    return leave, np.asarray(finish[:len(replayed)])[by_class]
