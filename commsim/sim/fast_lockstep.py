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
other, so one rank's events tell them all: the CPU it shares carries ``m`` copies of each of its jobs (m = the ranks sharing it) and
each of its messages has a twin arriving from its partner at the same instant.

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
from collections import deque

from commsim.costs import CostInputs, cpu_load, job_rate
from commsim.sim.engine import finished
from commsim.sim.fast_collectives import cpu_of, intra_link
from commsim.spec import RunSpec

# Steps of a run left to the event loop at its end, so that a job ending there is seen.
_MARGIN = 2


def covers(spec: RunSpec) -> bool:
    """Whether ``spec`` is a lockstep world of all-reduces (see the module's docstring)."""
    from commsim.strategies import get_strategy

    c = spec.cluster
    if spec.strategy not in ("ring", "ddp") or spec.stragglers or c.slow_links_Bps:
        return False
    strategy = get_strategy(spec.strategy)
    p = spec.world_size
    g = spec.group_size or p
    if p % g:
        return False
    algorithm = strategy.algorithm(spec) or "ring"
    if algorithm == "hierarchical" and c.ranks_per_host == 1:
        algorithm = "ring"
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


class _Lockstep:
    """One rank's processes, its CPU (shared with m - 1 twins) and its messages."""

    def __init__(self, spec: RunSpec, costs: CostInputs):
        c = spec.cluster
        self.costs = costs
        self.cores, self.m = cpu_of(spec)
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
        self.per_byte = costs.wire("all_reduce") / c.nic_bandwidth_Bps
        self.capped = self.contention and self.inter
        self.now = 0.0
        self.jobs: dict[int, list] = {}          # process -> [work left, threads, compute, start]
        self.timers: list = []                    # (time, order, process)
        self.ready = deque()                      # processes to resume now, in order
        self.processes: list = []
        self.waiting: dict = {}                   # signal -> process waiting for it
        self.fired: set = set()
        self.depth = 0                            # nested collectives the rank is inside
        self.order = 0
        self.compute_s = 0.0
        self.comm_s = 0.0
        self.bytes = 0.0
        self._since = 0.0

    # -- the CPU ---------------------------------------------------------------------------

    def load(self, compute: bool, comm: bool) -> float:
        """``ProcessorSharingCPU.load`` with every twin in the same state."""
        return cpu_load(self.cores, self.m * self.threads if compute else 0.0,
                        self.m if comm else 0)

    def rate(self, compute: bool, gloo: bool, comm: bool) -> float:
        """``ProcessorSharingCPU._rate``: every job's speed."""
        busy = self.m * ((self.threads if compute else 0.0) + (1.0 if gloo else 0.0))
        speed = self.costs.compute_speed(self.load(compute, comm)) \
            if comm and self.contention else 1.0
        return job_rate(self.cores, busy, self.efficiency, speed)

    def _state(self):
        compute = any(job[2] for job in self.jobs.values())
        gloo = any(not job[2] for job in self.jobs.values())
        return compute, gloo, self.depth > 0

    def _current_rate(self) -> float:
        return self.rate(*self._state())

    def _advance(self, t: float) -> None:
        if self.jobs and t > self.now:
            progress = (t - self.now) * self._current_rate()
            for job in self.jobs.values():
                job[0] -= progress
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

    # -- collectives -------------------------------------------------------------------------

    def enter(self) -> None:
        self._advance(self.now)
        if self.depth == 0:
            self._since = self.now
        self.depth += 1

    def exit(self) -> None:
        self.depth -= 1
        if self.depth == 0:
            self.comm_s += self.now - self._since

    def steps(self, count: int, nbytes: float, work: float):
        """``count`` equal steps (a message each way, then ``work`` on the Gloo thread), those
        with nothing else due in between as one addition."""
        left = count
        while left:
            jump = self._jumpable(left, nbytes, work)
            if jump:
                left -= jump
                continue
            self.bytes += nbytes
            yield ("wait", self.message_s(nbytes))
            if work > 0:
                yield ("cpu", work, 1.0, False)
            left -= 1

    def _jumpable(self, left: int, nbytes: float, work: float) -> int:
        """Take as many of ``left`` steps as nothing else interrupts at once; how many."""
        if self.timers or self.ready or any(not job[2] for job in self.jobs.values()):
            return 0
        compute = [job for job in self.jobs.values() if job[2]]
        wire = self.message_s(nbytes)
        if not compute:
            step = wire + (work / self.rate(False, True, True) if work > 0 else 0.0)
            jump = left
        else:
            job = compute[0]
            alone = self.rate(True, False, True)
            both = self.rate(True, True, True)
            used = wire * alone + work          # backward's work done in one step
            jump = min(left, int(job[0] / used) - _MARGIN) if used > 0 else left
            if jump <= 0:
                return 0
            step = wire + (work / both if work > 0 else 0.0)
            job[0] -= jump * used
        self.now += jump * step
        self.bytes += jump * nbytes
        return jump

    # -- processes ---------------------------------------------------------------------------

    def start(self, process) -> None:
        self.processes.append(process)
        self.ready.append(len(self.processes) - 1)

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
            key = action[1]                       # "for": a signal or a process's end
            if key in self.fired:
                continue
            self.waiting[key] = k
            return

    def run(self) -> float:
        while True:
            while self.ready:
                self._resume(self.ready.popleft())
            due_job = None
            if self.jobs:
                rate = self._current_rate()
                due_job = self.now + min(job[0] for job in self.jobs.values()) / rate
            due_timer = self.timers[0][0] if self.timers else None
            if due_job is None and due_timer is None:
                return self.now
            if due_timer is not None and (due_job is None or due_timer <= due_job):
                self._advance(due_timer)
                while self.timers and self.timers[0][0] <= self.now:
                    self.ready.append(heapq.heappop(self.timers)[2])
                continue
            self._advance(due_job)
            for k in finished(self.jobs):
                job = self.jobs.pop(k)
                if job[2]:
                    self.compute_s += self.now - job[3]
                self.ready.append(k)


