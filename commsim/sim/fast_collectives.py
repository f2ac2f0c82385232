"""The collectives of ``commsim.sim.collectives`` as recurrences over arrays of ranks.

The fast engine (``commsim.sim.fast``) times a collective for many ranks at once.  A *block* is a
2-D array of simulated ranks, one row per independent collective (a group of ``group_size``
ranks, or the whole world), its columns the ranks' positions in the collective's ``ranks``
tuple.  Every function takes when each rank of the block calls the collective and returns when
each one leaves it, as the DES would time them, by walking the algorithm's steps: a step is a
set of messages, each delivered at max(sender posts, receiver posts) + its cost (the DES's
rendezvous), then maybe a reduction on the rank's Gloo thread.  The steps of a tree or doubling
algorithm are a ``Schedule``, built once per run (a message's cost is linear in the bytes); the
ring's 2(p-1) steps are aggregated (``_ring_phase``, ``RingPaths``).

That walk is exact while no NIC direction carries two messages at once and no host's cores are
oversubscribed by a rank's own threads.  The first is checked on shared hosts: a ring must keep
one rank per host on each NIC direction (``Run.claim_nic``, else its steps are replayed as a
schedule, ``ring_schedule``); a schedule's messages are first timed without queues, and where
two would meet on a direction (``NicState.accept``) the run's collectives are replayed
through the NICs' FIFO queues, rank by rank (``Replay``, ``replay`` and
``commsim.sim.fast_queues``).  On a uniform cluster the doubling algorithms over a power
of two of alike hosts replay two of them (``Block.alike``).  The second is
``fast.unsupported``'s business, except for DDP's Gloo thread beside backward, which
``Run.gloo`` models with processor sharing.  With one rank per host the first always holds: a
rank has at most one send and one receive in flight, and only the parameter server's root
talks to many ranks at once (``fast`` handles that queue itself).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from commsim.costs import CostInputs, job_rate
from commsim.errors import UserError
from commsim.sim import collectives, fast_queues
from commsim.sim.fast_queues import NicState
from commsim.spec import RunSpec

# A step whose per-rank advances differ by less than this (relative to the clock) has reached
# the max-plus eigenvector; the rest differ only by float rounding.
_EIGEN_RTOL = 1e-12


class NotExact(UserError):
    """The run needs the DES after all (found while computing it): ``--engine auto`` then runs
    the DES, ``--engine fast`` reports why."""

    def __init__(self, reason: str, instead: str = "use --engine auto or des"):
        self.reason = reason
        super().__init__(f"--engine fast cannot model this run exactly: {reason}; {instead}")


def cpu_rate(cores: float, threads: float) -> float:
    """The DES's processor sharing: full speed while the threads fit, else cores / threads."""
    return job_rate(cores, threads)


def cpu_of(spec: RunSpec) -> tuple[float, int]:
    """(cores, ranks sharing them) of a rank's CPU: its host's, or the one pool of
    ``shared_cpu_cores``."""
    c = spec.cluster
    if c.shared_cpu_cores is not None:
        return c.shared_cpu_cores, spec.world_size
    return c.cores_per_host, c.ranks_per_host


def efficiency_at(points: tuple, busy):
    """The CPU efficiency curve at ``busy`` threads (an array): ``costs.clamped_piecewise``."""
    busy = np.asarray(busy, dtype=float)
    if not points:
        return np.ones_like(busy)
    x, y = (np.array(v, dtype=float) for v in zip(*points))
    return np.where(busy <= x[0], 1.0, np.interp(busy, x, y))


def sharing_rate(spec: RunSpec, busy: float) -> float:
    """A job's rate on its CPU while ``busy`` threads run there: processor sharing, times the
    efficiency curve (``engine.ProcessorSharingCPU._rate``)."""
    cores, _ = cpu_of(spec)
    return cpu_rate(cores, busy) * float(efficiency_at(spec.cluster.cpu_efficiency, busy))


def host_bandwidths(c) -> np.ndarray:
    bw = np.full(c.hosts, float(c.nic_bandwidth_Bps))
    for host, rate in c.slow_links_Bps.items():
        bw[host] = rate
    return bw


def intra_link(c) -> tuple[float, float]:
    """Latency and bandwidth of a message between two ranks of one host (as the DES takes them:
    unknown intra-host numbers fall back to the network's)."""
    bw = c.intra_host_bandwidth_Bps or c.nic_bandwidth_Bps
    lat = c.nic_latency_s if c.intra_host_latency_s is None else c.intra_host_latency_s
    return lat, bw


@dataclass(frozen=True)
class Block:
    """Independent collectives over the simulated ranks, one per row of ``idx``.

    idx:     (rows, width) indices into ``Run.ranks``, each row in the collective's rank order.
    size:    ranks in each collective: the width, except for one period of a ring that tiles a
             larger one (a homogeneous cluster: every host's ranks behave alike).
    stride:  for such a period, how far the ring's next rank is (1: the world ring; ranks per
             host: the ring of hosts' first ranks); None otherwise.
    alike:   the row is two hosts' ranks standing for a power of two of them (``size``) on
             alike hosts, for the doubling algorithms (``_folded``).
    partners: for a row of ranks standing for a power of two of them (``size``) by class, the
             doubling algorithms' partners: called once per schedule built, it gives a map
             from each step's distance (in the order the steps come) to each position's
             partner (``fast._wave_plan``).
    """
    idx: np.ndarray
    size: int
    stride: int | None = None
    alike: bool = False
    partners: Callable[[], Callable[[int], np.ndarray]] | None = None


