"""What a measurement phase of ``commsim calibrate`` is: one small interface, ``Phase``.

A phase measures one thing on every rank (compute alone, every rank computing at once, ...),
one key at a time (``keys``), and knows what its records add to the profile.  The loop that runs
the phases (``loop.calibrate_rank``) owns what they have in common: skipping what a resumed run
already has, the samples log, the heartbeat of ranks waiting for a solo phase, progress lines.
``RankContext`` is what a phase sees of its rank; ``ProfileParts`` is the profile in the making,
which the phases' ``add_to_profile`` fill in the order they run (a later phase may use what an
earlier one fitted: the collectives need the reduction cost).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Iterable

from commsim.calibrate.phases.keys import Key

if TYPE_CHECKING:
    from commsim.calibrate.compute import ComputeBench
    from commsim.calibrate.launch.heartbeat import Beat
    from commsim.profile import NetworkFit


class Phase(ABC):
    """One measurement phase: subclasses set the class attributes and implement the abstract
    methods; ``expected``, ``progress``, ``close`` and ``from_samples`` have defaults."""
    # The name of its records in ``Profile.samples``.
    samples: str = ""
    # Only some ranks measure (rank 0, while co-located ranks would share its cores): the loop
    # runs the whole phase inside one heartbeat block, so the others wait without timing out.
    solo: bool = False
    # It times the model (``RankContext.bench``), which is freed after the last such phase.
    uses_model: bool = False

    @abstractmethod
    def key(self, record: dict) -> Key | None:
        """The key of a samples-log record, if this phase took it (else None)."""

    @abstractmethod
    def plan(self, ctx: "RankContext") -> Iterable[Key]:
        """The keys this rank measures, in order.  Lazily where the next key depends on what was
        measured (``ctx.taken`` has every key's record once the loop has measured or resumed
        it); every rank must plan the same keys, unless the phase is ``solo``."""

    @abstractmethod
    def measure(self, ctx: "RankContext", key: Key) -> dict:
        """Measure ``key`` on every rank that planned it; its record (rank 0's is kept), whose
        ``key(record)`` is ``key``."""

    def expected(self, ctx: "RankContext") -> int:
        """How many keys this rank has still to measure (planned, not in ``ctx.taken``), as far
        as is known now: exact where the plan is fixed, an estimate for a lazy sweep, refined as
        it runs.  Only the progress display's total uses it: a wrong guess is a jump there."""
        return 0

    def progress(self, record: dict) -> str | None:
        """The progress line for a record just measured (None: none)."""
        return None

    def close(self) -> None:
        """Release what measuring held (helper processes): called when the phase ends, also on
        an error."""

    @abstractmethod
    def add_to_profile(self, records: list[dict], parts: "ProfileParts") -> None:
        """Fit this phase's ``records`` (all of them: resumed and measured) into ``parts``,
        and keep them under ``parts.samples[self.samples]``."""

    def from_samples(self, samples: dict) -> list[dict]:
        """This phase's records back from a profile's samples (``refit_profile``)."""
        return list(samples.get(self.samples) or [])


def left(ctx: "RankContext", keys: Iterable[Key]) -> int:
    """How many of ``keys`` are still to measure (``Phase.expected``)."""
    return sum(key not in ctx.taken for key in keys)


@dataclass
class RankContext:
    """One rank of a calibration as its phases see it."""
    rank: int
    world_size: int
    config: dict
    # Every rank's host name, by rank: which ranks share this host's cores.
    hosts: list[str]
    # A heartbeat block on the ranks' own group (``launch.heartbeat``).
    heartbeat: Callable[[], ContextManager["Beat"]]
    # The model being calibrated, its optimiser and inputs; None once no phase needs it.
    bench: "ComputeBench | None"
    # Every record this run has, by key: resumed from the samples log or measured (every rank).
    taken: dict[Key, dict] = field(default_factory=dict)

    @property
    def colocated(self) -> int:
        """Ranks on this rank's host (this one included)."""
        return self.hosts.count(self.hosts[self.rank])

    @property
    def local_index(self) -> int:
        """This rank's place among the ranks of its host."""
        return self.hosts[:self.rank].count(self.hosts[self.rank])

    @property
    def threads(self) -> int:
        import torch

        return torch.get_num_threads()

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.config["input_shape"])


@dataclass
class ProfileParts:
    """A profile in the making: what the phases' records add up to.  ``assemble`` makes the
    ``Profile`` of it (with the model's shapes and the run's metadata)."""
    world_size: int
    compute: dict[str, Any] = field(default_factory=dict)      # ComputeTable's fields
    compute_fits: dict[str, dict] = field(default_factory=dict)  # by mode: ``fit.fit_compute``
    # The compute record whose gradient-ready fractions the profile takes.
    grad_ready: dict | None = None
    network: "NetworkFit | None" = None
    collectives: dict[str, Any] = field(default_factory=dict)
    # The reduction record (None: not measured) and γ, the seconds per byte it fits.
    reduction: dict | None = None
    reduction_s_per_B: float = 0.0
    samples: dict[str, Any] = field(default_factory=dict)


def median_text(values: list[float]) -> str:
    """A progress line's median of timings."""
    from commsim.calibrate.compute import median_iqr
    from commsim.units import fmt_time

    return fmt_time(median_iqr(values)[0])
