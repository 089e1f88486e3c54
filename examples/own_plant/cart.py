"""A plant cbfsim does not ship: a cart on a rail with linear drag and a position limit.

    p' = v,   v' = -drag v + u,   |u| <= u_max,   safe: |p| <= p_max (constraint p_max^2 - p^2 >= 0)

The set {|p| <= p_max} is not control invariant: near the limit, a fast cart cannot stop in time.
The barrier has to learn the braking region, roughly p_max - |p| >= v^2 / (2 u_max) when moving
outward, which is what makes this a real test of training rather than a copy of the constraint.
"""
from __future__ import annotations

from dataclasses import dataclass

from systems import ControlAffineSystem
from systems.base import Definition


@dataclass(frozen=True)
class CartParams:
    drag: float = 0.5       # linear drag [1/s]
    p_max: float = 1.0      # position limit [m]
    u_max: float = 1.0      # |u| <= u_max [m/s^2]
    v_ref: float = 1.0      # the nominal controller's cruise speed [m/s]
    k_v: float = 2.0        # its speed gain [1/s]


class Cart(ControlAffineSystem):
    """x = [p, v]; f = [v, -drag v], G = [0, 1]^T."""

    name = "cart"
    state_names = ("p", "v")
    input_names = ("u",)
    Params = CartParams

    @staticmethod
    def define(x, p):
        pos, vel = x
        return Definition(
            f=[vel, -p.drag * vel],
            G=[[0], [1]],
            constraint=p.p_max**2 - pos**2,
            u_min=[-p.u_max],
            u_max=[p.u_max],
            domain=([-1.5, -2.0], [1.5, 2.0]),
            # drive toward +p at v_ref, through the limit: the filter must brake in time
            nominal={"cruise": [p.k_v * (p.v_ref - vel) + p.drag * vel]},
        )


def cart(**params: float) -> Cart:
    """The factory, as every plant module has one (``module:cart`` works as a name too)."""
    return Cart(CartParams(**params))
