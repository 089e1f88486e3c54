"""The periodic input embedding in the generated C++: its tables and its argument range.

The header evaluates the embedding with its own m_sincos (compiler/cppmath.py) on the
argument fl(fl(w) * x), w = 2 pi / P. The reduction in m_sincos is exact only for
|argument| <= ``TRIG_MAX`` (12800 float / 1.6e6 double; NaN beyond), so each periodic
coordinate gets a bound L on |x| (the largest scalar whose product with fl(w) rounds to at
most TRIG_MAX) and the entries refuse a state beyond it like a NaN input: all outputs NaN and
status 1. With P = 2 pi that is |theta| <= 12800 rad (2037 turns) in float; a simulator that
wraps the angle never comes near it.
"""
from __future__ import annotations

import numpy as np

from .cpp_activations import literal
from .ir import Model

TRIG_MAX = {"float": 12800.0, "double": 1.6e6}     # cppmath's SIN_MAX


def _dtype(scalar: str):
    return np.float32 if scalar == "float" else np.float64


def frequency(w: float, scalar: str) -> float:
    """The frequency as the header stores it (w rounded to the scalar)."""
    return float(_dtype(scalar)(w))


def argument_limit(w: float, scalar: str) -> float:
    """The largest |x| (a scalar) with fl(fl(w) |x|) <= TRIG_MAX, where m_sincos is exact."""
    t = _dtype(scalar)
    wf, top = t(w), t(TRIG_MAX[scalar])
    with np.errstate(over="ignore"):
        x = t(top / wf)
        while t(wf * x) > top:
            x = np.nextafter(x, t(0))
        while t(wf * np.nextafter(x, t(np.inf))) <= top:
            x = np.nextafter(x, t(np.inf))
    return float(x)


def tables(model: Model, scalar: str) -> list[str]:
    """detail:: tables of the embedding (coordinates, slots, frequencies) and its range check."""
    emb = model.embedding
    if emb is None:
        return []
    freq = emb.frequencies()
    index = [i for i, _ in emb.periods]
    slot = [index.index(i) if i in freq else -1 for i in range(emb.in_dim)]
    periods = ", ".join(f"x[{i}]: P = {p!r}" for i, p in emb.periods)
    checks = " && ".join(f"mx_fabs(x[{i}]) <= {literal(argument_limit(freq[i], scalar), scalar)}" for i in index)
    return [f"// periodic embedding ({periods}): coordinate kPeriodicIndex[q] becomes the columns",
            "// (sin, cos)(kFrequency[q] x) in place, kFrequency = 2 pi / P; kPeriodicSlot[i] = q, or -1 (passes through)",
            f"constexpr int kPeriodicIndex[{len(index)}] = {{{', '.join(map(str, index))}}};",
            f"constexpr int kPeriodicSlot[{emb.in_dim}] = {{{', '.join(map(str, slot))}}};",
            f"constexpr scalar kFrequency[{len(index)}] = {{{', '.join(literal(freq[i], scalar) for i in index)}}};",
            "// m_sincos reduces exactly for |kFrequency x| <= " + literal(TRIG_MAX[scalar], scalar)
            + ": beyond, the entries answer like a NaN input",
            f"inline bool periodic_in_range(const scalar* x) noexcept {{ return {checks}; }}"]
