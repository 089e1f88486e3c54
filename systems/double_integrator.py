"""Double integrator pdot = v, vdot = a with |a| <= a_max.

Constraint |p| <= p_max written smooth as h = p_max^2 - p^2 (bounded safe set, so the
training box covers it).  The set itself is not invariant (braking distance v^2 / 2a_max);
the viable set is |p| + v|v|/(2 a_max) <= p_max -- what a CBF has to learn.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import sympy as sp

from .base import ControlAffineSystem, Definition


@dataclass(frozen=True)
class DoubleIntegratorParams:
    p_max: float = 1.0
    a_max: float = 1.0
    p_ref: float = 1.5   # PD target, beyond p_max so the nominal controller leaves the set
    kp: float = 1.0
    kd: float = 1.5


class DoubleIntegrator(ControlAffineSystem):
    """xdot = [v, 0] + [0, 1]^T a."""

    name = "double_integrator"
    state_names = ("p", "v")
    input_names = ("a",)
    Params = DoubleIntegratorParams

    @staticmethod
    def define(x: tuple[sp.Symbol, ...], p: SimpleNamespace) -> Definition:
        pos, vel = x
        return Definition(
            f=[vel, 0],
            G=[[0], [1]],
            constraint=p.p_max**2 - pos**2,
            u_min=[-p.a_max],
            u_max=[p.a_max],
            domain=([-2 * p.p_max, -2], [2 * p.p_max, 2]),
            nominal={"pd": [-p.kp * (pos - p.p_ref) - p.kd * vel], "zero": [0]},
        )


def double_integrator(**params: float) -> DoubleIntegrator:
    return DoubleIntegrator(DoubleIntegratorParams(**params))
