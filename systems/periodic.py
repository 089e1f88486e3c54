"""Periodic coordinates of a plant: the checks a declaration must pass, and the wrap.

A plant declares an angle periodic (``Definition(periodic={2: 2*pi})``): x and x + P e_i are one
state. That is only true if the domain is one period wide there and f, G and the constraint
repeat with the period; ``checked_periods`` refuses anything else in one line naming the
coordinate. ``wrap_states`` is the representative every simulator keeps, [lo_i, lo_i + P_i);
the firmware's ``wrap_periodic`` (firmware/common/step.hpp) does the same in float32.
"""
from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from compiler.errors import CbfsimError

__all__ = ["PeriodicCoordinateError", "checked_periods", "wrap_states"]

CHECK_STATES = 64          # states spread over the domain at which f, G and the constraint must repeat
RELATIVE_TOLERANCE = 1e-9  # of |value| + 1, for the repeat check and the domain width


class PeriodicCoordinateError(CbfsimError, ValueError):
    """A periodic coordinate that is not one: bad index or period, a domain that is not one
    period wide, or f, G or the constraint not repeating with the period (message names it)."""


def checked_periods(system: Any, periods: Mapping[Any, Any]) -> dict[int, float]:
    """{index: period} for ``system`` (a ControlAffineSystem being built: name, n, state_names,
    domain and its numpy fields), each a state index with a finite period > 0 equal to the
    domain's width there, f, G and the constraint repeating with it; else PeriodicCoordinateError."""
    out: dict[int, float] = {}
    lo, hi = system.domain
    for key, value in periods.items():
        if isinstance(key, bool) or not isinstance(key, (int, np.integer)) or not 0 <= key < system.n:
            raise PeriodicCoordinateError(f"{system.name}: periodic coordinate {key!r} is not a state index "
                                          f"in 0..{system.n - 1}")
        i = int(key)
        label = f"{system.state_names[i]!r} (coordinate {i})"
        try:
            period = float(value)
        except TypeError:                      # a symbolic value that is not a number
            period = math.nan
        if not (math.isfinite(period) and period > 0):
            raise PeriodicCoordinateError(f"{system.name}: periodic coordinate {label}: the period must be a "
                                          f"finite number > 0 in the parameters, got {value}")
        width = float(hi[i] - lo[i])
        if abs(width - period) > RELATIVE_TOLERANCE * period:
            raise PeriodicCoordinateError(
                f"{system.name}: periodic coordinate {label} has period {period!r} but its domain "
                f"[{float(lo[i])!r}, {float(hi[i])!r}] is {width!r} wide; they must match")
        _check_repeats(system, i, period, label)
        out[i] = period
    return dict(sorted(out.items()))


def _check_repeats(system: Any, i: int, period: float, label: str) -> None:
    """f, G and the constraint at x and x + P e_i agree (to float tolerance) at states spread
    over the domain (a fixed seed), or PeriodicCoordinateError names the first that does not."""
    lo, hi = system.domain
    X = np.random.default_rng(0x5EED).uniform(lo, hi, size=(CHECK_STATES, system.n))
    shifted = X.copy()
    shifted[:, i] += period
    for what, fn in (("f", system.f), ("G", system.G), ("the constraint", system.constraint)):
        a = np.asarray(fn(X), dtype=np.float64).reshape(len(X), -1)
        b = np.asarray(fn(shifted), dtype=np.float64).reshape(len(X), -1)
        with np.errstate(invalid="ignore"):
            bad = ~(np.abs(a - b) <= RELATIVE_TOLERANCE * (1.0 + np.abs(a)))
        bad &= np.isfinite(a) | np.isfinite(b)
        if bad.any():
            row = int(np.flatnonzero(bad.any(axis=1))[0])
            raise PeriodicCoordinateError(
                f"{system.name}: {what} is not periodic in {label} with period {period!r}: it differs at "
                f"x = {np.array2string(X[row], precision=6)} and x + period")


def wrap_states(x: np.ndarray, lo: np.ndarray, periods: Mapping[int, float]) -> np.ndarray:
    """A copy of x ((n,) or (B, n)) with every periodic coordinate i mapped into [lo_i, lo_i + P_i).

    Only entries outside that interval change, to x_i - k P_i with k = floor((x_i - lo_i) / P_i);
    one that rounding leaves on the far side of the seam becomes lo_i. Entries already inside
    keep their bits, and so does every other coordinate and every non-finite entry."""
    out = np.array(x, dtype=np.float64)
    for i, period in periods.items():
        v = out[..., i]                          # a view: written in place
        top = lo[i] + period
        with np.errstate(invalid="ignore"):
            outside = np.isfinite(v) & ((v < lo[i]) | (v >= top))
        if outside.any():
            w = v[outside] - np.floor((v[outside] - lo[i]) / period) * period
            w[(w < lo[i]) | (w >= top)] = lo[i]
            v[outside] = w
    return out
