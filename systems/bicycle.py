"""Kinematic bicycle with the input transformation u = [a, tan(delta)].

Using tan(delta) instead of delta makes the model control affine:
psidot = v tan(delta) / l_w.  ``steering_angle`` maps u back to delta.  Lane keeping
|p_y| <= w is written smooth as h = w^2 - p_y^2 (w - |p_y| has a kink on the centre
line).  h has relative degree 2 (steering acts through psi, and not at all at v = 0).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np
import sympy as sp

from .base import ControlAffineSystem, Definition


@dataclass(frozen=True)
class BicycleParams:
    l_w: float = 2.5          # wheelbase [m]
    w: float = 1.75           # lane half-width [m]
    a_max: float = 3.0        # |a| <= a_max [m/s^2]
    delta_max: float = 0.5    # |delta| <= delta_max [rad]
    v_ref: float = 10.0       # nominal cruise speed [m/s]
    y_target: float = 3.0     # nominal lateral target, outside the lane [m]
    k_v: float = 1.0          # nominal speed gain [1/s]
    k_y: float = 0.5          # nominal heading-reference gain [1/m]
    k_psi: float = 1.0        # nominal steering gain


def steering_angle(u: Any) -> Any:
    """delta = arctan(u[..., 1]) for numpy arrays or torch tensors."""
    if type(u).__module__.startswith("torch"):
        import torch
        return torch.atan(u[..., 1])
    return np.arctan(np.asarray(u, dtype=np.float64)[..., 1])


class Bicycle(ControlAffineSystem):
    """x = [p_x, p_y, psi, v]; xdot = [v cos psi, v sin psi, 0, 0] + G u, G = [[0,0],[0,0],[0,v/l_w],[1,0]]."""

    name = "bicycle"
    state_names = ("p_x", "p_y", "psi", "v")
    input_names = ("a", "tan_delta")
    Params = BicycleParams
    steering_angle = staticmethod(steering_angle)

    @staticmethod
    def define(x: tuple[sp.Symbol, ...], p: SimpleNamespace) -> Definition:
        px, py, psi, v = x
        tan_max = sp.tan(p.delta_max)
        psi_ref = sp.atan(p.k_y * (p.y_target - py))
        return Definition(
            f=[v * sp.cos(psi), v * sp.sin(psi), 0, 0],
            G=[[0, 0], [0, 0], [0, v / p.l_w], [1, 0]],
            constraint=p.w**2 - py**2,
            u_min=[-p.a_max, -tan_max],
            u_max=[p.a_max, tan_max],
            domain=([-10, -2 * p.w, -math.pi / 2, 0], [10, 2 * p.w, math.pi / 2, 2 * p.v_ref]),
            # keep speed, steer toward a lateral target outside the lane: leaves the set
            nominal={"drift": [p.k_v * (p.v_ref - v), p.k_psi * (psi_ref - psi)]},
        )


def bicycle(**params: float) -> Bicycle:
    return Bicycle(BicycleParams(**params))


TURN_AWAY_SLOPE = 0.35        # turn_away_margin: how far the wall moves in per unit sin(psi) [m]
TURN_AWAY_CLEARANCE = 0.065   # ... and how far it keeps off the lane edge at psi = 0 [m]
LANE_CLEARANCE = 0.05         # ... and off it when heading away (< the above: that wall binds only for psi < 0)
HEADING_CLEARANCE = 0.05      # ... and off the faces |psi| = pi/3 of the training box [rad]


def turn_away_margin(system: Bicycle, x: np.ndarray) -> np.ndarray:
    """A set of lane states the car keeps by steering away at full lock, with room to spare on
    every state of its edge (``label_set`` for training; the margin in metres).

    Heading towards the + edge (psi > 0), full lock away turns on a circle of radius rho =
    l_w / tan(delta_max) and reaches p_y + rho (1 - cos psi) at most, and that quantity is
    constant along the turn: the set {p_y + rho (1 - cos psi) <= w} is held with zero slack.
    This one moves its wall in by a clearance and by k sin psi, p_y <= w - c - rho (1 - cos
    psi)^+ - k sin psi (the cosine term only while heading towards the edge): steering away then
    raises the margin by >= v k cos(psi) / rho, and on its wall along the lane edge (a clearance
    inside it, heading away) by v |sin psi|.  Both sides, and the lane, by the least of the four
    margins, and a wall short of the training box's heading faces |psi| = pi/3 (full lock turns
    the heading back at v tan(delta_max) / l_w); the slack on the whole edge is >= 0.038 v with
    the defaults (tests/test_training.py)."""
    p = system.params
    x = np.asarray(x, dtype=np.float64)
    py, psi = x[..., 1], x[..., 2]

    def inner(toward: np.ndarray, side: np.ndarray) -> np.ndarray:   # side: +p_y or -p_y
        return p.w - TURN_AWAY_CLEARANCE - side - _full_lock_bend(p, toward) - TURN_AWAY_SLOPE * np.sin(toward)
    lane = p.w - LANE_CLEARANCE
    heading = math.pi / 3 - HEADING_CLEARANCE - np.abs(psi)     # off the box's psi faces: the set stays closed
    return np.minimum.reduce([lane - py, lane + py, inner(psi, py), inner(-psi, -py), heading])


ROUNDED_SLOPE = 0.25          # rounded_turn_away_margin: the side wall's inward shift per radian heading [m/rad]
ROUNDED_CLEARANCE = 0.045     # ... its clearance off the lane edge at psi = 0 [m]
ROUNDED_LANE_CLEARANCE = 0.03  # ... the lane wall's (heading away; 0.015 less, so that wall binds only past
#                               psi = 0.015 / slope, where heading away moves p_y at >= sin(0.015 / slope) v)
ROUNDED_HEADING_CLEARANCE = 0.03  # ... the heading wall's off the training box's faces |psi| = pi/3 [rad]
ROUNDED_HEADING_SCALE = 2.0   # ... the heading wall in metres per radian
ROUNDED_RADIUS = 0.5          # ... the radius [m] that rounds the walls' corners


def rounded_turn_away_margin(system: Bicycle, x: np.ndarray) -> np.ndarray:
    """turn_away_margin's set with a linear wall shift and its heading-wall corners rounded
    (``label_set``; metres).  The module's ROUNDED_* constants set it.

    The walls along each lane edge are turn_away_margin's with a linear shift, p_y <= w - c -
    rho (1 - cos psi)^+ - k psi: steering away raises that margin by v k / rho (0.055 v with k
    = 0.25; k sin psi gives less near the heading wall and more than needed near psi = 0).
    Where an edge's walls meet the heading wall, a plain min has a corner, and a state there
    may steer into the heading wall while the filter reads the edge wall's rising gradient:
    within a 2 ms hold the gradient turns (h'' ~ jump / corner width) and the sampled-data
    bound, eps v / 10 >= (T / 2) v^2 |h''| (h'' along the arc length), cannot close.  So with
    S+, S- the two edges' margins and H = s (pi/3 - c_H - |psi|) the heading wall's,
    m = r - |((r - S+)^+, (r - S-)^+, (r - H)^+)|: where one is below r it is that one, where
    two are, an arc of radius r (a corner's curvature along a path <= |rate|^2 / r), and r
    inside (a cap).  The two edges enter separately, so the ridge between them is smooth too
    where the set is narrow (next to the heading wall); the set loses nothing there while
    it is wider than r."""
    p = system.params
    x = np.asarray(x, dtype=np.float64)
    py, psi = x[..., 1], x[..., 2]
    lane, r = p.w - ROUNDED_LANE_CLEARANCE, ROUNDED_RADIUS
    heading = ROUNDED_HEADING_SCALE * (math.pi / 3 - ROUNDED_HEADING_CLEARANCE - np.abs(psi))

    def edge(toward: np.ndarray, side: np.ndarray) -> np.ndarray:   # side: +p_y or -p_y
        turn_away = p.w - ROUNDED_CLEARANCE - side - _full_lock_bend(p, toward) - ROUNDED_SLOPE * toward
        return np.minimum(lane - side, turn_away)

    below = [np.maximum(r - m, 0.0) for m in (edge(psi, py), edge(-psi, -py), heading)]
    return r - np.sqrt(below[0] ** 2 + below[1] ** 2 + below[2] ** 2)


def _full_lock_bend(p: BicycleParams, toward: np.ndarray) -> np.ndarray:
    """rho (1 - cos psi)^+: how far full lock away still carries the car toward the edge it heads
    to (rho = l_w / tan(delta_max), the turning radius); 0 when it heads away."""
    rho = p.l_w / math.tan(p.delta_max)
    return np.where(toward > 0, rho * (1.0 - np.cos(toward)), 0.0)
