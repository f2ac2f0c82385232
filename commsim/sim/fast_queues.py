"""Messages queueing on shared NIC directions, as the DES queues them, for the fast engine.

With several ranks per host, a collective's messages can meet on one NIC direction: recursive
doubling and Rabenseifner send every rank of a host to another host at once, and trees or folds
load a host's NIC unevenly once a straggler or a slow link shifts the ranks.  The DES
(``commsim.sim.engine.Network``) then queues them: a transfer requests its sender's transmit
direction when the send and the receive are both posted, holds it while it requests the
receiver's receive direction, transmits, and releases both (simpy resources: FIFO in request
order).  ``NicState`` keeps, per host, when each direction is free and when it was last
requested, across the collectives of one run; ``simulate`` replays the ranks' processes
(their compute jobs, their collectives' messages and reductions) through those queues and the
hosts' CPUs.

``simulate`` is a small event simulation, in time order with simpy's tie order: events at one
instant run in the order they were scheduled, and every step the DES takes through simpy's
queue between two actions (a resource granted, a release processed, a transfer's completion
delivered, an all_of completed, a CPU timer set again and fired, a process spawned, signalled
or resumed) is one event here too, so that two messages asking for one direction at the same
instant queue as in the DES.  Processes that start at one instant start in the order given
(rank order, as the DES starts them).  The queue is a heap of instants with a list of events
per instant (ties are the rule on alike hosts): O(events + instants log instants) Python
operations, about 1 us an event.  The fast engine runs it where messages would meet
(``NicState.accept`` says), on a uniform cluster for one representative pair of hosts
(``fast_collectives``), and where jobs share a CPU out of step: then its CPUs are the DES's
processor sharing (``SharedCpus``) instead of fixed rates.
"""
from __future__ import annotations

import heapq
import math
from collections import defaultdict, deque
from collections.abc import Sequence

import numpy as np

from commsim.costs import cpu_load, job_rate
from commsim.sim.engine import finished_jobs

try:        # the event loop compiled (setup.py: optional, where a C compiler was found)
    from commsim.sim import _replay
except ImportError:         # pragma: no cover - a build without a compiler
    _replay = None

# Two times closer than this (relative to the clock) are one instant: float rounding.
TOUCH_RTOL = 1e-12

MEET = ("messages meet on a NIC direction at one instant, and the DES queues them in the "
        "order its event history gives them")

# A CPU job this close to its end (seconds) is done (the DES's residue guard on work left).
_DUE_S = 1e-15

# Actions of a rank's program.
SEND, RECV, EXCHANGE, GLOO, WAIT, ENTER, EXIT, MARK, COMPUTE, SPAWN, SIGNAL, READY, JOIN, \
    TOGETHER, ALL, GHOST, ROWS = range(17)
# A follower's host on the side that stands in for a host not replayed (``simulate``'s lead).
STAND_IN = -2
if _replay is not None and (getattr(_replay, "ROWS", None), getattr(_replay, "STAND_IN", None)) \
        != (ROWS, STAND_IN):
    _replay = None          # (a build older than these actions: the Python loop runs)
# Events.
_RESUME, _TIMER, _TX_GRANTED, _RX_GRANTED, _END, _TX_RELEASED, _RX_RELEASED, _DELIVERED, \
    _DONE, _SIGNALLED, _ENDED, _LATCHED = range(12)


def capped_s(nbytes, cap_Bps):
    """A message's seconds at the contended bandwidth ``cap_Bps``, in the DES's arithmetic
    (``engine.Network``: bytes times the larger seconds a byte, the link's or 1 / cap): a
    message's seconds are the larger of its link's and these.  Bytes / cap is a last bit
    apart, and a last bit reordered a crowded host's ends (DDP, recursive doubling, three
    ranks a host on one core: 1.7e-3 off)."""
    return nbytes * (1.0 / cap_Bps)


def _touch(end) -> float:
    """The clock's touch (``TOUCH_RTOL``) at the latest of ``end``: instants closer are one."""
    return TOUCH_RTOL * max(1.0, float(np.abs(end).max()))


class NicState:
    """Per host, when its transmit and receive directions are free and when they were last
    requested, over the collectives of one run (one rank per host on a direction at a time is
    the DES's FIFO without waiting)."""

    def __init__(self, hosts: int):
        self.free = (np.full(hosts, -np.inf), np.full(hosts, -np.inf))        # tx, rx
        self.requested = (np.full(hosts, -np.inf), np.full(hosts, -np.inf))

    @classmethod
    def alike(cls, hosts: int, free: tuple, requested: tuple) -> "NicState":
        """``hosts`` hosts whose (transmit, receive) directions were all freed at ``free`` and
        last requested at ``requested``."""
        state = cls(0)
        state.free = tuple(np.full(hosts, float(x)) for x in free)
        state.requested = tuple(np.full(hosts, float(x)) for x in requested)
        return state

    def copy(self) -> "NicState":
        other = NicState(0)
        other.free = tuple(x.copy() for x in self.free)
        other.requested = tuple(x.copy() for x in self.requested)
        return other

    @staticmethod
    def meet(hs, hd, begin, end) -> bool:
        """Whether two of these messages (``begin`` .. ``end`` on directions ``hs`` -> ``hd``)
        hold one direction at once (beyond the clock's touch): then some message queued."""
        if begin.size == 0:
            return False
        tol = _touch(end)
        for hosts in (hs, hd):
            # (by host and start; of those starting at one instant the longest first, which
            # meets every other there if any does: an empty message beside a longer one
            # queues behind it in the DES when the longer asks first)
            order = np.lexsort((-end, begin, hosts))
            h, b, e = hosts[order], begin[order], end[order]
            if np.any((h[1:] == h[:-1]) & (b[1:] < e[:-1] - tol)):
                return True
        return False

    def accept(self, hs, hd, begin, end) -> bool:
        """Messages timed without queues (``begin`` .. ``end`` on directions ``hs`` -> ``hd``):
        True, and recorded, if none overlaps another or starts before its directions are free
        (then no message waited, as the times assumed); False, and nothing recorded, if some
        message would have queued."""
        if begin.size == 0:
            return True
        tol = _touch(end)
        if any(np.any(begin < free[hosts] - tol) for hosts, free in zip((hs, hd), self.free)):
            return False
        if NicState.meet(hs, hd, begin, end):
            return False
        for hosts, free, requested in zip((hs, hd), self.free, self.requested):
            np.maximum.at(free, hosts, end)
            np.maximum.at(requested, hosts, begin)
        return True


