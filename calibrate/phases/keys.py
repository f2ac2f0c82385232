"""How a calibration's samples are keyed: one typed key per kind of record in the samples log.

A key names what one record measured (which mode and batch size, which collective at which
size, ...): two records with the same key are the same measurement, so a resumed run skips a
planned key that the log already has.  Keys are read off the records as they are on disk
(``of``), so logs written before keys were typed resume as they are.  Frozen dataclasses, not
tuples: keys of different kinds never compare equal, whatever their fields.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ComputeKey:
    """A compute record: its ``mode`` ("alone", "data", "contended", "oversubscribed"), the
    batch size, and for one round of the interleaved alone sweep the round (None: a record of
    all of a size's repetitions, as logs from before the rounds have them)."""
    mode: str
    batch_size: int
    round: int | None = None

    @classmethod
    def of(cls, record: dict, *modes: str) -> "ComputeKey | None":
        """The key of a compute record in one of ``modes``; None for any other record."""
        if record.get("kind") != "compute" or record.get("mode") not in modes:
            return None
        return cls(record["mode"], record["batch_size"], record.get("round"))


@dataclass(frozen=True)
class CollectiveKey:
    """A collective timed at one message size (bytes per rank; 0 for barrier)."""
    op: str
    bytes: int
    KIND = "collective"

    @classmethod
    def of(cls, record: dict) -> "CollectiveKey | None":
        if record.get("kind") != cls.KIND:
            return None
        return cls(record["op"], record["bytes"])


@dataclass(frozen=True)
class ContentionKey:
    """The contention all-reduce with ``burn_threads`` compute threads beside it on every rank."""
    burn_threads: int

    @classmethod
    def of(cls, record: dict) -> "ContentionKey | None":
        if record.get("kind") != "contention":
            return None
        return cls(record["burn_threads"])


@dataclass(frozen=True)
class ReductionKey:
    """The local reduction cost: one record per run."""

    @classmethod
    def of(cls, record: dict) -> "ReductionKey | None":
        return cls() if record.get("kind") == "reduction" else None


@dataclass(frozen=True)
class HostSideKey(CollectiveKey):
    """A collective timed at one size with the emulated links' shaping off (never equal to a
    ``CollectiveKey`` of the same op and size: dataclasses compare their classes)."""
    KIND = "host_side"


Key = ComputeKey | CollectiveKey | ContentionKey | ReductionKey | HostSideKey
