"""All-reduces on a world whose ranks all act at the same instants, CPU contention included,
for the fast engine.

Where the ranks sharing a CPU (a host's, or the one pool of ``shared_cpu_cores``) do not keep
their jobs apart, the DES's processor sharing makes every job's speed depend on every other's:
DDP's Gloo thread reduces while backward computes, and with calibrated contention a message
sent while compute runs on its cores is capped and compute slows while its rank communicates.
``fast.ring_like``'s recurrences assume none of that.  On a *lockstep* world they need not: a
uniform cluster (no straggler, no slow link) of one rank per host (or of one host) whose
all-reduce treats every rank alike (a ring, within groups or not; recursive doubling or
Rabenseifner over a power of two), or of two ranks per host in a ring (within groups of an
even size: of a step's two messages each rank of a host sends one and receives the other,
one inside the host and one from another, so both wait for the later).  There every rank
posts, computes, reduces and enters or leaves its collectives at the same instants as every
other, so one rank's events tell them all: the CPU it shares carries ``m`` copies of each of
its jobs (m = the ranks sharing it) and each of its messages has a twin arriving from its
partner at the same instant.

A binomial tree (``tree``) treats its ranks by class (``place_classes``): over a power of two a
place's trailing zero bits say in which round it sends up and in which mask the broadcast
reaches it; over other sizes the places beside a missing child, and their subtrees, part too.
So do recursive doubling and Rabenseifner over a number that is not a power of two (the ranks
MPICH's fold sets aside, those that take their buffers, the survivors whose partners start
late: 3 or 4 classes at 1,000 ranks), and both algorithms on an uneven cluster: a straggler or
a slow link, and the ranks its delay reaches along the schedule, are classes of their own.
Rings of groups on an uneven cluster too: the other groups are alike.  On one rank per host, or
one host (or a tree over two ranks a host on one pool: the pair meet inside the host at mask 1,
and beyond only a host's first rank uses its NIC), the ranks of a class act at the same
instants: one rank of each class is simulated, the CPU of all (one pool, one host) carrying
each class's jobs as many times as it has ranks, or each class's rank on a CPU of its own.  A
message joins a rank of one class with ranks of several (a sender's parent may be of any higher
class, as a receiver's in the broadcast): each pair is delivered when both have posted, and
where the pairs of one class's rank would arrive apart, its ranks would part, and the engine
raises ``NotExact`` (every rank is then replayed).  log2(g)+1 classes for a tree over a power
of two (a few dozen otherwise) and O(classes x log g) events a collective.

Steps (one rank's processes, as ``strategies.ddp`` runs them; ``strategies.ring`` runs the
first alone, all-reducing every tensor after backward):
1. compute: the k-1 local steps, DDP's buffer broadcast (``fast._buffer_broadcast``: a tree
   with no CPU work; every rank leaves when it is over), forward, backward bucket by bucket
   (signalling each bucket ready), wait for the communication, the optimizer step;
2. communication: per bucket, once ready: enter the collective, its call overhead, its steps
   (a message, then with reduce-scatter steps a reduction on the Gloo thread), the divide, leave;
   with fp16 the two casts around an all-reduce of half the bytes;
3. the CPU (``engine.ProcessorSharingCPU``): every job runs at cores / busy threads (once the
   busy threads m·(threads of its jobs) exceed the cores) times the efficiency curve at the busy
   threads, times the calibrated compute speed at its load while the rank is inside a
   collective; a message holds the wire for its bytes at the slower of the link and the
   contended bandwidth at its CPU's load when it starts, then takes one latency.
Runs of equal steps with nothing else due are one addition (``_Lockstep.steps``): every step
after backward, and the steps during backward that leave its current job running.  O(buckets)
additions plus the few steps around each change of regime, at any rank count.
"""
from __future__ import annotations

import heapq
from collections import Counter, deque

import numpy as np

from commsim.costs import CostInputs, cpu_load, job_rate
from commsim.sim.engine import finished
from commsim.sim.fast_collectives import NotExact, cpu_of, intra_link
from commsim.spec import RunSpec

# Steps of a run left to the event loop at its end, so that a job ending there is seen.
_MARGIN = 2
# Classes (beyond 8 a doubling of the ranks) past which the ranks are replayed instead: a
# straggler on cores of its own parts doubling's ranks nearly one by one, and an event loop
# over every class is then slower than the replay's over every rank.
_MOST_CLASSES = 64