class SharedCpus:
    """The DES's processor-sharing CPUs (``engine.ProcessorSharingCPU``) for ``simulate``:
    every job on a CPU runs at cores / busy threads once the busy threads exceed its cores,
    times the efficiency curve at the busy threads, times the calibrated compute speed at its
    load while a rank on it is inside a collective; a message between hosts is held to the
    contended bandwidth at the busier end's load when it starts.

    cpu:           per process, its CPU (a host's, or 0 for every process on one pool).
    cores:         cores of every CPU.
    threads:       threads of a compute job (a Gloo job has one).
    efficiency:    ((busy threads, speed), ...), ``ClusterSpec.cpu_efficiency``.
    costs:         the run's ``CostInputs`` (its contention curve), or None for none.
    multiplicity:  how many alike ranks each replayed process stands for on its CPU (a period
                   of a uniform cluster on one pool; per process, a class of ranks that act
                   at the same instants): its jobs' threads and its talking count that many
                   times.
    per_job:       keep each job's work left as the DES does, taking the progress off every
                   job at each of its CPU's events (a host's few jobs, a replay's pool).

    Every job on a CPU progresses at the same rate, so on a pool of many jobs the CPU keeps
    the work done per job since it was last idle (``done``) and its jobs on a heap keyed by
    the ``done`` at which each ends: O(log jobs) per arrival or end.  Its work left is then
    a difference of sums where the DES's is what successive progress left, and the two can
    differ in the last bit: two of a host's jobs whose ends tie in one end apart in the
    other, and the DES's event order with them (DDP over four ranks a host on one core, a
    tie the other way: 8.7e-4 off; 102 ranks on a pool of two cores, 2e-6 off).  So a
    replay keeps each job's work left (``per_job``), O(jobs) per event as the DES (the
    compiled loop: O(distinct works left), its jobs of one work left a group); the heap is
    for the event loops that time a pool of tens of thousands of ranks (the parameter
    server's last scatter, dp's phases, binomial ps's classes)."""

    def __init__(self, cpu, cores: float, threads: float, efficiency: tuple = (), costs=None,
                 multiplicity: float = 1.0, per_job: bool = False):
        self.cpu = list(cpu)
        self.per_job = per_job
        self.visits = math.inf          # the most groups of jobs the compiled loop's events visit
        self.cores, self.threads, self.efficiency = float(cores), float(threads), efficiency
        self.costs = costs if costs is not None and costs.contention else None
        self.m = [float(m) for m in multiplicity] if np.ndim(multiplicity) else \
            [float(multiplicity)] * len(self.cpu)
        count = max(self.cpu) + 1 if self.cpu else 0
        self.done = [0.0] * count
        self.last = [0.0] * count
        # Per CPU a heap of jobs: (done at its end, order, process, threads, compute?, work,
        # done when it came); with ``per_job`` a list in arrival order: [work left, order,
        # process, threads, compute?].
        self.jobs = [[] for _ in range(count)]
        # (Counted with each process's multiplicity.)
        self.busy = [0.0] * count                    # threads of running jobs
        self.computing = [0.0] * count               # threads of running compute jobs
        self.talking = [0.0] * count                 # ranks inside a collective
        self._rate = [None] * count                  # each CPU's rate, until it changes
        self._cap = [None] * count                   # and its contended bandwidth
        self._rates, self._caps = {}, {}             # by the threads they depend on
        self.started = {}                            # process -> when its job began
        self.compute_s = {}                          # process -> seconds of compute jobs
        self.comm_s = {}                             # process -> seconds inside collectives
        self._order = 0

    def unused(self) -> bool:
        """Whether no job has come yet, nor a process counted a second (the compiled loop
        takes these: ``_compiled``)."""
        return not (any(self.jobs) or self.started or self.compute_s or self.comm_s)

    def adopt(self, done, last, busy, computing, talking, jobs, started, compute_s, comm_s,
              order) -> None:
        """The state the compiled loop left (``_replay.c``'s ``cpus_state``)."""
        self.done, self.last, self.busy, self.computing, self.talking = \
            done, last, busy, computing, talking
        self.jobs, self.started, self.compute_s, self.comm_s = jobs, started, compute_s, comm_s
        self._order = order
        self._rate = [None] * len(done)
        self._cap = [None] * len(done)

    def rate(self, c: int) -> float:
        """``ProcessorSharingCPU._rate`` (kept until the CPU's jobs or talking ranks change)."""
        rate = self._rate[c]
        if rate is None:
            rate = self._rate[c] = self.rate_at(self.busy[c], self.computing[c],
                                                self.talking[c])
        return rate

    def rate_at(self, busy: float, computing: float, talking: float) -> float:
        """A CPU's rate with ``busy`` threads of jobs, ``computing`` of them compute jobs,
        ``talking`` ranks inside a collective."""
        # A function of the CPU's threads alone, which come back to a few values.
        key = (busy, computing, talking)
        rate = self._rates.get(key)
        if rate is None:
            speed = 1.0
            if talking and self.costs is not None:
                speed = self.costs.compute_speed(cpu_load(self.cores, computing, talking))
            rate = self._rates[key] = job_rate(self.cores, busy, self.efficiency, speed)
        return rate

    def advance(self, c: int, t: float) -> None:
        last = self.last[c]
        if t > last and self.jobs[c]:
            progress = (t - last) * self.rate(c)
            if self.per_job:
                for job in self.jobs[c]:
                    job[0] -= progress
            else:
                self.done[c] += progress
        self.last[c] = t

    def arrive(self, k: int, t: float, work: float, compute: bool) -> int:
        c = self.cpu[k]
        self.advance(c, t)
        threads = (self.threads if compute else 1.0) * self.m[k]
        if self.per_job:
            self.jobs[c].append([work, self._order, k, threads, compute])
        else:
            heapq.heappush(self.jobs[c], (self.done[c] + work, self._order, k, threads,
                                          compute, work, self.done[c]))
        self._order += 1
        self.busy[c] += threads
        self._rate[c] = self._cap[c] = None
        if compute:
            self.computing[c] += threads
        self.started[k] = t
        return c

    def communicating(self, k: int, t: float, delta: int) -> int:
        """Process k began (+1) or ended (-1) a collective at ``t``: its CPU."""
        c = self.cpu[k]
        self.advance(c, t)
        self.talking[c] += delta * self.m[k]
        self._rate[c] = self._cap[c] = None
        self.comm_s[k] = self.comm_s.get(k, 0.0) - delta * t
        return c

    def _left(self, c: int, job) -> float:
        """A job's work left: its work less what its CPU has done since it came (a job just
        come has its work left to the bit, as in the DES, so that equal jobs coming at one
        instant on two CPUs end at one instant there too)."""
        return job[5] - (self.done[c] - job[6])

    def next_end(self, c: int, t: float):
        """When the CPU's first job ends at the current rate (None: no job)."""
        jobs = self.jobs[c]
        if not jobs:
            return None
        if self.per_job:
            return t + max(0.0, min(job[0] for job in jobs) / self.rate(c))
        return t + max(0.0, self._left(c, jobs[0])) / self.rate(c)

    def finish_due(self, c: int, t: float) -> list:
        """The processes whose jobs end at ``t``, in the order they arrived (the DES's residue
        guard; at least the one closest to its end)."""
        self.advance(c, t)
        jobs = self.jobs[c]
        if self.per_job:
            ended = finished_jobs(jobs)
            for job in ended:
                jobs.remove(job)
        else:
            ended = [heapq.heappop(jobs)]
            while jobs:
                left = self._left(c, jobs[0])
                if left > _DUE_S * max(1.0, left):
                    break
                ended.append(heapq.heappop(jobs))
        if not jobs:
            # Idle: the next job's end is then its work over the rate, to the bit, as the DES
            # has it (two CPUs' jobs ending at one instant keep the DES's order).
            self.done[c] = 0.0
        if len(ended) > 1:
            ended.sort(key=lambda job: job[1])
        self._rate[c] = self._cap[c] = None
        busy, computing, compute_s = self.busy, self.computing, self.compute_s
        for _, _, k, threads, compute, *_ in ended:
            busy[c] -= threads
            if compute:
                computing[c] -= threads
                compute_s[k] = compute_s.get(k, 0.0) + (t - self.started[k])    # (the DES's sum)
        return [job[2] for job in ended]

    def ends_alone(self, c: int, k: int, starts, works) -> np.ndarray:
        """When compute jobs of ``works`` started at ``starts`` by processes like ``k`` on
        CPU ``c`` end, each alone there from its start (nothing else on the CPU, the process
        leaving a collective as it starts): ``communicating`` then ``arrive`` and
        ``next_end``, in their arithmetic (a job that comes has its work left)."""
        m = self.m[k]
        rate = self.rate_at(self.busy[c] + self.threads * m,
                            self.computing[c] + self.threads * m, self.talking[c] - m)
        return np.asarray(starts, dtype=float) + np.maximum(0.0, works) / rate

    def ran_alone(self, c: int, ks, starts, ends) -> None:
        """Processes ``ks`` ran compute jobs alone on CPU ``c`` from ``starts`` to ``ends``
        (``ends_alone``), leaving a collective as each started and entering one as it ended:
        the seconds ``finish_due`` and ``communicating`` count, the CPU as they leave it."""
        if not len(ks):
            return
        for k, start, end in zip(ks, np.asarray(starts).tolist(), np.asarray(ends).tolist()):
            self.started[k] = start
            self.compute_s[k] = self.compute_s.get(k, 0.0) + (end - start)
            self.comm_s[k] = self.comm_s.get(k, 0.0) + start - end
        self.last[c] = float(ends[-1])
        self.done[c] = 0.0
        self._order += len(ks)
        self._rate[c] = self._cap[c] = None

    def message_s(self, src: int, dst: int, nbytes: float, busy: float) -> float:
        """A message's time on the wire: its link's, or the contended bandwidth's at the
        busier end."""
        if self.costs is None:
            return busy
        c, d = self.cpu[src], self.cpu[dst]
        cap = self.cap(c)
        if d != c:
            cap = min(cap, self.cap(d))
        return max(busy, capped_s(nbytes, cap))

    def cap(self, c: int) -> float:
        """The contended bandwidth at the CPU's load (kept until its jobs or talking ranks
        change)."""
        cap = self._cap[c]
        if cap is None:
            cap = self._cap[c] = self.cap_at(self.computing[c], self.talking[c])
        return cap

    def cap_at(self, computing: float, talking: float) -> float:
        """The contended bandwidth on a CPU with ``computing`` threads of compute jobs and
        ``talking`` ranks inside a collective."""
        key = (computing, talking)
        cap = self._caps.get(key)
        if cap is None:
            cap = self._caps[key] = self.costs.contended_Bps(
                cpu_load(self.cores, computing, talking))
        return cap


