"""Darboux: an autonomous (m = 0) polynomial benchmark of the barrier-certificate literature.

xdot1 = x2 + 2 x1 x2, xdot2 = -x1 + 2 x1^2 - x2^2 on D = [-2, 2]^2, unsafe x1 + x2^2 <= 0
(Prajna, Jadbabaie and Pappas; the exact ReLU-NCBF verifier of Zhang et al., NeurIPS 2023,
uses the same sets).  The constraint is x1 + x2^2 (>= 0 on the safe side; its zero set is
the boundary of the unsafe set).  The initial set 0 <= x1 <= 1, 1 <= x2 <= 2 is recorded in
``INITIAL_SET`` as data: a barrier certificate must be >= 0 there.  No inputs: G is n x 0.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

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
