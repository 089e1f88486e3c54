"""Van der Pol oscillator, actuated in x2dot.

Constraint: the disk h = r^2 - x1^2 - x2^2 >= 0 with r = 1.5, which the unforced limit
cycle (|x1| ~ 2, |x2| ~ 2.7) leaves.  Why a disk and why it is enforceable: along f the
x1*x2 terms cancel, hdot = -2 x2 (mu (1 - x1^2) x2 + u), so u = -u_max sign(x2) gives
hdot >= 2|x2| (u_max - mu (1 - x1^2) |x2|) >= 0 wherever u_max >= mu r (the worst case is
x1 = 0, |x2| = r).  With mu = 1, r = 1.5, u_max = 2 every point of the disk admits hdot >= 0,
so the disk is control invariant (h itself is a valid CBF) with margin.  A box |x1| <= c
would instead need a braking-distance shaped barrier.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import sympy as sp

from .base import ControlAffineSystem, Definition


@dataclass(frozen=True)
class VanDerPolParams:
    mu: float = 1.0      # damping nonlinearity
    r: float = 1.5       # radius of the safe disk
    u_max: float = 2.0   # |u| <= u_max; keep u_max >= mu * r for the disk to stay invariant


class VanDerPol(ControlAffineSystem):
    """xdot = [x2, mu (1 - x1^2) x2 - x1] + [0, 1]^T u."""

    name = "van_der_pol"
    state_names = ("x1", "x2")
    input_names = ("u",)
    Params = VanDerPolParams

    @staticmethod
    def define(x: tuple[sp.Symbol, ...], p: SimpleNamespace) -> Definition:
        x1, x2 = x
        return Definition(
            f=[x2, p.mu * (1 - x1**2) * x2 - x1],
            G=[[0], [1]],
            constraint=p.r**2 - x1**2 - x2**2,
            u_min=[-p.u_max],
            u_max=[p.u_max],
            domain=([-3, -3], [3, 3]),
            nominal={"zero": [0]},   # follows the limit cycle, which leaves the disk
        )


def van_der_pol(**params: float) -> VanDerPol:
    return VanDerPol(VanDerPolParams(**params))