# A row of an actions' table: the action's kind, its first integer (a message, a bucket), and
# its second integer (an exchange's message back) or its seconds, which share their place (no
# kind has both); one 16-byte record a row, so that the compiled loop reads a row from one
# place, and a replay of every rank at 65,536 ranks holds 4.3 million a bucket.
ROW = np.dtype({"names": ["kind", "a", "b", "w"],
                "formats": [np.int32, np.int32, np.int64, np.float64],
                "offsets": [0, 4, 8, 8], "itemsize": 16})
_NO_ROWS = np.zeros(0, ROW)
# The kinds whose row holds seconds (``w``) where the others hold their second integer.
_TIMED = (GLOO, COMPUTE, WAIT)
if _replay is not None and getattr(_replay, "ROW_BYTES", None) != ROW.itemsize:
    _replay = None          # (a build whose rows are another size: the Python loop runs)


def action_table(kind, a, b, w) -> np.ndarray:
    """An actions' table (``ROW`` records) from its four columns (a row keeps ``w`` where its
    kind takes seconds, ``b`` elsewhere)."""
    kind = np.asarray(kind)
    table = np.empty(kind.size, dtype=ROW)
    table["kind"], table["a"], table["b"] = kind, a, b
    np.copyto(table["w"], np.asarray(w, dtype=np.float64), where=np.isin(kind, _TIMED))
    return table


