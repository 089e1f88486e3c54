"""The periodic input embedding: the one layer a barrier may put before its first Linear.

A plant's angle θ (period P) wraps: θ and θ + P are the same state.  A network that reads θ
raw jumps at the seam, so a barrier for a wrapped state reads (sin 2πθ/P, cos 2πθ/P) instead,
which is continuous (and smooth) across the wrap.  ``PeriodicEmbedding`` expands the state in
place: a periodic coordinate i becomes the pair (sin, cos) at its position, every other
coordinate passes through, so the output has n + (number of periodic coordinates) entries.

    x = (p_x, p_y, θ), periods {2: 2π}  ->  (p_x, p_y, sin θ, cos θ)

This module is the interface between training (which builds it as the first module of an
``nn.Sequential``) and the compiler (whose frontends recognise it and whose IR carries it as
its first layer).  torch is imported lazily, as everywhere in ``compiler/``.
"""
from __future__ import annotations

import math
from typing import Mapping


def check_periods(n: int, periods: Mapping[int, float]) -> dict[int, float]:
    """{coordinate: period} with every index in range(n) and every period finite and > 0."""
    out: dict[int, float] = {}
    for key, value in dict(periods).items():
        i = int(key)
        if not 0 <= i < n:
            raise ValueError(f"periodic coordinate {key} is not a state index in 0..{n - 1}")
        p = float(value)
        if not (math.isfinite(p) and p > 0):
            raise ValueError(f"periodic coordinate {i}: the period must be a finite number > 0, got {value!r}")
        out[i] = p
    return dict(sorted(out.items()))


def embedded_width(n: int, periods: Mapping[int, float]) -> int:
    return int(n) + len(periods)


def periodic_embedding(n: int, periods: Mapping[int, float]):
    """A ``PeriodicEmbedding`` torch module for an n-state plant with these periods."""
    return _embedding_class()(n, periods)


def is_periodic_embedding(module: object) -> bool:
    """True for a ``PeriodicEmbedding`` (without importing torch when none was built)."""
    return _CLASS and isinstance(module, _CLASS[0])


_CLASS: list = []


def _embedding_class():
    """The torch class, defined on first use so that importing ``compiler`` never needs torch."""
    if _CLASS:
        return _CLASS[0]
    import torch
    import torch.nn as nn

    class PeriodicEmbedding(nn.Module):
        """x (..., n) -> (..., n + k): coordinate i in ``periods`` becomes (sin, cos)(2π x_i / P_i)."""

        def __init__(self, n: int, periods: Mapping[int, float]) -> None:
            super().__init__()
            self.n = int(n)
            self.periods = check_periods(self.n, periods)

        def forward(self, x: "torch.Tensor") -> "torch.Tensor":
            parts = []
            for i in range(self.n):
                xi = x[..., i:i + 1]
                if i in self.periods:
                    w = 2.0 * math.pi / self.periods[i]
                    parts += [torch.sin(w * xi), torch.cos(w * xi)]
                else:
                    parts.append(xi)
            return torch.cat(parts, dim=-1)

        def extra_repr(self) -> str:
            return f"n={self.n}, periods={self.periods}"

    PeriodicEmbedding.__module__ = __name__
    PeriodicEmbedding.__qualname__ = "PeriodicEmbedding"
    _CLASS.append(PeriodicEmbedding)
    return PeriodicEmbedding


def __getattr__(name: str):
    """``compiler.periodic.PeriodicEmbedding`` resolves (for isinstance and pickling) on demand."""
    if name == "PeriodicEmbedding":
        return _embedding_class()
    raise AttributeError(name)