def covers(spec: RunSpec) -> bool:
    """Whether ``spec`` is a lockstep world of all-reduces (see the module's docstring)."""
    from commsim.strategies import get_strategy

    c = spec.cluster
    if spec.strategy not in ("ring", "ddp"):
        return False
    strategy = get_strategy(spec.strategy)
    p = spec.world_size
    g = spec.group_size or p
    if p % g:
        return False
    algorithm = strategy.algorithm(spec) or "ring"
    if algorithm == "hierarchical" and c.ranks_per_host == 1:
        algorithm = "ring"
    uneven = bool(spec.stragglers or c.slow_links_Bps)
    if by_class(algorithm, g, p, uneven):
        # Classes of ranks by their place in the schedule, their speed and their link
        # (``place_classes``); one rank per host, or one host, so that no CPU or NIC mixes
        # classes; or a tree over pairs of ranks a host on one pool (the pair meet at mask 1
        # inside the host; beyond, only the first of a host sends or receives).
        return (c.ranks_per_host == 1 or c.hosts == 1
                or (algorithm == "tree" and c.ranks_per_host == 2 and g % 2 == 0
                    and c.shared_cpu_cores is not None))
    if uneven:
        return False
    if c.hosts > 1 and c.ranks_per_host == 2:
        # A ring over pairs of ranks on alike hosts: the first of each pair sends inside the
        # host and receives from the previous host, the second the other way round; both
        # wait for both kinds of message, so they post, reduce and share their cores together.
        # (Doubling sends both ranks of a host to another at once: they queue on its NIC.)
        return algorithm == "ring" and g % 2 == 0
    if c.ranks_per_host > 1 and c.hosts > 1:
        return False
    if algorithm in ("recursive_doubling", "rabenseifner"):
        return g & (g - 1) == 0
    return algorithm == "ring" or g == 1


def by_class(algorithm: str, g: int, p: int, uneven: bool = False) -> bool:
    """Whether an all-reduce over groups of ``g`` of ``p`` ranks treats its ranks by class: a
    tree, or doubling over a number that is not a power of two (its fold) or on an ``uneven``
    cluster (stragglers, slow links: their delay reaches the others by the doubling's
    partners, log2 g classes), or rings of groups on an uneven cluster (the other groups
    alike); a world ring takes every rank alike, or goes by runs (a straggler's delay travels
    round it rank by rank: ``fast_runs``)."""
    doubling = algorithm in ("recursive_doubling", "rabenseifner")
    return g > 1 and (algorithm == "tree" or (doubling and (g & (g - 1) != 0 or uneven))
                      or (algorithm == "ring" and uneven and g < p))


def equal_steps(left: int, wire: float, work: float, job_left, *, alone: float, both: float,
                idle: float) -> tuple[int, float, float]:
    """Of ``left`` equal steps (a message of ``wire`` seconds, then ``work`` on the Gloo thread)
    with nothing else due but a compute job with ``job_left`` work to do (None: none), how many
    to take at once, and each one's seconds and the compute job's work done in it.  The job
    runs at ``alone`` beside a message, at ``both`` beside a reduction (at ``idle`` without
    the job); steps are taken up to ``_MARGIN`` short of its end, which the event loop sees."""
    if job_left is None:
        return left, wire + (work / idle if work > 0 else 0.0), 0.0
    used = wire * alone + work          # the compute job's work done in one step
    jump = min(left, int(job_left / used) - _MARGIN) if used > 0 else left
    if jump <= 0:
        return 0, 0.0, 0.0
    return jump, wire + (work / both if work > 0 else 0.0), used


def steps_of(algorithm: str, nbytes: float, g: int, gamma: float) -> list[tuple[int, float, float]]:
    """One rank's steps of an all-reduce of ``nbytes`` among ``g`` lockstep ranks (without the
    overhead and the divide), as runs: (count, bytes sent and received, reduction seconds)."""
    if g <= 1:
        return []
    if algorithm in ("ring", "hierarchical"):
        chunk = nbytes / g
        return [(g - 1, chunk, chunk * gamma), (g - 1, chunk, 0.0)]
    levels = g.bit_length() - 1
    if algorithm == "recursive_doubling":
        return [(levels, nbytes, nbytes * gamma)]
    halving = [(1, nbytes / 2 ** k, nbytes / 2 ** k * gamma) for k in range(1, levels + 1)]
    doubling = [(1, nbytes / g * 2 ** k, 0.0) for k in range(levels)]
    return halving + doubling


# A place's step in a round of a schedule (``schedule_rounds``).
RECV, SEND, BOTH, RING = 1, 2, 3, 4
_KINDS = {RECV: "recv", SEND: "send", BOTH: "both", RING: "ring"}


