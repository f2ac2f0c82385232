"""CIFAR-10 from its standard binary files, or a synthetic stand-in of the same shape.

1. ``read_cifar_bin`` reads one ``*.bin`` file: records of 1 label byte + 3072 pixel bytes
   (1024 red, 1024 green, 1024 blue, row-major 32x32).  The file size must be a multiple of
   3073 and every label < 10; anything else is a UserError naming the file.  Nothing is ever
   unpickled (the python-pickle flavour of CIFAR is refused by construction).
2. ``synthetic_cifar`` draws images and labels from a seeded generator (same dtype and shape),
   so calibration and tests run without the data set.  Its labels are random: nothing can be
   learnt from it, which is right for timing and wrong for accuracy.
   ``learnable_cifar`` is the stand-in for accuracy: every class has a fixed template image and
   each sample is its class's template plus seeded pixel noise, so a small model climbs well
   above chance (10%) in a few hundred steps and the test split (fresh noise, same templates)
   measures what was learnt.
3. ``CifarDataset`` normalises per channel with the base script's mean/std and optionally applies
   the training augmentation (random 32x32 crop of the 4-pixel zero-padded image, horizontal
   flip with p=0.5).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from commsim.errors import UserError
from commsim.files import fault

RECORD_BYTES = 1 + 3 * 32 * 32
TRAIN_FILES = tuple(f"data_batch_{i}.bin" for i in range(1, 6))
TEST_FILES = ("test_batch.bin",)
NUM_CLASSES = 10
# The CS744 base script's normalisation (per channel, on 0..1 pixels).
MEAN = (125.3 / 255, 123.0 / 255, 113.9 / 255)
STD = (63.0 / 255, 62.1 / 255, 66.7 / 255)
# The standard archive unpacks into this folder; accept it or its parent as --data.
ARCHIVE_DIR = "cifar-10-batches-bin"
CIFAR10_TEST_SAMPLES = 10_000
SYNTHETIC_KINDS = ("random", "learnable")
# Learnable synthetic data, in pixel units (0..255): class signal against per-pixel noise.  Chosen
# so that small_cnn at batch 64 goes from 10% to ~60% test accuracy in 300 steps and is still
# climbing (local aggregation's accuracy cost shows); at signal 16 it saturates near 100%.
LEARNABLE_SIGNAL = 8.0
LEARNABLE_NOISE = 64.0
# Templates are drawn at 4x4 and upsampled to 32x32: low frequencies survive the pooling of
# small models (and the 4-pixel crops of augmentation shift them by at most half a block).
TEMPLATE_RES = 4
_CHUNK = 4096  # samples generated at a time: float32 noise for 50,000 images would be 600 MB


def read_cifar_bin(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """One binary batch file -> (images uint8 [N,3,32,32], labels int64 [N])."""
    p = Path(path)
    try:
        raw = np.fromfile(p, dtype=np.uint8)
    except FileNotFoundError:
        raise UserError(f"CIFAR-10 file {p} does not exist") from None
    except OSError as exc:
        raise fault("read CIFAR-10 file", p, exc) from None
    if raw.size == 0 or raw.size % RECORD_BYTES:
        raise UserError(f"CIFAR-10 file {p} has {raw.size} bytes, not a positive multiple of "
                        f"{RECORD_BYTES} (1 label byte + 3072 pixel bytes per record)")
    records = raw.reshape(-1, RECORD_BYTES)
    labels = records[:, 0].astype(np.int64)
    bad = np.flatnonzero(labels >= NUM_CLASSES)
    if bad.size:
        raise UserError(f"CIFAR-10 file {p}: record {int(bad[0])} has label {int(labels[bad[0]])}"
                        f", expected 0..9 (is this the binary version of CIFAR-10?)")
    images = records[:, 1:].reshape(-1, 3, 32, 32)
    return images, labels


def read_cifar_dir(data_dir: str | Path, train: bool) -> tuple[np.ndarray, np.ndarray]:
    """All training (or test) files of a CIFAR-10 binary directory, concatenated in order."""
    root = Path(data_dir)
    if not root.is_dir():
        raise UserError(f"CIFAR-10 directory {root} does not exist")
    if (root / ARCHIVE_DIR).is_dir():
        root = root / ARCHIVE_DIR
    names = TRAIN_FILES if train else TEST_FILES
    missing = [n for n in names if not (root / n).is_file()]
    if missing:
        raise UserError(f"CIFAR-10 directory {root} lacks {', '.join(missing)} (expected the "
                        f"binary version: data_batch_1.bin..data_batch_5.bin, test_batch.bin)")
    parts = [read_cifar_bin(root / n) for n in names]
    return (np.concatenate([im for im, _ in parts]), np.concatenate([lb for _, lb in parts]))


def synthetic_cifar(size: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``size`` random uint8 images and labels, reproducible from ``seed``."""
    if size < 1:
        raise UserError(f"synthetic data set size must be >= 1, got {size}")
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, size=(size, 3, 32, 32), dtype=np.uint8)
    labels = rng.integers(0, NUM_CLASSES, size=size, dtype=np.int64)
    return images, labels


