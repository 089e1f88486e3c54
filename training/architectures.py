"""Barrier network builders: plain ``nn.Sequential`` MLPs the compiler accepts as they are.

The activation names are the training presets of compiler.activations' table (e.g.
'gelu_tanh' is the gelu entry with approximate=tanh); nothing here lists them again."""
from __future__ import annotations

from typing import Sequence

from compiler.activations import ACTIVATIONS, preset

ACTIVATION_NAMES = tuple(name for spec in ACTIVATIONS.values() for name in spec.presets)


def activation_module(name: str, **params):
    """An ``nn`` activation by name; params (the table's parameter names, e.g. beta for softplus)
    override the preset's."""
    try:
        spec, base = preset(name)
    except KeyError:
        raise ValueError(f"unknown activation {name!r}; choose from {', '.join(ACTIVATION_NAMES)}") from None
    return spec.torch_module({**base, **params})

def mlp(widths: Sequence[int], activation: str = "relu", seed: int | None = None, dtype=None, **params):
    """Linear / activation stack with widths [n_0, ..., n_d]; n_d must be 1 for a barrier."""
    import torch
    import torch.nn as nn
    if len(widths) < 2 or any(w < 1 for w in widths):
        raise ValueError(f"widths must list at least an input and an output size >= 1, got {list(widths)}")
    if seed is not None:
        torch.manual_seed(seed)
    layers = []
    for i in range(1, len(widths)):
        layers.append(nn.Linear(widths[i - 1], widths[i]))
        if i < len(widths) - 1:
            layers.append(activation_module(activation, **params))
    net = nn.Sequential(*layers)
    return net.to(dtype) if dtype is not None else net
