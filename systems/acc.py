"""Adaptive cruise control, Ames, Grizzle & Tabuada (CDC 2014) / Ames et al. (TAC 2017).

Standard two-state form x = [v, z] (ego speed, gap to the lead car, which drives at constant
v0): vdot = (u - F_r(v)) / M, zdot = v0 - v, F_r = f0 + f1 v + f2 v^2, u = wheel force [N]
bounded by -c_d M g <= u <= c_a M g.  Constraint: headway h = z - T_h v >= 0 (T_h = 1.8 s,
"half the speedometer").  With bounded braking h is not invariant by itself (the papers use
z - T_h v - (v0 - v)^2 / (2 c_d g) for that); the learned CBF has to carve out the viable set.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import sympy as sp

from .base import ControlAffineSystem, Definition


@dataclass(frozen=True)
class ACCParams:
    M: float = 1650.0     # mass [kg]
    g: float = 9.81
    f0: float = 0.1       # rolling resistance [N]
    f1: float = 5.0       # [N s/m]
    f2: float = 0.25      # aerodynamic [N s^2/m^2]
    v0: float = 13.89     # lead vehicle speed [m/s]
    v_d: float = 24.0     # desired cruise speed [m/s]
    T_h: float = 1.8      # time headway [s]
    c_a: float = 0.3      # max acceleration / g
    c_d: float = 0.3      # max deceleration / g
    k_v: float = 0.5      # nominal speed gain [1/s]


class ACC(ControlAffineSystem):
    """x = [v, z]; f = [-F_r(v)/M, v0 - v], G = [1/M, 0]^T."""

    name = "acc"
    state_names = ("v", "z")
    input_names = ("F",)
    Params = ACCParams

    @staticmethod
    def define(x: tuple[sp.Symbol, ...], p: SimpleNamespace) -> Definition:
        v, z = x
        F_r = p.f0 + p.f1 * v + p.f2 * v**2
        return Definition(
            f=[-F_r / p.M, p.v0 - v],
            G=[[1 / p.M], [0]],
            constraint=z - p.T_h * v,
            u_min=[-p.c_d * p.M * p.g],
            u_max=[p.c_a * p.M * p.g],
            domain=([0, 0], [30, 120]),
            # cancel the drag, P control to v_d > v0: the gap shrinks until headway is violated
            nominal={"cruise": [F_r - p.k_v * p.M * (v - p.v_d)]},
        )


def acc(**params: float) -> ACC:
    return ACC(ACCParams(**params))
