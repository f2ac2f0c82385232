"""The discrete-event machinery: CPUs, NICs, messages, and what happened when.

* ``ProcessorSharingCPU``: a pool of cores.  Each job has an amount of work (seconds at full speed
  with its thread count) and a thread count.  While the busy threads fit in the cores every job
  runs at full speed; beyond that every job slows by cores / busy threads (processor sharing), so
  co-located ranks and Gloo's reduction threads take CPU from each other, as on a real host.
* NICs: each host's transmit and receive directions are simpy resources (full duplex).  A message
  of n bytes holds the sender's transmit and the receiver's receive direction for n / bandwidth,
  then is delivered one latency later.  Messages queue behind others on the same direction.
* Rendezvous: a transfer starts when the sender has posted the send and the receiver has posted the
  matching receive (FIFO per ordered pair, like MPI/Gloo tags in order); both sides complete when
  the message is delivered.
* Recording: per-rank compute and communication intervals, NIC busy intervals, bytes, so the
  result and the Perfetto trace are computed from the same events.
"""
from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from commsim.costs import cpu_load, job_rate

if TYPE_CHECKING:       # imported where a DES starts: the fast engine's start-up skips it
    import simpy

# Work below this (seconds) is finished: guards float residue in processor sharing.
_EPS = 1e-15


@dataclass
class Interval:
    track: str      # "compute", "comm", "tx", "rx"
    owner: int      # rank (compute/comm) or host (tx/rx)
    name: str
    start: float
    end: float
    args: dict = field(default_factory=dict)


def finished(jobs: dict) -> list:
    """The keys of the jobs (key -> [work left, ...], in arrival order) that are done
    (``finished_jobs``)."""
    return [key for _, key in finished_jobs([(job[0], key) for key, job in jobs.items()])]


def finished_jobs(jobs: list) -> list:
    """The jobs ([work left, ...], in arrival order) that are done, in that order: those
    within float residue of no work left (``residue``), else the one closest to done (finish
    it rather than spin on tiny timeouts)."""
    return [job for job in jobs if residue(job[0])] or [min(jobs, key=lambda job: job[0])]


def residue(left: float) -> bool:
    """Whether ``left`` work is float residue of none: the job is done."""
    return left <= _EPS * max(1.0, left)


class ProcessorSharingCPU:
    """Cores shared by jobs; exact processor sharing, event-driven (no time slicing)."""

    def __init__(self, env: simpy.Environment, cores: float, efficiency: tuple = (),
                 comm_speed=None):
        self.env = env
        self.cores = float(cores)
        self.efficiency = tuple(efficiency)
        # load -> fraction of speed jobs keep while ranks on these cores communicate (measured).
        self.comm_speed = comm_speed
        self.jobs: dict[int, list] = {}   # id -> [remaining_work, threads, done_event, compute]
        self.compute_threads = 0.0        # threads of running compute jobs (not comm library)
        self.comm_ranks = 0               # ranks on these cores inside a collective (SimContext)
        self._next_id = 0
        self._last = 0.0
        self._version = 0

    def _rate(self) -> float:
        busy = sum(job[1] for job in self.jobs.values())
        talking = self.comm_ranks and self.comm_speed is not None
        return job_rate(self.cores, busy, self.efficiency,
                        self.comm_speed(self.load()) if talking else 1.0)

    def _advance(self) -> None:
        now = self.env.now
        if self.jobs and now > self._last:
            progress = (now - self._last) * self._rate()
            for job in self.jobs.values():
                job[0] -= progress
        self._last = now

    def _reschedule(self) -> None:
        self._version += 1
        if not self.jobs:
            return
        version = self._version
        delay = max(0.0, min(job[0] for job in self.jobs.values()) / self._rate())
        self.env.timeout(delay).callbacks.append(lambda _ev: self._on_timer(version))

    def _on_timer(self, version: int) -> None:
        if version != self._version:
            return  # superseded by an arrival or a departure
        self._advance()
        for jid in finished(self.jobs):
            job = self.jobs.pop(jid)
            if job[3]:
                self.compute_threads -= job[1]
            job[2].succeed()
        self._reschedule()

    def run(self, work_s: float, threads: float, compute: bool = False) -> simpy.Event:
        """An event that fires when ``work_s`` of work with ``threads`` threads is done;
        ``compute`` marks model compute (it makes concurrent communication contended)."""
        done = self.env.event()
        if work_s <= 0:
            done.succeed()
            return done
        self._advance()
        if compute:
            self.compute_threads += threads
        self.jobs[self._next_id] = [work_s, threads, done, compute]
        self._next_id += 1
        self._reschedule()
        return done

    def communicating(self, delta: int) -> None:
        """``delta`` ranks on these cores started (+1) or ended (-1) their collectives: the
        load, and with it the jobs' speed, changes from now on."""
        self._advance()
        self.comm_ranks += delta
        self._reschedule()

    def load(self) -> float:
        """Compute threads per core, as the contention calibration counts its load; 0 while
        compute and communication threads together fit in the cores (nothing to contend)."""
        return cpu_load(self.cores, self.compute_threads, self.comm_ranks)