def schedule_rounds(algorithm: str, g: int) -> list[tuple]:
    """``collectives``' all-reduce over ``g`` places as rounds, each place taking at most one
    step a round: (key, code per place (0 none, RECV, SEND, BOTH: an exchange, RING: a send to
    the partner and a receive from the place whose partner it is), partner per place, the
    step's share of the bytes, whether a reduction of them follows).

    ring (``ring_allreduce``): 2(g-1) steps of a chunk to the right and one from the left, the
    first g-1 adding what came.

    tree (``tree_allreduce``): the reduce at masks 1, 2, 4, ...: a place receives from place
    + m and adds, or sends to place - m and stops; the broadcast at masks down to 1: a place
    receives from its parent, then sends to each child.  The doubling algorithms
    (``_folded_allreduce``): MPICH's fold of the first 2r places (each even one hands its
    buffer to the next, which adds it), the q = g - r survivors' exchanges (recursive
    doubling: the whole buffer with the one 2^k away, then add; Rabenseifner: halves with
    the one q/2, q/4, ... away, adding, then doubling back), the result handed back."""
    place = np.arange(g)
    none = np.zeros(g, dtype=np.int8)
    rounds = []

    def pairs(key, a, b, code_a, code_b, share, reduce):
        code, partner = none.copy(), np.zeros(g, dtype=np.int64)
        code[a], code[b], partner[a], partner[b] = code_a, code_b, b, a
        rounds.append((key, code, partner, share, reduce))

    if algorithm == "ring":
        right = (place + 1) % g
        code = np.full(g, RING, dtype=np.int8)
        return [(("ring", step), code, right, 1.0 / g, step < g - 1)
                for step in range(2 * (g - 1))]
    if algorithm == "tree":
        levels = max(g - 1, 0).bit_length()
        for level in range(levels):
            m = 1 << level
            recv = np.flatnonzero((place % (2 * m) == 0) & (place + m < g))
            pairs(("up", level), recv, recv + m, RECV, SEND, 1.0, True)
        for level in reversed(range(levels)):
            m = 1 << level
            send = np.flatnonzero((place % (2 * m) == 0) & (place + m < g))
            pairs(("down", level), send, send + m, SEND, RECV, 1.0, False)
        return rounds
    q = 1 << (g.bit_length() - 1)
    r = g - q
    odd = np.arange(1, 2 * r, 2)
    survivor = np.concatenate([odd, np.arange(2 * r, g)])     # ``_survivor``
    if r:
        pairs(("fold", 0), odd - 1, odd, SEND, RECV, 1.0, True)
    j = np.arange(q)
    if algorithm == "recursive_doubling":
        steps = [(mask, 1.0, True) for mask in (1 << k for k in range(q.bit_length() - 1))]
    else:
        halving = [(q >> (k + 1), 1.0 / (2 << k), True) for k in range(q.bit_length() - 1)]
        steps = halving + [(1 << k, (1 << k) / q, False) for k in range(q.bit_length() - 1)]
    for n, (distance, share, reduce) in enumerate(steps):
        low = j[j & distance == 0]
        pairs(("x", n), survivor[low], survivor[low ^ distance], BOTH, BOTH, share, reduce)
    if r:
        pairs(("out", 0), odd, odd - 1, SEND, RECV, 1.0, False)
    return rounds


def tile_rounds(rounds, g: int, p: int) -> list[tuple]:
    """``rounds`` of one group of ``g`` places for the p // g groups of ``p`` places."""
    groups = p // g
    offset = np.repeat(np.arange(groups) * g, g)
    return [(key, np.tile(code, groups), np.tile(partner, groups) + offset, share, reduce)
            for key, code, partner, share, reduce in rounds]


def place_classes(p: int, rounds, ready=None, speed=None, own_cpus: bool = False,
                  link=None) -> tuple[list[int], list[list[tuple]]]:
    """The places of a schedule's ``rounds`` (``schedule_rounds``) by class, and each class's
    steps.  Places of one class take the same steps at the same instants: the places are
    timed with generic message, reduction and compute seconds, a collective after another
    (each starting when a place is ``ready`` for it, a row per collective: default one, all
    at 0, or when the one before ended; with stragglers, with compute a hundredth, once and a
    hundred times as long) and grouped by their compute ``speed`` (a straggler's factor;
    ``own_cpus``: each rank's on cores of its own) and ``link`` (how many times slower its
    host's link is than the others'), steps and times.  A tree over a power of two has a
    class per count of trailing zero bits (log2 g + 1), and doubling one class; over other
    sizes the places beside a missing child or a fold, and those they reach, part (a tree:
    15 classes at 1,000 places, 40 at 50,000), and a straggler or a slow link parts the
    places its delay reaches.  Classes are numbered by their first place; a step is
    (``"recv" | "send" | "both" | "ring"``, key, share of the bytes, reduction after,
    partners), its partners the classes of its places' partners (a ring's: the (right, left)
    pairs of classes its places have).  ``_Lockstep`` checks at every message that a class's
    places still act together (on a real CPU their times may part where the generic ones did
    not)."""
    latency, per_share, reduction = 0.6180, 1.0, 0.3713        # generic: no chance ties
    label = np.zeros(p)
    for alike in (speed, link):
        if alike is not None:
            label = grouped(np.column_stack([label, alike])) * 1.0
    # On CPUs of their own a slower rank's reductions and messages may be slower too (its
    # compute beside them on its cores): they take longer here, so that the ranks they reach
    # part.  (On one pool every job runs at one speed.)
    slow = None if speed is None or not own_cpus else np.asarray(speed, dtype=float) ** 0.37
    wire = None if link is None else np.asarray(link, dtype=float)
    # Where compute is short, or long, beside a message (a straggler's delay hidden by a
    # fold's message, or not): the classes of every scale together.
    ready = [np.zeros(p)] if ready is None else ready
    scales = (0.01, 1.0, 100.0) if speed is not None or link is not None else (1.0,)
    # Per round: its places, their partners, a message's generic seconds and the reduction's
    # after it (the same at every scale; one number where every place's is).
    timed = []
    for _, code, partner, share, reduce in rounds:
        at = np.flatnonzero(code).astype(np.int32)
        to = partner[at].astype(np.int32)
        seconds = share * per_share
        for factor in (slow, wire):
            if factor is not None:
                seconds = seconds * np.maximum(factor[at], factor[to])
        seconds = latency + seconds
        after = None
        if reduce:
            after = share * reduction * (1.0 if slow is None else slow[at])
            after = np.where(code[at] != SEND, after, 0.0)
        timed.append((code, at, to, seconds, at.size > 0 and code[at[0]] == RING, after))
    for scale in scales:
        end = np.zeros(p)
        for begin in ready:
            t = np.maximum(end, begin * scale)
            columns = [label]
            for code, at, to, seconds, ring, after in timed:
                done = np.maximum(t[at], t[to]) + seconds
                if ring:                              # done when its send and receive are
                    got = np.empty(p)
                    got[to] = done
                    done = np.maximum(done, got[at])
                if after is not None:
                    done = done + after
                t[at] = done
                stamp = np.zeros(p)
                stamp[at] = done
                columns += [code, stamp]
            end = t
            label = grouped(np.vstack(columns).T) * 1.0
    cls = label.astype(np.int64)
    n = int(cls.max()) + 1 if p else 0
    steps = [[] for _ in range(n)]
    for (key, _, _, share, reduce), (code, at, to, _, ring, _) in zip(rounds, timed):
        if ring:
            sides = {}
            left_of = np.empty(p, dtype=np.int64)
            left_of[to] = at
            for c, q, l in _distinct(n, cls[at], cls[to], cls[left_of[at]]):
                sides.setdefault(c, []).append((q, l))
            for c in sorted(sides):
                steps[c].append(("ring", key, share, reduce, tuple(sides[c])))
            continue
        met = {}
        for c, kind, q in _distinct(n, cls[at], code[at], cls[to]):
            met.setdefault((c, kind), []).append(q)
        for (c, kind), qs in met.items():
            steps[c].append((_KINDS[kind], key, share, reduce and kind != SEND, tuple(qs)))
    return cls.tolist(), steps