class Messages:
    """A replay's messages as its schedules make them: seven columns (src and dst processes,
    latency, busy seconds, transmit and receive hosts (-1 inside a host), bytes), kept as the
    arrays added until the replay reads them (``columns``): no Python object a message.  And
    a table of actions (``ROW`` records) that programs run rows of, (ROWS, first, end)
    (``add_rows``), so that a schedule's thousands of actions a rank are not a Python tuple
    each."""
    _TYPES = (np.int64, np.int64, np.float64, np.float64, np.int64, np.int64, np.float64)

    def __init__(self):
        self._chunks = [[] for _ in self._TYPES]
        self._row_chunks = []
        self.count = 0
        self.row_count = 0

    def add(self, columns) -> int:
        """Messages appended (seven columns of one length, arrays or lists): the first's id."""
        first = self.count
        for chunk, column, dtype in zip(self._chunks, columns, self._TYPES):
            chunk.append(np.asarray(column, dtype=dtype).ravel())
        self.count += self._chunks[0][-1].size
        return first

    def add_rows(self, table) -> int:
        """An actions' table appended (``ROW`` records): its first row's number."""
        first = self.row_count
        self._row_chunks.append(table)
        self.row_count += table.size
        return first

    def columns(self) -> "_Columns":
        """The seven columns, each one array, joined when first read (a column at a time, its
        chunks freed as it is joined: the replay's peak is one column over its messages; the
        compiled loop reads four of them unless the CPUs are shared)."""
        return _Columns(self)

    def column(self, i: int) -> np.ndarray:
        """Column ``i`` as one array (its chunks joined, once)."""
        chunks = self._chunks[i]
        if len(chunks) != 1:
            self._chunks[i] = [np.concatenate(chunks) if chunks
                               else np.zeros(0, self._TYPES[i])]
            del chunks
        return self._chunks[i][0]

    def rows(self) -> list:
        """The actions' table: its chunks as added, in order (a ROWS action's rows lie in
        one; not joined, which would copy the replay's largest array)."""
        return list(self._row_chunks)


class _Columns(Sequence):
    """``Messages.columns``: its seven columns, each joined when first read."""

    def __init__(self, messages: Messages):
        self._messages = messages

    def __len__(self) -> int:
        return len(Messages._TYPES)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        return self._messages.column(i % len(self))


def columns_of(messages) -> list:
    """A replay's messages as seven columns: ``Messages``'s, or the columns given."""
    return messages.columns() if isinstance(messages, Messages) else messages


def rows_of(messages):
    """A replay's actions' table (``Messages.rows``), None where it has none."""
    return messages.rows() if isinstance(messages, Messages) and messages.row_count else None


def _action_tuples(rows) -> list:
    """Each row of an actions' table as its action's tuple."""
    kinds, a, b, w = (rows[name].tolist() for name in ROW.names)
    return [(k, w[r]) if k in (GLOO, COMPUTE, WAIT) else (k, a[r], b[r]) if k == EXCHANGE
            else (k, a[r]) if k in (SEND, RECV, SIGNAL, READY) else (k, (a[r],)) if k == GHOST
            else (k,) for r, k in enumerate(kinds)]


def split_actions(rows, bounds) -> list:
    """Per process, the actions of its rows of a table (rows ``bounds[k]`` to
    ``bounds[k + 1]``) as tuples: a program."""
    made = _action_tuples(rows)
    edges = np.asarray(bounds).tolist()
    return [made[lo:hi] for lo, hi in zip(edges[:-1], edges[1:])]


def _with_rows(programs, rows) -> list:
    """The programs with each ROWS action as the actions of its rows (the Python loop's;
    ``rows``: the table's chunks)."""
    rows = np.concatenate(rows) if len(rows) else _NO_ROWS
    made = None
    out = []
    for program in programs:
        if not any(action[0] == ROWS for action in program):
            out.append(program)
            continue
        if made is None:
            made = _action_tuples(rows)
        out.append([x for action in program
                    for x in (made[action[1]:action[2]] if action[0] == ROWS else (action,))])
    return out


class _Direction:
    """One NIC direction as a simpy Resource of capacity 1: the holder, the FIFO of waiting
    transfers, and whether a release is still to be processed."""
    __slots__ = ("holder", "waiting")

    def __init__(self):
        self.holder = None
        self.waiting = deque()


def _ties(start, owners) -> list:
    """Per process, where ``simulate``'s answer could depend on ``order`` through it: its
    start instant and its owner where a process of another owner starts at that instant too,
    else None.

    ``order`` only sorts the processes that start at one instant, and simulate's events at
    one instant run in the order they were scheduled.  Every event is scheduled by one event
    before it (or by the start): so it has one root, the start it descends from.  Two events
    at one instant keep their order in every start order unless their roots are two processes
    that start at one instant and may swap (other owners): going up from both, their
    schedulers' instants differ (the earlier scheduled first), or they meet (one event's
    program order), or they reach two roots whose order is fixed.  Events that touch nothing
    another touches at their instant commute.  So where no two events at one instant whose
    roots may swap touch one resource (a NIC direction, a CPU, a process, a message's posts,
    the sequence or the latch), every order gives the same events, each at the same instant,
    and the same answer: the replays in other orders (``fast_collectives.replay``'s check)
    can only agree."""
    owners_at: dict = {}
    for t, owner in zip(start, owners):
        if t < np.inf:
            owners_at.setdefault(t, set()).add(owner)
    return [(t, owner) if t < np.inf and len(owners_at[t]) > 1 else None
            for t, owner in zip(start, owners)]


# Why a replay apart from the collective before it refuses (``simulate``'s ``after_release``
# and ``left``).
_ASKED_BEFORE = ("a message would ask for a NIC direction at or before the instant an earlier "
                 "collective's last one there asked for it, which the DES orders by its event "
                 "history")
# Why a replay stops where its CPUs' events have visited more groups of jobs than it may
# (``SharedCpus.visits``).
_TOO_LONG = ("the jobs sharing the CPUs part, and replaying them all would take longer than "
             "--engine auto's seconds")
_LEFT_AFTER = ("a rank would use its host's NIC or cores while another rank of the host is "
               "still in the earlier collective, whose last events there the DES orders among "
               "this one's by its event history")


def _released_later(start, host, nics: NicState) -> list:
    """(direction, host, when) for each NIC direction of these processes' hosts that an
    earlier collective frees after the first start, transmit directions first, hosts in
    order: its release is an event then.  (One freed at or before the first start is free:
    its release would come first among that instant's events, before any request, with
    nothing to grant.)"""
    hosts = np.unique(host)
    first_start = min(start, default=np.inf)
    return [(d, h, float(nics.free[d][h])) for d in (0, 1)
            for h in hosts[nics.free[d][hosts] > first_start].tolist()]


def _left_last(host, left, hosts: int) -> np.ndarray:
    """Per host of ``hosts``, when its last process left the earlier collective (-inf:
    none did; ``left`` per process, inf for one still to start)."""
    latest = np.full(hosts, -np.inf)
    left = np.asarray(left, dtype=np.float64)
    finite = left < np.inf
    np.maximum.at(latest, np.asarray(host, dtype=np.int64)[finite], left[finite])
    return latest


