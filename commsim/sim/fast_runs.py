"""A world ring whose ranks share one pool of cores out of step (stragglers), by runs of ranks
alike, for the fast engine.

On one pool every job runs at the same speed, so ranks that start equal jobs at one instant
end them together, and a ring step whose ranks all post at one instant delivers their messages
at one instant.  A straggler parts the ring only where its delay has reached: the ranks after
it stop one step later each while it computes (a staircase), and its delay then travels round
the ring one rank a step.  So the ranks form *runs*, arcs of consecutive ranks in one state
(the program position of each of their processes, their pending job or time), and one rank's
events stand for its run's; its ranks' compute speeds and reported seconds are kept per rank,
and a compute job splits a run by speed:

1. programs: the rank processes of ``strategies.ring`` (every tensor all-reduced after
   backward) and ``strategies.ddp`` (buckets on a communication process beside backward, the
   buffer broadcast, fp16), as instruction lists (``_programs``);
2. the pool: a job is ``(work, threads)``; runs that start the same job at one instant share a
   job group, whose work left is taken off at the instants and in the arithmetic of
   ``engine.ProcessorSharingCPU`` (a job's start or end, a rank entering or leaving a
   collective), so that near-ties between events fall as in the DES; the rate is
   ``costs.job_rate`` over the groups' threads, times the calibrated compute speed while ranks
   communicate;
3. a ring step of a run posted at t delivers its inner messages at t + the message's time (the
   wire at the contended bandwidth at the pool's load then, one latency; with two ranks a host
   the later of a message inside the host and one between hosts); its end ranks' other
   messages pair with the neighbouring runs' when both have posted: an end rank whose
   neighbour has not posted splits off to wait for it;
4. runs ready at one instant in one state next to each other join again, and a waiting
   neighbour that a run's message releases joins it at once.
Where every rank posts the same step with nothing else due but compute jobs, equal steps are
one addition, as in ``fast_lockstep``; where a few runs step alike (a staircase building, or
taken in around the straggler), whole steps go without timers or batches (``_Ring._stride``),
and the ranks a staircase leaves waiting, each on its own step, are held as one run until a
neighbour looks at one of them (``_Stair``).  With one straggler, O(p) events an iteration
instead of the DES's O(p²) messages an all-reduce; a budget of events stops runs that keep
parting.

Two ranks a host on each host's cores (``_Ring.hosts_apart``, a ring per tensor) go by runs
with a CPU a host (``_Cpu``) instead of the pool: the hosts of runs that hold both their ranks
and start one job together share one, and a host whose two ranks are in different runs has
its own, on which a run's end rank that starts a job there runs it beside the other run's
rank; with calibrated contention a host computing beside a collective slows the messages that
leave or enter it, and a run's end ranks whose messages meet it post alone.  A straggler's
delay tilts the ranks there, each step a little apart from a neighbour's: O(p^2) events
(``covers``).
"""
from __future__ import annotations

import heapq

import numpy as np

from commsim.costs import CostInputs, cpu_load, job_rate
from commsim.sim.engine import finished, residue
from commsim.sim.fast_collectives import NotExact, intra_link
from commsim.sim.fast_lockstep import equal_steps
from commsim.spec import RunSpec

# Instructions of a rank's program.
JOB, ENTER, EXIT, WAIT, BROADCAST, SIGNAL, AWAIT, AWAIT_END, STEPS, FINISH = range(10)


def covers(spec: RunSpec) -> bool:
    """A world ring (DDP's or a ring per tensor) of stragglers on one pool of cores: one or two
    ranks a host on the pool, or every rank on one host; or a ring per tensor of two ranks a
    host on each host's cores (``_Ring.hosts_apart``).  (With two, each rank's messages of a
    step are one inside its host and one between hosts, and it waits for both: ranks of a run
    still go on together.)"""
    from commsim.strategies import get_strategy

    c = spec.cluster
    if spec.strategy not in ("ring", "ddp") or not spec.stragglers or c.slow_links_Bps:
        return False
    algorithm = get_strategy(spec.strategy).algorithm(spec) or "ring"
    if algorithm == "hierarchical" and c.ranks_per_host == 1:
        algorithm = "ring"
    p = spec.world_size
    if algorithm != "ring" or (spec.group_size or p) != p or p < 2:
        return False
    if c.hosts == 1 or (c.shared_cpu_cores is not None and c.ranks_per_host == 1):
        return True
    # Two ranks a host: a ring per tensor only.  DDP's buckets part the ranks at O(p^2)
    # instants there (measured with the DES, a straggler on a pool: 339, 1,165 and 3,880
    # distinct delivery times at 16, 32 and 64 ranks), as a slow link does anywhere.
    if c.ranks_per_host != 2 or spec.strategy != "ring":
        return False
    # Each host its cores: a straggler's delay leaves the ranks tilted, every rank's step a
    # little apart from its neighbours', through the first tensors, and the runs take O(p^2)
    # events (with VGG-11: 2,840, 28,111, 455,887 and 1.8 million at 32, 128, 512 and 1,024
    # ranks, about 1.7p^2): covered while 2p^2 of them fit the budget (about 230 ranks).
    return c.shared_cpu_cores is not None or 2 * p * p <= budget(spec)


def budget(spec: RunSpec) -> int:
    """The most events the runs take before they refuse (``NotExact``): O(p) where runs stay
    few, about 2p for a ring per tensor, more with DDP's buckets, every one of which a
    straggler holds back (2,048 ranks: 6.5p with 25 MB buckets, 15p with 4 MB or 1 MB), and
    each further straggler brings staircases of its own (2 to 32 stragglers, 1 MB buckets:
    32p to 115p).  Beyond, the ranks part at O(p^2) instants and the runs would take longer
    than the DES's refusal."""
    return 32 * spec.world_size * max(1, len(spec.stragglers)) + 100_000