def _distinct(n: int, *columns) -> list[tuple]:
    """The distinct rows of integer ``columns`` (each below ``n`` or the kinds' codes), in
    order: one number a row, so that 65,536 places take one sort rather than as many tuples."""
    base = max(n, RING + 1)
    key = np.zeros(columns[0].size, dtype=np.int64)
    for column in columns:
        key = key * base + column.astype(np.int64)
    key = np.unique(key)
    out = []
    for _ in columns:
        out.append((key % base).tolist())
        key //= base
    return list(zip(*out[::-1]))


def grouped(rows) -> np.ndarray:
    """Each row's group of equal rows, numbered by first row.  Grouped by a random projection
    of each row (sorting 65,536 rows themselves takes a second), then checked row by row; a
    collision groups the rows themselves."""
    key = np.zeros(rows.shape[0])
    for column, weight in zip(rows.T, np.random.default_rng(0).random(rows.shape[1])):
        key += column * weight        # (elementwise: a matrix product may round equal rows apart)
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    if not (rows == rows[first][inverse.ravel()]).all():
        _, first, inverse = np.unique(rows, axis=0, return_index=True, return_inverse=True)
    order = np.argsort(first)                          # class numbers by first place
    number = np.empty_like(order)
    number[order] = np.arange(order.size)
    return number[inverse.ravel()]


