"""Model factories as users write them, for the --model contract tests (importable by ranks when
this folder is on PYTHONPATH)."""
from torch import nn


def plain():
    """No arguments at all: the most common user factory."""
    return nn.Sequential(nn.AvgPool2d(4), nn.Flatten(), nn.Linear(3 * 8 * 8, 10))


def with_classes(num_classes):
    return nn.Sequential(nn.AvgPool2d(4), nn.Flatten(), nn.Linear(3 * 8 * 8, num_classes))


def anything(**kwargs):
    anything.seen = kwargs
    return plain()


def raises():
    raise RuntimeError("weights not found")