class Run:
    """The simulated ranks of one fast-engine run: their links, Gloo threads, and the bytes they
    sent.  ``ranks`` are global rank numbers; every per-rank array here is indexed like them."""

    def __init__(self, spec: RunSpec, costs: CostInputs, ranks):
        c = spec.cluster
        self.spec, self.costs = spec, costs
        self.p = spec.world_size
        self.rph = c.ranks_per_host
        self.ranks = np.asarray(ranks, dtype=np.int64)
        self.factor = np.array([spec.stragglers.get(r, 1.0) for r in self.ranks.tolist()])
        self.bw = host_bandwidths(c)
        self.lat = c.nic_latency_s
        self.intra_lat, self.intra_bw = intra_link(c)
        threads, cores = costs.threads_per_rank, c.cores_per_host
        # Rates of compute alone, of one Gloo thread alone, of either while both run.
        self.a = cpu_rate(cores, threads)
        # A reduction's rate, with every rank sharing the CPU reducing at once (they do where
        # cores are short or shared: ``fast._in_step``).
        self.b = sharing_rate(spec, cpu_of(spec)[1])
        self.r = cpu_rate(cores, threads + 1)
        n = self.ranks.size
        self.sent, self.received = np.zeros(n), np.zeros(n)
        self.nic_sent, self.nic_received = np.zeros(n), np.zeros(n)
        # While DDP's reductions compete with backward: when each rank's backward would end if
        # nothing more competed (None: nothing competes).
        self.backward_end = None
        # Calibrated contention beside backward (``fast._sync``, one rank per host): while
        # ``contended``, the collective's ranks compute at ``speed`` of their rate and a message
        # with a computing end takes at least ``slowest_s_per_B`` a byte.
        self.contended = False
        self.speed = 1.0
        self.slowest_s_per_B = 0.0
        # Ranks sharing a host could queue on its NIC.  A ring's hosts each keep one rank per
        # direction, claimed here; a schedule's messages go through the hosts' NIC queues
        # (``nics``: when each direction is free, over the run's collectives).
        self.shared_nics = self.rph > 1 and c.hosts > 1
        self.nics = NicState(c.hosts) if self.shared_nics else None
        # Whether a schedule whose messages would queue raises ``Replay`` (the caller then
        # replays all its collectives at once, ``replay``) rather than replaying itself alone.
        self.replays = False
        # Whether ``replay`` runs the DES's processor sharing (``fast_queues.SharedCpus``):
        # where jobs share a CPU beyond the rates above.  Then its compute seconds and its
        # seconds inside collectives, per process.
        self.sharing = False
        # With ``sharing``, the most groups of jobs the compiled loop's CPU events may visit
        # before the replay stops (``fast._visits``: within --engine auto's seconds).
        self.visits = math.inf
        self.compute_s = self.comm_s = None
        # Where a replay notes when each message released its NIC directions (message ->
        # time; the checks of ``fast._wave_plan``); None: nowhere.  And a check of them
        # (``released_ok(released)``) that the replay makes before its order checks, whose
        # runs a failing check would waste.
        self.released = None
        self.released_ok = None
        # Whether its collective is replayed apart from the one before it over every rank
        # (``fast._tensor_by_tensor``): a request may not come before that one's last release
        # on its direction (``fast_queues.simulate``'s ``after_release``).
        self.after_release = False
        # Where a collective is replayed alone after another replayed alone (``fast._tensor_by_
        # tensor``): per rank, its place among those that start at one instant (the order in
        # which they left the last, as the DES resumes them), instead of rank order; and a list
        # to which the replay appends its processes as they pass a mark and end
        # (``fast_queues.simulate``'s ``sequence``), or None.
        self.start_order = None
        self.sequence = None
        # And per rank, when it left that one (``fast_queues.simulate``'s ``left``), or None.
        self.left = None
        # Whether ranks due at one instant on alike hosts resume in rank order in the DES, as
        # a uniform cluster's do from the start; not after an uneven collective
        # (``fast._replayed_then_alike``): a replay then checks that its times do not depend
        # on that order.
        self.order_known = True
        # Where it is not: whether a host's ranks due at one instant still resume in rank order
        # among themselves (``fast._wave_buckets``): then only the hosts' order is checked.
        self.hosts_in_order = False
        # Where some messages follow others (``fast_stand_ins``: a replay by class beside a
        # slow link), a list of their leaders (per message, -1: none), one array per
        # collective as its messages are made, and the three arrays that ``replay`` fills in
        # (``fast_queues.simulate``'s ``lead`` and ``grants``); None: no follower.
        self.lead = self.grants = None
        if self.shared_nics:
            self._tx_rank = np.full(c.hosts, -1, dtype=np.int64)
            self._rx_rank = np.full(c.hosts, -1, dtype=np.int64)
        self._schedules: dict = {}

    # -- links ---------------------------------------------------------------------------------

    def link(self, src, dst, collective: str):
        """(latency, seconds per byte, crosses hosts) of messages src -> dst (global ranks):
        a message of n bytes is delivered latency + n x seconds-per-byte after it starts and
        holds the NIC directions it crosses for the n x seconds-per-byte."""
        hs, hd = src // self.rph, dst // self.rph
        inter = hs != hd
        per_byte = np.where(inter, self.costs.wire(collective)
                            / np.minimum(self.bw[hs], self.bw[hd]), 1.0 / self.intra_bw)
        return np.where(inter, self.lat, self.intra_lat), per_byte, inter

    def claim_nic(self, src, dst) -> None:
        """Inter-host messages src -> dst (global ranks): each host must keep one sending and
        one receiving rank, whose messages then follow one another."""
        for table, ranks in ((self._tx_rank, src), (self._rx_rank, dst)):
            hosts = ranks // self.rph
            free = table[hosts] < 0
            table[hosts[free]] = ranks[free]
            if np.any(table[hosts] != ranks):
                raise NotExact("several ranks of one host use its NIC in one direction, and the "
                               "DES queues their messages in its event order")

    # -- CPU -----------------------------------------------------------------------------------

    def rates(self) -> tuple[float, float, float]:
        """(a, b, r) as ``beside_backward`` takes them: inside a contended collective, compute
        (and a reduction beside it) at the calibrated speed."""
        if self.contended:
            return self.a * self.speed, self.b, self.r * self.speed
        return self.a, self.b, self.r

    def gloo(self, idx, start, work, cols=None):
        """A reduction of ``work`` CPU-seconds (scalar or per rank) on the Gloo thread of ranks
        ``idx`` (columns ``cols`` of them, if given) from ``start``: when it ends."""
        if self.backward_end is None:
            return start + work / self.b
        if cols is not None:
            idx = _get(idx, cols)
        end, self.backward_end[idx], _ = beside_backward(start, self.backward_end[idx], work,
                                                         *self.rates())
        return end

    # -- schedules -----------------------------------------------------------------------------

    def schedule(self, name: str, blk: "Block", build) -> "Schedule":
        """The steps of collective ``name`` over ``blk`` (built once per run: they do not
        depend on the bytes)."""
        key = (name, id(blk.idx))
        if key not in self._schedules:
            sched = Schedule(self, blk.idx, blk.alike)
            build(sched)
            self._schedules[key] = sched
        return self._schedules[key]


def beside_backward(start, backward_end, work, a: float, b: float, r: float):
    """A Gloo reduction of ``work`` from ``start`` on a host whose backward would end at
    ``backward_end`` if nothing more competed (processor sharing of the host's cores).

    Returns (end, new backward_end, regime), regime 0: after backward (rate b), 1: wholly inside
    it (both at rate r; backward ends w/r - w/a later), 2: straddling its end.  Zero work ends
    at ``start`` and changes nothing (regime 0 or 1).
    """
    left = a * (backward_end - start)            # backward work still to do at ``start``
    over = left <= 0
    regime = np.where(over, 0, np.where(left >= work, 1, 2))
    # x, the reduction's work done beside backward (none, all of it, or what backward has
    # left), runs at r, the rest at b: one expression for the three regimes (fewer passes
    # over 65,536 ranks than choosing among them).
    x = np.clip(left, 0.0, work)
    end = start + x / r + (work - x) / b
    new_b = np.where(over, backward_end, start + x / r + (left - x) / a)
    return end, new_b, regime


# -- rings -------------------------------------------------------------------------------------

def ring_steps(run: Run, blk: Block, post, nbytes: float):
    """The 2(size-1) steps of Gloo's ring among each row of ``blk`` (``_ring_steps``): send one
    chunk right, receive one from the left, reduce it (reduce-scatter), then the same without
    reducing (all-gather)."""
    p = blk.size
    chunk = nbytes / p
    ranks = run.ranks[blk.idx]
    if blk.stride is None:
        right = np.roll(ranks, -1, axis=1)
    else:
        right = (ranks + blk.stride) % run.p
    lat, per_byte, inter = run.link(ranks, right, "all_reduce")
    edge_s = lat + chunk * per_byte
    if run.contended:          # (latency, busy) of each edge with a computing end
        edge_s = (edge_s, lat + chunk * np.where(inter, np.maximum(per_byte, run.slowest_s_per_B),
                                                 per_byte))
    if run.shared_nics and inter.any():
        try:
            run.claim_nic(ranks[inter], right[inter])
        except NotExact:
            if run.replays:
                raise Replay from None
            raise
    # One pricing of the ring's walks serves both phases (it depends on the edges alone).
    paths = (RingPaths(edge_s[0]), RingPaths(edge_s[1])) if run.contended else \
        (RingPaths(edge_s),) * 2
    post = _ring_phase(run, blk.idx, post, p - 1, edge_s, chunk * run.costs.gamma_s_per_B,
                       paths)
    post = _ring_phase(run, blk.idx, post, p - 1, edge_s, 0.0, paths)
    moved = 2 * (p - 1) * chunk
    run.sent[blk.idx] += moved
    run.received[blk.idx] += moved
    run.nic_sent[blk.idx] += np.where(inter, moved, 0.0)
    run.nic_received[blk.idx] += np.where(np.roll(inter, 1, axis=1), moved, 0.0)
    return post