class _Lockstep:
    """The processes of one rank of each class (the ranks of a class act at the same instants),
    their CPUs (a class's rank shares its CPU with ``weights[c]`` ranks of its class, and on one
    CPU for all, with the other classes' ranks), and their messages."""

    def __init__(self, spec: RunSpec, costs: CostInputs, weights=None, own_cpus=False,
                 bandwidth=None, inside=()):
        c = spec.cluster
        self.costs = costs
        # Class -> its ranks' link (a message between classes takes the slower's).
        self.bandwidth = bandwidth
        # Steps of a schedule whose messages stay inside hosts (by their key).
        self.inside = frozenset(inside)
        self.cores, m = cpu_of(spec)
        # Class -> ranks of it on one CPU; class -> which CPU (one for all, or one per class
        # where each rank has a host of its own).
        self.weights = list(weights) if weights is not None else [m]
        self.cpu = list(range(len(self.weights))) if own_cpus else [0] * len(self.weights)
        self.one_cpu = max(self.cpu, default=0) == 0
        self.efficiency = c.cpu_efficiency
        self.threads = costs.threads_per_rank
        self.contention = bool(costs.contention)
        # A step's messages: inside the host (one host; or with two ranks per host, the
        # first rank's to the second) and between hosts (the second's to the next host's
        # first; none in groups of one host's ranks), which the DES caps under load.  With
        # two ranks per host each waits for both.
        self.intra = c.hosts == 1 or c.ranks_per_host == 2
        self.inter = c.hosts > 1 and (spec.group_size or spec.world_size) > c.ranks_per_host
        self.intra_latency_s, bandwidth = intra_link(c)
        self.intra_per_byte = 1.0 / bandwidth
        self.latency_s = c.nic_latency_s
        self.wire = costs.wire("all_reduce")
        self.per_byte = self.wire / c.nic_bandwidth_Bps
        self.capped = self.contention and self.inter
        self.now = 0.0
        self.jobs: dict[int, list] = {}          # process -> [work left, threads, compute, start]
        self.timers: list = []                    # (time, order, process)
        self.ready = deque()                      # processes to resume now, in order
        self.processes: list = []
        self.cls: list = []                       # process -> its class
        self.waiting: dict = {}                   # signal -> process waiting for it
        self.fired: set = set()
        # Messages between classes: (message, class) -> [process, pairs left, deliveries].
        self.posts: dict = {}
        # (what, cpu) -> ``_cap_of`` or ``_rate_of`` of it, until its jobs or talking ranks
        # change (every message asks).
        self._kept: dict = {}
        n = len(self.weights)
        self.depth = [0] * n                      # nested collectives a class's rank is inside
        self._talking = [0] * (max(self.cpu) + 1 if n else 0)    # cpu -> ranks inside one
        # cpu -> threads of its running jobs, and of its compute jobs (whole numbers of
        # threads and ranks: kept by adding and taking off, to the bit as summed anew).
        self._busy = [0.0] * len(self._talking)
        self._computing = [0.0] * len(self._talking)
        self.order = 0
        self.compute_s = [0.0] * n
        self.comm_s = [0.0] * n
        self.sent = [0.0] * n
        self.received = [0.0] * n
        self.nic_sent = [0.0] * n                 # of those, over the NIC (by class)
        self.nic_received = [0.0] * n
        self.finish = [0.0] * n
        self._since = [0.0] * n

    # -- the CPU ---------------------------------------------------------------------------

    def load(self, compute: bool, comm: bool) -> float:
        """``ProcessorSharingCPU.load`` with every twin in the same state (one class)."""
        m = self.weights[0]
        return cpu_load(self.cores, m * self.threads if compute else 0.0, m if comm else 0)

    def rate(self, compute: bool, gloo: bool, comm: bool) -> float:
        """``ProcessorSharingCPU._rate``: every job's speed (one class)."""
        busy = self.weights[0] * ((self.threads if compute else 0.0) + (1.0 if gloo else 0.0))
        speed = self.costs.compute_speed(self.load(compute, comm)) \
            if comm and self.contention else 1.0
        return job_rate(self.cores, busy, self.efficiency, speed)

    def _state(self):
        compute = any(job[2] for job in self.jobs.values())
        gloo = any(not job[2] for job in self.jobs.values())
        return compute, gloo, self.depth[0] > 0

    def _tally(self, cpu: int):
        """(busy threads, compute threads, ranks inside a collective) on ``cpu``."""
        return self._busy[cpu], self._computing[cpu], self._talking[cpu]

    def _running(self, k: int, job, sign: int) -> None:
        """Process ``k``'s ``job`` starts (+1) or ends (-1) on its class's CPU."""
        c = self.cls[k]
        threads = sign * self.weights[c] * job[1]
        self._busy[self.cpu[c]] += threads
        if job[2]:
            self._computing[self.cpu[c]] += threads
        self._changed()

    def _changed(self) -> None:
        """A job started or ended, or a class entered or left its collectives."""
        self._kept.clear()

    def _cap_of(self, cpu: int) -> float:
        """The contended bandwidth at ``cpu``'s load (kept until it changes)."""
        cap = self._kept.get(("cap", cpu))
        if cap is None:
            cap = self._kept[("cap", cpu)] = self.costs.contended_Bps(self.cpu_load_of(cpu))
        return cap

    def cpu_load_of(self, cpu: int) -> float:
        _, computing, talking = self._tally(cpu)
        return cpu_load(self.cores, computing, talking)

    def _rate_of(self, cpu: int) -> float:
        """``ProcessorSharingCPU._rate`` of ``cpu`` now (kept until it changes)."""
        rate = self._kept.get(("rate", cpu))
        if rate is None:
            busy, computing, talking = self._tally(cpu)
            speed = self.costs.compute_speed(cpu_load(self.cores, computing, talking)) \
                if talking and self.contention else 1.0
            rate = self._kept[("rate", cpu)] = job_rate(self.cores, busy, self.efficiency, speed)
        return rate

    def _rates(self) -> dict:
        if self.one_cpu:
            return {0: self._rate_of(0)}
        return {cpu: self._rate_of(cpu) for cpu in {self.cpu[self.cls[k]] for k in self.jobs}}

    def _advance(self, t: float) -> None:
        if self.jobs and t > self.now:
            rates = self._rates()
            for k, job in self.jobs.items():
                job[0] -= (t - self.now) * rates[self.cpu[self.cls[k]]]
        self.now = t

    def message_s(self, nbytes: float) -> float:
        """From posting to delivery of a step's messages: between hosts, the wire at the
        slower of the link and the contended bandwidth at the CPU's load now, then one
        latency; inside a host, its latency and bandwidth; the later of the two where a
        rank sends one and receives the other."""
        seconds = 0.0
        if self.inter:
            per_byte = self.per_byte
            if self.capped:
                compute, _, comm = self._state()
                per_byte = max(per_byte,
                               1.0 / self.costs.contended_Bps(self.load(compute, comm)))
            seconds = nbytes * per_byte + self.latency_s
        if self.intra:
            seconds = max(seconds, self.intra_latency_s + nbytes * self.intra_per_byte)
        return seconds

    def delivery(self, nbytes: float, a: int, b: int, inside: bool = False) -> float:
        """When a message between ranks of classes ``a`` and ``b`` posted by both now arrives
        (``engine.Network._transfer``): between hosts the wire at the slower of the link and
        the contended bandwidth at the busier end's load, then one latency; inside the host its
        latency and bandwidth."""
        if inside or not self.inter:
            return self.now + (self.intra_latency_s + nbytes * self.intra_per_byte)
        per_byte = self.per_byte
        if self.bandwidth is not None:
            per_byte = self.wire / min(self.bandwidth[a], self.bandwidth[b])
        if self.capped:
            ca, cb = self.cpu[a], self.cpu[b]
            cap = self._cap_of(ca) if ca == cb else min(self._cap_of(ca), self._cap_of(cb))
            per_byte = max(per_byte, 1.0 / cap)
        return self.now + nbytes * per_byte + self.latency_s

    # -- collectives -------------------------------------------------------------------------

    def enter(self, c: int = 0) -> None:
        self._advance(self.now)
        if self.depth[c] == 0:
            self._since[c] = self.now
            self._talking[self.cpu[c]] += self.weights[c]
            self._changed()
        self.depth[c] += 1

    def exit(self, c: int = 0) -> None:
        self.depth[c] -= 1
        if self.depth[c] == 0:
            self.comm_s[c] += self.now - self._since[c]
            self._talking[self.cpu[c]] -= self.weights[c]
            self._changed()

    def steps(self, count: int, nbytes: float, work: float):
        """``count`` equal steps (a message each way, then ``work`` on the Gloo thread), those
        with nothing else due in between as one addition (one class)."""
        left = count
        while left:
            jump = self._jumpable(left, nbytes, work)
            if jump:
                left -= jump
                continue
            self.sent[0] += nbytes
            self.received[0] += nbytes
            yield ("wait", self.message_s(nbytes))
            if work > 0:
                yield ("cpu", work, 1.0, False)
            left -= 1

    def _jumpable(self, left: int, nbytes: float, work: float) -> int:
        """Take as many of ``left`` steps as nothing else interrupts at once; how many."""
        if self.timers or self.ready or any(not job[2] for job in self.jobs.values()):
            return 0
        compute = [job for job in self.jobs.values() if job[2]]
        jump, step, used = equal_steps(
            left, self.message_s(nbytes), work, compute[0][0] if compute else None,
            alone=self.rate(True, False, True), both=self.rate(True, True, True),
            idle=self.rate(False, True, True))
        if not jump:
            return 0
        if compute:
            compute[0][0] -= jump * used
        self.now += jump * step
        self.sent[0] += jump * nbytes
        self.received[0] += jump * nbytes
        return jump

    def _post(self, k: int, message, nbytes: float, partners: tuple, kind: str) -> None:
        """Process ``k``'s rank posts its side of ``message`` (a send, a receive, or both: an
        exchange, whose two messages start together and cost the same) with ranks of the
        ``partners`` classes (one each: its rank's partner is of one of them, and of each
        where it has several).  Each pair is delivered once both have posted; a class goes on
        when all its pairs are, which must be at one instant, else its ranks would part."""
        c = self.cls[k]
        inside = bool(self.inside) and message[1:] in self.inside
        nic = self.inter and not inside
        if kind != "recv":
            self.sent[c] += nbytes
            self.nic_sent[c] += nbytes if nic else 0.0
        if kind != "send":
            self.received[c] += nbytes
            self.nic_received[c] += nbytes if nic else 0.0
        if kind == "ring":
            # A chunk to the right and one from the left (``partners``: the classes of a
            # rank's right and left, as its ranks have them): each pair delivered once both
            # have posted; a rank goes on when its two have arrived, every rank of the class
            # at one instant.
            rights = {q for q, _ in partners}
            lefts = {q for _, q in partners}
            self.posts[(message, c)] = [k, len(rights) + len(lefts), {}, partners]
            pairs = ({(c, q) for q in rights if (message, q) in self.posts}
                     | {(q, c) for q in lefts if (message, q) in self.posts})
            for a, b in sorted(pairs):
                t = self.delivery(nbytes, a, b, inside)
                self._delivered((message, a), t, ("out", b))
                self._delivered((message, b), t, ("in", a))
            return
        self.posts[(message, c)] = [k, len(partners), {}]
        for q in partners:
            if (message, q) in self.posts:
                t = self.delivery(nbytes, c, q, inside)
                self._delivered((message, c), t)
                self._delivered((message, q), t)

    def _delivered(self, key, t: float, side=None) -> None:
        """One of a post's pairs delivered at ``t``: every pair of a post at one instant, for
        the class's ranks to act together; a ring's (``side``: out to, or in from, a class)
        at one instant for each of its ranks' (right, left) classes."""
        post = self.posts[key]
        seen = post[2].get(side)
        if seen is not None and abs(t - seen) > 1e-12 * max(1.0, abs(t)):
            raise NotExact("the ranks of a class receive at different instants")
        post[1] -= 1
        post[2][side] = t
        if post[1] == 0:
            end = t
            if len(post) == 4:
                ends = [max(post[2][("out", r)], post[2][("in", q)]) for r, q in post[3]]
                end = max(ends)
                if end - min(ends) > 1e-12 * max(1.0, abs(end)):
                    raise NotExact("the ranks of a class receive at different instants")
            heapq.heappush(self.timers, (end, self.order, post[0]))
            self.order += 1

    # -- processes ---------------------------------------------------------------------------

    def start(self, process, c: int = 0) -> int:
        self.processes.append(process)
        self.cls.append(c)
        self.ready.append(len(self.processes) - 1)
        return len(self.processes) - 1

    def signal(self, key) -> None:
        self.fired.add(key)
        k = self.waiting.pop(key, None)
        if k is not None:
            self.ready.append(k)

    def _resume(self, k: int) -> None:
        process = self.processes[k]
        while True:
            try:
                action = next(process)
            except StopIteration:
                self.signal(("end", k))
                return
            kind = action[0]
            if kind == "cpu":
                _, work, threads, compute = action
                if work <= 0:
                    self.ready.append(k)
                    return
                self._advance(self.now)
                self.jobs[k] = [work, threads, compute, self.now]
                self._running(k, self.jobs[k], 1)
                return
            if kind == "wait":
                if action[1] > 0:
                    heapq.heappush(self.timers, (self.now + action[1], self.order, k))
                    self.order += 1
                    return
                continue
            if kind == "until":
                heapq.heappush(self.timers, (action[1], self.order, k))
                self.order += 1
                return
            if kind in ("send", "recv", "both", "ring"):
                self._post(k, action[1], action[2], action[3], kind)
                return
            key = action[1]                       # "for": a signal or a process's end
            if key in self.fired:
                continue
            self.waiting[key] = k
            return

    def run(self) -> float:
        while True:
            while self.ready:
                self._resume(self.ready.popleft())
            due_job = due_cpus = None
            if self.jobs and self.one_cpu:      # (every job at one speed: the least work first)
                due_job = self.now + min(job[0] for job in self.jobs.values()) / self._rate_of(0)
                due_cpus = (0,)
            elif self.jobs:
                rates = self._rates()
                due = {}
                for k, job in self.jobs.items():
                    cpu = self.cpu[self.cls[k]]
                    t = self.now + job[0] / rates[cpu]
                    due[cpu] = min(due.get(cpu, t), t)
                due_job = min(due.values())
                due_cpus = {cpu for cpu, t in due.items() if t == due_job}
            due_timer = self.timers[0][0] if self.timers else None
            if due_job is None and due_timer is None:
                return self.now
            if due_timer is not None and (due_job is None or due_timer <= due_job):
                self._advance(due_timer)
                while self.timers and self.timers[0][0] <= self.now:
                    self.ready.append(heapq.heappop(self.timers)[2])
                continue
            self._advance(due_job)
            for cpu in sorted(due_cpus):
                on_cpu = self.jobs if self.one_cpu else \
                    {k: job for k, job in self.jobs.items() if self.cpu[self.cls[k]] == cpu}
                for k in finished(on_cpu):
                    job = self.jobs.pop(k)
                    self._running(k, job, -1)
                    if job[2]:
                        self.compute_s[self.cls[k]] += self.now - job[3]
                    self.ready.append(k)


