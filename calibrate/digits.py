"""Real data for accuracy: scikit-learn's handwritten digits (``--data digits``).

No data set can be downloaded here, and synthetic class templates make accuracy an artefact
of the templates.  scikit-learn ships a real one inside the package: 1,797 8x8 grey images of
the digits 0-9 (UCI's optdigits test set), read from the installed files, no download.

1. ``digits_split(train)``: a fixed, stratified split (seeded permutation within each class:
   the first 80% of every class trains, the rest tests: 1,438 / 359 images), pixels scaled from
   0..16 to 0..1 and normalised with the training split's mean and standard deviation, as
   float32 tensors [N, 1, 8, 8].
2. ``digits_cnn``: the seed document's model shape scaled to 8x8 inputs: three 3x3 convolutions
   (16, 32, 32 channels, two 2x2 max-pools) and one linear layer to the 10 classes
   (a small Horovod MNIST example).
scikit-learn is an optional extra (``pip install .[digits]``; the test extras have it),
imported only when digits are asked for.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from commsim.errors import UserError

DIGITS = "digits"
DIGITS_SHAPE = (1, 8, 8)
TRAIN_FRACTION = 0.8
SPLIT_SEED = 0


def _load() -> tuple[np.ndarray, np.ndarray]:
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise UserError("--data digits needs scikit-learn: pip install 'commsim[digits]'") \
            from None
    bunch = load_digits()
    return bunch.images.astype(np.float32) / 16.0, bunch.target.astype(np.int64)


def split_indices(labels: np.ndarray, train: bool, seed: int = SPLIT_SEED) -> np.ndarray:
    """The fixed stratified split: per class, a seeded permutation's first 80% train."""
    rng = np.random.default_rng(seed)
    picked = []
    for c in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == c))
        cut = int(round(TRAIN_FRACTION * len(idx)))
        picked.append(idx[:cut] if train else idx[cut:])
    return np.sort(np.concatenate(picked))


def digits_split(train: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(images float32 [N, 1, 8, 8] normalised by the training split, labels int64 [N])."""
    images, labels = _load()
    train_idx = split_indices(labels, True)
    mean, std = float(images[train_idx].mean()), float(images[train_idx].std())
    idx = train_idx if train else split_indices(labels, False)
    x = (images[idx] - mean) / std
    return torch.from_numpy(x[:, None, :, :].copy()), torch.from_numpy(labels[idx].copy())


class DigitsDataset(torch.utils.data.Dataset):
    """The digits split as a map-style dataset of (image [1, 8, 8], label)."""

    def __init__(self, train: bool):
        self.images, self.labels = digits_split(train)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int):
        return self.images[index], int(self.labels[index])


def digits_cnn(num_classes: int = 10, track_running_stats: bool = True) -> nn.Module:
    """Three 3x3 convolutions and a linear layer for 8x8 digits (15,338 parameters)."""
    del track_running_stats  # no batch norm: data-parallel replicas stay identical
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),     # 16 x 4 x 4
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),    # 32 x 2 x 2
        nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(),
        nn.Flatten(), nn.Linear(32 * 2 * 2, num_classes))