def _ring_phase(run: Run, idx, post, steps: int, edge_s, work: float, paths: tuple):
    """``steps`` ring steps (send right, receive left, then reduce ``work``) from post times
    ``post`` (rows: independent rings).  ``paths``: ``RingPaths`` of the edges, and of their
    costs with a computing end (``edge_s`` a pair where contended).  Returns the post times
    of the step after.

    Step by step: D_i = max(R_i, R_i+1) + c_i, E_i = max(D_i, D_i-1), R_i' = reduce(E_i).  Once
    one step moves every rank of a row by the same λ the row is a max-plus eigenvector and the
    remaining steps are one addition (while DDP's regimes hold).  Uncontended, the rest of the
    phase is ``ring_paths`` where that is cheaper than stepping.
    """
    # Contended edges cost more while an end computes: backward's end matters even without
    # reductions to compete with it.
    contended = isinstance(edge_s, tuple)
    if contended:
        edge_s, edge_busy_s = edge_s
    competing = run.backward_end is not None and (work > 0 or contended)
    B = run.backward_end[idx] if competing else None
    paths, inside_paths = paths
    a, b, r = run.rates()
    k = 0
    prev_regime = None
    while k < steps:
        if B is not None and np.all(B <= post):
            # Every rank's backward is over by its own next post (so by every later step's
            # start, and by both ends of every later message): plain max-plus from here.
            run.backward_end[idx] = B
            B = None
        if B is None:
            g = work / b if work > 0 else 0.0
            if paths.cheaper_than_stepping(steps - k):
                return paths.after(post, steps - k) + (steps - k) * g
        else:
            # Every backward going on past the last post of the next ``inside`` steps (a post
            # gains at most the dearest edge and a reduction a step): every step reduces
            # beside backward (regime 1, at r, backward growing by work/r - work/a) and
            # every edge has computing ends, so the ring is plain max-plus on those edges.
            g = work / r if work > 0 else 0.0
            bound = float(inside_paths.edge_s.max()) + g
            inside = int((float(B.min()) - float(post.max()) - work / a) // bound) - 1 \
                if bound > 0 else 0
            inside = min(inside, steps - k)
            if inside > 1 and inside_paths.cheaper_than_stepping(inside):
                post = inside_paths.after(post, inside) + inside * g
                B = B + inside * (work / r - work / a)
                k += inside
                prev_regime = None
                continue
        match = np.maximum(post, np.roll(post, -1, axis=1))
        busy = None
        if contended and B is not None:
            busy = (B > match) | (np.roll(B, -1, axis=1) > match)
            sent = match + np.where(busy, edge_busy_s, edge_s)
        else:
            sent = match + edge_s
        done = np.maximum(sent, np.roll(sent, 1, axis=1))
        steady = True
        if B is not None:
            nxt, B, regime = beside_backward(done, B, work, a, b, r)
            if busy is not None:
                # An edge keeps its cost over a jump only while its computing ends go on
                # computing through it (regime 1, held by the jump's slack) and the others
                # have stopped.
                inside = regime == 1
                steady = np.array_equal(busy, inside | np.roll(inside, -1, axis=1))
        else:
            nxt, regime = done + g, None
        k += 1
        advance = nxt - post
        lam = advance.max(axis=1, keepdims=True)
        eigen = float((lam - advance.min(axis=1, keepdims=True)).max()) <= \
            _EIGEN_RTOL * max(1.0, float(np.abs(nxt).max()))
        same_regime = regime is None or (steady and prev_regime is not None
                                         and not np.any(regime == 2)
                                         and np.array_equal(regime, prev_regime))
        if k < steps and same_regime and eigen:
            # Every later step of the phase adds lam to its row, while the regimes hold.
            jump = steps - k
            if regime is not None and np.any(regime == 1):
                grow = work / r - work / a            # backward's delay per overlapped step
                inside = regime == 1
                slack = (B - nxt)[inside] / (np.broadcast_to(lam, nxt.shape)[inside] - grow)
                jump = min(jump, int(np.floor(slack.min())) - 1)
            if jump > 0:
                nxt = nxt + jump * lam
                if regime is not None:
                    B = np.where(regime == 1, B + jump * (work / r - work / a), B)
                k += jump
        post, prev_regime = nxt, regime
    if B is not None:
        run.backward_end[idx] = B
    return post


class RingPaths:
    """Post times after k uncontended ring steps without their reductions (add k·g), in
    one go, for rings (rows) with edges ``edge_s``.

    One step is a max-plus product: R_i' = max(R_i + ĉ_i, R_i+1 + c_i, R_i-1 + c_i-1), staying
    at i weighing ĉ_i = max(c_i-1, c_i) >= either edge of i.  So R_i after K steps is the best
    K-step walk j -> i: R_j + its edges + ĉ of every stay, and a best walk goes straight from j
    to the vertex m of greatest ĉ it visits, stays there, and goes straight on to i (anything
    else weighs no more).  Each row's walks are priced at a level L, one of its ĉ values:
    * m with ĉ_m = L (most vertices): the walk weighs K·L less a penalty L - c_e for each edge
      it crosses cheaper than L (loopback inside a host), a difference of prefix sums Q.  Such
      a walk can stay where it enters i's *strip* (the vertices around i with ĉ < L) instead,
      at no loss, so i's value is the best arrival at a vertex b within the strip's length,
      max_j R_j - |Q_j - Q_b| over j within K - |b - i| steps (one-sided window maxima), less
      |Q_b - Q_i|.  Every edge at L or dearer (one rank per host): the window max of R + K·L.
    * m with ĉ_m > L (beside a slower link) lies in a *run* of neighbours of equal ĉ.  A walk
      from or to outside the run does as well staying at the run's end on that side (the run's
      edges cost no more than a stay): one O(size) sweep per end, the best arrival within d
      steps (R_j + edges - d·ĉ, a running max over d), then the way out to every i.  A walk
      from and to inside the run does as well staying where it starts: priced along the run.
    * m with ĉ_m < L stays inside a strip; such walks weigh no more than leaving the strip to
      stay at L once K·(L - ĉ_m) covers the way out and back (``exact`` checks it; below that
      the ring steps).
    """

    def __init__(self, edge_s):
        self.edge_s = edge_s
        self.stay = np.maximum(edge_s, np.roll(edge_s, 1, axis=1))
        self._run_end = ((self.stay != np.roll(self.stay, 1, axis=1))
                         | (self.stay != np.roll(self.stay, -1, axis=1)))
        self.level, self.strip, self._dominated = self._price()
        self.special = np.nonzero((self.stay > self.level) & self._run_end)
        self.penalty = self.level - np.minimum(edge_s, self.level)
        self._edges = {}
        self._runs = None

    def _price(self):
        """Per row, the level L with the least work: few run ends above it (a sweep each),
        short strips below it (a window pass per vertex of the longest); a row all at one
        value takes it.  Returns L (a column), the longest strip per row and, per row,
        (L - the dearest stay below L) / (L - the cheapest edge): walks inside strips weigh
        no more than others once steps x that >= twice the strip."""
        rows, size = self.stay.shape
        cost = np.full(rows, np.inf)
        level, strip = np.zeros(rows), np.zeros(rows, dtype=np.int64)
        # Ascending: the dearer level wins a tie.  (Not np.unique: it imports numpy.ma, 12 ms
        # of every start-up; nor a set of the stays, 20 times slower than sorting them.)
        stays = np.sort(self.stay.ravel())
        for value in stays[np.r_[True, stays[1:] != stays[:-1]]].tolist():
            runs = _longest_runs(self.stay < value)
            ends = ((self.stay > value) & self._run_end).sum(axis=1)
            work = ends * 2 * size + (runs + 1) * size
            better = (runs < size) & (work <= cost)
            cost, level, strip = (np.where(better, work, cost), np.where(better, value, level),
                                  np.where(better, runs, strip))
        level = level[:, None]
        under = np.where(self.stay < level, self.stay, -np.inf).max(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            dominated = np.where(strip > 0, (level[:, 0] - under)
                                 / (level[:, 0] - self.edge_s.min(axis=1)), np.inf)
        return level, strip, dominated

    def exact(self, steps: int) -> bool:
        """Walks staying inside a strip weigh no more than the others after ``steps``."""
        strips = self.strip > 0
        return bool(np.all(steps * self._dominated[strips] >= 2 * self.strip[strips]))

    def cheaper_than_stepping(self, steps: int) -> bool:
        """Exact and cheaper: a sweep per run end costs O(steps + size), a window pass per
        strip vertex O(size + 2·steps); steps cost O(rows x size) each, and a ring settles
        into its eigenvector within about a ring's length of them (a straggler's delay or a
        slow link's lag crosses it), after which they are jumped."""
        if not self.exact(steps):
            return False
        rows, size = self.edge_s.shape
        passes = int(self.strip.max()) + 1 if self.penalty.any() else 0
        work = (self.special[0].size * (steps + size)
                + passes * 2 * rows * (size + 2 * steps))
        return work <= rows * size * min(steps, size)

    def after(self, post, steps: int):
        if self.penalty.any():
            out = self._priced(post, steps)
        else:                        # every edge at the level or dearer: the plain window
            out = window_max(post, steps) + steps * self.level
        for r, m in zip(*(x.tolist() for x in self.special)):
            out[r] = np.maximum(out[r], self._walks_via(post[r], r, m, steps))
        self._inside_runs(post, steps, out)
        return out

    def _priced(self, post, steps: int):
        """The best walks staying at the level, with penalties: on the ring unrolled to
        ``steps`` either side (lifted index x is vertex (x - steps) mod size)."""
        rows, size = post.shape
        ring = (np.arange(size + 2 * steps) - steps) % size
        R = post[:, ring]
        Q = np.zeros(R.shape)                  # Q[x]: penalties of the edges before x
        np.cumsum(self.penalty[:, ring[:-1]], axis=1, out=Q[:, 1:])
        plus, minus = R + Q, R - Q
        here = steps + np.arange(size)
        at_level = self.stay >= self.level
        best = np.full((rows, size), -np.inf)
        for t in range(int(self.strip.max()) + 1):
            width = steps - t + 1
            left, right = _sliding_max(plus, width), _sliding_max(minus, width)
            for b in (here - t, here + t):     # where the walk enters i's strip
                arrive = np.maximum(left[:, b - width + 1] - Q[:, b], right[:, b] + Q[:, b])
                value = arrive - np.abs(Q[:, here] - Q[:, b])
                best = np.maximum(best, np.where(at_level[:, ring[b]], value, -np.inf))
        return best + steps * self.level

    def _inside_runs(self, post, steps: int, out) -> None:
        """Walks from and to inside a run above the level with interior vertices, staying
        where they start: R_j + edges + (steps - |i - j|)·ĉ, two one-sided window maxima
        along the run."""
        if self._runs is None:
            self._runs = _equal_runs(self.stay, self.stay > self.level)
        for r, run in self._runs:
            n = run.size
            stay = self.stay[r, run[0]]
            along = np.concatenate(([0.0], np.cumsum(self.edge_s[r, run[:-1]])))
            k = np.arange(n) * stay
            width = min(steps, n - 1) + 1
            pad = np.full(width - 1, -np.inf)
            from_left = _sliding_max(np.concatenate((pad, post[r, run] - along + k))[None],
                                     width)[0]
            from_right = _sliding_max(np.concatenate((post[r, run] + along - k, pad))[None],
                                      width)[0]
            best = np.maximum(from_left + along - k, from_right - along + k) + steps * stay
            out[r, run] = np.maximum(out[r, run], best)

    def _walks_via(self, R, row: int, m: int, steps: int):
        """The best ``steps``-step walks on ring ``row`` that stay at its vertex m: into every
        vertex.  Indexed from m: d steps right of m is (m + d) mod size, d steps left
        (m - d) mod size; a row that is one period of a longer ring (steps >= size) wraps."""
        size = R.size
        stay = self.stay[row, m]
        key = (row, m, steps)
        if key not in self._edges:    # the same edges serve both phases of a ring
            c = self.edge_s[row]
            c = np.roll(c, -m)                                 # c[d]: edge m+d -- m+d+1
            right = _cycle(c, steps)
            left = _cycle(c[::-1], steps)                      # edges m-d-1 -- m-d
            d_stay = np.arange(steps + 1) * stay
            self._edges[key] = (np.concatenate(([0.0], np.cumsum(right))) - d_stay,
                                np.concatenate(([0.0], np.cumsum(left))) - d_stay, d_stay)
        right_c, left_c, d_stay = self._edges[key]     # edges to m±d, less d stays
        R = np.roll(R, -m)                              # R[d]: vertex m + d
        right_r = _cycle(R, steps + 1)
        left_r = _cycle(np.concatenate((R[:1], R[:0:-1])), steps + 1)    # vertex m - d
        # Best arrival at m within d moves (each move weighed against a stay), then the
        # steps - d left: arrive within them, move out d.
        arrive = right_r + right_c
        left_r += left_c
        np.maximum(arrive, left_r, out=arrive)
        np.maximum.accumulate(arrive, out=arrive)
        leave = arrive[::-1] + d_stay[-1]
        right_out = leave + right_c
        left_out = np.add(leave, left_c, out=leave)
        if steps < size:             # each vertex reached once per direction
            out = np.full(size, -np.inf)
            out[:steps + 1] = right_out
            tail = out[size - steps:]                  # d = steps .. 1 to the left
            np.maximum(tail, left_out[steps:0:-1], out=tail)
        else:                        # one period of a longer ring: fold the laps
            out = _fold(right_out, size)
            np.maximum(out, np.roll(_fold(left_out, size)[::-1], 1), out=out)
        return np.roll(out, m)


def _longest_runs(mask):
    """Per row, the longest run of True, around the ring (the row's size if all True)."""
    rows, size = mask.shape
    out = np.where(mask.all(axis=1), size, 0)
    r, c = np.nonzero(~mask)
    if r.size:
        first = np.r_[0, np.flatnonzero(r[1:] != r[:-1]) + 1]     # each row's first False
        last = np.r_[first[1:] - 1, r.size - 1]
        gaps = np.r_[np.diff(c), 0]                                 # to the next False ...
        gaps[last] = c[first] + size - c[last]                      # ... or around the row
        np.maximum.at(out, r, gaps - 1)
    return out


def _equal_runs(stay, above):
    """(row, vertices) of every run of 3 or more neighbours with ``above`` and equal ``stay``
    (around the ring): the runs with vertices inside."""
    rows, size = stay.shape
    runs = []
    for r in np.flatnonzero(above.any(axis=1)).tolist():
        p = np.flatnonzero(above[r])
        groups = np.split(p, np.flatnonzero((np.diff(p) != 1) | (np.diff(stay[r, p]) != 0)) + 1)
        if (len(groups) > 1 and groups[0][0] == 0 and groups[-1][-1] == size - 1
                and stay[r, 0] == stay[r, -1]):
            groups[0] = np.concatenate((groups.pop(), groups[0]))
        runs += [(r, g) for g in groups if g.size >= 3]
    return runs


def _sliding_max(x, width: int):
    """out[:, a] = max of x[:, a:a + width] for every a (van Herk / Gil-Werman: O(size))."""
    rows, n = x.shape
    blocks = -(-n // width)
    padded = np.full((rows, blocks * width), -np.inf)
    padded[:, :n] = x
    padded = padded.reshape(rows, blocks, width)
    ahead = np.maximum.accumulate(padded, axis=2).reshape(rows, -1)
    behind = np.maximum.accumulate(padded[:, :, ::-1], axis=2)[:, :, ::-1].reshape(rows, -1)
    count = n - width + 1
    return np.maximum(behind[:, :count], ahead[:, width - 1:width - 1 + count])


def _cycle(x, count: int):
    """The first ``count`` values of ``x`` repeated."""
    return x[:count] if count <= x.size else np.resize(x, count)


def _fold(x, size: int):
    """out[k] = max of x[d] over d = k mod size."""
    rows = -(-x.size // size)
    if rows == 1:
        return np.concatenate((x, np.full(size - x.size, -np.inf)))
    padded = np.concatenate((x, np.full(rows * size - x.size, -np.inf)))
    return padded.reshape(rows, size).max(axis=0)


def window_max(x, radius: int):
    """Per row of ``x``, the max over the circular window of ``radius`` on either side
    (van Herk / Gil-Werman: O(size) for any radius)."""
    rows, n = x.shape
    width = 2 * radius + 1
    if width >= n:
        return np.broadcast_to(x.max(axis=1, keepdims=True), x.shape).copy()
    ext = np.concatenate([x[:, n - radius:], x, x[:, :radius]], axis=1)
    blocks = -(-ext.shape[1] // width)
    pad = np.full((rows, blocks * width - ext.shape[1]), -np.inf)
    ext = np.concatenate([ext, pad], axis=1).reshape(rows, blocks, width)
    ahead = np.maximum.accumulate(ext, axis=2).reshape(rows, -1)
    behind = np.maximum.accumulate(ext[:, :, ::-1], axis=2)[:, :, ::-1].reshape(rows, -1)
    return np.maximum(behind[:, :n], ahead[:, width - 1:width - 1 + n])


def ring_allreduce(run: Run, blk: Block, t, nbytes: float, average: bool = True):
    """``collectives.ring_allreduce``: call overhead, the ring's steps, divide by p."""
    post = t + run.costs.overhead("all_reduce")
    post = ring_steps(run, blk, post, nbytes)
    return run.gloo(blk.idx, post, nbytes * run.costs.gamma_s_per_B) if average else post


# -- schedules of messages ------------------------------------------------------------------------

_SEND, _EXCHANGE, _GLOO, _SHIFT = range(4)


def _cols(positions):
    """Columns as a slice where they are evenly spaced (a view, no copy), else as an array."""
    positions = np.asarray(positions, dtype=np.int64)
    if positions.size == 1:
        return slice(int(positions[0]), int(positions[0]) + 1)
    step = np.diff(positions)
    if positions.size and step[0] > 0 and np.all(step == step[0]):
        return slice(int(positions[0]), int(positions[-1]) + 1, int(step[0]))
    return positions


def _get(T, cols):
    """T[:, cols] (np.take gathers faster than fancy indexing)."""
    return T[:, cols] if isinstance(cols, slice) else np.take(T, cols, axis=1)


class Schedule:
    """One collective's steps over a block, with each message's latency and seconds per byte
    (the bytes scale with the collective's size n) and each rank's bytes per n sent and
    received: built once, then ``run`` for every tensor.

    Steps (positions are columns of the block):
    * send(src, dst, mult, work): src[k] sends mult[k]·n bytes to dst[k]; both are done when it
      is delivered; then dst reduces work·n seconds on its Gloo thread;
    * exchange(cols, partner, mult, work): each position of ``cols`` sends mult·n bytes to and
      receives from ``cols[partner]`` (done when both are delivered), then reduces work·n;
    * shift(cols, right, mult, work, div): the same, sending to ``cols[right]`` and receiving
      from the position whose right it is (a ring step), of n / div in place of n: a ring's
      chunk is n / p bytes and its reduction (n / p)·gamma seconds, as the DES computes them
      ((1 / p)·n is a last bit apart where p is not a power of two);
    * gloo(cols, work): those positions reduce work·n.
    """

    def __init__(self, run: Run, idx, alike: bool = False):
        self.idx = idx
        self.alike = alike
        self._run = run
        self.steps: list[tuple] = []
        self._shape = None          # (``_shaped``'s, for the steps it was built from)
        self._flat = _cols(idx.reshape(-1))
        # Bytes per byte of the collective, per position.
        self.sent, self.received = np.zeros(idx.shape), np.zeros(idx.shape)
        self.nic_sent, self.nic_received = np.zeros(idx.shape), np.zeros(idx.shape)

    def _messages(self, src, dst, mult, collective, stride=None, div: float = 1.0):
        """``stride``: the block is one period of a ring that tiles a larger one (``Block``):
        a message goes to the rank ``stride`` on, which the period's ``dst`` stands for.
        ``div``: the step's bytes are mult·(n / div)."""
        run = self._run
        gs, gd = run.ranks[self.idx[:, src]], run.ranks[self.idx[:, dst]]
        if stride is not None:
            gd = (gs + stride) % run.p
        lat, per_byte, inter = run.link(gs, gd, collective)
        mult = np.broadcast_to(np.asarray(mult, dtype=float), gs.shape[1:])
        per_n = mult / div                          # (bytes per byte of the collective)
        self.sent[:, src] += per_n
        self.received[:, dst] += per_n
        self.nic_sent[:, src] += np.where(inter, per_n, 0.0)
        self.nic_received[:, dst] += np.where(inter, per_n, 0.0)
        ends = (gs[inter], gd[inter]) if inter.any() else None
        # Uniform links (one class of ranks) are scalars: most steps of a uniform cluster.
        if lat.min() == lat.max() and per_byte.min() == per_byte.max():
            lat, per_byte = float(lat.flat[0]), float(per_byte.flat[0])
        return lat, per_byte, (inter, ends), mult

    def send(self, src, dst, mult=1.0, work: float = 0.0, collective: str = "all_reduce"):
        lat, per_byte, crossing, mult = self._messages(src, dst, mult, collective)
        self.steps.append((_SEND, _cols(src), _cols(dst), lat, per_byte, crossing, mult, work,
                           1.0))

    def exchange(self, cols, partner, mult=1.0, work: float = 0.0):
        lat, per_byte, crossing, mult = self._messages(cols, cols[partner], mult, "all_reduce")
        self.steps.append((_EXCHANGE, _cols(cols), partner, lat, per_byte, crossing, mult,
                           work, 1.0))

    def shift(self, cols, right, mult=1.0, work: float = 0.0, stride=None, div: float = 1.0):
        lat, per_byte, crossing, mult = self._messages(cols, cols[right], mult, "all_reduce",
                                                       stride, div)
        self.steps.append((_SHIFT, _cols(cols), right, lat, per_byte, crossing, mult, work,
                           float(div)))

    def gloo(self, cols, work: float):
        self.steps.append((_GLOO, _cols(cols), None, 0.0, 0.0, None, None, work, 1.0))

    def run(self, T, nbytes: float):
        """The steps from post times ``T`` (rows x columns of the block) for a collective of
        ``nbytes``: when each position is done.

        Without queues first: a message starts when both ends have posted.  On shared hosts
        the run's NIC queues must agree (``NicState.accept``: no message met another on a
        direction); where they do not, the collective is replayed through them
        (``fast_queues.simulate``), as soon as one step's messages meet (the steps after it
        are not timed: at 65,536 ranks a straggler's all-reduce meets at its first step
        between hosts)."""
        run, idx = self._run, self.idx
        T = np.array(T, dtype=float)
        if run.nics is not None:
            start = T.copy()
            backward_end = None if run.backward_end is None else run.backward_end.copy()
        crossed = []
        queued = False
        for kind, src, dst, lat, per_byte, crossing, mult, work, div in self.steps:
            if kind == _GLOO:
                T[:, src] = run.gloo(idx, _get(T, src), work * nbytes, src)
                continue
            n = nbytes / div
            size = mult * n
            if kind == _SEND:
                begin = np.maximum(_get(T, src), _get(T, dst))
            else:
                begin = _get(T, src)
                begin = np.maximum(begin, np.take(begin, dst, axis=1))
            got = begin + (lat + size * per_byte)
            if kind == _SHIFT:         # done when its own and its left's message are delivered
                got = np.maximum(got, np.take(got, np.argsort(dst), axis=1))
            inter, ends = crossing
            if run.nics is not None and ends is not None:
                busy = np.broadcast_to(size * per_byte, begin.shape)[inter]
                crossed.append((ends[0] // run.rph, ends[1] // run.rph, begin[inter],
                                begin[inter] + busy))
                if NicState.meet(*crossed[-1]):
                    queued = True      # (the rest cannot undo it)
                    break
            # An exchange's two messages start together (max of the partners' posts) and cost
            # the same (one link, both ways): both are delivered at ``got``, the all_of too.
            done = run.gloo(idx, got, work * n, dst if kind == _SEND else src) \
                if work else got
            if kind == _SEND:
                T[:, src] = got
                T[:, dst] = done
            else:
                T[:, src] = done
        if queued or crossed and not run.nics.accept(*(np.concatenate(x) for x in zip(*crossed))):
            if run.replays:
                raise Replay
            # Alone: the first collective on these NICs (DDP's buffer broadcast), every rank
            # leaving when it is done.
            run.backward_end = backward_end
            messages = fast_queues.Messages()
            programs = self.added(nbytes, messages)
            flat = idx.ravel()
            whole = [[] for _ in range(run.ranks.size)]
            # Each rank then leaves the collective, which sets its host's CPU timer again in
            # the DES (``ProcessorSharingCPU.communicating``): of two hosts' jobs that end at
            # one instant, those of the host whose timer was set last come last (without it,
            # a tensor replayed alone left two hosts' ranks in the other order: seven hosts of
            # three ranks at 10 Gbit/s without latency, the next tensor 1.3e-6 off).  (Runs
            # that replay the DES's processor sharing, ``Run.sharing``, raise ``Replay`` above
            # rather than come here, where the enter to match would be missing.)
            leave = [] if run.sharing else [(fast_queues.EXIT,)]
            for k, program in zip(flat.tolist(), programs):
                whole[k] = program + leave
            finish, _ = replay(run, messages, whole, start.ravel(), flat,
                               order_known=(self.alike or uniform_cluster(run.spec))
                               and run.order_known or run.start_order is not None,
                               hosts_in_order=run.hosts_in_order,
                               left=None if run.left is None else run.left[flat])
            T = finish[idx]
        self.account(nbytes)
        return T

    def shed(self) -> None:
        """Lets go of the table ``added`` builds from (built again where it is needed again):
        a replay of every rank holds it twice over otherwise, beside its own."""
        self._shape = None

    def account(self, nbytes: float) -> None:
        """The bytes one collective of ``nbytes`` sends and receives, on the run's ranks."""
        run = self._run
        run.sent[self._flat] += nbytes * self.sent.reshape(-1)
        run.received[self._flat] += nbytes * self.received.reshape(-1)
        run.nic_sent[self._flat] += nbytes * self.nic_sent.reshape(-1)
        run.nic_received[self._flat] += nbytes * self.nic_received.reshape(-1)

    def replayed(self, nbytes: float, messages, phases=None, rows: bool = False):
        """``added``, and the collective's bytes counted: one more collective of ``nbytes``
        for a replay of several."""
        programs = self.added(nbytes, messages, phases, rows)
        self.account(nbytes)
        return programs

    def added(self, nbytes: float, messages, phases=None, rows: bool = True) -> list:
        """The steps for a collective of ``nbytes`` as ``fast_queues`` programs: its messages
        added to ``messages`` (``fast_queues.Messages``: src, dst, latency, busy, tx host, rx
        host, bytes; src and dst as indices into the run's ranks, hosts -1 inside a host);
        per position of the block (row-major), its actions (sends, receives, exchanges,
        reductions): as tuples, or with ``rows`` one ROWS action on its actions' table, which
        ``messages`` keeps.  ``phases``: a list to which each step is appended, ("messages",
        first id, end id) or ("work", seconds per rank of the run) (``fast_classes.classes``).
        Its bytes are not counted (``replayed`` counts them)."""
        table, bounds, mine = self._table(nbytes, messages.count, phases)
        messages.add(mine)
        if not rows:
            return fast_queues.split_actions(table, bounds)
        first = messages.add_rows(table)
        lo, hi = (first + bounds[:-1]).tolist(), (first + bounds[1:]).tolist()
        return [[(fast_queues.ROWS, a, b)] if a < b else [] for a, b in zip(lo, hi)]

    def _table(self, nbytes: float, first: int, phases):
        """``added``'s actions as a table (``fast_queues.ROW`` records), position by
        position, each position's rows in the order it takes them; where each position's
        rows begin (and the end); its messages.  From ``_shape`` (built once): the message
        numbers offset by ``first``, the seconds and bytes scaled by ``nbytes``, in the
        arithmetic the steps' own would take (work·n; mult·n, then times seconds a byte; n / div
        in place of n for a step with a divisor)."""
        shape = self._shape if self._shape and self._shape[0] == len(self.steps) \
            else self._shaped()
        _, kinds, a, b, work_per_B, bounds, columns, steps, divs = shape
        if first + len(columns[0]) >= 2 ** 31:          # (``fast_queues.ROW``'s a)
            raise NotExact("a replay of more than 2^31 messages")
        table = np.empty(kinds.size, dtype=fast_queues.ROW)
        table["kind"], table["a"], table["b"] = kinds, a, b
        if first:       # (message numbers: all but a reduction's a, an exchange's b)
            for name, where in (("a", kinds != fast_queues.GLOO),
                                ("b", kinds == fast_queues.EXCHANGE)):
                np.add(table[name], first, out=table[name], where=where)
        # (a reduction's seconds, in the place of the second integer it has not; a ring
        # step's of its chunk, n / div)
        row_div, message_div = divs
        n = nbytes if row_div is None else nbytes / row_div
        np.multiply(work_per_B, n, out=table["w"], where=kinds == fast_queues.GLOO)
        src, dst, lat, mult, per_byte, hs, hd = columns
        size = mult * (nbytes if message_div is None else nbytes / message_div)
        if phases is not None:
            for what, lo, hi, at, seconds, div in steps:
                if what == "messages":
                    phases.append(("messages", first + lo, first + hi))
                if at is not None:
                    spent = np.zeros(self._run.ranks.size)
                    spent[at] = seconds * (nbytes / div)
                    phases.append(("work", spent))
        return table, bounds, [src, dst, lat, size * per_byte, hs, hd, size]

    def _shaped(self) -> tuple:
        """``_table``'s table for any size, built once: per row (by position, in the order
        each takes them) its kind, its two integers before the message numbers' offset, its
        work per byte (``fast_queues.ROW``'s columns, compact); where each position's rows
        begin; the messages' columns (src, dst, latency, bytes per byte of the collective,
        seconds a byte, tx and rx hosts); per step, its phase (``added``'s ``phases``: its
        messages' numbers, the ranks that reduce and their work per byte, its divisor); where
        a step has a divisor (a ring's), each row's and message's (else None).

        Per step, its actions in the order a position takes them: a send's sender sends,
        then its receiver receives and reduces, message by message; in an exchange (or a
        ring shift) each position sends and receives, then reduces.  A stable sort by
        position keeps that order within each position."""
        run, idx = self._run, self.idx
        rows, width = idx.shape
        flat = np.arange(rows * width).reshape(rows, width)
        # Each step's rows go straight into the whole table's columns, compact (int8 kinds,
        # positions and message numbers in 32 bits where they fit): at 65,536 ranks a
        # bucket's table is millions of rows, and its copies were most of a replay's memory.
        total = sent = 0
        for kind, src, dst, *_, work, _ in self.steps:
            count = rows * np.arange(width)[src].size
            total += count * (1 if kind == _GLOO else (2 if kind == _SEND else 1) + bool(work))
            sent += 0 if kind == _GLOO else count
        index = np.int32 if max(total, sent, rows * width) < 2 ** 31 else np.int64
        at = np.empty(total, dtype=index)
        kinds = np.empty(total, dtype=np.int8)
        a, b = np.zeros(total, dtype=index), np.zeros(total, dtype=index)
        work_per_B = np.zeros(total)
        # Each row's and message's n / div, where a step has a divisor (a ring's): kept only
        # then, a column as long as the others.
        divided = any(step[-1] != 1.0 for step in self.steps)
        row_div = np.ones(total) if divided else None
        messages = []
        steps = []
        count = row = 0
        for kind, src, dst, lat, per_byte, crossing, mult, work, div in self.steps:
            cols = np.arange(width)[src]
            if kind == _GLOO:
                where = slice(row, row + rows * cols.size)
                at[where] = flat[:, cols].ravel()
                kinds[where] = fast_queues.GLOO
                work_per_B[where] = work
                row = where.stop
                steps.append(("work", 0, 0, idx[:, cols], work, div))
                continue
            to = np.arange(width)[dst] if kind == _SEND else cols[dst]
            s, d = flat[:, cols], flat[:, to]
            inter = crossing[0]
            hs = np.where(inter, run.ranks[idx[:, cols]] // run.rph, -1)
            hd = np.where(inter, run.ranks[idx[:, to]] // run.rph, -1)
            ids = count + np.arange(s.size)
            messages.append((idx[:, cols], idx[:, to], np.broadcast_to(lat, s.shape),
                             np.broadcast_to(mult, s.shape), np.broadcast_to(per_byte, s.shape),
                             hs, hd) + ((np.broadcast_to(div, s.shape),) if divided else ()))
            steps.append(("messages", count, count + s.size,
                          (idx[:, to] if kind == _SEND else idx[:, cols]) if work else None,
                          work, div))
            count += s.size
            # Interleaved, message by message, its actions in turn: a send's sender sends,
            # then its receiver receives (and reduces); an exchange's (or a ring shift's)
            # position sends and receives the message back (its partner's, or its left's),
            # then reduces.
            if kind == _SEND:
                acts = [(s.ravel(), fast_queues.SEND, ids, 0),
                        (d.ravel(), fast_queues.RECV, ids, 0)]
                reduces = d.ravel()
            else:
                back = (ids.reshape(s.shape)[:, np.argsort(dst)] if kind == _SHIFT
                        else ids.reshape(s.shape)[:, dst]).ravel()
                acts = [(s.ravel(), fast_queues.EXCHANGE, ids, back)]
                reduces = s.ravel()
            if work:
                acts.append((reduces, fast_queues.GLOO, 0, 0))
            per = len(acts)
            where = slice(row, row + per * ids.size)
            for j, (position, action, first, second) in enumerate(acts):
                lane = slice(where.start + j, where.stop, per)
                at[lane], kinds[lane], a[lane], b[lane] = position, action, first, second
            if work:
                work_per_B[where.start + per - 1:where.stop:per] = work
                if divided:
                    row_div[where.start + per - 1:where.stop:per] = div
            row = where.stop
        columns = [np.concatenate([np.ravel(x[i]) for x in messages]).astype(dtype, copy=False)
                   if messages else np.zeros(0, dtype)
                   for i, dtype in enumerate((np.int64, np.int64, np.float64, np.float64,
                                              np.float64, np.int64, np.int64)
                                             + ((np.float64,) if divided else ()))]
        message_div = columns.pop() if divided else None
        # A stable sort by position keeps each position's rows in the order it takes them.
        bounds = np.zeros(rows * width + 1, dtype=np.int64)
        np.cumsum(np.bincount(at, minlength=rows * width), out=bounds[1:])
        order = np.argsort(at, kind="stable")
        del at
        kinds, a, b, work_per_B = (x[order] for x in (kinds, a, b, work_per_B))
        if divided:
            row_div = row_div[order]
        del order
        self._shape = (len(self.steps), kinds, a, b, work_per_B, bounds, columns, steps,
                       (row_div, message_div))
        return self._shape


# Random orders (besides the reverse) in which ``replay`` starts processes that start at one
# instant, to find times that depend on it.
_ORDERS = 3


def uniform_cluster(spec: RunSpec) -> bool:
    """No straggler and no slow link: every host alike."""
    return not spec.stragglers and not spec.cluster.slow_links_Bps


class Replay(Exception):
    """A schedule's messages would queue on a NIC, in a run whose collectives are replayed
    together (``Run.replays``)."""


def replay(run: Run, messages, programs, start, processes=None, *, pairs: int = 0,
           order_known: bool = True, hosts_in_order: bool = False, together: int = 0,
           left=None):
    """``fast_queues.simulate`` of ``programs`` (one per process: the run's ranks, or with
    ``pairs`` two per rank), with the run's links, Gloo threads, compute rate and NICs, from
    ``start`` (for ``processes``, indices into the programs; the others start when spawned):
    when each process ends, and its marks.

    Processes starting at one instant start in simpy's event order, which ``simulate`` takes
    to be rank order: so it is at the start of an iteration (simpy starts the ranks in rank
    order), and on a uniform cluster whose ranks did alike before; where the run gives the
    order (``Run.start_order``, the order a replay of the last collective left them in), in
    that order.  Where it may not be
    (``order_known`` false: a broadcast before, whose ranks leave in the order they got the
    buffers), the times must not depend on it.  The replay notes whether they could
    (``fast_queues._ties``: two events at one instant that descend from processes that may
    swap touch one resource); where they cannot, every order gives its answer.  Where they
    could, the processes starting at one instant are replayed in reverse order and in
    ``_ORDERS`` random orders too, and the run declined if any end or mark differs; with
    ``hosts_in_order`` (a host's ranks are known to start in rank order among themselves)
    only the hosts' places are reversed and shuffled.
    """
    rows = fast_queues.rows_of(messages)
    messages = fast_queues.columns_of(messages)
    if run.r < run.a and not run.sharing:
        raise NotExact("DDP's reductions would slow backward on a host whose ranks queue on "
                       "its NIC")
    count = len(programs)
    processes = np.arange(count) if processes is None else np.asarray(processes)
    first = np.full(count, np.inf)
    first[processes] = start
    if left is not None:                 # (``fast_queues.simulate``'s, per process)
        out = np.full(count, np.inf)
        out[processes] = left
        left = out.tolist()
    rank = np.arange(count) % run.ranks.size
    hosts = (run.ranks[rank] // run.rph).tolist()
    c = run.spec.cluster
    pool = c.shared_cpu_cores is not None

    lead = None
    if run.lead is not None:
        lead = np.concatenate(run.lead) if run.lead else np.zeros(0, dtype=np.int64)
        if lead.size != len(messages[0]):
            raise ValueError("one leader a message")

    def simulate(order, nics, released=None, sequence=None, ordered=None):
        if lead is not None:
            run.grants = tuple(np.full(lead.size, np.nan) for _ in range(3))
        cpus = None
        if run.sharing:
            # Each job's work left as the DES's successive progress leaves it (``per_job``),
            # a pool's too: the work done since the pool was last idle, less each job's share
            # of it when it came, differs from that in the last bits, and over a hundred ranks
            # on two cores such a difference reordered two near-simultaneous ends (DDP, fp16,
            # three ranks a host beside a slow link: 2e-6 off).  The cost (a pass over the
            # pool's jobs, or the compiled loop's groups of them, at each of its events) is
            # bounded: ``fast._within_reach`` and ``run.visits``.
            cpus = fast_queues.SharedCpus(
                [0] * count if pool else hosts, c.shared_cpu_cores if pool else c.cores_per_host,
                run.costs.threads_per_rank, c.cpu_efficiency, run.costs,
                multiplicity=run.p / run.ranks.size if pool else 1.0, per_job=True)
            cpus.visits = run.visits
        ends = fast_queues.simulate(first.tolist(), order, hosts, programs, messages, run.b,
                                    nics, pairs=pairs, compute_rate=run.a, together=together,
                                    cpus=cpus, released=released, sequence=sequence,
                                    after_release=run.after_release, left=left,
                                    owners=owners, ordered=ordered, rows=rows, lead=lead,
                                    grants=run.grants)
        if cpus is not None:
            run.compute_s = np.array([cpus.compute_s.get(k, 0.0) for k in range(count)])
            run.comm_s = np.array([cpus.comm_s.get(k, 0.0) for k in range(count)])
        return ends

    if run.nics is None:                 # one host: nothing crosses a NIC
        run.nics = NicState(run.spec.cluster.hosts)
    before = run.nics.copy()
    ranks = run.ranks[rank]
    order = ranks if run.start_order is None else run.start_order[rank]
    # (where the order is not known, the replay notes whether it could matter)
    owners = None if order_known else hosts if hosts_in_order else list(range(count))
    ordered = None if order_known else []
    finish, marks = simulate(order.tolist(), run.nics, run.released, run.sequence, ordered)
    if run.released_ok is not None and not run.released_ok(run.released):
        raise NotExact("the classes of a replay by class part")
    if not order_known and not ordered[0]:
        after = run.nics
        rng = np.random.default_rng(0)
        times = np.concatenate([finish, *marks])
        if hosts_in_order:
            host, local = ranks // run.rph, ranks % run.rph
            orders = [-host * run.rph + local,
                      *(rng.permutation(int(host.max()) + 1)[host] * run.rph + local
                        for _ in range(_ORDERS))]
        else:
            orders = [-ranks, *(rng.permutation(count) for _ in range(_ORDERS))]
        for order in orders:
            run.nics = before.copy()
            again, also = simulate(order.tolist(), run.nics)
            if not np.allclose(times, np.concatenate([again, *also]), rtol=1e-12, atol=0.0):
                raise NotExact(fast_queues.MEET)
        run.nics = after
    return np.array(finish), marks


# -- trees and recursive doubling ----------------------------------------------------------------

def _trees(first, places) -> np.ndarray:
    """Positions ``places`` of a tree counted from each of ``first`` (its position 0)."""
    return (np.asarray(first)[:, None] + places[None, :]).ravel()


def _binomial_reduce(sched: Schedule, width: int, work: float, first=(0,)) -> None:
    """``collectives.binomial_reduce`` along each row (over the ``width`` positions from each
    of ``first``): at distance m, position i + m sends to i (i a multiple of 2m), which
    reduces ``work``·n."""
    m = 1
    while m < width:
        dst = _trees(first, np.arange(0, width - m, 2 * m))
        sched.send(dst + m, dst, work=work)
        m <<= 1


def _binomial_broadcast(sched: Schedule, width: int, collective: str = "all_reduce",
                        share=None, first=(0,)) -> None:
    """``collectives.binomial_broadcast`` along each row (over the ``width`` positions from each
    of ``first``), from its position 0: at distance m (from the top down) position i sends to
    i + m (i a multiple of 2m).  ``share(m, dst)``: bytes per n of each message when they vary
    (a scatter's subtrees; one tree a row)."""
    m = 1 << max(0, (width - 1).bit_length() - 1) if width > 1 else 0
    while m >= 1:
        src = np.arange(0, width - m, 2 * m)
        mult = 1.0 if share is None else share(m, src + m)
        src = _trees(first, src)
        sched.send(src, src + m, mult, collective=collective)
        m >>= 1


def binomial_broadcast_schedule(run: Run, blk: "Block", collective: str) -> Schedule:
    """A binomial broadcast from position 0 of each row (DDP's buffers)."""
    width = blk.idx.shape[1]
    return run.schedule(f"broadcast {collective}", blk,
                        lambda s: _binomial_broadcast(s, width, collective))


def binomial_broadcast(run: Run, blk: "Block", T, nbytes: float, collective: str):
    """A binomial broadcast of ``nbytes`` from position 0 of each row, from ``T``."""
    return binomial_broadcast_schedule(run, blk, collective).run(T, nbytes)


def tree_schedule(run: Run, blk: Block, average: bool = True) -> Schedule:
    """``collectives.tree_allreduce`` after the overhead: binomial reduce to the first rank,
    binomial broadcast, divide."""
    width = blk.idx.shape[1]
    gamma = run.costs.gamma_s_per_B

    def build(s):
        _binomial_reduce(s, width, gamma)
        _binomial_broadcast(s, width)
        if average:
            s.gloo(np.arange(width), gamma)

    return run.schedule(f"tree {average}", blk, build)


def _folded(sched: Schedule, blk: Block, gamma: float, average: bool, power_of_two) -> None:
    """``collectives._folded_allreduce`` after the overhead: MPICH's fold of the first 2r
    positions onto the odd ones, ``power_of_two(sched, survivors, q, partner)`` among the q
    survivors (``partner(d)``: the survivor d away from each, as indices into survivors), the
    fold back, the divide.

    A block of two alike hosts (``Block.alike``) stands for a power of two of ranks over alike
    hosts: nothing folds, and a partner a host or more away (d >= ranks per host, which keeps
    the rank's place in its host) is the rank's twin on the other host, whose times equal
    those of the real partner by symmetry."""
    width = blk.idx.shape[1]
    if blk.partners is not None:
        power_of_two(sched, np.arange(width), blk.size, blk.partners())
    elif blk.alike:
        survivors, local = np.arange(width), width // 2
        power_of_two(sched, survivors, blk.size, lambda d: survivors ^ min(d, local))
    else:
        q = 1 << (width.bit_length() - 1)
        r = width - q
        even = np.arange(0, 2 * r, 2)
        if r:
            sched.send(even, even + 1, work=gamma)
        j = np.arange(q)
        power_of_two(sched, np.where(j < r, 2 * j + 1, j + r), q, lambda d: j ^ d)
        if r:
            sched.send(even + 1, even)
    if average:
        sched.gloo(np.arange(width), gamma)


def doubling_steps(algorithm: str, q: int, gamma: float) -> list:
    """The exchanges of a doubling all-reduce among q survivors (a power of two), in order:
    (distance to the partner, bytes sent per byte of the collective, reduction seconds per
    byte after it).  Recursive doubling: the whole buffer with the survivor 2^k away, and
    add, for k = 0, 1, ...; Rabenseifner: recursive halving (half the segment with the
    survivor q/2, q/4, ... away, and add), then recursive doubling of the segments."""
    if algorithm == "recursive_doubling":
        return [(1 << k, 1.0, gamma) for k in range(q.bit_length() - 1)]
    steps, seg, dist = [], 1.0, q // 2
    while dist >= 1:
        seg /= 2
        steps.append((dist, seg, seg * gamma))
        dist //= 2
    dist = 1
    while dist < q:
        steps.append((dist, seg, 0.0))
        seg *= 2
        dist *= 2
    return steps


def recursive_doubling_schedule(run: Run, blk: Block, average: bool = True) -> Schedule:
    """``collectives.recursive_doubling_allreduce`` after the overhead: exchange the whole
    buffer with the survivor 2^k away and add, for k = 0, 1, ..."""
    gamma = run.costs.gamma_s_per_B

    def doubling(sched, survivors, q, partner):
        for dist, mult, work in doubling_steps("recursive_doubling", q, gamma):
            sched.exchange(survivors, partner(dist), mult, work=work)

    return run.schedule(f"recursive_doubling {average}", blk,
                        lambda s: _folded(s, blk, gamma, average, doubling))


def rabenseifner_schedule(run: Run, blk: Block, average: bool = True) -> Schedule:
    """``collectives.rabenseifner_allreduce`` after the overhead: recursive halving (exchange
    and add halves of the segment with the survivor q/2, q/4, ... away), then recursive
    doubling of the segments."""
    gamma = run.costs.gamma_s_per_B

    def halving_doubling(sched, survivors, q, partner):
        for dist, mult, work in doubling_steps("rabenseifner", q, gamma):
            sched.exchange(survivors, partner(dist), mult, work=work)

    return run.schedule(f"rabenseifner {average}", blk,
                        lambda s: _folded(s, blk, gamma, average, halving_doubling))


def ring_schedule(run: Run, blk: Block, average: bool = True) -> Schedule:
    """``collectives.ring_allreduce`` after the overhead, step by step (for a replay: the ring
    is timed by ``ring_steps`` elsewhere): 2(size-1) shifts of a chunk to the right, the first
    half each reducing it, then the divide.  A period of a larger ring (``Block.stride``)
    sends its last rank's chunks to its first, which stands for the next period's."""
    width = blk.idx.shape[1]
    size = blk.size
    gamma = run.costs.gamma_s_per_B

    def build(s):
        _ring_shifts(s, np.arange(width), size, gamma, blk.stride)
        if average:
            s.gloo(np.arange(width), gamma)

    return run.schedule(f"ring {average}", blk, build)


def _ring_shifts(sched: Schedule, cols, size: int, gamma: float, stride=None) -> None:
    """``collectives._ring_steps`` among positions ``cols`` of a ring of ``size`` ranks: 2(size-1)
    shifts of an n/size chunk to the right, the first half each reducing it."""
    right = np.roll(np.arange(cols.size), -1)
    for step in range(2 * (size - 1)):
        sched.shift(cols, right, 1.0, gamma if step < size - 1 else 0.0, stride, div=size)


def hierarchical_schedule(run: Run, blk: Block, average: bool = True) -> Schedule:
    """``collectives.hierarchical_allreduce`` after the overhead, step by step over a row of
    whole hosts in rank order (for a replay: ``hierarchical_allreduce`` times it elsewhere):
    binomial reduce inside each host to its first rank, the ring among the hosts' first
    ranks, binomial broadcast inside each host, the divide."""
    width, rph = blk.idx.shape[1], run.rph
    assert width % rph == 0, "a row of whole hosts"
    firsts = np.arange(0, width, rph)
    gamma = run.costs.gamma_s_per_B

    def build(s):
        _binomial_reduce(s, rph, gamma, firsts)
        _ring_shifts(s, firsts, firsts.size, gamma)
        _binomial_broadcast(s, rph, first=firsts)
        if average:
            s.gloo(np.arange(width), gamma)

    return run.schedule(f"hierarchical {average}", blk, build)


# The all-reduces that are schedules of messages (their NIC queues can be replayed).
SCHEDULES = {"tree": tree_schedule, "recursive_doubling": recursive_doubling_schedule,
             "rabenseifner": rabenseifner_schedule, "ring": ring_schedule,
             "hierarchical": hierarchical_schedule}


def _scheduled(name: str):
    def allreduce(run: Run, blk: Block, t, nbytes: float, average: bool = True):
        return SCHEDULES[name](run, blk, average).run(t + run.costs.overhead("all_reduce"),
                                                     nbytes)
    allreduce.__doc__ = f"``collectives.{name}_allreduce``: the overhead, then its schedule."
    return allreduce


tree_allreduce, recursive_doubling_allreduce, rabenseifner_allreduce = (
    _scheduled(name) for name in ("tree", "recursive_doubling", "rabenseifner"))


def hierarchical_allreduce(run: Run, blk: Block, t, nbytes: float, average: bool = True):
    """``collectives.hierarchical_allreduce``; ``blk.idx`` holds one host per row (its ranks in
    order; one row stands for every host on a uniform cluster): reduce inside the host, ring
    among the hosts' first ranks, broadcast inside the host, divide."""
    hosts = run.spec.cluster.hosts
    width = blk.idx.shape[1]
    gamma = run.costs.gamma_s_per_B
    T = t + run.costs.overhead("all_reduce")
    T = run.schedule("host reduce", blk, lambda s: _binomial_reduce(s, width, gamma)).run(
        T, nbytes)
    if hosts > 1:
        period = blk.idx.shape[0] < hosts
        leaders = Block(blk.idx[:, :1].T, hosts, run.rph if period else None)
        T[:, 0] = ring_steps(run, leaders, T[:, :1].T, nbytes)[0]

    def build(s):
        _binomial_broadcast(s, width)
        if average:
            s.gloo(np.arange(width), gamma)

    return run.schedule(f"host broadcast {average}", blk, build).run(T, nbytes)


# The recurrence of every DES algorithm, named after it: one the DES gains without a recurrence
# here fails on import, not in a run.
ALLREDUCE = {name: globals()[f"{name}_allreduce"] for name in collectives.ALLREDUCE}


def binomial_gather_scatter_schedules(run: Run, blk: Block) -> tuple[Schedule, Schedule]:
    """``collectives.binomial_gather_mean_scatter`` with root 0 (position 0 of each row), its
    two schedules, each after its overhead: a rank forwards its subtree's buffers up and the
    root takes the mean; the subtrees' shares go down."""
    costs = run.costs
    width = blk.idx.shape[1]

    def gather(s):
        m = 1
        while m < width:
            dst = np.arange(0, width - m, 2 * m)
            s.send(dst + m, dst, np.minimum(m, width - dst - m), collective="gather")
            m <<= 1
        s.gloo(np.arange(1), width * costs.gamma_s_per_B)

    def scatter(s):
        _binomial_broadcast(s, width, "scatter", share=lambda m, dst: np.minimum(m, width - dst))

    return (run.schedule("binomial gather", blk, gather),
            run.schedule("binomial scatter", blk, scatter))


def binomial_gather_mean_scatter(run: Run, blk: Block, t, nbytes: float):
    """``collectives.binomial_gather_mean_scatter``: the gather's overhead and schedule, the
    scatter's."""
    costs = run.costs
    gather, scatter = binomial_gather_scatter_schedules(run, blk)
    T = gather.run(t + costs.overhead("gather"), nbytes)
    return scatter.run(T + costs.overhead("scatter"), nbytes)


def lcm(a: int, b: int) -> int:
    return a * b // math.gcd(a, b)
