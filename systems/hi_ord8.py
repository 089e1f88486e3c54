"""hi-ord8: an autonomous (m = 0) 8th-order linear system in companion form.

x^(8) + 20 x^(7) + 170 x^(6) + 800 x^(5) + 2273 x^(4) + 3980 x''' + 4180 x'' + 2400 x' + 576 x = 0
(characteristic roots -1, -2, -3, -4 twice each: stable), states x1 = x, ..., x8 = x^(7), on
D = [-2, 2]^8.  The exact ReLU verifier (NeurIPS 2023) reports 8-8-1 and 8-16-1; Fossil 2.0
uses it as a barrier benchmark.  Sets chosen after Fossil's barrier benchmark as we recall
it (not checked against Fossil's source in this session): unsafe the ball of radius 0.5
about (-2, ..., -2), i.e. constraint |x + 2|^2 - 0.25 (>= 0 outside it); initial the ball of
radius 0.5 about (1, ..., 1), recorded as ``INITIAL_BALL``; ``initial_set`` is the box around
it, [0.5, 1.5]^8 (h >= 0 on the box implies it on the ball).

A barrier that holds with room to spare, from the system's own structure (``eigen_halfspace``):
w a unit left eigenvector of A for the eigenvalue lam = -1 (w^T A = lam w^T), h = w.x + c.
Then hdot = w^T A x = lam w.x = lam (h - c), so on {h = 0} hdot = -lam c = c > 0 for c > 0: the
set {h >= 0} is invariant (w.x(t) = e^(lam t) w.x(0)).  Every w_i > 0 and sum w_i = 2.054, so
w.x is 2.054 (+-0.5) on the initial ball and at most -4.107 + 0.5 on the unsafe ball: any
0 < c < 3.607 separates them; ``EIGEN_OFFSET`` = 1.8 sits in the middle.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import sympy as sp

from .base import ControlAffineSystem, Definition

COEFFS = (576, 2400, 4180, 3980, 2273, 800, 170, 20)    # of x, x', ..., x^(7)
INITIAL_BALL = ((1.0,) * 8, 0.5)                          # (centre, radius): the initial set, as data
INITIAL_BOX = tuple((0.5, 1.5) for _ in range(8))         # (lo, hi) per state: the box around the ball
EIGEN_VALUE = -1.0
EIGEN_OFFSET = 1.8


def left_eigenvector(lam: float = EIGEN_VALUE) -> np.ndarray:
    """The unit w with w^T A = lam w^T for the companion matrix A of ``COEFFS`` (lam one of its
    roots -1, -2, -3, -4): from w_8 = 1, column j of w^T A = lam w^T gives w_(j-1) = lam w_j + a_j."""
    w = np.zeros(8)
    w[7] = 1.0
    for j in range(7, 0, -1):
        w[j - 1] = lam * w[j] + COEFFS[j]
    return w / np.linalg.norm(w)


@dataclass(frozen=True)
class HiOrd8Params:
    bound: float = 2.0          # D = [-bound, bound]^8
    unsafe_centre: float = -2.0
    unsafe_radius: float = 0.5


class HiOrd8(ControlAffineSystem):
    """xdot = A x, A the companion matrix of COEFFS; no input."""

    name = "hi_ord8"
    state_names = tuple(f"x{i}" for i in range(1, 9))
    input_names = ()
    Params = HiOrd8Params
    initial_ball = INITIAL_BALL
    initial_set = INITIAL_BOX

    @staticmethod
    def define(x: tuple[sp.Symbol, ...], p: SimpleNamespace) -> Definition:
        top = -sum(c * xi for c, xi in zip(COEFFS, x))
        b = p.bound
        return Definition(
            f=list(x[1:]) + [top],
            G=[[] for _ in x],
            constraint=sum((xi - p.unsafe_centre) ** 2 for xi in x) - p.unsafe_radius**2,
            u_min=[],
            u_max=[],
            domain=([-b] * 8, [b] * 8),
            nominal={"none": []},
        )


def hi_ord8(**params: float) -> HiOrd8:
    return HiOrd8(HiOrd8Params(**params))


def eigen_halfspace(system: HiOrd8, x: np.ndarray) -> np.ndarray:
    """w.x + c (module docstring): an invariant half-space holding the initial ball and none of
    the unsafe ball, as a ``label_set`` or as the barrier itself; for the default parameters."""
    return np.asarray(x, dtype=np.float64) @ left_eigenvector() + EIGEN_OFFSET
