"""Obstacle avoidance (the Dubins-style UAV of the neural-CBF verification literature).

xdot = v sin(psi), ydot = v cos(psi), psidot = u with v = 1 and |u| <= 2, on the published
domain D = [-2, 2]^3, avoiding the disk of radius 0.2 at the origin: constraint
x^2 + y^2 - 0.04 (>= 0 outside the obstacle).  Zhang, Wu, Vorobeychik and Clark (NeurIPS 2023)
verify ReLU barriers 3-32-1 ... 3-64-64-1 for it; SEEV takes psi in [-pi, pi].  psi is not
wrapped here (D is the published box), so a certificate's claim about psi holds while the
states stay in D unless the barrier is negative on the psi faces.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import sympy as sp

from .base import ControlAffineSystem, Definition


@dataclass(frozen=True)
class ObstacleAvoidanceParams:
    v: float = 1.0            # constant speed
    u_max: float = 2.0        # turn rate bound
    radius: float = 0.2       # obstacle radius
    bound: float = 2.0        # D = [-bound, bound]^3


class ObstacleAvoidance(ControlAffineSystem):
    """xdot = [v sin psi, v cos psi, 0] + [0, 0, 1]^T u."""

    name = "obstacle_avoidance"
    state_names = ("x", "y", "psi")
    input_names = ("u",)
    Params = ObstacleAvoidanceParams

    @staticmethod
    def define(x: tuple[sp.Symbol, ...], p: SimpleNamespace) -> Definition:
        px, py, psi = x
        b = p.bound
        return Definition(
            f=[p.v * sp.sin(psi), p.v * sp.cos(psi), 0],
            G=[[0], [0], [1]],
            constraint=px**2 + py**2 - p.radius**2,
            u_min=[-p.u_max],
            u_max=[p.u_max],
            domain=([-b, -b, -b], [b, b, b]),
            nominal={"straight": [0], "turn": [p.u_max]},
        )


def obstacle_avoidance(**params: float) -> ObstacleAvoidance:
    return ObstacleAvoidance(ObstacleAvoidanceParams(**params))