def simulate(start, order, host, programs, messages, gloo, nics: NicState, *, pairs: int = 0,
             compute_rate: float = 1.0, together: int = 0, cpus: SharedCpus | None = None,
             released: dict | None = None, sequence: list | None = None,
             after_release: bool = False, left: list | None = None,
             owners: list | None = None, ordered: list | None = None, rows=None,
             lead=None, grants=None):
    """When each process of the ranks ends (the DES's times, queues included), and its marks.

    Processes: one per rank, running its compute and collectives; or with ``pairs`` = n, as
    DDP runs them, two per rank: process k (k < n) all-reduces rank k's buckets, process n + k
    runs its compute and starts process k (``SPAWN``), as ``strategies.ddp`` does.

    start:     per process, when it starts its program (inf: when spawned).
    order:     per process, its place among those starting at one instant (simpy resumes them
               in its event order; rank order on a uniform cluster).
    host:      per process, its host (whose cores its jobs share with co-located ranks').
    programs:  per process, its actions in order: (SEND, message), (RECV, message),
               (EXCHANGE, message sent, message received), (ALL, messages sent, messages
               received) (posted in that order, all awaited), (GLOO, work seconds) on the Gloo
               thread, (COMPUTE, work seconds) at ``compute_rate``, (WAIT, seconds),
               (ENTER,) or (EXIT,) (a collective begins or ends: its host's CPU timer is set
               again), (MARK,) (note the time); and with ``pairs``: (SPAWN,) (process n + k
               starts process k), (SIGNAL, i) (process n + k: rank k's bucket i is ready),
               (READY, i) (process k waits for that), (JOIN,) (process n + k waits for
               process k to end); (TOGETHER,): wait until ``together`` processes have come
               to it (``SimContext.together``), all leaving in the order they came;
               (GHOST, messages): post a side of each for ranks that are not replayed,
               which act as this process does (a class of ranks), and go on (nothing
               waits on those sides); (ROWS, first, end): the actions of those rows of
               ``rows`` in turn (not ALL; a GHOST row posts one side, its first integer's).
    messages:  (src, dst, latency, busy, tx host, rx host) per message, src and dst processes;
               a host of -1 marks a message inside a host (no NIC: latency + busy), and with
               ``lead`` a host of ``STAND_IN`` a follower's side that stands in for a host
               not replayed.
    lead:      where given, per message its leader (-1: none): a follower (one side
               ``STAND_IN``) stands for the messages of a class of ranks that are not replayed,
               whose one host acts as its leader's does (``fast_stand_ins``: a replay by
               class beside a slow link).  Its transmit side standing in: it asks for its receive
               direction when its leader is granted its transmit direction (at once if that
               was before); its receive side: once granted its own transmit direction, it
               transmits when its leader is granted its receive direction.  It holds and
               releases its own direction only.
    grants:    with ``lead``, three arrays (one float a message, NaN before), filled in: when
               each message started (both its sides posted), was granted its transmit and
               its receive direction (a follower's stand-in side: its leader's grant as it
               took it), for the caller to check that every follower acted as its leader.
    rows:      the actions' table of ROWS actions (``Messages.rows``: chunks of ``ROW``
               records, each action's rows in one).
    gloo:      the Gloo thread's rate: a reduction of w work seconds takes w / gloo.
    cpus:      the DES's processor sharing instead (``SharedCpus``; ``gloo`` and
               ``compute_rate`` then unused), with a seventh column of ``messages``, their
               bytes, for the contention caps.
    nics:      the run's NicState: directions busy before are waited for; a request before
               or at the instant an earlier collective's last one on that direction asked for
               it raises NotExact (the DES would have served this one first, or orders the two
               by its event history, which this replay, starting after the other, does not
               hold).
    after_release: a request before or at an earlier collective's last release on its
               direction raises NotExact too (a collective replayed apart from the one before
               it over every rank: waiting behind that message, its grant comes at a release
               event this replay places first among the instant's, the DES after the
               message's end; with three ranks a host that order decided a queue).
    left:      where given (a collective replayed apart from the one before it), per process,
               when it left that one: a message asking for a direction of a host, or a job on
               its CPU, before or at the instant the host's last process left it raises
               NotExact (the DES holds that process's last events there among this
               collective's, in an order a replay apart does not hold: ties on the host's
               CPU timer, or on its NIC, broken otherwise).
    released:  where given, each message between hosts -> when it released its directions.
    sequence:  where given, each process appended as it passes a mark and as it ends, in the
               order the DES's events take them (the order in which processes that leave a
               collective at one instant go on to the next).
    owners, ordered: where given, per process its owner (processes of one owner keep their
               order among those starting at one instant: its host, or itself), and a list to
               which the replay appends whether its answer is the same in every order of the
               owners that ``order`` could give (``_ties``).

    Steps: every process resumes at its start (in ``order`` for ties) and runs its program
    until it waits: a reduction or compute is a job on its host's CPU, whose one timer (for
    the job that ends first) is set again whenever a job arrives or ends there or a collective
    begins or ends (``ProcessorSharingCPU._reschedule``), and ends every job due at once, in
    arrival order; a spawned process runs as soon as its parent waits (simpy's Initialize is
    urgent); a signal or a process's end is an event its waiter resumes on; a
    wait is a timeout; a posted message is matched once both its ends have posted; a matched
    message inside a host is delivered after its latency and busy time; one between hosts
    requests the transmit direction, holds it while it requests the receive direction,
    transmits, releases both (each waiter granted in FIFO order) and is delivered a latency
    later; a rank waiting for its messages resumes when they all are delivered.
    """
    if lead is not None and cpus is not None:
        raise ValueError("followers beside shared CPUs")
    if _replay is not None and ordered is None and (cpus is None or cpus.unused()):
        return _compiled(start, order, host, programs, messages, gloo, nics, pairs=pairs,
                         compute_rate=compute_rate, together=together, cpus=cpus,
                         released=released, sequence=sequence, after_release=after_release,
                         left=left, rows=rows, lead=lead, grants=grants)
    if rows is not None:
        programs = _with_rows(programs, rows)
    # (lists: this loop reads a message's fields one at a time)
    messages = [x.tolist() if isinstance(x, np.ndarray) else x for x in messages]
    src, dst, lat, busy, tx_host, rx_host = messages[:6]
    nbytes = messages[6] if cpus is not None else None
    n = len(start)
    directions = (defaultdict(_Direction), defaultdict(_Direction))   # as they are first used
    posted = [0] * len(src)
    waiting_on = [None] * len(src) * 2         # (message, side) -> rank waiting on it
    pending = [0] * n                          # deliveries a process still waits for
    all_of = [False] * n                       # whether it waits on them as simpy's all_of
    fired = set()                              # signals and ends processed
    waits = {}                                 # process -> the signal or end it waits for
    spawned = []                               # processes to start at once
    latch = []                                 # processes at TOGETHER, in the order they came
    # Per host, its CPU's jobs as ``engine.ProcessorSharingCPU`` holds them: [work left, rate,
    # rank] in arrival order, taken off at the host's CPU events only (as the DES advances
    # them), and when it last did.  Done by the DES's residue rule (``engine.residue``), not
    # by an end instant: two jobs whose ends differ by less than the clock's resolution but
    # more than the residue end at two timers, the second after the instant's other events.
    jobs = {}
    advanced = {}
    # (every job at one rate: the soonest is the least work left over it, as the DES has it)
    one_rate = cpus is None and gloo == compute_rate
    timer = {}                                 # host -> the version of its valid timer
    pc = [0] * n
    finish = list(start)
    marks = [[] for _ in range(n)]
    # simpy's queue, ordered by (time, scheduling order): the instants to come on a heap, and
    # per instant its events in the order scheduled.  Ties are the rule on alike hosts, so
    # this sorts far fewer entries than a heap of every event would.
    instants = []
    at = {}
    heappush = heapq.heappush

    # Each event carries its root: the process whose start it descends from (-1: none), as
    # ``_ties`` follows them.
    root = -1
    checking = ordered is not None
    tie = _ties(start, owners) if checking else None
    touched: dict = {}                         # resource -> (instant, {start: owner})
    clash = []

    def touch(resource, t):
        """Notes that the event now running touches ``resource`` at t (``_ties``)."""
        nonlocal checking
        mine = tie[root] if root >= 0 else None
        if mine is None:
            return
        seen = touched.get(resource)
        if seen is None or seen[0] != t:
            touched[resource] = (t, {mine[0]: mine[1]})
        elif seen[1].setdefault(mine[0], mine[1]) != mine[1]:
            clash.append(resource)
            checking = False                   # (once is enough)

    def push(t, kind, what):
        bucket = at.get(t)
        if bucket is None:
            at[t] = bucket = []
            heappush(instants, t)
        bucket.append((kind, what, root))

    # What earlier collectives left on the directions (read only until the end).
    busy_before = list(zip(nics.free, nics.requested))
    for d, h, t in _released_later(start, host, nics):
        directions[d][h].holder = -1
        push(t, _TX_RELEASED if d == 0 else _RX_RELEASED, h)
    # Per direction, host -> its latest request and when it was last freed (the clock only
    # moves on: the latest is the last).
    requested = [{}, {}]
    newest_free = [{}, {}]
    # Per direction, the hosts whose requests have come after an earlier collective's latest
    # there (the clock only moves on, so a host passed once stays passed).
    passed = (set(), set())
    last = 0 if after_release else 1           # (busy_before's release or request)
    # Per host, when its last process left the earlier collective (a host leaves once its NIC
    # or CPU has been used after it: the clock only moves on).
    quiet: dict = {}
    if left is not None:
        latest = _left_last(host, left, len(nics.free[0]))
        quiet = {h: t for h, t in enumerate(latest.tolist()) if t > -np.inf}

    def refuse(reason):
        from commsim.sim.fast_collectives import NotExact
        raise NotExact(reason)

    def request(d, h, m, t):
        if checking:
            touch((d, h), t)
        if h not in passed[d]:
            # (at the instant of an earlier collective's last request here, the DES orders
            # the two by its event history, which a collective replayed alone does not hold)
            if t <= float(busy_before[d][last][h]) + TOUCH_RTOL * max(1.0, abs(t)):
                refuse(_ASKED_BEFORE)
            if h in quiet:
                settled(h, t)
            passed[d].add(h)
        direction = directions[d][h]
        free = direction.holder is None and not direction.waiting
        requested[d][h] = t
        if free:
            direction.holder = m
            at[t].append((_TX_GRANTED if d == 0 else _RX_GRANTED, m, root))     # (t is now)
        else:
            if direction.holder is None:       # released, its release not yet processed
                grant(d, h, t)
            direction.waiting.append(m)

    def settled(h, t):
        """Refuses a use of host h's NIC or CPU at t before or at the instant its last process
        left the earlier collective."""
        if t <= quiet.pop(h) + TOUCH_RTOL * max(1.0, abs(t)):
            refuse(_LEFT_AFTER)

    def grant(d, h, t):
        if checking:
            touch((d, h), t)
        direction = directions[d][h]
        if direction.holder is None and direction.waiting:
            m = direction.waiting.popleft()
            direction.holder = m
            push(t, _TX_GRANTED if d == 0 else _RX_GRANTED, m)

    # Followers (``lead``): per leader and direction, those waiting on its grant, in order.
    if lead is not None:
        lead = lead.tolist() if isinstance(lead, np.ndarray) else list(lead)
        started, tx_at, rx_at = grants
    following = ({}, {})

    def post(m, t):
        if checking:
            touch(m, t)
        posted[m] += 1
        if posted[m] < 2:
            return
        if lead is not None:
            started[m] = t
        if tx_host[m] == -1:
            push(t + (lat[m] + busy[m]), _DELIVERED, m)     # as the DES adds them
        elif tx_host[m] == STAND_IN:           # its sender's direction is its leader's
            if np.isnan(tx_at[lead[m]]):
                following[0].setdefault(lead[m], []).append(m)
            else:
                tx_at[m] = t
                request(1, rx_host[m], m, t)
        else:
            request(0, tx_host[m], m, t)

    def granted(m, t):
        """A message granted its transmit direction, with followers: it asks for its receive
        direction, or (its receive side standing in) waits for its leader's; its followers
        waiting on this grant ask for theirs."""
        tx_at[m] = t
        if rx_host[m] != STAND_IN:
            request(1, rx_host[m], m, t)
        elif np.isnan(rx_at[lead[m]]):         # its receiver's direction is its leader's
            following[1].setdefault(lead[m], []).append(m)
        else:
            rx_at[m] = t
            transmit(m, t)
        for f in following[0].pop(m, ()):
            tx_at[f] = t
            request(1, rx_host[f], f, t)

    def transmit(m, t):
        if cpus is None:
            push(t + busy[m], _END, m)
        else:
            if checking:                       # (the caps at both ends' loads)
                touch(("cpu", cpus.cpu[src[m]]), t)
                touch(("cpu", cpus.cpu[dst[m]]), t)
            push(t + cpus.message_s(src[m], dst[m], nbytes[m], busy[m]), _END, m)

    def advance(h, t):
        """``ProcessorSharingCPU._advance``: host h's jobs' work taken off to t."""
        if checking:
            touch(("cpu", h), t)
        running = jobs.get(h)
        if running and t > advanced[h]:
            elapsed = t - advanced[h]
            for job in running:
                job[0] -= elapsed * job[1]
        advanced[h] = t

    def soonest(running) -> float:
        """When the first of a CPU's jobs ends, from its last advance."""
        if one_rate:
            return min(running)[0] / running[0][1]
        return min(job[0] / job[1] for job in running)

    def reschedule(h, t):
        if checking:
            touch(("cpu", h), t)
        version = timer[h] = timer.get(h, 0) + 1
        if cpus is not None:
            end = cpus.next_end(h, t)
            if end is not None:
                push(end, _TIMER, (h, version))
            return
        running = jobs.get(h)
        if running:
            push(t + max(0.0, soonest(running)), _TIMER, (h, version))

    def run_rank(k, t):
        """Process k's actions from t until one waits."""
        if checking:
            touch(("process", k), t)
        program = programs[k]
        i, last = pc[k], len(program)
        try:
            while i < last:
                action = program[i]
                i += 1
                kind = action[0]
                if kind == GLOO or kind == COMPUTE:   # a CPU job (no work: its event at once)
                    if quiet and action[1] > 0 and host[k] in quiet:
                        settled(host[k], t)
                    if action[1] > 0 and cpus is not None:
                        reschedule(cpus.arrive(k, t, action[1], kind == COMPUTE), t)
                    elif action[1] > 0:
                        # ``ProcessorSharingCPU.run`` (``reschedule`` inline: a job a
                        # reduction, the commonest action)
                        h = host[k]
                        advance(h, t)
                        running = jobs.setdefault(h, [])
                        rate = gloo if kind == GLOO else compute_rate
                        running.append([action[1], rate, k])
                        version = timer[h] = timer.get(h, 0) + 1
                        push(t + max(0.0, action[1] / rate if len(running) == 1
                                     else soonest(running)), _TIMER, (h, version))
                    else:
                        push(t, _RESUME, k)
                    return
                if kind == EXCHANGE:
                    pending[k] = 2
                    all_of[k] = True
                    waiting_on[2 * action[1]] = k
                    waiting_on[2 * action[2] + 1] = k
                    post(action[1], t)
                    post(action[2], t)
                    return
                if kind == ALL:
                    pending[k] = len(action[1]) + len(action[2])
                    all_of[k] = True
                    for m in action[1]:
                        waiting_on[2 * m] = k
                    for m in action[2]:
                        waiting_on[2 * m + 1] = k
                    for m in (*action[1], *action[2]):
                        post(m, t)
                    return
                if kind == SEND or kind == RECV:
                    pending[k] = 1
                    all_of[k] = False
                    waiting_on[2 * action[1] + (kind == RECV)] = k
                    post(action[1], t)
                    return
                if kind == WAIT:
                    if action[1] > 0:
                        push(t + action[1], _RESUME, k)
                        return
                elif kind == MARK:
                    marks[k].append(t)
                    if sequence is not None:
                        if checking:
                            touch("sequence", t)
                        sequence.append(k)
                elif kind == GHOST:
                    for m in action[1]:
                        post(m, t)
                elif kind == TOGETHER:
                    if checking:
                        touch("latch", t)
                    latch.append(k)
                    if len(latch) == together:
                        push(t, _LATCHED, None)
                    return
                elif kind == SPAWN:
                    spawned.append(k - pairs)
                elif kind == SIGNAL:
                    push(t, _SIGNALLED, (k - pairs, action[1]))
                elif kind == READY or kind == JOIN:
                    key = (k, action[1]) if kind == READY else (k - pairs, None)
                    if key not in fired:
                        waits[k] = key
                        return
                elif cpus is not None:                 # ENTER, EXIT
                    reschedule(cpus.communicating(k, t, 1 if kind == ENTER else -1), t)
                else:                                  # (``ProcessorSharingCPU.communicating``)
                    advance(host[k], t)
                    reschedule(host[k], t)
        finally:
            pc[k] = i      # (where it waits, or its end)
        finish[k] = t
        if sequence is not None:
            if checking:
                touch("sequence", t)
            sequence.append(k)
        if k < pairs:
            push(t, _ENDED, k)                     # the process's own event

    for k in sorted(range(n), key=lambda k: (start[k], order[k])):
        if start[k] < np.inf:
            root = k
            push(start[k], _RESUME, k)
    heappop = heapq.heappop
    tx_directions, rx_directions = directions
    tx_freed, rx_freed = newest_free
    while instants:
        t = heappop(instants)
        # The commonest events first: a send's or receive's, a resume, a CPU's timer.
        bucket = at[t]
        for kind, what, root in bucket:    # events scheduled now join the end: run them too
            if kind == _DONE:
                # A message's send event, then its receive event, as the DES processes them
                # (one after the other: the delivery scheduled both at once), with nothing
                # between but what the first spawns.
                for side in (2 * what, 2 * what + 1):
                    k = waiting_on[side]
                    if k is None:                      # a ghost's side
                        continue
                    if checking:
                        touch(("process", k), t)
                    pending[k] -= 1
                    if pending[k] == 0:
                        if all_of[k]:
                            bucket.append((_RESUME, k, root))    # all_of's own event first
                        else:
                            run_rank(k, t)
                    while spawned:
                        run_rank(spawned.pop(0), t)
            elif kind == _RESUME:
                run_rank(what, t)
            elif kind == _TIMER:                       # the CPU's timer: its due jobs' events
                h, version = what
                if checking:
                    touch(("cpu", h), t)
                if version != timer[h]:
                    continue
                if cpus is not None:
                    for k in cpus.finish_due(h, t):
                        bucket.append((_RESUME, k, root))
                    reschedule(h, t)
                    continue
                # ``ProcessorSharingCPU._on_timer``: the jobs done resume in their order
                # (``engine.finished_jobs``), and the timer is set again for the rest.
                advance(h, t)
                running = jobs[h]
                if len(running) == 1:              # (done, by residue or as the closest)
                    bucket.append((_RESUME, running.pop()[2], root))
                    timer[h] = version + 1
                    continue
                for job in finished_jobs(running):
                    running.remove(job)
                    bucket.append((_RESUME, job[2], root))
                reschedule(h, t)
            elif kind == _TX_GRANTED:                  # hold the transmit side, ask the receive
                if lead is None:
                    request(1, rx_host[what], what, t)
                else:
                    granted(what, t)
            elif kind == _RX_GRANTED:
                if cpus is None:
                    end = t + busy[what]           # (``push`` inline, as below)
                    later = at.get(end)
                    if later is None:
                        at[end] = later = []
                        heappush(instants, end)
                    later.append((_END, what, root))
                else:
                    transmit(what, t)
                if lead is not None:
                    rx_at[what] = t
                    for f in following[1].pop(what, ()):
                        rx_at[f] = t
                        transmit(f, t)
            elif kind == _DELIVERED:                   # the send's event, then the receive's
                bucket.append((_DONE, what, root))
            elif kind == _END:                         # release receive, then transmit
                # A release's event grants the direction's first waiter; with none waiting
                # now it has nothing to do (a request before it finds the direction free and
                # takes it at once), so it is not scheduled.
                # (a follower holds only its own side's direction)
                h = rx_host[what]
                if checking:
                    touch((1, h), t)
                    touch((0, tx_host[what]), t)
                for h, held, freed, event in ((h, rx_directions, rx_freed, _RX_RELEASED),
                                              (tx_host[what], tx_directions, tx_freed,
                                               _TX_RELEASED)):
                    if h >= 0:
                        direction = held[h]
                        direction.holder = None
                        freed[h] = t
                        if direction.waiting:
                            bucket.append((event, h, root))
                if released is not None:
                    released[what] = t
                end = t + lat[what]
                later = at.get(end)
                if later is None:
                    at[end] = later = []
                    heappush(instants, end)
                later.append((_DELIVERED, what, root))
            elif kind == _TX_RELEASED or kind == _RX_RELEASED:
                d = 0 if kind == _TX_RELEASED else 1
                if checking:
                    touch((d, what), t)
                direction = directions[d][what]
                if direction.holder == -1:             # an earlier collective's message
                    direction.holder = None
                if direction.waiting and direction.holder is None:
                    grant(d, what, t)
            elif kind == _LATCHED:
                for k in latch:
                    run_rank(k, t)
            else:                                      # a signal, or a process's end
                key = what if kind == _SIGNALLED else (what, None)
                k = what[0] if kind == _SIGNALLED else what + pairs
                if checking:
                    touch(("process", k), t)
                fired.add(key)
                if waits.get(k) == key:
                    del waits[k]
                    run_rank(k, t)
            while spawned:
                run_rank(spawned.pop(0), t)
        del at[t]
    if ordered is not None:
        ordered.append(not clash)
    for d in (0, 1):
        for mine, theirs in ((newest_free[d], nics.free[d]), (requested[d], nics.requested[d])):
            if mine:
                touched = np.fromiter(mine, dtype=np.int64, count=len(mine))
                theirs[touched] = np.maximum(theirs[touched], list(mine.values()))
    return finish, marks


