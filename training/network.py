"""The trained barrier module and its export as a plain full-width ``nn.Sequential``.

An input mask is implemented by construction, not by a penalty: the trained network's
first Linear only has columns for the selected states.  The exported Sequential takes the
full state (through the periodic embedding first, for a plant with angles); its first-layer
columns for the other states are exactly 0, so the compiled
barrier has the whole state as input and provably ignores the masked ones (for the
pendulum that gives L_G h == 0 exactly, i.e. relative degree 2).
"""
from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Mapping, Sequence

import torch
import torch.nn as nn

from compiler.periodic import check_periods, embedded_width, periodic_embedding

from .architectures import mlp


class MaskedBarrier(nn.Module):
    """h(x) = net((x[..., mask] - center) / half_width) for x of shape (B, n).

    The input scaling (the training box mapped to [-1, 1]) keeps a state like a speed in
    [2, 15] m/s from swamping an angle in the first layer; it is folded into W1 and b1 on
    export, so the shipped network is a plain MLP on raw states.

    A plant with periodic coordinates (``periodic`` = {index: period}, ``system.periodic``)
    gets the periodic embedding first (compiler/periodic.py): coordinate i becomes
    (sin, cos)(2 pi x_i / P_i), so h is continuous across the wrap and equal at x and x + P e_i.
    The scaling then applies to the other coordinates only (sin and cos are already in [-1, 1]),
    and the mask selects states: a masked-out angle drops both of its features.
    """

    def __init__(self, n: int, mask: Sequence[int], hidden: Sequence[int], activation: str,
                 seed: int | None = None, center: Sequence[float] | None = None,
                 half_width: Sequence[float] | None = None, periodic: Mapping[int, float] | None = None):
        super().__init__()
        self.n = int(n)
        self.mask_list = [int(i) for i in mask]
        self.periodic = check_periods(self.n, periodic or {})
        self.register_buffer("mask", torch.as_tensor(self.mask_list, dtype=torch.long), persistent=False)
        columns = _embedded_columns(self.n, self.periodic)
        # the input features the network reads: positions in the embedded state, with their scaling
        self.feature_list = [c for i in self.mask_list for c in columns[i]]
        self.register_buffer("features", torch.as_tensor(self.feature_list, dtype=torch.long), persistent=False)
        c0 = [0.0] * self.n if center is None else [float(v) for v in center]
        s0 = [1.0] * self.n if half_width is None else [float(v) for v in half_width]
        c = [0.0 if i in self.periodic else c0[i] for i in self.mask_list for _ in columns[i]]
        s = [1.0 if i in self.periodic else s0[i] for i in self.mask_list for _ in columns[i]]
        if any(v <= 0 for v in s):
            raise ValueError(f"half_width must be > 0, got {s}")
        self.register_buffer("center", torch.as_tensor(c).float())
        self.register_buffer("half_width", torch.as_tensor(s).float())
        self.embedding = periodic_embedding(self.n, self.periodic) if self.periodic else None
        self.activation = activation
        self.net = mlp([len(self.feature_list), *hidden, 1], activation, seed=seed)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.embedding is not None:
            z = self.embedding(x).index_select(-1, self.features)
        else:
            z = x if self.mask_list == list(range(self.n)) else x.index_select(-1, self.mask)
        return self.net((z - self.center.to(x.dtype)) / self.half_width.to(x.dtype))

    def h(self, x: torch.Tensor) -> torch.Tensor:
        """(B, n) -> (B,)."""
        return self.forward(x).squeeze(-1)

    @property
    def embedded_width(self) -> int:
        """The first Linear's input width in the exported network (n + number of periodic coordinates)."""
        return embedded_width(self.n, self.periodic)


def _embedded_columns(n: int, periodic: Mapping[int, float]) -> list[list[int]]:
    """For each state i, its columns in the embedded vector (two for a periodic one: sin, cos)."""
    out, k = [], 0
    for i in range(n):
        width = 2 if i in periodic else 1
        out.append(list(range(k, k + width)))
        k += width
    return out


def to_sequential(barrier: MaskedBarrier, dtype: torch.dtype = torch.float32) -> nn.Sequential:
    """An equivalent ``nn.Sequential`` on the full raw state: input scaling folded into the
    first layer (in float64, then cast), masked columns of W1 exactly 0. With periodic
    coordinates it starts with the periodic embedding, then the Linear on the embedded width."""
    out: list[nn.Module] = []
    if barrier.embedding is not None:
        out.append(periodic_embedding(barrier.n, barrier.periodic))
    width = barrier.embedded_width
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
            W = torch.zeros(layer.out_features, width, dtype=torch.float64)
            W[:, barrier.feature_list] = W1
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
    """Widths of the exported network, e.g. [4, 32, 32, 1] (its input: the raw state, before any
    periodic embedding)."""
    return [int(n), *map(int, hidden), 1]
