"""Dubins car in a walled arena with a disk obstacle: x = [p_x, p_y, theta], u = [omega].

The car drives at a constant speed v and can only steer: pdot = v (cos theta, sin theta),
thetadot = omega with |omega| <= omega_max (turning radius v / omega_max).  It cannot stop,
so the only way to stay safe is to keep turning, and its safe set must be bounded for a
certificate to close: the constraint keeps it inside a circular arena (a geofence) and
outside the obstacle disk at the arena's centre,

    h = (R^2 - s) (s - r^2) / (R^2 - r^2),   s = p_x^2 + p_y^2,

a smooth polynomial that is >= 0 exactly on the ring r <= |p| <= R (both factors change
sign only on their circle, and no point is inside the obstacle and outside the arena).  The
division scales it like a distance near the obstacle (slope 2r per metre). The heading is
periodic (period 2 pi, domain [-pi, pi]); the position box is a little wider than the
arena, so h < 0 on its faces and the safe set lies strictly inside the domain.

Viability: heading straight at the obstacle centre from distance d, a full turn clears it
iff d^2 + rho^2 >= (r + rho)^2 (rho = v / omega_max); heading straight out at distance d it
stays in the arena iff sqrt(d^2 + rho^2) + rho <= R.  With the defaults (rho = 0.5, r = 0.5,
R = 3) that is d >= 0.866 and d <= 2.45: a wide ring of states from which a turn saves the car.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import sympy as sp

from .base import ControlAffineSystem, Definition


@dataclass(frozen=True)
class DubinsParams:
    v: float = 1.0            # constant forward speed [m/s]
    omega_max: float = 2.0    # |omega| <= omega_max [rad/s] (turning radius v / omega_max = 0.5 m)
    r: float = 0.5            # obstacle radius [m], centred at the origin
    R: float = 3.0            # arena radius [m], centred at the origin
    extent: float = 3.5       # the domain's position box is [-extent, extent]^2 (> R)
    x_goal: float = 2.5       # go_to_goal's target: straight through the obstacle from (-2.5, 0)
    y_goal: float = 0.0
    k_omega: float = 2.0      # nominal turn-rate gain on the body-frame bearing [1/s]
    circling_slope: float = 0.04   # left_circling_margin: how fast its walls move with the heading [m/rad]
    circling_focus: float = 4.0    # ... how sharply the walls' rise gathers at one heading
    circling_clearance: float = 0.02   # ... and how far its walls keep off the full-left-safe edge [m]


class Dubins(ControlAffineSystem):
    """xdot = [v cos theta, v sin theta, 0] + [0, 0, 1]^T omega."""

    name = "dubins"
    state_names = ("p_x", "p_y", "theta")
    input_names = ("omega",)
    Params = DubinsParams

    @staticmethod
    def define(x: tuple[sp.Symbol, ...], p: SimpleNamespace) -> Definition:
        px, py, th = x
        c, s = sp.cos(th), sp.sin(th)
        dist2 = px**2 + py**2

        def bearing(dx: sp.Expr, dy: sp.Expr) -> sp.Expr:
            """Angle of (dx, dy) seen from the car's body frame (atan2: no wrapping needed)."""
            return sp.atan2(c * dy - s * dx, c * dx + s * dy)

        return Definition(
            f=[p.v * c, p.v * s, 0],
            G=[[0], [0], [1]],
            constraint=(p.R**2 - dist2) * (dist2 - p.r**2) / (p.R**2 - p.r**2),
            u_min=[-p.omega_max],
            u_max=[p.omega_max],
            domain=([-p.extent, -p.extent, -sp.pi], [p.extent, p.extent, sp.pi]),
            nominal={
                "aim": [p.k_omega * bearing(-px, -py)],                     # at the obstacle centre
                "go_to_goal": [p.k_omega * bearing(p.x_goal - px, p.y_goal - py)],
            },
            periodic={2: 2 * sp.pi},
        )


def _wall_profile(slope: float, focus: float, terms: int = 12):
    """w(psi) >= 0, min 0, with w' = slope (2 sum_n I_n(focus)/I_0(focus) cos n psi): the
    integral of a von Mises bump minus its mean, so w falls at the rate ``slope`` over more than
    half the circle and rises steeply around psi = 0 (closed form, smooth, periodic)."""
    from scipy import special           # here, not at import: every process that lists the plants imports this module
    n = np.arange(1, terms + 1)
    coef = 2 * slope * special.iv(n, focus) / special.iv(0, focus) / n
    grid = np.linspace(-np.pi, np.pi, 4097)
    floor = float((np.sin(np.multiply.outer(grid, n)) @ coef).min())
    return lambda psi: np.sin(np.multiply.outer(psi, n)) @ coef - floor


def left_circling_margin(system: Dubins, x: np.ndarray) -> np.ndarray:
    """A set of states the car can keep by circling left, with room to spare at every state of
    its edge (``label_set`` for training: h >= 0 exactly where this is >= 0).

    Why not the states a full left turn keeps safe?  In the coordinates of the left turning
    circle's centre c = p + rho (-sin theta, cos theta), its speed is d/dt c = (v - rho omega)
    (cos theta, sin theta), so full left (omega = omega_max) holds c still and every function of
    c stays constant: that set, {r + rho <= |c| <= R - rho}, is held only with zero slack (its
    edge has sup_u dh/dt = 0), and no filter margin certifies it.  This set moves its walls with
    the heading psi = theta - angle(c) relative to c's bearing: the inner wall |c| = r + rho +
    clearance + w(psi) falls with psi wherever the car heads inward (cos psi <= 0), so turning left raises
    the margin there, and rises only where the car heads outward, where driving on does.  Its
    outer wall is the same profile half a turn on.  With the defaults every edge state can raise
    the margin by >= 0.069 m/s, and the set holds 87% of the full-left-safe states (measured by
    sampling, tests/test_dubins.py).  The margin is (|c| - inner)(outer - |c|)/(outer - inner)
    [m]: the distance to the nearer wall, roughly."""
    p = system.params
    rho = p.v / p.omega_max
    x = np.asarray(x, dtype=np.float64)
    cx = x[..., 0] - rho * np.sin(x[..., 2])
    cy = x[..., 1] + rho * np.cos(x[..., 2])
    dist = np.hypot(cx, cy)
    psi = x[..., 2] - np.arctan2(cy, cx)
    wall = _wall_profile(p.circling_slope, p.circling_focus)
    inner = p.r + rho + p.circling_clearance + wall(psi)
    outer = p.R - rho - p.circling_clearance - wall(psi + np.pi)
    return (dist - inner) * (outer - dist) / (outer - inner)


def dubins(**params: float) -> Dubins:
    return Dubins(DubinsParams(**params))


__all__ = ["Dubins", "DubinsParams", "dubins", "left_circling_margin"]