def _compiled(start, order, host, programs, messages, gloo, nics: NicState, *, pairs: int,
              compute_rate: float, together: int, cpus: SharedCpus | None,
              released: dict | None, sequence: list | None, after_release: bool,
              left: list | None, rows=None, lead=None, grants=None):
    """``simulate`` without the order note, its event loop compiled (``_replay.c``): the
    same arguments and answer, and ``cpus`` left as the Python loop leaves it.  Here the
    arrays the loop reads are made: the NIC directions' earlier state per host, the releases
    to schedule, the start order, per host when its last process left the earlier
    collective, and the CPUs' state."""
    start_a = np.asarray(start, dtype=np.float64)
    host_a = np.ascontiguousarray(host, dtype=np.int64)
    hosts = len(nics.free[0])
    lat, busy = (np.ascontiguousarray(x, dtype=np.float64) for x in messages[2:4])
    tx, rx = (np.ascontiguousarray(x, dtype=np.int64) for x in messages[4:6])
    releases = _released_later(start_a, host_a, nics)
    d_rel, h_rel, t_rel = ([x[i] for x in releases] for i in range(3))
    firsts = np.lexsort((np.asarray(order), start_a))          # (stable: rank order last)
    firsts = firsts[start_a[firsts] < np.inf]
    quiet = np.full(hosts, -np.inf) if left is None else _left_last(host_a, left, hosts)
    threshold = nics.free if after_release else nics.requested
    mine = [np.full(hosts, np.nan) for _ in range(4)]      # requested tx, rx; freed tx, rx
    m = len(lat)
    released_t = np.full(m if released is not None else 0, np.nan)
    released_order = np.empty(m if released is not None else 0, dtype=np.int64)
    shared = None
    if cpus is not None:
        floats = [np.array(x, dtype=np.float64) for x in (
            cpus.m, messages[6], cpus.done, cpus.last, cpus.busy, cpus.computing, cpus.talking)]
        shared = (cpus, np.array(cpus.cpu, dtype=np.int64), floats[0], cpus.cores,
                  cpus.threads, int(cpus.per_job), int(cpus.costs is not None),
                  *(np.ascontiguousarray(x, dtype=np.int64) for x in messages[:2]),
                  *floats[1:], cpus._order, float(cpus.visits))
    finish, marks, count, refused, state = _replay.run(
        start_a, host_a, firsts.astype(np.int64), programs, lat, busy, tx, rx,
        float(gloo if gloo is not None else 1.0), float(compute_rate), int(pairs),
        int(together), *(np.ascontiguousarray(x, dtype=np.float64) for x in threshold), quiet,
        np.array(d_rel, dtype=np.int64), np.array(h_rel, dtype=np.int64),
        np.array(t_rel, dtype=np.float64), *mine, released_t, released_order,
        sequence, shared, [np.ascontiguousarray(chunk, dtype=ROW) for chunk in rows or ()],
        None if lead is None else (np.ascontiguousarray(lead, dtype=np.int64), *grants))
    if state is not None:
        cpus.adopt(*state)
    if refused:
        from commsim.sim.fast_collectives import NotExact
        raise NotExact(_ASKED_BEFORE if refused == 1 else _LEFT_AFTER if refused == 2
                       else _TOO_LONG)
    if released is not None:
        for what in released_order[:count].tolist():
            released[what] = float(released_t[what])
    for d in (0, 1):
        for new, theirs in ((mine[2 + d], nics.free[d]), (mine[d], nics.requested[d])):
            touched = np.flatnonzero(~np.isnan(new))
            theirs[touched] = np.maximum(theirs[touched], new[touched])
    return finish, marks
