"""What a live rank trains on: the run's model, its data set and its share of every batch.

The model comes from the config's factory ("module:function", ``build_model``); the data is
CIFAR-10 from ``data_dir``, scikit-learn's real handwritten digits (``data_dir="digits"``,
``calibrate.digits``), or a synthetic stand-in (``cifar.load_dataset``); ``batches`` deals each
rank its DistributedSampler partition of every batch.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch.nn as nn

from commsim.calibrate.cifar import load_dataset
from commsim.calibrate.digits import DIGITS
from commsim.calibrate.models import build_model

if TYPE_CHECKING:
    from commsim.calibrate.live.config import LiveConfig


def live_model(cfg: "LiveConfig") -> nn.Module:
    """The run's model: keywords go only to a factory that accepts them (``build_model``)."""
    return build_model(cfg.model, num_classes=10, track_running_stats=cfg.track_running_stats)


def load_data(cfg: "LiveConfig", train: bool):
    """CIFAR-10 from ``cfg.data_dir``, the digits, or synthetic images (``cfg.synthetic``);
    crop/flip on CIFAR training data if ``cfg.augment``."""
    if cfg.data_dir == DIGITS:
        from commsim.calibrate.digits import DigitsDataset

        return DigitsDataset(train)
    return load_dataset(cfg.data_dir, train=train, synthetic_size=cfg.synthetic_size,
                        seed=cfg.seed, augment=train and cfg.augment, synthetic=cfg.synthetic)


def has_test_set(cfg: "LiveConfig") -> bool:
    """Real data, or synthetic data whose labels can be learnt: test accuracy means something."""
    return cfg.data_dir is not None or cfg.synthetic == "learnable"


def batches(dataset, rank: int, world_size: int, batch: int, seed: int):
    """Endless iterator over this rank's DistributedSampler partition, ``set_epoch`` per epoch."""
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler

    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True,
                                 seed=seed)
    loader = DataLoader(dataset, batch_size=batch, sampler=sampler, drop_last=True)
    epoch = 0
    while True:
        sampler.set_epoch(epoch)
        yield from loader
        epoch += 1
