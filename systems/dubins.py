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


def dubins(**params: float) -> Dubins:
    return Dubins(DubinsParams(**params))


__all__ = ["Dubins", "DubinsParams", "dubins"]
