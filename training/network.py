"""The trained barrier module and its export as a plain full-width ``nn.Sequential``.

An input mask is implemented by construction, not by a penalty: the trained network's
first Linear only has columns for the selected states.  The exported Sequential takes the
full state; its first-layer columns for the other states are exactly 0, so the compiled
barrier has the whole state as input and provably ignores the masked ones (for the
pendulum that gives L_G h == 0 exactly, i.e. relative degree 2).
"""
from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Sequence

import torch
import torch.nn as nn

from .architectures import mlp


class MaskedBarrier(nn.Module):
    """h(x) = net((x[..., mask] - center) / half_width) for x of shape (B, n).

    The input scaling (the training box mapped to [-1, 1]) keeps a state like a speed in
    [2, 15] m/s from swamping an angle in the first layer; it is folded into W1 and b1 on
    export, so the shipped network is a plain MLP on raw states.
    """

    def __init__(self, n: int, mask: Sequence[int], hidden: Sequence[int], activation: str,
                 seed: int | None = None, center: Sequence[float] | None = None,
                 half_width: Sequence[float] | None = None):
        super().__init__()
        self.n = int(n)
        self.mask_list = [int(i) for i in mask]
        self.register_buffer("mask", torch.as_tensor(self.mask_list, dtype=torch.long), persistent=False)
        k = len(self.mask_list)
        c = torch.zeros(k) if center is None else torch.as_tensor([center[i] for i in self.mask_list])
        s = torch.ones(k) if half_width is None else torch.as_tensor([half_width[i] for i in self.mask_list])
        if torch.any(s <= 0):
            raise ValueError(f"half_width must be > 0, got {s.tolist()}")
        self.register_buffer("center", c.float())
        self.register_buffer("half_width", s.float())
        self.activation = activation
        self.net = mlp([k, *hidden, 1], activation, seed=seed)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = x if self.mask_list == list(range(self.n)) else x.index_select(-1, self.mask)
        return self.net((z - self.center.to(x.dtype)) / self.half_width.to(x.dtype))

    def h(self, x: torch.Tensor) -> torch.Tensor:
        """(B, n) -> (B,)."""
        return self.forward(x).squeeze(-1)


def to_sequential(barrier: MaskedBarrier, dtype: torch.dtype = torch.float32) -> nn.Sequential:
    """An equivalent ``nn.Sequential`` on the full raw state: input scaling folded into the
    first layer (in float64, then cast), masked columns of W1 exactly 0."""
    out: list[nn.Module] = []
    for i, layer in enumerate(barrier.net):
        if not isinstance(layer, nn.Linear):
            out.append(copy.deepcopy(layer))
            continue
        W = layer.weight.detach().double()
        b = layer.bias.detach().double()
        if i == 0:
            scale = barrier.half_width.double()
            W1 = W / scale
            b = b - W1 @ barrier.center.double()
            W = torch.zeros(layer.out_features, barrier.n, dtype=torch.float64)
            W[:, barrier.mask_list] = W1
        new = nn.Linear(W.shape[1], W.shape[0]).double()
        with torch.no_grad():
            new.weight.copy_(W)
            new.bias.copy_(b)
        out.append(new)
    return nn.Sequential(*out).to(dtype).eval()


def export_onnx(seq: nn.Sequential, path: str | os.PathLike, n: int) -> Path:
    """Write ``seq`` as ONNX with input "x" (batch, n) and output "h" (legacy exporter)."""
    import warnings
    path = Path(path)
    example = torch.zeros(1, n, dtype=torch.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(seq.float().eval(), (example,), str(path), input_names=["x"], output_names=["h"],
                          dynamic_axes={"x": {0: "batch"}, "h": {0: "batch"}}, dynamo=False)
    return path


def full_widths(n: int, hidden: Sequence[int]) -> list[int]:
    """Widths of the exported network, e.g. [4, 32, 32, 1]."""
    return [int(n), *map(int, hidden), 1]