def crosses(spec: RunSpec):
    """Per rank, whether its ring message to the next rank leaves its host."""
    c = spec.cluster
    ranks = np.arange(spec.world_size)
    return (c.hosts > 1) & (ranks // c.ranks_per_host
                            != (ranks + 1) % spec.world_size // c.ranks_per_host)


def _programs(spec: RunSpec, costs: CostInputs, buckets: bool, broadcast: bool):
    """A rank's processes as instruction lists: the compute process, and with ``buckets``
    DDP's communication process."""
    p = spec.world_size
    gamma = costs.gamma_s_per_B
    overhead = costs.overhead("all_reduce")
    threads = costs.threads_per_rank
    serial = iter(range(1 << 30))

    def allreduce(nbytes, average=True):
        """``collectives.ring_allreduce``: each STEPS a run of ring steps, a message each way
        then the reduction, numbered (collective, first step)."""
        collective = next(serial)
        chunk = nbytes / p
        out = [(ENTER,)] + ([(WAIT, overhead)] if overhead > 0 else [])
        out += [(STEPS, collective, 0, chunk, chunk * gamma, p - 1),
                (STEPS, collective, p - 1, chunk, 0.0, p - 1)]
        if average:
            out.append((JOB, nbytes * gamma, 1.0, False))
        return out + [(EXIT,)]

    compute = []
    for _ in range(spec.sync_every - 1):
        compute += [(JOB, costs.forward_s, threads, True), (JOB, costs.backward_s, threads, True)]
    if not buckets:
        compute += [(JOB, costs.forward_s, threads, True), (JOB, costs.backward_s, threads, True)]
        for nbytes in costs.param_bytes:
            compute += allreduce(nbytes)
        return [compute + [(JOB, costs.optimizer_s, threads, True), (FINISH,)]]
    if broadcast:
        compute += [(ENTER,), (BROADCAST,), (EXIT,)]
    compute.append((JOB, costs.forward_s, threads, True))
    done = 0.0
    for bucket in costs.buckets:
        if spec.overlap:
            segment = (bucket.ready_fraction - done) * costs.backward_s
            if segment > 0:
                compute.append((JOB, segment, threads, True))
            done = max(done, bucket.ready_fraction)
            compute.append((SIGNAL,))
    if done < 1.0:
        compute.append((JOB, (1.0 - done) * costs.backward_s, threads, True))
    if not spec.overlap:
        compute += [(SIGNAL,)] * len(costs.buckets)
    compute += [(AWAIT_END,), (JOB, costs.optimizer_s, threads, True), (FINISH,)]
    talk = []
    fp16 = spec.compression == "fp16"
    for i, bucket in enumerate(costs.buckets):
        talk.append((AWAIT, i))
        if fp16:
            cast = (JOB, bucket.bytes * gamma, 1.0, False)
            talk += [(ENTER,), cast] + allreduce(bucket.bytes / 2, average=False) + [cast, (EXIT,)]
        else:
            talk += allreduce(bucket.bytes)
    return [compute, talk]


class _Group:
    """Equal jobs started at one instant: ``left`` work each, taken off as the DES's CPU
    takes it off its jobs (so that they end at its instants to the last bit)."""
    __slots__ = ("left", "weight", "compute", "start", "members")

    def __init__(self, left, compute, start):
        self.left, self.weight, self.compute, self.start = left, 0.0, compute, start
        self.members = []                          # (run, process)


def _advance(groups: dict, progress: float) -> None:
    """Every job of ``groups`` advanced by ``progress`` work (``ProcessorSharingCPU._advance``:
    the elapsed time times the rate, taken off each)."""
    for group in groups.values():
        group.left -= progress


def _due(now: float, groups: dict, rate: float) -> float:
    """When the first of ``groups``' jobs ends at ``rate`` from ``now`` (``_reschedule``)."""
    return now + max(0.0, min(group.left for group in groups.values()) / rate)


def _ending(groups: dict) -> list:
    """The keys of ``groups``' jobs that end now (``engine.finished``)."""
    return finished({key: [group.left] for key, group in groups.items()})


class _Cpu:
    """Where each host has cores of its own (``_Ring.hosts_apart``), the cores of hosts whose
    jobs run alike: the hosts of runs that hold both their ranks and start one job at one
    instant (each host two of its jobs), or one host whose two ranks are in runs of their own.
    Its jobs (``groups``: key -> ``_Group``, their ``weight`` its threads) are advanced at
    its own events alone, as ``ProcessorSharingCPU``'s, and its timer is set again at each
    (``version``)."""
    __slots__ = ("groups", "last", "busy", "computing", "talking", "version", "host", "key")

    def __init__(self, now, host=None, key=None, talking=0):
        self.groups, self.last, self.busy, self.computing, self.version = {}, now, 0.0, 0.0, 0
        self.talking = talking                      # its ranks inside a collective
        self.host, self.key = host, key             # (one host's, or hosts alike's job key)


class _Run:
    """Ranks lo, lo+1, ..., lo+n-1 (mod p) in one state."""
    __slots__ = ("lo", "n", "procs", "fired", "talked", "depth", "sent", "received", "alive")

    def copy(self, lo, n) -> "_Run":
        other = _Run()
        other.lo, other.n, other.alive = lo, n, True
        other.fired, other.talked, other.depth = self.fired, self.talked, self.depth
        other.sent, other.received = self.sent, self.received
        other.procs = [list(proc) for proc in self.procs]
        return other

    def alike(self, other: "_Run") -> bool:
        """Whether both are in one state: where their processes are and what they wait for,
        what their timing depends on (their ranks' compute speeds only where a compute job
        starts, which splits a run by speed).  A run waiting on a neighbour is never joined.
        Compared field by field, as runs are at every batch of the loop (``_Ring._join``),
        most of them differing early."""
        if self.sent != other.sent or self.fired != other.fired \
                or self.depth != other.depth or self.talked != other.talked:
            return False
        for (pc, rep, pending), (their_pc, their_rep, theirs) in zip(self.procs, other.procs):
            if type(pending) is list or type(theirs) is list:
                return False                       # (waiting on a neighbour: no state)
            # (("job", group) pairs are equal for one group: groups compare by identity)
            if pc != their_pc or rep != their_rep or (pending is not theirs
                                                      and pending != theirs):
                return False
        return True


class _Stair:
    """A staircase's waiting ranks held as one run (``_Ring._stride``'s ``settle``): ranks
    alike in every process but the collectives', each of which waits on its own ring step
    for one neighbour's message.  The run stands for them in the pool (their jobs are its,
    as the ranks of any run; of one compute speed, so that no compute job parts it) and in
    the ring's places; one of them becomes a run of its own (``_Ring._peel``) where a
    neighbour looks at it, or leaves it for the run that takes it in (``_Ring._shrink``).

    items: per rank, from the run's first, (the run that left it, the rank, its collectives'
    process ``[pc, rep, pending]``, bytes sent, bytes received); ``low`` .. ``high`` the ones
    still held."""
    __slots__ = ("items", "low", "high")

    def __init__(self, items):
        self.items, self.low, self.high = items, 0, len(items)


def _posting(run: _Run) -> tuple:
    """The order in which runs due at one instant are taken: one-rank runs first, then by
    first rank.  A rank alone (a faster one, its backward ahead of its neighbours') then posts
    before the runs beside it, which pair with it as they post, rather than leave an end rank
    to wait for it and join it again at the next step.  (The DES's times do not depend on
    this order: messages posted at one instant start at that instant.)"""
    return run.n != 1, run.lo


def _taken(item: tuple) -> tuple:
    """A batch's (run, process) in the order the loop takes them: by ``_posting``, then
    process (one flat key: batches hold every rank's process where the ranks part)."""
    run = item[0]
    return run.n != 1, run.lo, item[1]


class _Ring:
    """The event loop over runs."""

    def __init__(self, spec: RunSpec, costs: CostInputs, programs, broadcast_end):
        c = spec.cluster
        self.p = spec.world_size
        self.costs = costs
        self.cores = c.shared_cpu_cores if c.shared_cpu_cores is not None else c.cores_per_host
        self.efficiency = c.cpu_efficiency
        self.contention = bool(costs.contention)
        self.crosses = crosses(spec).tolist()      # rank -> its message right leaves the host
        self.kinds = sorted(set(self.crosses))     # the kinds of messages a step has
        self.intra_latency_s, bandwidth = intra_link(c)
        self.intra_per_byte = 1.0 / bandwidth
        self.latency_s = c.nic_latency_s
        self.per_byte = costs.wire("all_reduce") / c.nic_bandwidth_Bps
        self.programs = programs
        self.talker = len(programs) - 1            # the process that runs the collectives
        self.broadcast_end = broadcast_end
        # Two ranks a host, each host its cores: a CPU a host (``_Cpu``), not the pool's.
        self.hosts_apart = c.shared_cpu_cores is None and c.hosts > 1
        self.host_cpus: dict = {}                  # host -> its _Cpu, while it has jobs
        self.alike_cpus: dict = {}                 # job key -> the _Cpu of hosts alike
        self.cpu_timers: list = []                 # (time, order, _Cpu, version)
        self.now = 0.0
        self.cpu_last = 0.0                        # when the pool's jobs were last advanced
        self.cpu_due = None                        # when its next job ends, set then
        self.deferred = None                       # while a batch runs: whether it is due
        self.groups: dict = {}                     # (work, threads, compute, start) -> _Group
        self.busy = self.computing = self.talking = 0.0
        self._rates: dict = {}                     # (busy, computing, talking) -> rate
        self.timers: list = []                     # (time, order, run, process)
        self.live_timers = 0
        self.order = 0
        self.ready: list = []                      # (run, process) to resume now
        self.first: dict = {}                      # lo -> run
        self.last: dict = {}                       # last rank -> run
        self.arrived: list = []                    # (run, process, time) at the broadcast
        self.events = 0
        self.budget = budget(spec)
        # Per rank: its compute speed, and what it reports.  Ranks of one run share these
        # but for the compute seconds (a compute job splits a run by speed).
        self.factor = np.array([spec.stragglers.get(r, 1.0) for r in range(self.p)])
        self.speeds = self.factor.tolist()         # (one rank's, without numpy's scalars)
        self.compute_s = np.zeros(self.p)
        self.comm_s = np.zeros(self.p)
        self.since = np.zeros(self.p)
        self.finish = np.full(self.p, np.nan)
        run = _Run()
        run.lo, run.n, run.alive = 0, self.p, True
        run.procs = [[0, 0, None] for _ in programs]
        run.fired, run.talked, run.depth, run.sent, run.received = 0, False, 0, 0.0, 0.0
        self._place(run)
        self.ready += [(run, k) for k in range(len(programs))]

    # -- runs --------------------------------------------------------------------------------

    def _place(self, run: _Run) -> None:
        self.first[run.lo] = run
        self.last[(run.lo + run.n - 1) % self.p] = run

    def _unplace(self, run: _Run) -> None:
        if self.first.get(run.lo) is run:
            del self.first[run.lo]
        end = (run.lo + run.n - 1) % self.p
        if self.last.get(end) is run:
            del self.last[end]

    def _drop(self, run: _Run) -> None:
        run.alive = False
        self._unplace(run)
        self.live_timers -= sum(1 for proc in run.procs
                                if proc[2] is not None and proc[2][0] == "timer")

    def _peel(self, run: _Run, low: bool) -> _Run:
        """The first rank (``low``) or the last of a run holding a staircase (``_Stair``)
        made a run of its own, in the staircase's state (its processes ready now are ready:
        the staircase's are, in the loop's batch or next)."""
        k = self.talker
        rank = run.lo if low else (run.lo + run.n - 1) % self.p
        _, _, proc, sent, received = self._shrink(run, low)
        piece = _Run()
        piece.lo, piece.n, piece.alive = rank, 1, True
        piece.fired, piece.talked, piece.depth = run.fired, run.talked, run.depth
        piece.sent, piece.received = sent, received
        piece.procs = [proc if j == k else list(other) for j, other in enumerate(run.procs)]
        self._adopt(piece)
        return piece

    def _shrink(self, run: _Run, low: bool) -> tuple:
        """A run holding a staircase lets go of its first rank (``low``) or its last: that
        rank's item (``_Stair``)."""
        stair, p = run.procs[self.talker][2], self.p
        end = (run.lo + run.n - 1) % p
        if low:
            at = stair.low
            stair.low += 1
            del self.first[run.lo]
            run.lo = (run.lo + 1) % p
        else:
            stair.high -= 1
            at = stair.high
            del self.last[end]
        run.n -= 1
        if not run.n:
            if low:
                del self.last[end]
            else:
                del self.first[run.lo]
            run.alive = False                  # (its jobs pass it by: ``_end_jobs``)
        elif low:
            self.first[run.lo] = run
        else:
            self.last[(end - 1) % p] = run
        return stair.items[at]

    def _before(self, rank: int) -> _Run | None:
        """The run whose last rank is ``rank`` (a staircase's: that rank, made its own)."""
        run = self.last.get(rank)
        if run is not None and type(run.procs[self.talker][2]) is _Stair:
            return self._peel(run, False)
        return run

    def _after(self, rank: int) -> _Run | None:
        """The run whose first rank is ``rank`` (a staircase's: that rank, made its own)."""
        run = self.first.get(rank)
        if run is not None and type(run.procs[self.talker][2]) is _Stair:
            return self._peel(run, True)
        return run

    def _adopt(self, run: _Run, executing: int | None = None) -> None:
        """Put a new run where its pending jobs, timers and waits will find it, and its
        processes that were ready (all but ``executing``, the one that made it) in line."""
        self._place(run)
        for k, (_, _, pending) in enumerate(run.procs):
            if pending is None:
                if k != executing:
                    self.ready.append((run, k))
                continue
            if pending[0] == "job":
                pending[1].members.append((run, k))
            elif pending[0] == "timer":
                self._timer(pending[1], run, k)
            elif pending[0] == "broadcast":
                self.arrived.append((run, k, pending[1]))

    def _join(self) -> None:
        """Runs ready now, in one state, next to each other become one."""
        if len(self.ready) < 2:
            return
        ready = {}
        for run, _ in self.ready:
            if run.alive:
                for proc in run.procs:
                    if type(proc[2]) is list:
                        break                  # (waiting on a neighbour: never joined)
                else:
                    ready[id(run)] = run
        if len(ready) < 2:
            return
        became = {}
        for run in sorted(ready.values(), key=lambda r: r.lo):
            if not run.alive or run.n == self.p:
                continue
            while run.n < self.p:
                right = self.first.get((run.lo + run.n) % self.p)
                if right is None or right is run or id(right) not in ready \
                        or not run.alike(right):
                    break
                joined = run.copy(run.lo, run.n + right.n)
                self._drop(run)
                self._drop(right)
                self._adopt(joined)
                ready[id(joined)] = joined
                became[id(run)] = became[id(right)] = joined
                run = joined
        if not became:
            return
        seen = set()
        out = []
        for run, k in self.ready:
            while id(run) in became:
                run = became[id(run)]
            if run.alive and (id(run), k) not in seen:
                seen.add((id(run), k))
                out.append((run, k))
        self.ready = out

    # -- the pool ----------------------------------------------------------------------------

    def _rate(self, busy=None, computing=None) -> float:
        """Every job's speed on the pool (``ProcessorSharingCPU._rate``), now or with
        ``busy`` threads of which ``computing`` compute."""
        key = (self.busy if busy is None else busy,
               self.computing if computing is None else computing, self.talking)
        rate = self._rates.get(key)
        if rate is None:
            rate = self._rates[key] = job_rate(self.cores, key[0], self.efficiency,
                                               self._speed(key[1]))
        return rate

    def _speed(self, computing: float) -> float:
        """Jobs' speed on the pool but for its sharing: the calibrated compute speed while
        ranks communicate with ``computing`` threads computing, else 1."""
        if self.talking and self.contention:
            return self.costs.compute_speed(cpu_load(self.cores, computing, self.talking))
        return 1.0

    def _spans(self, run: _Run):
        """``run``'s ranks as slices of the per-rank arrays (two where it wraps round)."""
        lo, n, p = run.lo, run.n, self.p
        return (slice(lo, lo + n),) if lo + n <= p else (slice(lo, p), slice(0, lo + n - p))

    def _compute(self, run: _Run, k: int, work: float, threads: float) -> None:
        """Process ``k`` of ``run`` starts a compute job of ``work`` times each rank's speed:
        ranks of different speeds part here, into arcs of one speed each."""
        if run.n == 1:                         # (the commonest where runs part: no arrays)
            work *= self.speeds[run.lo]
            if work > 0:
                self._job(run, k, work, threads, True)
            else:
                self.ready.append((run, k))
            return
        factor = np.concatenate([self.factor[span] for span in self._spans(run)])
        cuts = [0] + (np.flatnonzero(np.diff(factor)) + 1).tolist() + [run.n]
        if len(cuts) > 2:
            if type(run.procs[self.talker][2]) is _Stair:
                raise NotExact("a staircase's ranks part by speed")   # (a bug: ``settle``)
            self._drop(run)
            pieces = [run.copy((run.lo + a) % self.p, b - a) for a, b in zip(cuts, cuts[1:])]
            for piece in pieces:
                self._adopt(piece, k)
        else:
            pieces = [run]
        for piece, a in zip(pieces, cuts):
            if work * factor[a] > 0:
                self._job(piece, k, work * factor[a], threads, True)
            else:
                self.ready.append((piece, k))

    def _job(self, run: _Run, k: int, work: float, threads: float, compute: bool,
             reschedule: bool = True) -> None:
        """Process ``k`` of ``run`` starts a job; ``reschedule``: the pool's timer set again
        now (else by the caller, once a batch of jobs has started)."""
        if self.hosts_apart:
            self._host_job(run, k, work, threads, compute)
            return
        if self.now != self.cpu_last:              # (time never runs back)
            self._cpu_event()
        key = (work, threads, compute, self.now)
        group = self.groups.get(key)
        if group is None:
            group = self.groups[key] = _Group(work, compute, self.now)
        group.weight += run.n * threads
        group.members.append((run, k))
        self.busy += run.n * threads
        if compute:
            self.computing += run.n * threads
        run.procs[k][2] = ("job", group)
        if reschedule:
            if self.deferred is not None:      # (``_reschedule`` within a batch: once after it)
                self.deferred = True
            else:
                self._reschedule()

    # -- a CPU a host (``hosts_apart``) ---------------------------------------------------

    def _host_job(self, run: _Run, k: int, work: float, threads: float,
                  compute: bool) -> None:
        """``_job`` where each host has its cores: a run's end rank whose host's other rank
        is in another run becomes a run of its own, on that host's ``_Cpu``; the rest, whole
        hosts, start the job on the ``_Cpu`` of hosts that start it now."""
        p = self.p
        pieces = [run]
        if 1 < run.n < p:
            lo, n = run.lo, run.n
            cut = []
            if lo % 2:
                cut.append((lo, 1))
                lo, n = (lo + 1) % p, n - 1
            if n and (lo + n - 1) % 2 == 0:
                cut.append(((lo + n - 1) % p, 1))
                n -= 1
            if cut:
                if n:
                    cut.append((lo, n))
                self._drop(run)
                pieces = [run.copy(a, b) for a, b in cut]
                for piece in pieces:
                    self._adopt(piece, k)
        key = (work, threads, compute, self.now)
        for piece in pieces:
            if piece.n == 1:
                host = piece.lo // 2
                cpu = self.host_cpus.get(host)
                if cpu is None:
                    # (its ranks are the last of one run and the first of the next)
                    talking = sum(1 for other in (self.last[2 * host],
                                                  self.first[2 * host + 1]) if other.depth)
                    cpu = self.host_cpus[host] = _Cpu(self.now, host=host, talking=talking)
                weight = threads
            else:
                cpu = self.alike_cpus.get(key)
                if cpu is None:
                    cpu = self.alike_cpus[key] = _Cpu(self.now, key=key)
                weight = 2 * threads if key not in cpu.groups else 0.0
            self._host_advance(cpu)
            group = cpu.groups.get(key)
            if group is None:
                group = cpu.groups[key] = _Group(work, compute, self.now)
            group.weight += weight
            cpu.busy += weight
            if compute:
                cpu.computing += weight
            group.members.append((piece, k))
            piece.procs[k][2] = ("job", group)
            self._host_reschedule(cpu)

    def _host_advance(self, cpu: _Cpu) -> None:
        """``cpu``'s jobs advanced to now (``ProcessorSharingCPU._advance``)."""
        if cpu.groups and self.now > cpu.last:
            _advance(cpu.groups, (self.now - cpu.last) * self._host_rate(cpu))
        cpu.last = self.now

    def _host_reschedule(self, cpu: _Cpu) -> None:
        """``cpu``'s timer set again (``ProcessorSharingCPU._reschedule``)."""
        cpu.version += 1
        if cpu.groups:
            due = _due(self.now, cpu.groups, self._host_rate(cpu))
            heapq.heappush(self.cpu_timers, (due, self.order, cpu, cpu.version))
            self.order += 1

    def _host_rate(self, cpu: _Cpu) -> float:
        """Its jobs' speed (``ProcessorSharingCPU._rate``; hosts alike run their jobs
        outside collectives, or reductions without compute: the calibrated speed is 1)."""
        speed = 1.0
        if cpu.talking and self.contention:
            speed = self.costs.compute_speed(cpu_load(self.cores, cpu.computing, cpu.talking))
        return job_rate(self.cores, cpu.busy, self.efficiency, speed)

    def _host_load(self, host: int) -> float:
        """Compute threads a core on ``host`` as the contention calibration counts them (only a
        host whose ranks are in two runs computes beside a collective)."""
        cpu = self.host_cpus.get(host)
        return 0.0 if cpu is None else cpu_load(self.cores, cpu.computing, cpu.talking)

    def _edge_per_byte(self, src: int) -> float:
        """A byte's time on the wire from rank ``src`` to the next (between hosts) now: the
        link's, or the contended bandwidth at the busier end (``SimContext._contention``)."""
        loads = self._host_load(src // 2), self._host_load((src + 1) % self.p // 2)
        if not any(loads):
            return self.per_byte
        return max(self.per_byte, 1.0 / min(self.costs.contended_Bps(load) for load in loads))

    def _host_touchy(self, run: _Run) -> list | None:
        """Where a run about to post has an end whose messages meet a host computing beside a
        collective (calibrated contention, ``hosts_apart``): the run cut into pieces, the ranks
        whose messages are slowed alone (an end rank, and where its host's message to the
        next leaves from that host, the next rank too); None where none is."""
        p, lo, n = self.p, run.lo, run.n
        end = (lo + n - 1) % p
        left = self._host_load((lo - 1) % p // 2) > 0
        right = self._host_load((end + 1) % p // 2) > 0
        if not (left or right):
            return None
        alone = []
        if left:
            alone += [lo, (lo + 1) % p] if lo % 2 else [lo]
        if right:
            alone += [(end - 1) % p, end] if end % 2 == 0 else [end]
        offsets = sorted({(r - lo) % p for r in alone if (r - lo) % p < n})
        pieces, at = [], 0
        for off in offsets:
            if off > at:
                pieces.append(((lo + at) % p, off - at))
            pieces.append(((lo + off) % p, 1))
            at = off + 1
        if at < n:
            pieces.append(((lo + at) % p, n - at))
        return pieces

    def _host_talks(self, run: _Run, delta: int) -> None:
        """``run``'s ranks enter or leave a collective: the hosts it shares with other runs
        have their jobs advanced and their timers set again (the DES's
        ``ProcessorSharingCPU.communicating``; its other hosts have no jobs now)."""
        p = self.p
        if run.n == p:
            return
        end = (run.lo + run.n - 1) % p
        shared = {rank // 2 for rank, alone in ((run.lo, run.lo % 2), (end, end % 2 == 0))
                  if alone}                    # (a one-rank run's host once)
        for host in shared:
            cpu = self.host_cpus.get(host)
            if cpu is not None:
                self._host_advance(cpu)
                cpu.talking += delta
                self._host_reschedule(cpu)

    def _host_due(self):
        """When the next of the hosts' jobs ends (None: none runs)."""
        timers = self.cpu_timers
        while timers and timers[0][3] != timers[0][2].version:
            heapq.heappop(timers)                  # (set again since)
        return timers[0][0] if timers else None

    def _host_ends(self) -> None:
        """The hosts' jobs due now end (``ProcessorSharingCPU._on_timer``, each host's)."""
        timers = self.cpu_timers
        while timers and timers[0][0] <= self.now:
            _, _, cpu, version = heapq.heappop(timers)
            if version != cpu.version:
                continue
            self._host_advance(cpu)
            for key in _ending(cpu.groups):
                group = cpu.groups.pop(key)
                cpu.busy -= group.weight
                if group.compute:
                    cpu.computing -= group.weight
                self._ended(group)
            self._host_reschedule(cpu)
            if not cpu.groups:
                if cpu.host is None:
                    del self.alike_cpus[cpu.key]
                else:
                    del self.host_cpus[cpu.host]

    def _cpu_event(self) -> None:
        """The pool's jobs advanced to now at the speed they had
        (``ProcessorSharingCPU._advance``, at the same instants)."""
        if self.groups and self.now > self.cpu_last:
            _advance(self.groups, (self.now - self.cpu_last) * self._rate())
        self.cpu_last = self.now

    def _reschedule(self) -> None:
        """When the next job ends at the speed from now on (``_reschedule``); while the loop
        takes a batch, once after it (nothing reads it before, and at one instant only the
        last setting counts)."""
        if self.deferred is not None:
            self.deferred = True
            return
        self.cpu_due = None
        if self.groups:
            self.cpu_due = _due(self.now, self.groups, self._rate())

    def _finished(self) -> list:
        """The pool's jobs advanced to now; the keys of those that end now."""
        self._cpu_event()
        return _ending(self.groups)

    def _end_jobs(self, ended: list | None = None) -> None:
        """The jobs that end now (``ended``: their keys, from ``_finished``) end: their
        processes are ready."""
        for key in self._finished() if ended is None else ended:
            group = self.groups.pop(key)
            self.busy -= group.weight
            if group.compute:
                self.computing -= group.weight
            self._ended(group)
        self._reschedule()

    def _ended(self, group: _Group) -> None:
        """``group``'s jobs are over: its processes are ready, its compute seconds counted."""
        took = self.now - group.start
        alone = []                             # one-rank runs' ranks: added at once below
        ready = self.ready
        for run, k in group.members:
            proc = run.procs[k]
            if run.alive and proc[2] is not None and proc[2][1] is group:
                if group.compute and run.n == 1:
                    alone.append(run.lo)
                elif group.compute:
                    for span in self._spans(run):
                        self.compute_s[span] += took
                proc[2] = None
                ready.append((run, k))
        if alone:                              # (a rank is in one run of a group: once each)
            self.compute_s[alone] += took
        # The runs it held that have since joined others hold it (their processes'
        # states): the cycle freed now, not at the collector's next pass (``fast.run_fast``).
        group.members.clear()

    # -- messages ----------------------------------------------------------------------------

    def _per_byte(self) -> float:
        """A byte's time on the wire between hosts now: the link's, or the contended
        bandwidth's at the pool's load (``SimContext._contention``)."""
        per_byte = self.per_byte
        if self.contention:
            load = cpu_load(self.cores, self.computing, self.talking)
            per_byte = max(per_byte, 1.0 / self.costs.contended_Bps(load))
        return per_byte

    def _wire_s(self, nbytes: float) -> float:
        """A step's time from every rank's post to its last delivery, posted now."""
        return self._inner(nbytes) - self.now

    def _delivered(self, nbytes: float, crossing: bool, now: float | None = None,
                   per_byte: float | None = None) -> float:
        """When a message both ends post now (or at ``now``) arrives (between hosts, or
        inside one), added up as ``engine.Network._transfer`` does; ``per_byte``: the wire's
        time a byte, where the caller holds it (``_per_byte``)."""
        now = self.now if now is None else now
        if not crossing:
            return now + (self.intra_latency_s + nbytes * self.intra_per_byte)
        return now + nbytes * (self._per_byte() if per_byte is None else per_byte) \
            + self.latency_s

    def _arrivals(self, nbytes: float) -> list:
        """When a message posted now arrives, indexed by its kind (leaves the host or not;
        None for a kind the ring has not)."""
        arrive = [None, None]
        for kind in self.kinds:
            arrive[kind] = self._delivered(nbytes, kind)
        return arrive

    def _inner(self, nbytes: float, arrive: list | None = None) -> float:
        """When a rank whose both messages of a step are posted now goes on: the later of
        them (one of each kind where hosts hold two ranks of the ring)."""
        arrive = self._arrivals(nbytes) if arrive is None else arrive
        return max(arrive[kind] for kind in self.kinds)

    def _post(self, run: _Run, k: int, step, nbytes: float) -> None:
        """``run``'s ranks post a ring step (a send right, a receive left).  Its messages
        between its own ranks arrive at one instant; so do its end ranks' others where the
        neighbouring ranks have posted theirs (now, or before); an end rank whose neighbour
        has not splits off to wait for it."""
        if self.hosts_apart and self.contention and 1 < run.n < self.p:
            pieces = self._host_touchy(run)
            if pieces is not None:
                self._drop(run)
                pieces = [run.copy(lo, n) for lo, n in pieces]
                for piece in pieces:
                    self._adopt(piece, k)
                for piece in pieces:
                    self._post(piece, k, step, nbytes)
                return
        run.sent += nbytes
        run.received += nbytes
        if run.n == self.p:
            self._timer(self._inner(nbytes), run, k)
            return
        if run.n == 1:
            run.procs[k][2] = ["step", step, nbytes, None, None]
            self._pair(run, k)
            return
        left = self._before((run.lo - 1) % self.p)
        right = self._after((run.lo + run.n) % self.p)
        waits_left = not self._posted(left, k, step, 4)
        waits_right = not self._posted(right, k, step, 3)
        p, hop = self.p, self.crosses
        arrive = self._arrivals(nbytes)           # kind -> when this post's messages arrive
        inner = self._inner(nbytes, arrive)
        if waits_left or waits_right:
            lo, n = run.lo, run.n
            if waits_left:
                first = run.copy(lo, 1)
                first.procs[k][2] = ["step", step, nbytes, None, arrive[hop[lo]]]
                self._adopt(first, k)
                lo, n = (lo + 1) % p, n - 1
            if waits_right:
                last = run.copy((lo + n - 1) % p, 1)
                last.procs[k][2] = ["step", step, nbytes, arrive[hop[(lo + n - 2) % p]],
                                    None]
                self._adopt(last, k)
                n -= 1
            if n:
                # The rest shrinks in place: its jobs, timers and ready processes stay its own.
                self._unplace(run)
                run.lo, run.n = lo, n
                self._place(run)
            else:
                self._drop(run)
                run = None
        # Pair with the neighbours that have posted: both ends deliver now.  A neighbour that
        # thereby goes on with the run, in the run's state, joins it now.
        for other, side, waits, edge in ((left, 4, waits_left, (left.lo + left.n - 1) % p),
                                         (right, 3, waits_right, (right.lo - 1) % p)):
            if not waits and other.alive:
                theirs = other.procs[k][2]
                theirs[side] = arrive[hop[edge]]
                if theirs[3] is not None and theirs[4] is not None:
                    done = max(theirs[3], theirs[4])
                    if run is not None and other is not run and done == inner \
                            and run.n + other.n <= self.p and self._twins(run, other, k):
                        # (in place: the run keeps its jobs and timers, which are the
                        # other's too)
                        self._unplace(run)
                        self._drop(other)
                        run.lo, run.n = (other.lo if side == 4 else run.lo), run.n + other.n
                        self._place(run)
                    else:
                        self._timer(done, other, k)
        if run is not None:
            self._timer(inner, run, k)
        if waits_left:
            self._pair(first, k)
        if waits_right:
            self._pair(last, k)

    @staticmethod
    def _twins(run: _Run, other: _Run, k: int) -> bool:
        """Whether ``other`` (done with the step ``run`` just posted) is in ``run``'s state."""
        mine, theirs = run.procs, other.procs
        if mine[k][:2] != theirs[k][:2]:
            return False
        for j, (a, b) in enumerate(zip(mine, theirs)):
            if j != k and (a[:2] != b[:2] or (a[2] is not b[2] and a[2] != b[2])):
                return False
        return (run.fired, run.talked, run.depth, run.sent) == \
            (other.fired, other.talked, other.depth, other.sent)

    @staticmethod
    def _posted(other: _Run, k: int, step, side: int) -> bool:
        """Whether ``other`` (one rank) waits on ``step`` with its ``side`` undelivered."""
        theirs = other.procs[k][2]
        return (theirs is not None and theirs[0] == "step" and theirs[1] == step
                and theirs[side] is None)

    def _pair(self, run: _Run, k: int) -> None:
        """A one-rank run waiting on a ring step: deliver its messages to and from the
        neighbouring ranks that have posted theirs."""
        pending = run.procs[k][2]
        p = self.p
        for side, at, edge in ((3, (run.lo - 1) % p, self.crosses[(run.lo - 1) % p]),
                               (4, (run.lo + 1) % p, self.crosses[run.lo])):
            if pending[side] is not None:
                continue
            other = self._before(at) if side == 3 else self._after(at)
            theirs = other.procs[k][2]
            if theirs is None or theirs[0] != "step" or theirs[1] != pending[1]:
                continue
            src = run.lo - 1 if side == 3 else run.lo
            t = self._delivered(pending[2], edge, per_byte=self._edge_per_byte(src % p)
                                if self.hosts_apart and self.contention else None)
            pending[side] = t
            theirs[7 - side] = t
            if theirs[3] is not None and theirs[4] is not None:
                self._timer(max(theirs[3], theirs[4]), other, k)
        if pending[3] is not None and pending[4] is not None:
            self._timer(max(pending[3], pending[4]), run, k)

    # -- processes ---------------------------------------------------------------------------

    def _timer(self, t: float, run: _Run, k: int) -> None:
        run.procs[k][2] = ("timer", t)
        heapq.heappush(self.timers, (t, self.order, run, k))
        self.order += 1
        self.live_timers += 1

    def _resume(self, run: _Run, k: int) -> None:
        proc = run.procs[k]
        program = self.programs[k]
        while True:
            pc, rep = proc[0], proc[1]
            if pc == len(program):
                proc[2] = ("done",)
                if k == self.talker and k > 0:
                    run.talked = True
                    if run.procs[0][2] == ("end",):
                        run.procs[0][2] = None
                        self.ready.append((run, 0))
                return
            ins = program[pc]
            kind = ins[0]
            if kind == STEPS:
                _, collective, first, chunk, work, count = ins
                if rep == 2 * count:
                    proc[0], proc[1] = pc + 1, 0
                    continue
                if rep % 2 == 0:
                    proc[1] = rep + 1
                    self._post(run, k, (collective, first + rep // 2), chunk)
                    return
                proc[1] = rep + 1
                if work > 0:
                    self._job(run, k, work, 1.0, False)
                    return
                continue
            proc[0] = pc + 1
            if kind == JOB:
                _, work, threads, compute = ins
                if compute:
                    self._compute(run, k, work, threads)
                    return
                if work > 0:
                    self._job(run, k, work, threads, compute)
                    return
            elif kind == ENTER:
                if run.depth == 0:
                    for span in self._spans(run):
                        self.since[span] = self.now
                    self._talks(run, 1)
                run.depth += 1
            elif kind == EXIT:
                run.depth -= 1
                if run.depth == 0:
                    for span in self._spans(run):
                        self.comm_s[span] += self.now - self.since[span]
                    self._talks(run, -1)
            elif kind == WAIT:
                self._timer(self.now + ins[1], run, k)
                return
            elif kind == BROADCAST:
                proc[2] = ("broadcast", self.now)
                self.arrived.append((run, k, self.now))
                if sum(r.n for r, _, _ in self.arrived if r.alive) == self.p:
                    self._broadcast()
                return
            elif kind == SIGNAL:
                run.fired += 1
                other = run.procs[self.talker][2]
                if other == ("await", run.fired - 1):
                    run.procs[self.talker][2] = None
                    self.ready.append((run, self.talker))
            elif kind == AWAIT:
                if run.fired <= ins[1]:
                    proc[2] = ("await", ins[1])
                    return
            elif kind == AWAIT_END:
                if not run.talked:
                    proc[2] = ("end",)
                    return
            elif kind == FINISH:
                for span in self._spans(run):
                    self.finish[span] = self.now

    def _talks(self, run: _Run, delta: int) -> None:
        """``run``'s ranks enter (1) or leave (-1) their collectives: their CPU's jobs are
        advanced and its timer set again (``ProcessorSharingCPU.communicating``)."""
        if self.hosts_apart:
            self._host_talks(run, delta)
            return
        self._cpu_event()
        self.talking += delta * run.n
        self._reschedule()

    def _broadcast(self) -> None:
        """Every rank has reached the buffer broadcast: all leave when it is over."""
        start = np.zeros(self.p)
        for run, _, t in self.arrived:
            if run.alive:
                idx = (run.lo + np.arange(run.n)) % self.p
                start[idx] = t
        end = self.broadcast_end(start)
        for run, k, _ in self.arrived:
            if run.alive:
                self._timer(end, run, k)
        self.arrived = []

    def _jump(self, batch) -> None:
        """Where every rank is about to post the same ring step (``batch`` is every run's
        collective process, at one program position) and nothing else is due but compute
        jobs, equal steps at once (``fast_lockstep.equal_steps``)."""
        if self.live_timers or self.host_cpus or self.alike_cpus:
            return
        k = self.talker
        if len(batch) != len(self.first) or any(j != k for _, j in batch):
            return
        runs = [run for run, _ in batch]
        pc, rep, _ = runs[0].procs[k]
        if any(run.procs[k][0] != pc or run.procs[k][1] != rep for run in runs[1:]):
            return
        if pc == len(self.programs[k]) or self.programs[k][pc][0] != STEPS:
            return
        _, _, _, nbytes, work, count = self.programs[k][pc]
        if rep % 2 and work <= 0:
            rep += 1                      # a step without a reduction: the next one's post
        if rep % 2 or rep == 2 * count:
            return
        jobs = list(self.groups.values())
        if any(not job.compute for job in jobs):
            return
        # Compute jobs (the ranks' backward, a straggler's longer) all run at the pool's one
        # speed: the steps are equal until the first of them ends.
        threads = sum(job.weight for job in jobs)
        gloo = 2.0 if self.hosts_apart else float(self.p)   # (Gloo threads on a CPU)
        # The jobs' work left as of now (taken off them only if the steps are taken: the DES
        # advances its jobs at its CPU's events alone, and rounding follows that).
        done = (self.now - self.cpu_last) * self._rate() if jobs else 0.0
        jump, step, used = equal_steps(
            count - rep // 2, self._wire_s(nbytes), work,
            min(job.left for job in jobs) - done if jobs else None,
            alone=self._rate(threads, threads), both=self._rate(threads + gloo, threads),
            idle=self._rate(gloo, 0.0))
        if not jump:
            return
        self._cpu_event()
        self.now += jump * step
        for job in jobs:
            job.left -= jump * used
        self.cpu_last = self.now
        self._reschedule()
        for run in runs:
            run.procs[k][1] = rep + 2 * jump
            run.sent += jump * nbytes
            run.received += jump * nbytes

    def _glide(self) -> None:
        """The loop's work while the runs only take ring steps, without its batches' costs.

        Where a straggler's delay travels round the ring, a run parts from its end ranks a
        step at a time while the ranks beside it wait on earlier steps (it builds a
        staircase), or takes in the ranks beside it, which posted this step and wait on it
        (the staircase unwinds): O(p) events an all-reduce, the most of an iteration's.
        Here events are taken as ``run`` takes them (the timers due at one instant, or the
        jobs that end, as one batch in ``_posting`` order), with a ring step's reduction
        starting, and a post in those two shapes, done in line (the arithmetic of ``_job``
        and ``_post``, in their order) and anything else by ``_resume``.  The glide leaves to the
        loop what only it does: runs that ``_join`` would join, a batch of every run
        (``_jump``), and jobs ending other than ring steps' reductions."""
        k, p = self.talker, self.p
        if self.ready or not self.live_timers or len(self.first) < 3 or len(self.kinds) != 1:
            return
        program, timers, groups = self.programs[k], self.timers, self.groups

        def stepping(run, j: int, odd: int) -> bool:
            """Whether process ``j`` of ``run`` is the collectives' at a ring step, its
            messages on the wire (``odd``) or its reduction running."""
            pc, rep = run.procs[j][0], run.procs[j][1]
            return (j == k and pc < len(program) and program[pc][0] == STEPS
                    and rep % 2 == odd)

        mine = set()                           # ids of ring steps' reductions
        for group in groups.values():
            if not group.compute and len(group.members) <= 4 and all(
                    run.alive and run.procs[j][2] is not None and run.procs[j][2][1] is group
                    and stepping(run, j, 0) for run, j in group.members):
                mine.add(id(group))
        per_byte, latency = self._per_byte(), self.latency_s   # (no compute job starts or
        # ends, and no rank enters or leaves a collective, while runs glide)

        def post(run) -> bool:
            """``_resume`` then ``_post`` of a run's next step where it builds or unwinds."""
            proc = run.procs[k]
            pc, rep = proc[0], proc[1]
            _, collective, first, chunk, _, count = program[pc]
            n, lo = run.n, run.lo
            if rep == 2 * count or not 4 <= n <= p - 4:
                return False
            step = (collective, first + rep // 2)
            left, right = self._before((lo - 1) % p), self._after((lo + n) % p)
            posted = self._posted(left, k, step, 4), self._posted(right, k, step, 3)
            arrive = self.now + chunk * per_byte + latency
            if posted == (True, True):
                if left.n + right.n != 2 or left.procs[k][2][3] is None or \
                        left.procs[k][2][3] > arrive or right.procs[k][2][4] is None or \
                        right.procs[k][2][4] > arrive:
                    return False               # they would not go on with the run now
            elif posted != (False, False):
                return False
            saved = run.sent, run.received
            proc[1] = rep + 1
            run.sent += chunk
            run.received += chunk
            if posted[0]:
                # It unwinds: the neighbours, done with the step, join it in place.
                if not (self._twins(run, left, k) and self._twins(run, right, k)):
                    proc[1] = rep
                    run.sent, run.received = saved
                    return False
                self._unplace(run)
                self._drop(left)
                self._drop(right)
                run.lo, run.n = left.lo, n + 2
                self._place(run)
            else:
                # It builds: its end ranks wait for their outer neighbours.
                self._unplace(run)
                run.lo, run.n = (lo + 1) % p, n - 2
                self._place(run)
                for at, pending in ((lo, [None, arrive]), ((lo + n - 1) % p, [arrive, None])):
                    piece = run.copy(at, 1)
                    piece.procs[k][2] = ["step", step, chunk, *pending]
                    self._adopt(piece, k)
            self._timer(arrive, run, k)
            return True

        def loops(batch) -> bool:
            """Whether the loop must take this batch: ``_join`` would join two of its runs
            (neighbours in one state), or it holds every run (``_jump``)."""
            if len(batch) >= len(self.first):
                return True
            after = {(run.lo + run.n) % p: run for run, _ in batch}
            for other, _ in batch:
                run = after.get(other.lo)
                if run is not None and run is not other and run.alike(other):
                    return True
            return False

        while self.events < self.budget:
            while timers and not (timers[0][2].alive and
                                  timers[0][2].procs[timers[0][3]][2] == ("timer", timers[0][0])):
                heapq.heappop(timers)          # (a dropped run's, or one set again)
            due = self.cpu_due
            if timers and (due is None or timers[0][0] <= due):
                t = timers[0][0]
                if t < self.now:
                    return
                self.now = t
                batch = []
                while timers and timers[0][0] <= t:
                    _, _, run, j = heapq.heappop(timers)
                    if run.alive and run.procs[j][2] == ("timer", t):
                        self.live_timers -= 1
                        run.procs[j][2] = None
                        batch.append((run, j))
            elif due is not None and due >= self.now:
                self.now = due
                ended = self._finished()
                if any(id(groups[key]) not in mine for key in ended):
                    return                     # ``_end_jobs`` at this instant: the loop's
                for key in ended:
                    mine.discard(id(groups[key]))
                self._end_jobs(ended)
                batch, self.ready = self.ready, []
            else:
                return
            batch = self._stride(batch, mine)
            if batch is None:
                return                         # a job not a ring step's ends: the loop's
            if loops(batch):
                self.ready += batch
                return
            batch.sort(key=_taken)
            started = False
            for run, j in batch:
                if not (run.alive and run.procs[j][2] is None):
                    continue
                self.events += 1
                proc = run.procs[j]
                work = program[proc[0]][4] if stepping(run, j, 1) else 0.0
                if work > 0:
                    # ``_resume`` at a ring step's reduction (the pool's timer is set again
                    # after the batch).
                    proc[1] += 1
                    fresh = (work, 1.0, False, self.now) not in groups
                    self._job(run, k, work, 1.0, False, reschedule=False)
                    if fresh:
                        mine.add(id(proc[2][1]))
                    started = True
                elif not (stepping(run, j, 0) and post(run)):
                    self._resume(run, j)
                    per_byte = self._per_byte()    # (it may have entered or left one)
            if started:
                self._reschedule()
            if self.ready:
                return

    def _stride(self, batch, mine: set):
        """Whole ring steps of a few runs in step (``batch``: each one's collective process,
        ready in one run of ring steps, the runs whole steps apart or none), while nothing
        else happens: the glide's events without its timers and batches.

        Each step, in the glide's order (``_posting``), a run posts (``_post``): beside a
        rank that waits on this step with its other message in (a staircase's step) it takes
        it in; beside ranks not at this step (or the ones it left) it leaves its end rank to
        wait (made once the steps stop: nothing looks at it before); beside a one-rank run of
        the batch that posted before it, it delivers.  Its messages arrive at one instant
        (one kind of message), where every run's timer fires together; a reduction starts
        there for all (``_job``, one group) and ends, alone, at the pool's next event.  The
        steps stop where the glide would do otherwise: another timer or job due first, a
        post of another shape, runs that would join, the program past its ring steps.
        Returns the batch ready now (empty where a reduction runs; None where a job not
        theirs ends with it: the loop's)."""
        k, p = self.talker, self.p
        if not 1 <= len(batch) <= 8 or len(self.kinds) != 1:
            return batch                       # (a few: a straggler's staircase is one to
            # three runs, a second straggler, faster or slower, brings its own few)
        program = self.programs[k]
        runs = []
        for run, j in batch:
            if j != k or not run.alive or run.procs[k][2] is not None:
                return batch
            runs.append(run)
        pc, rep = runs[0].procs[k][0], runs[0].procs[k][1]
        if pc >= len(program) or program[pc][0] != STEPS or any(
                run.procs[k][0] != pc or (run.procs[k][1] - rep) % 2 for run in runs):
            return batch
        # Runs whole steps apart go together too, each posting its own step (a staircase
        # unwinding beside the next one building, hundreds of steps behind it, their timers
        # due at one instant: DDP without overlap, a ring per tensor on a pool, at 65,536
        # ranks): ``rep`` is the first's, each run's that plus its ``ahead``.
        ahead = {id(run): run.procs[k][1] - rep for run in runs}
        top, low = max(ahead.values()), min(ahead.values())
        ids = {id(run) for run in runs}
        if len(ids) != len(runs):
            return batch
        for run in runs:
            for j, proc in enumerate(run.procs):
                if j != k and (proc[2] is None or proc[2][0] not in ("job", "end", "done")
                               or (proc[2][0] == "job" and not proc[2][1].compute)):
                    return batch               # (only compute jobs go on beside the steps)
        timers = self.timers
        while timers and not (timers[0][2].alive and
                              timers[0][2].procs[timers[0][3]][2] == ("timer", timers[0][0])):
            heapq.heappop(timers)
        foreign = timers[0][0] if timers else float("inf")
        kind = self.kinds[0]
        per_byte = self._per_byte()            # (no rank enters or leaves a collective)

        first, last = self.first, self.last
        rest = [j for j in range(len(self.programs)) if j != k]

        def twin(run, other) -> bool:
            """``_twins`` but for the collectives' process and the bytes sent."""
            if run.fired != other.fired or run.talked != other.talked \
                    or run.depth != other.depth:
                return False
            for j in rest:
                if run.procs[j] != other.procs[j]:
                    return False
            return True

        alike: dict = {}                       # (id, id) -> whether two runs' others differ
        plans = order = None                   # the last step's, in the glide's order

        def takes(run, other, side, step, arrive, pc, rep, sent) -> bool:
            """Whether ``run``, posting ``step`` now (at ``rep``, its bytes then ``sent``),
            takes ``other`` in on ``side`` (``_post``'s merge): a neighbour, not of the batch,
            waiting on this step for ``run``'s message alone, its other one in by the time
            ``run``'s arrive, in ``run``'s state."""
            if other is None or id(other) in order:
                return False
            proc, theirs_sent = other.procs[k], other.sent
            stair = proc[2]
            if type(stair) is _Stair:           # (its rank next to ``run``, held by it)
                _, _, proc, theirs_sent, _ = stair.items[stair.high - 1 if side == 4
                                                         else stair.low]
            theirs = proc[2]
            return (type(theirs) is list and theirs[0] == "step" and theirs[1] == step
                    and theirs[side] is None and theirs[7 - side] is not None
                    and theirs[7 - side] <= arrive and proc[0] == pc
                    and proc[1] == rep + 1 and theirs_sent == sent
                    and twin(run, other))

        shed = {id(run): [False, False] for run in runs}   # whether it left an end rank
        pieces = []                            # the ranks left: (run, lo, proc, sent, rcvd)

        def apart(a, b) -> bool:
            """Whether two runs of the batch differ but in the steps (which they take
            together: so while they step)."""
            key = (id(a), id(b))
            if key not in alike:
                alike[key] = not twin(a, b)
            return alike[key]

        if len(runs) >= len(self.first) or any(
                not apart(run, self.first[(run.lo + run.n) % p]) for run in runs
                if id(self.first.get((run.lo + run.n) % p)) in ids):
            return batch                       # (``loops``: the loop's batch)

        def settle(ready):
            """The ranks left waiting made, in place: those one side of a run left, of one
            compute speed, one run holding them (``_Stair``), else each a run of its own (as
            ``_Run.copy`` and ``_adopt`` make them: their other processes are the run's, in
            compute jobs or waiting on nothing due); ``ready`` returned."""
            speeds = self.speeds
            sides = {}                         # (id(run), waits on its left) -> run, ranks
            for item in pieces:
                sides.setdefault((id(item[0]), item[2][2][3] is None), (item[0], []))[1].append(
                    item)
            for (_, waits_left), (run, left) in sides.items():
                if not waits_left:
                    left.reverse()             # (in the ranks' order: a side's first left
                    # outermost)
                others = [(j, run.procs[j]) for j in rest]
                jobs_of = [(j, run.procs[j][2][1].members) for j in rest
                           if run.procs[j][2][0] == "job"]
                lo = left[0][1]
                if len(left) > 1 and all((lo + i) % p == item[1] for i, item in enumerate(left)) \
                        and len({speeds[item[1]] for item in left}) == 1:
                    n = len(left)
                    left = [(run, lo, [-1, -1, _Stair(left)], float("nan"), float("nan"))]
                else:
                    n = 1
                for _, lo, proc, sent, received in left:
                    piece = _Run()
                    piece.lo, piece.n, piece.alive = lo, n, True
                    piece.fired, piece.talked, piece.depth = run.fired, run.talked, run.depth
                    piece.sent, piece.received = sent, received
                    piece.procs = procs = [proc] * len(run.procs)
                    for j, other in others:
                        procs[j] = other.copy()
                    for j, members in jobs_of:
                        members.append((piece, j))
                    first[lo] = last[(lo + n - 1) % p] = piece
            return ready

        groups = self.groups
        # ``_rate``: only the threads busy change while runs step.
        cores, efficiency, speed = self.cores, self.efficiency, self._speed(self.computing)
        rates: dict = {}
        jobs = list(groups.values())           # the others': none starts or ends meanwhile

        def rate_at(busy: float) -> float:
            rate = rates.get(busy)
            if rate is None:
                rate = rates[busy] = job_rate(cores, busy, efficiency, speed)
            return rate

        def reduction(now: float, cpu_last: float, busy: float, lefts: list, sizes: list,
                      work: float):
            """A step's reductions started now by runs of ``sizes`` ranks, beside the
            others' jobs with ``lefts`` work left as of ``cpu_last`` on ``busy`` threads, in
            the arithmetic of ``_cpu_event``, ``_job``, ``_reschedule`` and ``finished``:
            (how it goes, when it ends, the others' work left at its start and at its end,
            its own then, the threads busy with it, its threads).  It goes "alone" where it
            ends next and alone, "timer" where another timer comes first, "other" where
            another job ends with it."""
            start_lefts = lefts
            if lefts and now > cpu_last:
                progress = (now - cpu_last) * (rates.get(busy) or rate_at(busy))
                start_lefts = [left - progress for left in lefts]
            weight, both = 0.0, busy
            for size in sizes:
                weight += size * 1.0
                both += size * 1.0
            rate = rates.get(both) or rate_at(both)
            least = work
            for left in start_lefts:
                if left < least:
                    least = left
            due = now + max(0.0, least / rate)
            if not foreign > due:
                return "timer", due, start_lefts, start_lefts, work, both, weight
            end_lefts, mine = start_lefts, work
            if due > now:
                progress = (due - now) * rate
                end_lefts = [left - progress for left in start_lefts]
                mine = work - progress
            done = residue(mine)
            for left in end_lefts:
                if residue(left) or (not done and left <= mine):
                    return "other", due, start_lefts, end_lefts, mine, both, weight
            return "alone", due, start_lefts, end_lefts, mine, both, weight

        def next_due(now: float, lefts: list, busy: float):
            """``_reschedule`` once the reductions have ended: the others' next end."""
            if not lefts:
                return None
            least = lefts[0]
            for left in lefts:
                if left < least:
                    least = left
            return now + max(0.0, least / rate_at(busy))

        def reduce(work: float, rep: int):
            """The step's reductions, from their start to their end (``reduction``); False
            where a timer comes first (the glide's), None where a job not theirs ends with
            them (the loop's), with the reductions made as ``_job`` makes them."""
            now = self.now
            how, due, start_lefts, end_lefts, left, both, weight = reduction(
                now, self.cpu_last, self.busy, [job.left for job in jobs],
                [run.n for run in runs], work)
            self.events += len(runs)
            if how != "alone":
                at_due = how == "other"
                for job, value in zip(jobs, end_lefts if at_due else start_lefts):
                    job.left = value
                self.cpu_last = self.now = due if at_due else now
                group = groups[(work, 1.0, False, now)] = _Group(work, False, now)
                group.left, group.weight = (left if at_due else work), weight
                group.members = [(run, k) for run in runs]
                mine.add(id(group))
                for run in runs:
                    run.procs[k][1], run.procs[k][2] = rep + ahead[id(run)] + 1, ("job", group)
                self.busy, self.cpu_due = both, due
                return None if at_due else False
            for job, value in zip(jobs, end_lefts):                 # ``_end_jobs``
                job.left = value
            self.cpu_last = self.now = due
            for run in runs:
                run.procs[k][1] = rep + ahead[id(run)] + 1
            self.busy = both - weight
            self.cpu_due = next_due(due, end_lefts, self.busy)
            return True

        def repeat(pc: int, rep: int, collective, start: int, chunk: float, work: float,
                   count: int):
            """Steps alike, as the last step's ``plans`` say: a staircase building (one run
            leaving its end ranks, the commonest shape) or taken in (by the runs beside the
            straggler).  The steps of the loop below (the post, then ``reduce``), the same
            arithmetic in the same order, on locals; it stops before a step the loop would
            judge otherwise (at a post), or once posted where the loop would look again at
            the runs, or before a reduction that would not end alone (where ``reduce`` takes
            it up).  Returns the posts made, and "settle" or "judge" where the loop, after
            the last, would settle the runs or judge their plans anew."""
            now, cpu_last, busy, cpu_due = self.now, self.cpu_last, self.busy, self.cpu_due
            events, budget, posts, many = self.events, self.budget, 0, len(runs)
            lefts = [job.left for job in jobs]
            steps = along(plans)
            verdict = None
            while rep + top < 2 * count and events + many <= budget:
                arrive = self._delivered(chunk, kind, now, per_byte)
                if arrive >= foreign or (cpu_due is not None and arrive > cpu_due):
                    break
                for run, _, plan, a in steps:           # the post (``_post``)
                    if plan is None:
                        continue
                    left_does, right_does = plan
                    if run.n - (left_does == 0) - (right_does == 0) < 2 or (
                            left_does == 1 and not takes(
                                run, last.get((run.lo - 1) % p), 4,
                                (collective, start + (rep + a) // 2), arrive, pc, rep + a,
                                run.sent + chunk)) or (
                            right_does == 1 and not takes(
                                run, first.get((run.lo + run.n) % p), 3,
                                (collective, start + (rep + a) // 2), arrive, pc, rep + a,
                                run.sent + chunk)):
                        break
                else:
                    events += many
                    posts += 1
                    posted(steps, pc, rep, collective, start, chunk, arrive)
                    now = arrive
                    rep += 1
                    verdict = looked()
                    if verdict is not None:
                        break
                    if work <= 0:
                        rep += 1                   # (no reduction: the next post)
                        continue
                    if (work, 1.0, False, now) in groups or events + many > budget:
                        break
                    # The reductions (``reduce``), kept only if they end alone next.
                    how, due, _, end_lefts, _, both, weight = reduction(
                        now, cpu_last, busy, lefts, [run.n for run in runs], work)
                    if how != "alone":
                        break
                    lefts, cpu_last, now, busy = end_lefts, due, due, both - weight
                    cpu_due = next_due(due, lefts, busy)
                    rep += 1
                    for _, proc, _, a in steps:
                        proc[1] = rep + a
                    events += many
                    continue
                break
            self.now, self.cpu_last, self.busy, self.cpu_due = now, cpu_last, busy, cpu_due
            self.events = events
            self.order += posts * many
            for job, left in zip(jobs, lefts):
                job.left = left
            return posts, verdict

        def along(plans) -> list:
            """Per run, in order: it, its collectives' process, its plan, its ``ahead``."""
            return [(run, run.procs[k], plan, ahead[id(run)]) for run, plan in zip(runs, plans)]

        def posted(steps, pc: int, rep: int, collective, start: int, chunk: float,
                   arrive: float) -> None:
            """Every run's post of its step as its plan says (``steps``: ``along``'s; ``_post``:
            the end ranks left, then the neighbours taken in), in the glide's order."""
            for run, proc, plan, a in steps:
                run.sent += chunk
                run.received += chunk
                proc[0], proc[1] = pc, rep + a + 1
                if plan is None:
                    continue
                left_does, right_does = plan
                lo, n = run.lo, run.n
                step = (collective, start + (rep + a) // 2)
                if not left_does:
                    pieces.append((run, lo,
                                   [pc, rep + a + 1, ["step", step, chunk, None, arrive]],
                                   run.sent, run.received))
                    del first[lo]
                    lo, n = (lo + 1) % p, n - 1
                    first[lo] = run
                    shed[id(run)][0] = True
                if not right_does:
                    end = (lo + n - 1) % p
                    pieces.append((run, end,
                                   [pc, rep + a + 1, ["step", step, chunk, arrive, None]],
                                   run.sent, run.received))
                    del last[end]
                    n -= 1
                    last[(end - 1) % p] = run
                    shed[id(run)][1] = True
                if left_does == 1:
                    other = last[(lo - 1) % p]
                    if type(other.procs[k][2]) is _Stair:
                        self._shrink(other, False)         # (its last rank, in ``run`` now)
                        taken = 1
                    else:
                        del last[(lo - 1) % p]
                        other.procs[k][2][4] = arrive
                        other.alive = False        # (``_drop``: it has no timer)
                        taken = other.n
                    del first[lo]
                    lo, n = (lo - taken) % p, n + taken
                    first[lo] = run
                if right_does == 1:
                    other = first[(lo + n) % p]
                    if type(other.procs[k][2]) is _Stair:
                        self._shrink(other, True)
                        taken = 1
                    else:
                        del first[(lo + n) % p]
                        other.procs[k][2][3] = arrive
                        other.alive = False
                        taken = other.n
                    del last[(lo + n - 1) % p]
                    n += taken
                    last[(lo + n - 1) % p] = run
                run.lo, run.n = lo, n

        def looked():
            """After a step: "settle" where the runs would join (the timers fire together:
            the glide's batch), "judge" where their order changed, else None."""
            if len(runs) >= len(first) + len(pieces):
                return "settle"
            if len(runs) == 1:
                return None                    # (no other run of the batch beside it)
            verdict = before = None
            for run in runs:
                right = first.get((run.lo + run.n) % p)
                if right is not run and id(right) in order and not apart(run, right):
                    return "settle"
                key = _posting(run)
                if before is not None and before > key:
                    verdict = "judge"          # (the order changed: judge it all again)
                before = key
            return verdict

        while True:
            pc, rep = runs[0].procs[k][0], runs[0].procs[k][1] - ahead[id(runs[0])]
            _, collective, start, chunk, work, count = program[pc]
            if rep % 2:
                if work > 0:
                    # Their messages are in: each starts the step's reduction (``_resume``).
                    if (work, 1.0, False, self.now) in groups or \
                            self.events + len(runs) > self.budget:
                        return settle(batch)
                    ended = reduce(work, rep)
                    if ended is None:
                        settle(None)
                        return None
                    if not ended:
                        return settle([])      # (the glide takes the timer first)
                    # (``batch`` holds these runs still: the glide sorts what it is handed)
                    continue
                rep += 1                       # (``_resume``: no reduction, the next post)
            if rep + top == 2 * count:
                if top != low:
                    return settle(batch)       # (one run done with these steps, one not)
                pc, rep = pc + 1, 0
                if pc >= len(program) or program[pc][0] != STEPS:
                    return settle(batch)
                _, collective, start, chunk, work, count = program[pc]
            if plans is not None:
                posts, verdict = repeat(pc, rep, collective, start, chunk, work, count)
                if verdict == "settle":
                    return settle(batch)
                if verdict == "judge":
                    plans = None
                if posts:
                    continue
            if self.events + len(runs) > self.budget:
                return settle(batch)
            arrive = self._delivered(chunk, kind, self.now, per_byte)
            if arrive >= foreign or (self.cpu_due is not None and arrive > self.cpu_due):
                return settle(batch)           # (another event comes first or with them)
            # What each run does, in the glide's order, judged before any is done: per side,
            # leave its end rank (0), take in a waiting neighbour (1), deliver to a one-rank
            # run of the batch that posted before it (2).  Steps alike repeat it: only the
            # neighbours to take in are looked at again.  Each run posts its own step: runs
            # apart pair with no run of the batch.
            if plans is not None:
                for run, plan in zip(runs, plans):
                    if plan is None:
                        continue
                    if run.n - (plan[0] == 0) - (plan[1] == 0) < 2:
                        return settle(batch)
                    if plan[0] != 1 and plan[1] != 1:
                        continue
                    a = ahead[id(run)]
                    step, sent = (collective, start + (rep + a) // 2), run.sent + chunk
                    if (plan[0] == 1 and not takes(run, last.get((run.lo - 1) % p), 4, step,
                                                   arrive, pc, rep + a, sent)) or \
                            (plan[1] == 1 and not takes(run, first.get((run.lo + run.n) % p),
                                                        3, step, arrive, pc, rep + a, sent)):
                        plans = None
                        break
            if plans is None:
                plans = []
                if len(runs) > 1:
                    runs.sort(key=_posting)
                order = {id(run): i for i, run in enumerate(runs)}
                for i, run in enumerate(runs):
                    a = ahead[id(run)]
                    step, sent = (collective, start + (rep + a) // 2), run.sent + chunk
                    lo, n = run.lo, run.n
                    left, right = self._before((lo - 1) % p), self._after((lo + n) % p)
                    if n == 1:
                        # Its messages pair with the runs beside it, which post after it.
                        if left is None or right is None or left is right or not (
                                order.get(id(left), -1) > i and order.get(id(right), -1) > i
                                and ahead[id(left)] == a == ahead[id(right)]):
                            return settle(batch)
                        plans.append(None)
                        continue
                    gone = shed[id(run)]
                    if left is right and not (gone[0] or gone[1]):
                        return settle(batch)   # (the ring's one other run on both sides)
                    plan = []
                    for side, other, leaves in ((4, left, gone[0]), (3, right, gone[1])):
                        if leaves:
                            plan.append(0)
                        elif other is None or other is run:
                            return settle(batch)
                        elif id(other) in order:
                            if other.n != 1 or order[id(other)] > i or not apart(
                                    run, other) or ahead[id(other)] != a:
                                return settle(batch)
                            plan.append(2)
                        elif not (type(other.procs[k][2]) is list
                                  and other.procs[k][2][0] == "step"
                                  and other.procs[k][2][1] == step):
                            plan.append(0)     # (``_post``: it waits for that neighbour)
                        elif takes(run, other, side, step, arrive, pc, rep + a, sent):
                            plan.append(1)
                        else:
                            return settle(batch)
                    if n - (plan[0] == 0) - (plan[1] == 0) < 2:
                        return settle(batch)
                    plans.append(plan)
            # Done, in order.
            self.events += len(runs)
            self.order += len(runs)
            posted(along(plans), pc, rep, collective, start, chunk, arrive)
            self.now = arrive
            verdict = looked()
            if verdict == "settle":
                return settle(batch)
            if verdict == "judge":
                plans = None

    def run(self):
        while True:
            while self.ready:
                self._join()
                batch, self.ready = self.ready, []
                self._jump(batch)
                if len(batch) > 1:
                    batch.sort(key=_taken)
                self.deferred = False
                for run, k in batch:
                    if run.alive and run.procs[k][2] is None:
                        self.events += 1
                        if self.events > self.budget:
                            raise NotExact(
                                f"the ranks keep parting into runs of their own (more than "
                                f"{self.budget} events for {self.p} ranks)")
                        self._resume(run, k)
                deferred, self.deferred = self.deferred, None
                if deferred:
                    self._reschedule()
            self._glide()
            if self.ready:
                continue
            while self.timers and not self.timers[0][2].alive:
                heapq.heappop(self.timers)
            due_timer = self.timers[0][0] if self.timers else None
            due_job = self._host_due() if self.hosts_apart else self.cpu_due
            if due_timer is None and due_job is None:
                return
            if due_timer is not None and (due_job is None or due_timer <= due_job):
                self.now = max(self.now, due_timer)
                while self.timers and self.timers[0][0] <= self.now:
                    t, _, run, k = heapq.heappop(self.timers)
                    if run.alive and run.procs[k][2] == ("timer", t):
                        self.live_timers -= 1
                        run.procs[k][2] = None
                        self.ready.append((run, k))
                continue
            self.now = max(self.now, due_job)
            if self.hosts_apart:
                self._host_ends()
            else:
                self._end_jobs()

    def per_rank(self):
        """(finish, compute, comm, sent, received), each an array over the ranks."""
        sent, received = np.zeros(self.p), np.zeros(self.p)
        for run in self.first.values():
            for span in self._spans(run):
                sent[span], received[span] = run.sent, run.received
        return self.finish, self.compute_s, self.comm_s, sent, received


def iteration(spec: RunSpec, costs: CostInputs, *, buckets: bool, broadcast: bool,
              broadcast_end):
    """One iteration: per rank (finish, compute seconds, communication seconds, bytes sent,
    bytes received) in the all-reduces.  ``broadcast``: DDP's buffer broadcast runs;
    ``broadcast_end(start)``: when it ends, from each rank's start."""
    ring = _Ring(spec, costs, _programs(spec, costs, buckets, broadcast), broadcast_end)
    ring.run()      # (with the collector paused: ``fast.run_fast``)
    if np.isnan(ring.finish).any():
        raise NotExact("a rank of the runs did not finish")      # a bug, never a guess
    return ring.per_rank()
