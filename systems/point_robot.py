"""Planar point robot: a double integrator in the plane avoiding a disk.

pdot = v, vdot = u with |u_i| <= a_max, states (p_x, p_y, v_x, v_y) on D = [-3, 3]^2 x [-1, 1]^2,
obstacle the disk of radius r at the origin: constraint |p|^2 - r^2 (>= 0 outside it).  The
constraint has relative degree 2 (the input reaches |p| only through v), so a first-order
barrier must read the velocity: the robot has to brake before the disk, and the states it can
keep out are those whose inward radial speed it can still cancel.  This is the n = 4, m = 2
row of the certifier's scaling study (issue 21).
"""
from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import sympy as sp

from .base import ControlAffineSystem, Definition


@dataclass(frozen=True)
class PointRobotParams:
    a_max: float = 1.0          # |u_x|, |u_y| <= a_max
    radius: float = 0.5         # obstacle radius
    p_bound: float = 3.0        # p in [-p_bound, p_bound]^2
    v_bound: float = 1.0        # v in [-v_bound, v_bound]^2
    goal_x: float = 2.5         # the "goal" nominal's target, behind the obstacle from the left
    kp: float = 1.0
    kd: float = 1.5
    # braking_margin (the label set): clearance to the disk (0.05 left the fitted edge 0.012 m
    # from the disk, and containment took 40% of the certifier's boxes), the braking rate it
    # plans with (a share of the radial deceleration every direction has, >= a_max), and the
    # radial speed v_star at which it stops braking (the slack every edge state keeps, m/s).
    clearance: float = 0.15
    brake: float = 0.75
    v_star: float = 0.2


class PointRobot(ControlAffineSystem):
    """xdot = [v_x, v_y, 0, 0] + [[0, 0], [0, 0], [1, 0], [0, 1]] u."""

    name = "point_robot"
    state_names = ("p_x", "p_y", "v_x", "v_y")
    input_names = ("u_x", "u_y")
    Params = PointRobotParams

    @staticmethod
    def define(x: tuple[sp.Symbol, ...], p: SimpleNamespace) -> Definition:
        px, py, vx, vy = x
        pb, vb = p.p_bound, p.v_bound
        return Definition(
            f=[vx, vy, 0, 0],
            G=[[0, 0], [0, 0], [1, 0], [0, 1]],
            constraint=px**2 + py**2 - p.radius**2,
            u_min=[-p.a_max, -p.a_max],
            u_max=[p.a_max, p.a_max],
            domain=([-pb, -pb, -vb, -vb], [pb, pb, vb, vb]),
            nominal={"goal": [-p.kp * (px - p.goal_x) - p.kd * vx, -p.kp * py - p.kd * vy], "zero": [0, 0]},
        )


def braking_margin(system: PointRobot, x: np.ndarray) -> np.ndarray:
    """A set the robot can keep out of the disk with room to spare at every edge state
    (``label_set`` for training: h >= 0 exactly where this is >= 0), in metres.

    With d = |p| - r - clearance and the radial speed s = p.v / |p|, the set is
    d >= phi(s), phi(s) = (v_star - s)^2 / (2 brake) for s < v_star and 0 beyond.  Along the
    edge, d/dt (d - phi(s)) = s - phi'(s) (p.u / |p| + |v_t|^2 / |p|), and some admissible u
    gives p.u / |p| = |p / |p||_1 >= a_max >= 1 (the box holds the unit disk), so with brake < 1
    every edge state can raise the margin by at least v_star: s - phi'(s) = s + (v_star - s) /
    brake >= v_star for s <= v_star, and = s >= v_star beyond.  Why not the exact braking set
    d >= s^2 / (2 a) (s < 0)?  Its edge meets the face d = 0 where s = 0, and there the slack is
    zero: no filter margin certifies it.  phi is C^1, and the network fits a smooth version."""
    p = system.params
    x = np.asarray(x, dtype=np.float64)
    dist = np.hypot(x[..., 0], x[..., 1])
    radial = (x[..., 0] * x[..., 2] + x[..., 1] * x[..., 3]) / np.maximum(dist, 1e-12)
    short = np.minimum(radial - p.v_star, 0.0)
    return dist - p.radius - p.clearance - short**2 / (2 * p.brake)


def point_robot(**params: float) -> PointRobot:
    return PointRobot(PointRobotParams(**params))


__all__ = ["PointRobot", "PointRobotParams", "point_robot", "braking_margin"]
