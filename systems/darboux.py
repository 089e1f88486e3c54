"""Darboux: an autonomous (m = 0) polynomial benchmark of the barrier-certificate literature.

xdot1 = x2 + 2 x1 x2, xdot2 = -x1 + 2 x1^2 - x2^2 on D = [-2, 2]^2, unsafe x1 + x2^2 <= 0
(Prajna, Jadbabaie and Pappas; the exact ReLU-NCBF verifier of Zhang et al., NeurIPS 2023,
uses the same sets).  The constraint is x1 + x2^2 (>= 0 on the safe side; its zero set is
the boundary of the unsafe set).  The initial set 0 <= x1 <= 1, 1 <= x2 <= 2 is recorded in
``INITIAL_SET`` as data: a barrier certificate must be >= 0 there.  No inputs: G is n x 0.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from types import SimpleNamespace

import numpy as np
import sympy as sp

from .base import ControlAffineSystem, Definition

INITIAL_SET = ((0.0, 1.0), (1.0, 2.0))     # (lo, hi) per state: the literature's initial set


@dataclass(frozen=True)
class DarbouxParams:
    bound: float = 2.0        # D = [-bound, bound]^2


class Darboux(ControlAffineSystem):
    """xdot = f(x), no input."""

    name = "darboux"
    state_names = ("x1", "x2")
    input_names = ()
    Params = DarbouxParams
    initial_set = INITIAL_SET

    @staticmethod
    def define(x: tuple[sp.Symbol, ...], p: SimpleNamespace) -> Definition:
        x1, x2 = x
        return Definition(
            f=[x2 + 2 * x1 * x2, -x1 + 2 * x1**2 - x2**2],
            G=[[], []],
            constraint=x1 + x2**2,
            u_min=[],
            u_max=[],
            domain=([-p.bound, -p.bound], [p.bound, p.bound]),
            nominal={"none": []},
        )


def darboux(**params: float) -> Darboux:
    return Darboux(DarbouxParams(**params))


def _flow_slope(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """dx2/dx1 along the flow where xdot1 = x2 (1 + 2 x1) > 0."""
    return (2 * x * x - x - y * y) / (y * (1 + 2 * x))


def lower_curve(segments: int = 16, slack: float = 0.05, x_left: float = -0.3, below: tuple = (0.0, 0.95),
                x_right: float = 2.0, grid: int = 41) -> tuple[np.ndarray, np.ndarray]:
    """Knots (xs, ys) of a piecewise-linear y = phi(x) on [x_left, x_right] that the flow crosses
    upward: on each segment the slope is the least flow slope over the segment's range of
    states (a ``grid`` x ``grid`` sample) less ``slack``, so d/dt (x2 - phi(x1)) = xdot1 (F - phi')
    >= xdot1 slack > 0 where x1 > -1/2 and x2 > 0 (a sample, not a proof: the certifier proves
    it).  phi passes through ``below`` (x1, x2) or under it: (0, 0.95) lies under the initial
    set's corner (0, 1), whose trajectory dips to x2 = 0.63 and leaves D at x1 = 2."""
    xs = np.linspace(x_left, x_right, segments + 1)

    def march(y_left: float) -> np.ndarray:
        ys = [y_left]
        for a, b in zip(xs[:-1], xs[1:]):
            slope = 0.0
            for _ in range(4):            # the segment's states depend on its slope: iterate
                end = ys[-1] + min(slope, 0.0) * (b - a)
                gx = np.linspace(a, b, grid)[:, None]
                gy = np.linspace(end, ys[-1], grid)[None]
                slope = float(_flow_slope(gx, gy).min()) - slack
            ys.append(ys[-1] + slope * (b - a))
        return np.array(ys)

    low, high = 0.5, 4.0                  # bisect phi(x_left) so that phi(below x1) <= below x2
    for _ in range(60):
        mid = 0.5 * (low + high)
        low, high = (low, mid) if np.interp(below[0], xs, march(mid)) > below[1] else (mid, high)
    ys = march(low)
    if ys.min() <= 0:
        raise ValueError(f"the curve reaches x2 = {ys.min():.3g} <= 0, where the flow turns: less slack or "
                         f"fewer segments")
    return xs, ys


def barrier_terms(xs: np.ndarray, ys: np.ndarray) -> list[tuple]:
    """h = min(x1 - xs[0], x2 - phi(x1)) as terms of ``training.designed.relu_min_network``:
    the left edge x1 = xs[0] > -1/2 is crossed inward (xdot1 = x2 (1 + 2 x1) > 0 for x2 > 0) and
    the curve from below (``lower_curve``).  Its set stays out of the unsafe x1 + x2^2 <= 0
    when phi >= sqrt(-xs[0]) where x1 < 0, and holds the initial set when phi <= 1 on [0, 1]."""
    slopes = np.diff(ys) / np.diff(xs)
    e1 = np.array([1.0, 0.0])
    left = (e1, -float(xs[0]), [])
    curve = (np.array([-slopes[0], 1.0]), -float(ys[0]) + float(slopes[0] * xs[0]),
             [(-float(slopes[k] - slopes[k - 1]), e1, -float(xs[k])) for k in range(1, len(slopes))])
    return [left, curve]


# curve_margin's curve (lower_curve): 0.2 under the initial set, so a fitted network has room
CURVE_SEGMENTS, CURVE_SLACK, CURVE_BELOW = 64, 0.05, (0.0, 0.8)


@lru_cache(maxsize=None)
def _label_curve() -> tuple[np.ndarray, np.ndarray]:
    return lower_curve(CURVE_SEGMENTS, CURVE_SLACK, below=CURVE_BELOW)


def curve_margin(system: Darboux, x: np.ndarray) -> np.ndarray:
    """A set the flow cannot leave while in D, for training (``label_set``): min(x1 - x_left,
    x2 - phi(x1)) with phi = ``lower_curve(CURVE_SEGMENTS, CURVE_SLACK, below=CURVE_BELOW)``
    (the kind of set ``barrier_terms`` writes down as a network).  Both walls are crossed inward with room:
    xdot1 >= 0.4 x2 on the left one, xdot1 * slack on the curve."""
    xs, ys = _label_curve()
    x = np.asarray(x, dtype=np.float64)
    return np.minimum(x[..., 0] - xs[0], x[..., 1] - np.interp(x[..., 0], xs, ys))
