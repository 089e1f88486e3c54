"""Inverted pendulum, torque input: theta_ddot = (g/L) sin theta + u / (m L^2).

Constraint |theta| <= theta_max as h = theta_max^2 - theta^2 (smooth).  u_max = 12 N m
exceeds the gravity torque m g L sin(theta_max) = 6.9 N m at the boundary, so a viable
braking region exists inside the set -- what the CBF must learn.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from types import SimpleNamespace

import sympy as sp

from .base import ControlAffineSystem, Definition


@dataclass(frozen=True)
class InvertedPendulumParams:
    g: float = 9.81
    L: float = 1.0                  # length [m]
    mass: float = 1.0               # point mass [kg]
    u_max: float = 12.0             # |u| <= u_max [N m]
    theta_max: float = math.pi / 4  # safe |theta| [rad]
    theta_ref: float = math.pi / 3  # PD target, beyond theta_max
    kp: float = 4.0                 # PD gains on the feedback-linearised angle [1/s^2]
    kd: float = 4.0                 # [1/s]


class InvertedPendulum(ControlAffineSystem):
    """x = [theta, theta_dot]; f = [theta_dot, (g/L) sin theta], G = [0, 1/(m L^2)]."""

    name = "inverted_pendulum"
    state_names = ("theta", "theta_dot")
    input_names = ("u",)
    Params = InvertedPendulumParams

    @staticmethod
    def define(x: tuple[sp.Symbol, ...], p: SimpleNamespace) -> Definition:
        th, om = x
        inertia = p.mass * p.L**2
        return Definition(
            f=[om, p.g / p.L * sp.sin(th)],
            G=[[0], [1 / inertia]],
            constraint=p.theta_max**2 - th**2,
            u_min=[-p.u_max],
            u_max=[p.u_max],
            domain=([-2 * p.theta_max, -4], [2 * p.theta_max, 4]),
            nominal={
                # gravity compensation + PD to theta_ref: settles outside the set
                "pd": [inertia * (-p.g / p.L * sp.sin(th) - p.kp * (th - p.theta_ref) - p.kd * om)],
                "zero": [0],
            },
        )


def inverted_pendulum(**params: float) -> InvertedPendulum:
    return InvertedPendulum(InvertedPendulumParams(**params))
