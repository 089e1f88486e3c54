"""Unicycle with a disk obstacle: x = [p_x, p_y, theta], u = [v, omega].

h = (p_x - x_o)^2 + (p_y - y_o)^2 - r^2.  Only v enters hdot (omega has relative degree 2,
and v's effect vanishes when the heading is tangent to the obstacle): neural CBFs on the
full state handle this; a distance-only CBF would not.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from types import SimpleNamespace

import sympy as sp

from .base import ControlAffineSystem, Definition


@dataclass(frozen=True)
class UnicycleParams:
    x_o: float = 2.0          # obstacle centre [m]
    y_o: float = 0.0
    r: float = 0.5            # obstacle radius [m]
    v_max: float = 1.0        # |v| <= v_max [m/s]
    omega_max: float = 2.0    # |omega| <= omega_max [rad/s]
    x_goal: float = 4.0       # nominal goal, straight through the obstacle from the origin
    y_goal: float = 0.0
    k_v: float = 1.0
    k_omega: float = 2.0


class Unicycle(ControlAffineSystem):
    """xdot = [[cos theta, 0], [sin theta, 0], [0, 1]] [v, omega]."""

    name = "unicycle"
    state_names = ("p_x", "p_y", "theta")
    input_names = ("v", "omega")
    Params = UnicycleParams

    @staticmethod
    def define(x: tuple[sp.Symbol, ...], p: SimpleNamespace) -> Definition:
        px, py, th = x
        dx, dy = p.x_goal - px, p.y_goal - py
        c, s = sp.cos(th), sp.sin(th)
        return Definition(
            f=[0, 0, 0],
            G=[[c, 0], [s, 0], [0, 1]],
            constraint=(px - p.x_o)**2 + (py - p.y_o)**2 - p.r**2,
            u_min=[-p.v_max, -p.omega_max],
            u_max=[p.v_max, p.omega_max],
            domain=([-1, -3, -math.pi], [5, 3, math.pi]),
            # goal in the body frame: forward speed on its x, turn rate on its bearing
            # (atan2 of the body-frame goal needs no angle wrapping)
            nominal={"go_to_goal": [p.k_v * (c * dx + s * dy), p.k_omega * sp.atan2(c * dy - s * dx, c * dx + s * dy)]},
        )


def unicycle(**params: float) -> Unicycle:
    return Unicycle(UnicycleParams(**params))