class Network:
    """Hosts' NIC directions and rendezvous matching of point-to-point messages."""

    def __init__(self, env: simpy.Environment, cluster, recorder: "Recorder",
                 contention=None):
        self.env = env
        # (src rank, dst rank) -> bandwidth cap from CPU contention at the endpoints.
        self.contention = contention
        self.cluster = cluster
        self.rec = recorder
        import simpy

        self.tx = [simpy.Resource(env, capacity=1) for _ in range(cluster.hosts)]
        self.rx = [simpy.Resource(env, capacity=1) for _ in range(cluster.hosts)]
        self._sends: dict[tuple[int, int], deque] = defaultdict(deque)
        self._recvs: dict[tuple[int, int], deque] = defaultdict(deque)
        self.intra_bw = cluster.intra_host_bandwidth_Bps
        self.intra_lat = cluster.intra_host_latency_s

    def send(self, src: int, dst: int, nbytes: float, slowdown: float = 1.0) -> simpy.Event:
        """``slowdown`` >= 1: the collective's measured efficiency on the wire (calibration)."""
        done = self.env.event()
        self._sends[(src, dst)].append((nbytes, slowdown, done))
        self._match(src, dst)
        return done

    def recv(self, dst: int, src: int) -> simpy.Event:
        done = self.env.event()
        self._recvs[(src, dst)].append(done)
        self._match(src, dst)
        return done

    def _match(self, src: int, dst: int) -> None:
        sends, recvs = self._sends[(src, dst)], self._recvs[(src, dst)]
        while sends and recvs:
            nbytes, slowdown, send_done = sends.popleft()
            recv_done = recvs.popleft()
            self.env.process(self._transfer(src, dst, nbytes, slowdown,
                                            (send_done, recv_done)))

    def _transfer(self, src: int, dst: int, nbytes: float, slowdown: float,
                  done: tuple):
        c = self.cluster
        hs, hd = c.host_of(src), c.host_of(dst)
        if hs == hd:
            # Same host: loopback/shared memory, no NIC.  Unknown intra-host numbers fall back
            # to the network's (conservative: a host is no faster inside than on the wire).
            bw = self.intra_bw or c.nic_bandwidth_Bps
            lat = c.nic_latency_s if self.intra_lat is None else self.intra_lat
            # (bytes times seconds per byte, as the fast engine's replay has it: two messages
            # due at one instant stay at one instant in both, in the order they were sent)
            yield self.env.timeout(lat + nbytes * (1.0 / bw))
        else:
            with self.tx[hs].request() as tx_req:
                yield tx_req
                with self.rx[hd].request() as rx_req:
                    yield rx_req
                    start = self.env.now
                    bw = min(c.bandwidth_of(hs), c.bandwidth_of(hd))
                    per_byte = slowdown / bw
                    if self.contention is not None:
                        # Busy CPUs cap the rate (the link may still be the slower part).
                        # Decided at the start: a message is one step of a collective, short
                        # against the compute phases whose start or end would change it.
                        per_byte = max(per_byte, 1.0 / self.contention(src, dst))
                    yield self.env.timeout(nbytes * per_byte)
                    self.rec.nic(hs, hd, src, dst, nbytes, start, self.env.now)
            yield self.env.timeout(c.nic_latency_s)
        self.rec.bytes(src, dst, nbytes)
        for ev in done:
            ev.succeed()


class Recorder:
    """Everything the result and the trace need, gathered as the simulation runs."""

    def __init__(self, world: int, hosts: int, timeline: bool):
        self.timeline = timeline
        self.intervals: list[Interval] = []
        self.compute_s = [0.0] * world
        self.comm_s = [0.0] * world
        self.sent = [0.0] * world
        self.received = [0.0] * world
        self.nic_tx_bytes = [0.0] * hosts
        self.nic_rx_bytes = [0.0] * hosts
        self.nic_tx_busy_s = [0.0] * hosts
        self.nic_rx_busy_s = [0.0] * hosts
        self.finish_s = [0.0] * world
        self._comm_depth = [0] * world
        self._comm_since = [0.0] * world

    def compute(self, rank: int, name: str, start: float, end: float, **args) -> None:
        self.compute_s[rank] += end - start
        if self.timeline:
            self.intervals.append(Interval("compute", rank, name, start, end, args))

    def comm(self, rank: int, name: str, start: float, end: float, **args) -> None:
        if self.timeline:
            self.intervals.append(Interval("comm", rank, name, start, end, args))

    def comm_begin(self, rank: int, now: float) -> bool:
        """Communication time is the union of a rank's in-flight collectives.  True when the
        rank was not communicating before."""
        first = self._comm_depth[rank] == 0
        if first:
            self._comm_since[rank] = now
        self._comm_depth[rank] += 1
        return first

    def comm_end(self, rank: int, now: float) -> bool:
        """True when the rank's last in-flight collective ended."""
        self._comm_depth[rank] -= 1
        if self._comm_depth[rank] == 0:
            self.comm_s[rank] += now - self._comm_since[rank]
            return True
        return False

    def nic(self, hs: int, hd: int, src: int, dst: int, nbytes: float, start: float,
            end: float) -> None:
        self.nic_tx_bytes[hs] += nbytes
        self.nic_rx_bytes[hd] += nbytes
        self.nic_tx_busy_s[hs] += end - start
        self.nic_rx_busy_s[hd] += end - start
        if self.timeline:
            self.intervals.append(Interval("tx", hs, f"{src}->{dst}", start, end,
                                           {"bytes": nbytes}))
            self.intervals.append(Interval("rx", hd, f"{src}->{dst}", start, end,
                                           {"bytes": nbytes}))

    def bytes(self, src: int, dst: int, nbytes: float) -> None:
        self.sent[src] += nbytes
        self.received[dst] += nbytes