def class_templates(seed: int = 0) -> np.ndarray:
    """The ten classes' templates (float32 [10,3,32,32], standard normal blocks), from ``seed``
    alone, so that the train and test splits share them."""
    low = np.random.default_rng([seed, 0]).standard_normal(
        (NUM_CLASSES, 3, TEMPLATE_RES, TEMPLATE_RES), dtype=np.float32)
    scale = 32 // TEMPLATE_RES
    return low.repeat(scale, axis=2).repeat(scale, axis=3)


def learnable_cifar(size: int, seed: int = 0, train: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """``size`` images whose class can be learnt, reproducible from ``seed``.

    1. templates: ``class_templates(seed)``, the same for both splits;
    2. labels: uniform over the ten classes, from a generator of (seed, split);
    3. pixels: 127.5 + LEARNABLE_SIGNAL x template[label] + LEARNABLE_NOISE x N(0, 1) from the
       same generator, rounded and clipped to uint8 (a chunk of samples at a time).
    """
    if size < 1:
        raise UserError(f"synthetic data set size must be >= 1, got {size}")
    templates = class_templates(seed)
    rng = np.random.default_rng([seed, 1 if train else 2])
    labels = rng.integers(0, NUM_CLASSES, size=size, dtype=np.int64)
    images = np.empty((size, 3, 32, 32), dtype=np.uint8)
    for start in range(0, size, _CHUNK):
        part = labels[start:start + _CHUNK]
        noise = rng.standard_normal((len(part), 3, 32, 32), dtype=np.float32)
        pixels = 127.5 + LEARNABLE_SIGNAL * templates[part] + LEARNABLE_NOISE * noise
        images[start:start + len(part)] = np.clip(np.rint(pixels), 0, 255)
    return images, labels


class CifarDataset(Dataset):
    """uint8 images -> normalised float32 tensors; training augmentation on request.

    Augmentation draws from ``torch``'s global generator, so a seeded run is reproducible
    (DataLoader workers get their own seeds from torch as usual)."""

    def __init__(self, images: np.ndarray, labels: np.ndarray, augment: bool = False):
        if images.ndim != 4 or images.shape[1:] != (3, 32, 32) or len(images) != len(labels):
            raise ValueError("images must be [N,3,32,32] with one label each")
        self.images = torch.from_numpy(np.ascontiguousarray(images))
        self.labels = torch.from_numpy(np.ascontiguousarray(labels)).long()
        self.augment = augment
        self._mean = torch.tensor(MEAN).view(3, 1, 1)
        self._std = torch.tensor(STD).view(3, 1, 1)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        x = (self.images[index].float() / 255.0 - self._mean) / self._std
        if self.augment:
            x = random_crop_flip(x)
        return x, int(self.labels[index])


def random_crop_flip(x: torch.Tensor, padding: int = 4) -> torch.Tensor:
    """RandomCrop(32, padding=4) + RandomHorizontalFlip() of a normalised [3,H,W] tensor.

    The padding is zero in *pixel* space as in torchvision (applied before Normalize there),
    which after normalisation is -mean/std."""
    _, h, w = x.shape
    fill = (-torch.tensor(MEAN) / torch.tensor(STD)).view(3, 1, 1)
    padded = fill.expand(3, h + 2 * padding, w + 2 * padding).clone()
    padded[:, padding:padding + h, padding:padding + w] = x
    top, left = (int(v) for v in torch.randint(0, 2 * padding + 1, (2,)))
    out = padded[:, top:top + h, left:left + w]
    if bool(torch.rand(()) < 0.5):
        out = out.flip(-1)
    return out.contiguous()


def load_dataset(data_dir: str | None, train: bool, synthetic_size: int = 50000,
                 seed: int = 0, augment: bool | None = None,
                 synthetic: str = "random") -> CifarDataset:
    """The CIFAR-10 split from ``data_dir``, or synthetic data when ``data_dir`` is None.

    ``synthetic`` picks the stand-in: "random" (random labels, for timing) or "learnable"
    (class templates plus noise, for accuracy); its test split has ``synthetic_size`` samples
    (random) or at most CIFAR-10's 10,000 (learnable).  ``augment`` defaults to ``train``
    (crop+flip for training, none for testing)."""
    if data_dir is None and synthetic == "learnable":
        size = synthetic_size if train else min(synthetic_size, CIFAR10_TEST_SAMPLES)
        images, labels = learnable_cifar(size, seed=seed, train=train)
    elif data_dir is None:
        if synthetic not in SYNTHETIC_KINDS:
            raise UserError(f"--synthetic: unknown kind {synthetic!r}; choose "
                            f"{' or '.join(SYNTHETIC_KINDS)}")
        # A different stream for the test split, so train and test never coincide.
        images, labels = synthetic_cifar(synthetic_size, seed=seed if train else seed + 1)
    else:
        images, labels = read_cifar_dir(data_dir, train)
    return CifarDataset(images, labels, augment=train if augment is None else augment)