def iteration(spec: RunSpec, costs: CostInputs, *, buckets: bool, broadcast_end):
    """One iteration on a lockstep world, class by class: (each rank's class, and per class
    when its ranks' step ends, their compute seconds, their communication seconds, the bytes
    each sent and received in the all-reduces).  One class but where ``by_class``
    (``place_classes``).
    ``buckets``: DDP's buckets overlapping backward, else every tensor all-reduced after
    backward (ring).  ``broadcast_end(begin)``: when DDP's buffer broadcast ends if the ranks
    start it at ``begin`` (None: there is none)."""
    from commsim.strategies import get_strategy

    c = spec.cluster
    p = spec.world_size
    g = spec.group_size or p
    algorithm = get_strategy(spec.strategy).algorithm(spec) or "ring"
    if algorithm == "hierarchical" and c.ranks_per_host == 1:
        algorithm = "ring"
    uneven = bool(spec.stragglers or c.slow_links_Bps)
    classes = by_class(algorithm, g, p, uneven)
    ranks_class = [0] * p
    weights = None
    factor = [1.0]                                # per class: its ranks' compute speed
    if classes:
        speed = np.array([spec.stragglers.get(r, 1.0) for r in range(p)])
        # When each rank is ready for its first collectives, in generic compute seconds
        # (forward, then its share of backward): DDP's buckets, or every tensor after
        # backward, the second starting when the first ends.  More would part no more
        # classes but where a later bucket's readiness does; ``_Lockstep`` checks it.
        fractions = ([b.ready_fraction if spec.overlap else 1.0 for b in costs.buckets][:4]
                     if buckets else [1.0, 1.0])
        ready = [speed * (0.5309 + fraction * 0.7717) for fraction in fractions]
        # On one CPU for all, a class's every rank shares it; else each rank has its own.
        shared = c.shared_cpu_cores is not None or c.hosts == 1
        # Per rank, its host's link (the slower end of a message sets its bandwidth).
        link = np.array([c.bandwidth_of(c.host_of(r)) for r in range(p)])
        rounds = tile_rounds(schedule_rounds(algorithm, g), g, p)
        ranks_class, schedule = place_classes(
            p, rounds, ready, speed if spec.stragglers else None, own_cpus=not shared,
            link=c.nic_bandwidth_Bps / link if c.slow_links_Bps else None)
        # The rounds whose every message stays inside a host (two ranks a host: a tree's
        # mask 1); a round that mixes both would part a class's messages.
        inside = set()
        for key, code, partner, _, _ in rounds:
            at = np.flatnonzero(code)
            same = at // c.ranks_per_host == partner[at] // c.ranks_per_host
            if c.hosts > 1 and same.all():
                inside.add(key)
            elif c.hosts > 1 and same.any():
                raise NotExact("a round's messages both stay inside hosts and leave them")
        if len(schedule) > _MOST_CLASSES + 8 * p.bit_length():
            raise NotExact(f"the ranks part into {len(schedule)} classes")
        factor = [0.0] * len(schedule)
        bandwidth = [0.0] * len(schedule)
        for r, k in enumerate(ranks_class):
            factor[k] = float(speed[r])
            bandwidth[k] = float(link[r])
        size = Counter(ranks_class)
        weights = [size[k] if shared else 1 for k in range(len(schedule))]
        sim = _Lockstep(spec, costs, weights, own_cpus=not shared, bandwidth=bandwidth,
                        inside=inside)
    else:
        sim = _Lockstep(spec, costs)
    fp16 = spec.compression == "fp16"
    gamma = costs.gamma_s_per_B
    overhead = costs.overhead("all_reduce")
    threads = costs.threads_per_rank

    def class_steps(k, nbytes, serial):
        """The all-reduce's messages and reductions for a rank of class k."""
        for kind, key, share, reduce, partners in schedule[k]:
            yield (kind, (serial, *key), nbytes * share, partners)
            if reduce:
                yield ("cpu", nbytes * share * gamma, 1.0, False)

    def allreduce(k, serial, nbytes, average=True):
        if g <= 1:
            return
        sim.enter(k)
        if overhead > 0:
            yield ("wait", overhead)
        if classes:
            yield from class_steps(k, nbytes, serial)
        else:
            for count, size, work in steps_of(algorithm, nbytes, g, gamma):
                yield from sim.steps(count, size, work)
        if average:
            yield ("cpu", nbytes * gamma, 1.0, False)
        sim.exit(k)

    def communicate(k):
        for i, bucket in enumerate(costs.buckets):
            yield ("for", ("ready", k, i))
            if fp16 and g > 1:
                sim.enter(k)
                yield ("cpu", bucket.bytes * gamma, 1.0, False)
                yield from allreduce(k, i, bucket.bytes / 2, average=False)
                yield ("cpu", bucket.bytes * gamma, 1.0, False)
                sim.exit(k)
            else:
                yield from allreduce(k, i, bucket.bytes)

    def backward_by_bucket(k):
        talker = sim.start(communicate(k), k)
        done = 0.0
        for i, bucket in enumerate(costs.buckets):
            if spec.overlap:
                segment = (bucket.ready_fraction - done) * costs.backward_s
                if segment > 0:
                    yield ("cpu", segment * factor[k], threads, True)
                done = max(done, bucket.ready_fraction)
                sim.signal(("ready", k, i))
        if done < 1.0:
            yield ("cpu", (1.0 - done) * costs.backward_s * factor[k], threads, True)
        if not spec.overlap:
            for i in range(len(costs.buckets)):
                sim.signal(("ready", k, i))
        yield ("for", ("end", talker))

    def compute(k):
        f = factor[k]
        for _ in range(spec.sync_every - 1):
            yield ("cpu", costs.forward_s * f, threads, True)
            yield ("cpu", costs.backward_s * f, threads, True)
        end = None
        if buckets:
            # One buffer broadcast for all: every class starts it at the same instant.
            if not ends:
                ends.append((sim.now, broadcast_end(sim.now)))
            elif ends[0][1] is not None and abs(ends[0][0] - sim.now) > 1e-12 * max(1.0,
                                                                                   sim.now):
                raise NotExact("the ranks of a schedule's classes start the buffer broadcast "
                               "apart")
            end = ends[0][1]
        if end is not None:
            sim.enter(k)
            yield ("until", end)
            sim.exit(k)
        yield ("cpu", costs.forward_s * f, threads, True)
        if buckets:
            yield from backward_by_bucket(k)
        else:
            yield ("cpu", costs.backward_s * f, threads, True)
            for i, nbytes in enumerate(costs.param_bytes):
                yield from allreduce(k, i, nbytes)
        yield ("cpu", costs.optimizer_s * f, threads, True)
        sim.finish[k] = sim.now

    ends = []
    for k in range(len(sim.weights)):
        sim.start(compute(k), k)
    sim.run()
    return (ranks_class, sim.finish, sim.compute_s, sim.comm_s, sim.sent, sim.received,
            sim.nic_sent, sim.nic_received)