def iteration(spec: RunSpec, costs: CostInputs, *, buckets: bool,
              broadcast_end) -> tuple[float, float, float, float]:
    """One iteration on a lockstep world: (when every rank's step ends, its compute seconds, its
    communication seconds, the bytes it sent and received in the all-reduces).  ``buckets``:
    DDP's buckets overlapping backward, else every tensor all-reduced after backward (ring).
    ``broadcast_end(begin)``: when DDP's buffer broadcast ends if the ranks start it at
    ``begin`` (None: there is none)."""
    from commsim.strategies import get_strategy

    sim = _Lockstep(spec, costs)
    p = spec.world_size
    g = spec.group_size or p
    algorithm = get_strategy(spec.strategy).algorithm(spec) or "ring"
    fp16 = spec.compression == "fp16"
    gamma = costs.gamma_s_per_B
    overhead = costs.overhead("all_reduce")
    threads = costs.threads_per_rank

    def allreduce(nbytes, average=True):
        if g <= 1:
            return
        sim.enter()
        if overhead > 0:
            yield ("wait", overhead)
        for count, size, work in steps_of(algorithm, nbytes, g, gamma):
            yield from sim.steps(count, size, work)
        if average:
            yield ("cpu", nbytes * gamma, 1.0, False)
        sim.exit()

    def communicate():
        for i, bucket in enumerate(costs.buckets):
            yield ("for", ("ready", i))
            if fp16 and g > 1:
                sim.enter()
                yield ("cpu", bucket.bytes * gamma, 1.0, False)
                yield from allreduce(bucket.bytes / 2, average=False)
                yield ("cpu", bucket.bytes * gamma, 1.0, False)
                sim.exit()
            else:
                yield from allreduce(bucket.bytes)

    def backward_by_bucket():
        sim.start(communicate())
        done = 0.0
        for i, bucket in enumerate(costs.buckets):
            if spec.overlap:
                segment = (bucket.ready_fraction - done) * costs.backward_s
                if segment > 0:
                    yield ("cpu", segment, threads, True)
                done = max(done, bucket.ready_fraction)
                sim.signal(("ready", i))
        if done < 1.0:
            yield ("cpu", (1.0 - done) * costs.backward_s, threads, True)
        if not spec.overlap:
            for i in range(len(costs.buckets)):
                sim.signal(("ready", i))
        yield ("for", ("end", 1))

    def compute():
        for _ in range(spec.sync_every - 1):
            yield ("cpu", costs.forward_s, threads, True)
            yield ("cpu", costs.backward_s, threads, True)
        end = broadcast_end(sim.now) if buckets else None
        if end is not None:
            sim.enter()
            yield ("until", end)
            sim.exit()
        yield ("cpu", costs.forward_s, threads, True)
        if buckets:
            yield from backward_by_bucket()
        else:
            yield ("cpu", costs.backward_s, threads, True)
            for nbytes in costs.param_bytes:
                yield from allreduce(nbytes)
        yield ("cpu", costs.optimizer_s, threads, True)

    sim.start(compute())
    finish = sim.run()
    return finish, sim.compute_s, sim.comm_s, sim.bytes
