"""The one small interface every sync strategy implements, and the registry of them by CLI name.

A strategy is one module, and everything about it is reached through ``get_strategy(name)``:

* ``rank_process(ctx, rank)``: a simpy generator for one rank, run by the discrete-event engine
  (any cluster: stragglers, slow links, shared NICs and cores);
* ``analytic(spec, costs)``: the closed form of the same iteration on a homogeneous cluster;
* ``fast(spec, costs)``: the fast engine's recurrence (``commsim.sim.fast``), where the
  strategy has one;
* ``live_sync(model, comm)``: what ``commsim live`` runs between backward and the optimizer step
  (torch is imported inside), and the flags live and validation read (``live``, ``wraps_ddp``,
  ``probed_compute``);
* ``label`` and ``color``: how tables and plots name and draw it.

The engines must agree exactly where they apply; ``tests/test_closed_form.py`` and
``tests/test_fast_engine.py`` hold them to it.  Adding a strategy is one new module, imported in
``commsim/strategies/__init__.py``, plus its tests.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar

from commsim.costs import CostInputs
from commsim.errors import UserError
from commsim.spec import RunSpec


@dataclass(frozen=True)
class Timing:
    """What an engine says about one iteration, per rank and per host, before derived metrics."""
    finish_s: tuple[float, ...]          # per rank: when its optimizer step ended
    compute_s: tuple[float, ...]         # per rank: wall time in forward/backward/optimizer
    comm_s: tuple[float, ...]            # per rank: wall time with a collective in flight
    sent_bytes: tuple[float, ...]        # per rank
    received_bytes: tuple[float, ...]    # per rank
    nic_tx_bytes: tuple[float, ...]      # per host
    nic_rx_bytes: tuple[float, ...]      # per host
    intervals: tuple = field(default=(), compare=False)   # engine.Interval, when recorded


class Strategy(ABC):
    name: ClassVar[str]
    summary: ClassVar[str]
    label: ClassVar[str]                   # tables and plot legends
    color: ClassVar[str] = "#7f7f7f"       # plots
    # Its reductions run on the Gloo thread while backward computes (DDP): one more runnable
    # thread per rank, competing with compute for the host's cores.
    overlaps_backward: ClassVar[bool] = False
    # It broadcasts the model's buffers (batch-norm statistics) from rank 0 before forward.
    broadcasts_buffers: ClassVar[bool] = False
    # ``commsim live`` can run it; it wraps the model in DistributedDataParallel there.
    live: ClassVar[bool] = False
    wraps_ddp: ClassVar[bool] = False
    # Live times its compute on a communication-free copy of the model (its sync overlaps
    # backward, so the real loop cannot separate them); validation predicts the same quantity.
    probed_compute: ClassVar[bool] = False

    @abstractmethod
    def rank_process(self, ctx, rank: int):
        """Simpy generator: one iteration of ``rank``."""

    @abstractmethod
    def analytic(self, spec: RunSpec, costs: CostInputs) -> Timing:
        """Closed form of one iteration on a homogeneous cluster, one rank per host."""

    def fast(self, spec: RunSpec, costs: CostInputs, reach) -> Timing:
        """The fast engine's answer (``commsim.sim.fast``) within ``reach`` (``fast.Reach``:
        how long a replay of every rank it takes on); strategies without one keep this."""
        raise NotImplementedError

    @property
    def has_fast(self) -> bool:
        return type(self).fast is not Strategy.fast

    def live_sync(self, model, comm) -> None:
        """``commsim live``: synchronise gradients after backward.  ``comm`` has the rank's
        ``rank``, the ``size`` of its averaging group and the torch process ``group`` (None:
        all ranks).  Default: nothing (one rank, or DDP, which reduced inside backward)."""

    def bus_factor(self, p: int) -> float:
        """busbw / algbw for this strategy's synchronisation (nccl-tests convention)."""
        return 0.0

    algorithms: ClassVar[tuple[str, ...]] = ()

    def check(self, spec: RunSpec) -> None:
        """Refuse run specs the strategy cannot run (raise UserError)."""
        if spec.algorithm is not None and spec.algorithm not in self.algorithms:
            allowed = ", ".join(self.algorithms) or "none"
            raise UserError(f"strategy {self.name!r} has no algorithm {spec.algorithm!r}; "
                            f"choose from {allowed}")

    def algorithm(self, spec: RunSpec) -> str:
        return spec.algorithm or (self.algorithms[0] if self.algorithms else "")


REGISTRY: dict[str, Strategy] = {}


def register(cls: type[Strategy]) -> type[Strategy]:
    REGISTRY[cls.name] = cls()
    return cls


def get_strategy(name: str) -> Strategy:
    try:
        return REGISTRY[name]
    except KeyError:
        raise UserError(f"unknown strategy {name!r}; choose one of "
                        f"{', '.join(sorted(REGISTRY))}") from None


def accumulate(ctx, rank: int):
    """The k-1 local steps of gradient accumulation (no sync) before the synchronised one."""
    for step in range(ctx.spec.sync_every - 1):
        yield from ctx.compute(rank, "forward", ctx.costs.forward_s, local_step=step)
        yield from ctx.compute(rank, "backward", ctx.costs.backward_s, local_step=step)


def accumulation_s(spec: RunSpec, costs: CostInputs) -> float:
    """Closed form of ``accumulate``: (k-1)·(forward + backward)."""
    return (spec.sync_every - 1) * (costs.forward_s + costs.backward_s)


def forward_backward(ctx, rank: int):
    """Accumulation steps, then forward and backward of the synchronised step."""
    yield from accumulate(ctx, rank)
    yield from ctx.compute(rank, "forward", ctx.costs.forward_s)
    yield from ctx.compute(rank, "backward", ctx.costs.backward_s)


def uniform_timing(p: int, iteration_s: float, compute_s: float, comm_s: float,
                   sent_per_rank: float, received_per_rank: float) -> Timing:
    """A Timing in which every rank (one per host) behaves the same."""
    return Timing(finish_s=(iteration_s,) * p, compute_s=(compute_s,) * p, comm_s=(comm_s,) * p,
                  sent_bytes=(sent_per_rank,) * p, received_bytes=(received_per_rank,) * p,
                  nic_tx_bytes=(sent_per_rank,) * p, nic_rx_bytes=(received_per_rank,) * p)


def require_uniform_bytes(algorithm: str, p: int) -> None:
    """The closed forms report one byte count for every rank; tree-shaped algorithms load ranks
    unevenly (and fold ranks of non-powers of two), so their bytes come from the DES."""
    uniform = algorithm in ("ring", "hierarchical") or (
        algorithm in ("recursive_doubling", "rabenseifner") and p & (p - 1) == 0)
    if not uniform:
        raise UserError(f"--engine analytic: algorithm {algorithm!r} sends uneven bytes per "
                        "rank; use --engine des")
