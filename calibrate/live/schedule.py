"""The learning rate of every optimizer step: constant, or the large-batch rule with warm-up.

Live runs change the batch one optimizer step averages over (more ranks, ``sync_every``,
``group_size``); with ``lr_scaling`` "linear" the rate follows it (Goyal et al. 2017), so a
what-if's accuracy is that of a run someone would actually make.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from commsim.calibrate.models import SGD_LR

if TYPE_CHECKING:
    from commsim.calibrate.live.config import LiveConfig

# The linear scaling rule's reference batch: lr = SGD_LR x batch / 256 (Goyal et al. 2017).
LR_REFERENCE_BATCH = 256
LR_SCALINGS = ("linear",)


@dataclass(frozen=True)
class LrSchedule:
    """The learning rate of every optimizer step.

    ``base`` is the base script's LR.  ``peak`` is ``base`` x ``update_batch`` / 256 under the
    linear scaling rule (Goyal et al. 2017), else ``base``; ``update_batch`` is the number of
    samples one step's gradient averages over: batch per rank x ranks averaged (the group) x
    ``sync_every``.  Warm-up (Goyal's gradual warm-up): the rate ramps linearly from ``base`` at
    iteration 0 to ``peak`` at iteration ``warmup_iters``, then stays; optimizer step u ends a
    cycle of ``sync_every`` iterations and uses the rate of the cycle's first iteration, u x k.
    """
    base: float
    peak: float
    update_batch: int
    rule: str = "constant"
    warmup_iters: int = 0
    sync_every: int = 1

    def lr(self, update: int) -> float:
        iteration = update * self.sync_every
        if iteration >= self.warmup_iters:
            return self.peak
        return self.base + (self.peak - self.base) * iteration / self.warmup_iters

    def to_dict(self, updates: int) -> dict[str, Any]:
        """The schedule and the rate of each of the first ``updates`` optimizer steps."""
        return {**asdict(self), "lrs": [self.lr(u) for u in range(updates)]}


def lr_schedule(cfg: "LiveConfig", world_size: int) -> LrSchedule:
    averaged = min(cfg.group_size or world_size, world_size)
    update_batch = cfg.rank_batch(world_size) * averaged * cfg.sync_every
    if cfg.lr_scaling == "linear":
        return LrSchedule(base=SGD_LR, peak=SGD_LR * update_batch / LR_REFERENCE_BATCH,
                          update_batch=update_batch, rule="linear",
                          warmup_iters=cfg.warmup_iters, sync_every=cfg.sync_every)
    return LrSchedule(base=SGD_LR, peak=SGD_LR, update_batch=update_batch,
                      sync_every=cfg.sync_every)
