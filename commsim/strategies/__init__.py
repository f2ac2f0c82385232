"""Sync strategies, one module each, registered by CLI name (see ``base.REGISTRY``)."""
from commsim.strategies import ddp, dp, ps, ring, single  # noqa: F401  (registers them)
from commsim.strategies.base import REGISTRY, Strategy, Timing, get_strategy

__all__ = ["REGISTRY", "Strategy", "Timing", "get_strategy"]
