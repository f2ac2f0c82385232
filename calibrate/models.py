"""Models to calibrate: the CIFAR VGG-11 of the assignment, and any user factory by name.

1. ``vgg11_cifar`` builds the VGG-11 of the CS744 base script (8 conv 3x3 + BatchNorm + ReLU
   blocks with 5 max-pools, then one 512->10 linear layer: 9,231,114 parameters).
2. ``load_factory("module:function")`` imports a user's factory (``--model``), with one-line
   errors for every way it can go wrong; ``build_model`` calls it, passing a keyword (e.g.
   ``num_classes``) only to a factory that accepts it, so a plain zero-argument factory works in
   every command.
3. ``param_specs`` lists the parameters in registration order: the order autograd hooks,
   gradient buckets and the profile use.
4. ``small_cnn`` and ``small_mlp`` are tiny models for tests and CI-sized live runs (named
   ``commsim.calibrate.live:small_cnn`` in tests, reports and saved results: ``live`` re-exports
   them).
"""
from __future__ import annotations

import importlib
import inspect
from typing import Callable

import torch
from torch import nn

from commsim.errors import UserError
from commsim.profile import ParamSpec
from commsim.spec import DEFAULT_MODEL

VGG11_CFG: tuple[int | str, ...] = (64, "M", 128, "M", 256, 256, "M", 512, 512, "M",
                                    512, 512, "M")
VGG11_FACTORY = DEFAULT_MODEL
# The optimiser of the assignment's base script (main.py of CS744 assignment 2).
SGD_LR, SGD_MOMENTUM, SGD_WEIGHT_DECAY = 0.1, 0.9, 1e-4


def sgd(params, lr: float = SGD_LR) -> torch.optim.Optimizer:
    """The base script's SGD over ``params`` (``lr`` changes with a learning-rate schedule)."""
    return torch.optim.SGD(params, lr=lr, momentum=SGD_MOMENTUM, weight_decay=SGD_WEIGHT_DECAY)


class VGG(nn.Module):
    """VGG for 32x32 inputs: after five 2x2 pools the feature map is 1x1x512."""

    def __init__(self, cfg: tuple[int | str, ...], num_classes: int = 10,
                 track_running_stats: bool = True, in_channels: int = 3):
        super().__init__()
        layers: list[nn.Module] = []
        channels = in_channels
        for item in cfg:
            if item == "M":
                layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
                continue
            layers += [nn.Conv2d(channels, int(item), kernel_size=3, padding=1),
                       nn.BatchNorm2d(int(item), track_running_stats=track_running_stats),
                       nn.ReLU(inplace=True)]
            channels = int(item)
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.features(x), 1))


def vgg11_cifar(num_classes: int = 10, track_running_stats: bool = True) -> nn.Module:
    """The assignment's VGG-11 for CIFAR-10 (``track_running_stats=False`` is what the seed
    report used to keep BatchNorm identical across ranks)."""
    return VGG(VGG11_CFG, num_classes=num_classes, track_running_stats=track_running_stats)


def small_cnn(num_classes: int = 10, track_running_stats: bool = True) -> nn.Module:
    """A tiny conv net (conv-BN-ReLU-pool, linear) for fast tests and CI-sized live runs."""
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8, track_running_stats=track_running_stats),
        nn.ReLU(), nn.MaxPool2d(4),
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(4),
        nn.Flatten(), nn.Linear(16 * 2 * 2, num_classes))


def small_mlp(num_classes: int = 10, track_running_stats: bool = True) -> nn.Module:
    """A tiny model without batch norm: data-parallel training equals single-process training
    on the same global batch exactly (up to float reassociation)."""
    return nn.Sequential(nn.AvgPool2d(4), nn.Flatten(), nn.Linear(3 * 8 * 8, 32), nn.ReLU(),
                         nn.Linear(32, num_classes))


def wide_mlp(num_classes: int = 10, track_running_stats: bool = True) -> nn.Module:
    """The second model ``bench/fidelity --second-model`` calibrates: an MLP of 6.8 M
    parameters, 6.3 M of them in its first dense layer (3072 x 2048), so one 25 MB gradient
    becomes ready only at the very end of backward, where VGG-11 spreads 35 MB over 34
    tensors."""
    del track_running_stats  # no batch norm
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 2048), nn.ReLU(),
                         nn.Linear(2048, 256), nn.ReLU(), nn.Linear(256, num_classes))


def load_factory(spec: str) -> Callable[..., nn.Module]:
    """``"package.module:function"`` -> the callable; UserError (one line) if it is not one."""
    module_name, sep, attr = str(spec).partition(":")
    if not sep or not module_name or not attr:
        raise UserError(f"--model {spec!r} must be 'module:function', e.g. {VGG11_FACTORY}")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # any import-time failure of user code is the user's to fix
        raise UserError(f"--model {spec!r}: cannot import module {module_name!r} "
                        f"({type(exc).__name__}: {exc})") from None
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise UserError(f"--model {spec!r}: module {module_name!r} has no attribute "
                            f"{attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise UserError(f"--model {spec!r}: {attr!r} is not callable")
    return obj


def build_model(spec: str, **wanted) -> nn.Module:
    """Call the factory with those of the ``wanted`` keywords it accepts (all of them if it
    takes ``**kwargs``; none if it takes no arguments) and check that it returned an nn.Module.
    Every failure is one UserError line naming the factory."""
    factory = load_factory(spec)
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):  # a callable without a signature: call it plainly
        params = ()
    if any(p.kind is p.VAR_KEYWORD for p in params):
        kwargs = dict(wanted)
    else:
        names = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
        kwargs = {k: v for k, v in wanted.items() if k in names}
    try:
        model = factory(**kwargs)
    except Exception as exc:  # the user's code: its failure is one line, not a traceback
        shown = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
        raise UserError(f"--model {spec!r}: calling it({shown}) failed: "
                        f"{type(exc).__name__}: {' '.join(str(exc).split())}") from None
    if not isinstance(model, nn.Module):
        raise UserError(f"--model {spec!r} returned {type(model).__name__}, not an nn.Module")
    return model


def buffer_specs(model: nn.Module) -> tuple[ParamSpec, ...]:
    """Buffers (batch-norm running statistics, counters): what DDP broadcasts every forward."""
    return tuple(ParamSpec(name=name, numel=b.numel(), bytes=b.numel() * b.element_size())
                 for name, b in model.named_buffers())


def param_specs(model: nn.Module) -> tuple[ParamSpec, ...]:
    """Trainable parameters in registration order, with their element and byte counts."""
    return tuple(ParamSpec(name=name, numel=p.numel(), bytes=p.numel() * p.element_size())
                 for name, p in model.named_parameters() if p.requires_grad)
