"""Inverted pendulum, torque input: theta_ddot = (g/L) sin theta + u / (m L^2).

Constraint |theta| <= theta_max as h = theta_max^2 - theta^2 (smooth).  u_max = 12 N m
exceeds the gravity torque m g L sin(theta_max) = 6.9 N m at the boundary, so a viable
braking region exists inside the set -- what the CBF must learn.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from types import SimpleNamespace

import numpy as np
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


@dataclass(frozen=True)
class BrakingDesign:
    """The designed set's edge (see ``braking_margin``); ``alpha1`` must be the barrier's alpha1."""

    alpha1: float = 8.0          # HOCBF alpha1 [1/s] (preset ``pendulum``)
    slack: float = 1.2           # deceleration the edge leaves unused [rad/s^2]
    margin_accel: float = 1.0    # filter margin / |h'| at the tip [rad/s^2] (tip slope = margin / this)
    filter_margin: float = 1.0   # the filter's margin in psi2 units (preset ``filter_margin``)
    tip_gap: float = 0.002       # the set ends this far inside |theta| <= theta_max [rad]
    softness: float = 2.0        # exponent of the smooth minimum of the two braking demands
    top: float = 2.0             # edge speed [rad/s] (above the 1.25 face) where h starts to level off
    taper: float = 0.3           # ... and the angle over which it levels off [rad]
    passes: int = 3              # fixed-point passes for the margin m / |h'| along the edge
    grid: int = 40_001


BRAKING = BrakingDesign()


@lru_cache(maxsize=8)
def braking_profile(params: InvertedPendulumParams, design: BrakingDesign = BRAKING):
    """(s grid, edge speed phi(s), cubic spline of ln(h / (k0 s)), tip slope k0), s = theta* - |theta|.

    The edge theta_dot = phi asks the input for the deceleration d = phi dphi/ds; it is the smooth
    minimum of alpha1^2 s (phi = alpha1 s near the tip, so h is linear there) and
    a(theta) - slack - margin_accel, a = u_max / (m L^2) - (g / L) sin theta the largest one."""
    tip = params.theta_max - design.tip_gap
    s = np.linspace(0.0, tip, design.grid)
    accel = params.u_max / (params.mass * params.L**2) - params.g / params.L * np.sin(tip - s)
    k0 = design.filter_margin / design.margin_accel
    slope = np.full_like(s, k0)                 # |h'| along the edge, refined by the passes below
    for _ in range(design.passes):
        phi, inv_phi, log_ratio = _edge(s, accel - design.slack - design.filter_margin / slope, design)
        slope = k0 * np.exp(log_ratio(s)) * (1 + s * log_ratio(s, 1))      # d/ds of k0 s exp(G(s))
        slope = np.maximum.accumulate(np.maximum(slope, k0))   # where h levels off the edge is past the face
    return s, phi, inv_phi, log_ratio, k0


def _edge(s: np.ndarray, limit: np.ndarray, design: BrakingDesign):
    """phi, 1/phi and the spline of ln(h / (k0 s)) for the deceleration limit ``limit`` (see braking_profile)."""
    from scipy.integrate import cumulative_trapezoid
    from scipy.interpolate import CubicSpline
    if np.any(limit <= 0):
        raise ValueError("braking design: slack + margin exceed the input's deceleration")
    p = design.softness
    demand = np.zeros_like(s)
    demand[1:] = ((design.alpha1**2 * s[1:]) ** -p + limit[1:] ** -p) ** (-1 / p)
    phi = np.sqrt(2 * cumulative_trapezoid(demand, s, initial=0.0))
    start = s[min(np.searchsorted(phi, design.top), len(s) - 1)]
    r = np.clip((s - start) / design.taper, 0.0, 1.0)
    inv_phi = np.zeros_like(s)
    inv_phi[1:] = (1 - r[1:]) ** 2 * (1 + 2 * r[1:]) / phi[1:]        # 1/phi, smoothly to 0: h levels off
    rate = np.zeros_like(s)                                          # d/ds ln(h/s) = alpha1/phi - 1/s
    rate[1:] = design.alpha1 * inv_phi[1:] - 1 / s[1:]
    rate[0] = 0.0                                                    # phi = alpha1 s (1 + O(s^p)) at the tip
    return phi, inv_phi, CubicSpline(s, cumulative_trapezoid(rate, s, initial=0.0))


def braking_margin(system: InvertedPendulum, x: np.ndarray, design: BrakingDesign = BRAKING) -> np.ndarray:
    """A barrier h(theta) whose HOCBF edge psi1 = h' theta_dot + alpha1 h = 0 the input can follow
    with room to spare (``label_set`` for training; >= 0 exactly on the designed set's theta range).

    On the right (h' < 0) the edge is theta_dot = phi(theta) = alpha1 h / |h'|, and there the
    row psi1' >= m reads theta_ddot <= phi phi' - m / |h'|: the flow must follow the edge curve
    less a margin, independent of alpha1.  So choose phi and set h = exp(-alpha1 int dtheta / phi):
    phi = alpha1 s near the tip s = theta* - theta -> 0 (h linear there, slope k0), then a
    braking parabola that leaves ``slack`` of the deceleration unused, then 1/phi -> 0 once phi
    passes the 1.25 rad/s face (h flat in the middle).  Symmetric in theta; linear, slope k0,
    beyond the tip."""
    s_grid, _, _, log_ratio, k0 = braking_profile(system.params, design)
    theta = np.asarray(x, dtype=np.float64)[..., 0]
    s = (system.params.theta_max - design.tip_gap) - np.abs(theta)
    inside = np.clip(s, 0.0, s_grid[-1])
    return np.where(s > 0, k0 * inside * np.exp(log_ratio(inside)), k0 * s)
