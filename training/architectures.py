"""Barrier network builders: plain ``nn.Sequential`` MLPs the compiler accepts as they are."""
from __future__ import annotations

from typing import Sequence

ACTIVATION_NAMES = ("relu", "leaky_relu", "hardtanh", "elu", "tanh", "sigmoid", "softplus", "silu", "gelu",
                    "gelu_tanh")


def activation_module(name: str, **params):
    """An ``nn`` activation by name; params go to its constructor (e.g. beta for softplus)."""
    import torch.nn as nn
    factories = {
        "relu": nn.ReLU, "leaky_relu": nn.LeakyReLU, "hardtanh": nn.Hardtanh, "elu": nn.ELU, "tanh": nn.Tanh,
        "sigmoid": nn.Sigmoid, "softplus": nn.Softplus, "silu": nn.SiLU, "gelu": nn.GELU,
        "gelu_tanh": lambda: nn.GELU(approximate="tanh"),
    }
    if name not in factories:
        raise ValueError(f"unknown activation {name!r}; choose from {', '.join(ACTIVATION_NAMES)}")
    return factories[name](**params)


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
