"""Sync strategies, one module each, registered by CLI name (see ``base.REGISTRY``)."""
from commsim.strategies import ddp, dp, ps, ring, single  # noqa: F401  (registers them)
from commsim.strategies.base import REGISTRY, Strategy, Timing, get_strategy

# The seed documents' strategies: what sweeps and reports cover unless told otherwise.
SEED_STRATEGIES = ("single", "ps", "ring", "ddp")


def live_strategy_names() -> list[str]:
    """Strategies ``commsim live`` can run for real."""
    return [name for name, s in REGISTRY.items() if s.live]


__all__ = ["REGISTRY", "SEED_STRATEGIES", "Strategy", "Timing", "get_strategy",
           "live_strategy_names"]
