"""The per-run simulation context a strategy's rank processes run in.

A strategy sees ranks, not resources: it asks for compute (``compute``), CPU work done by the
communication library (``cpu``), messages (``send``/``recv``) and brackets its collectives with
``collective(...)`` so that communication time is accounted for.  Everything else (cores, NICs,
queues, recording) is the context's business.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING

from commsim.costs import CostInputs
from commsim.sim.engine import Network, ProcessorSharingCPU, Recorder
from commsim.spec import RunSpec

if TYPE_CHECKING:       # imported where a DES starts: the fast engine's start-up skips it
    import simpy


class SimContext:
    def __init__(self, spec: RunSpec, costs: CostInputs, *, timeline: bool = False):
        self.spec = spec
        self.costs = costs
        self.cluster = spec.cluster
        self.world = spec.world_size
        import simpy

        self.env = simpy.Environment()
        self._all_of = simpy.AllOf
        c = spec.cluster
        speed = costs.compute_speed if costs.contention else None
        if c.shared_cpu_cores is not None:
            pool = ProcessorSharingCPU(self.env, c.shared_cpu_cores, c.cpu_efficiency, speed)
            self._cpus = [pool] * c.hosts
        else:
            self._cpus = [ProcessorSharingCPU(self.env, c.cores_per_host, c.cpu_efficiency, speed)
                          for _ in range(c.hosts)]
        self.rec = Recorder(self.world, c.hosts, timeline)
        self.net = Network(self.env, c, self.rec,
                           contention=self._contention if costs.contention else None)
        self._latches: dict[str, list] = {}

    @property
    def now(self) -> float:
        return self.env.now

    def cpu_of(self, rank: int) -> ProcessorSharingCPU:
        return self._cpus[self.cluster.host_of(rank)]

    def compute(self, rank: int, name: str, work_s: float, **args):
        """Model compute (forward/backward/optimizer) with the rank's threads; stragglers slow."""
        work_s *= self.spec.stragglers.get(rank, 1.0)
        start = self.now
        yield self.cpu_of(rank).run(work_s, self.costs.threads_per_rank, compute=True)
        self.rec.compute(rank, name, start, self.now, **args)

    def cpu(self, rank: int, work_s: float):
        """CPU work of the communication library (reductions, scaling): one thread."""
        yield self.cpu_of(rank).run(work_s, 1)

    def send(self, src: int, dst: int, nbytes: float,
             collective: str = "all_reduce") -> simpy.Event:
        return self.net.send(src, dst, nbytes, self.costs.wire(collective))

    def recv(self, dst: int, src: int) -> simpy.Event:
        return self.net.recv(dst, src)

    def all_of(self, events) -> simpy.Event:
        return self._all_of(self.env, list(events))

    def wait(self, seconds: float):
        if seconds > 0:
            yield self.env.timeout(seconds)

    @contextmanager
    def collective(self, rank: int, name: str, nbytes: float):
        """Bracket one collective call for communication-time accounting and the timeline."""
        start = self.now
        if self.rec.comm_begin(rank, start):
            self.cpu_of(rank).communicating(+1)
        try:
            yield
        finally:
            if self.rec.comm_end(rank, self.now):
                self.cpu_of(rank).communicating(-1)
            self.rec.comm(rank, name, start, self.now, bytes=nbytes)

    def _contention(self, src: int, dst: int) -> float:
        """Bandwidth cap of a message: what calibration measured at the busier end's CPU load
        (compute threads per core)."""
        return min(self.costs.contended_Bps(self.cpu_of(src).load()),
                   self.costs.contended_Bps(self.cpu_of(dst).load()))

    def together(self, key: str, ranks: int | None = None) -> simpy.Event:
        """An event that fires once ``ranks`` (default: all) ranks have asked for ``key``:
        everyone leaves at the time the last one arrives."""
        need = self.world if ranks is None else ranks
        latch = self._latches.setdefault(key, [0, self.env.event()])
        latch[0] += 1
        if latch[0] == need:
            latch[1].succeed()
        return latch[1]

    def finish(self, rank: int) -> None:
        self.rec.finish_s[rank] = self.now
