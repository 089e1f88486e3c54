"""Spacecraft rendezvous: the linear Clohessy-Wiltshire-Hill (CWH) relative dynamics.

p = (x, y, z) relative position, v its rate; pdot = v, vxdot = 3 n^2 x + 2 n vy + ux,
vydot = -2 n vx + uy, vzdot = -n^2 z + uz, |u_i| <= 1, domain |p_i| <= 2, |v_i| <= 1, keep-out
ball r >= 0.25: constraint x^2 + y^2 + z^2 - 0.0625.  n = 0.0565 rad/s is the mean motion of
the training model in the exact-verification repository of Zhang et al. (NeurIPS 2023); the
matrix their verifier prints differs, and a real low orbit has n ~ 0.001 (the choice is
recorded, certification.md section 9).  Units are the benchmark's (nondimensional).
"""
from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import sympy as sp

from .base import ControlAffineSystem, Definition


@dataclass(frozen=True)
class SpacecraftParams:
    n_orbit: float = 0.0565   # mean motion [rad/s] (the benchmark's training model)
    u_max: float = 1.0
    radius: float = 0.25      # keep-out ball
    p_max: float = 2.0
    v_max: float = 1.0
    # braking_margin (the label set, as systems.point_robot's): clearance to the ball, the
    # braking rate it plans with (below the radial deceleration every state keeps, 1 - drift),
    # and the radial speed v_star at which it stops braking (the slack every edge state keeps).
    clearance: float = 0.1
    brake: float = 0.6
    v_star: float = 0.2


class Spacecraft(ControlAffineSystem):
    """CWH: xdot = A x + [0; I] u."""

    name = "spacecraft"
    state_names = ("px", "py", "pz", "vx", "vy", "vz")
    input_names = ("ux", "uy", "uz")
    Params = SpacecraftParams

    @staticmethod
    def define(x: tuple[sp.Symbol, ...], p: SimpleNamespace) -> Definition:
        px, py, pz, vx, vy, vz = x
        n = p.n_orbit
        P, V = p.p_max, p.v_max
        return Definition(
            f=[vx, vy, vz, 3 * n**2 * px + 2 * n * vy, -2 * n * vx, -n**2 * pz],
            G=[[0, 0, 0], [0, 0, 0], [0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]],
            constraint=px**2 + py**2 + pz**2 - p.radius**2,
            u_min=[-p.u_max] * 3,
            u_max=[p.u_max] * 3,
            domain=([-P, -P, -P, -V, -V, -V], [P, P, P, V, V, V]),
            nominal={"dock": [-px - 2 * vx, -py - 2 * vy, -pz - 2 * vz], "zero": [0, 0, 0]},
        )


def drift_bound(p: SpacecraftParams) -> float:
    """sup over D of |A_v x|, the CWH drift of the velocity (Coriolis and tidal terms)."""
    n, P, V = p.n_orbit, p.p_max, p.v_max
    return float(np.sqrt((3 * n**2 * P + 2 * n * V) ** 2 + (2 * n * V) ** 2 + (n**2 * P) ** 2))


def braking_margin(system: Spacecraft, x: np.ndarray) -> np.ndarray:
    """A set the chaser can keep out of the keep-out ball with room to spare at every edge
    state (``label_set`` for training: h >= 0 exactly where this is >= 0).

    With d = |p| - r - clearance and the radial speed s = p.v / |p|, the set is d >= phi(s),
    phi(s) = (v_star - s)^2 / (2 brake) for s < v_star and 0 beyond.  Along the edge,
    d/dt (d - phi(s)) = s - phi'(s) sdot with sdot = p.(A_v x + u) / |p| + |v_t|^2 / |p|; some
    admissible u gives p.u / |p| = |p / |p||_1 >= u_max, and |p.A_v x| / |p| <= drift_bound
    (0.17 here), so sdot >= u_max - drift_bound > brake and every edge state can raise the margin
    by at least v_star: s + (v_star - s) sdot / brake >= v_star for s <= v_star, = s beyond.
    Inside the ball s is taken as p.v / r instead (the set is the same: its states have |p| >= r +
    clearance): p.v / |p| jumps across p = 0, where the label only has to be negative."""
    p = system.params
    if p.brake >= p.u_max - drift_bound(p):
        raise ValueError(f"brake {p.brake} must stay below u_max - drift {p.u_max - drift_bound(p):.3f}")
    x = np.asarray(x, dtype=np.float64)
    dist = np.linalg.norm(x[..., :3], axis=-1)
    radial = (x[..., :3] * x[..., 3:]).sum(-1) / np.maximum(dist, p.radius)   # continuous in the ball
    short = np.minimum(radial - p.v_star, 0.0)
    return dist - p.radius - p.clearance - short**2 / (2 * p.brake)


def spacecraft(**params: float) -> Spacecraft:
    return Spacecraft(SpacecraftParams(**params))


def axis_drift(p: SpacecraftParams, axis: int) -> float:
    """sup over D of |e_axis . A_v x|, the CWH drift of one velocity component."""
    n, P, V = p.n_orbit, p.p_max, p.v_max
    return (3 * n**2 * P + 2 * n * V, 2 * n * V, n**2 * P)[axis]


def braking_terms(p: SpacecraftParams, knots: tuple[float, ...] = (0.2,), axes: tuple[int, ...] = (0, 1),
                  margin: float = 0.1) -> list[tuple]:
    """A barrier written down as a maximum of ReLU terms (``training.designed.relu_max_network``):
    one braking term per direction d = +-e_i, i in ``axes``,

        h_d = d.p - radius - clearance - phi(d.v),   phi(s) = sum_k c_k relu(t_k - s) (knots t_k),

    a slab the chaser keeps by braking along d.  On the piece of phi with slope -C (s in [t', t]),
    hdot_d = s + C d.(A_v x + u) and some admissible u gives d.u = u_max, so sup_u hdot_d >=
    t' + C (u_max - axis_drift) = ``margin`` for C = (margin - t') / (u_max - axis_drift); beyond
    the first knot (s >= knots[0] >= margin) phi = 0 and hdot_d = s.  Each term keeps its
    condition on its own zero level in D, so the maximum does on its own, and h_d >= 0 gives
    |p| >= d.p >= radius + clearance: outside the keep-out ball.  The set is a union of slabs:
    84% of D with one knot, 92% with (0.2, -0.3, -0.65), against ``braking_margin``'s 96%
    (sampled); a barrier whose certification does not hinge on training (benchmarks/certify_suite.py)."""
    knots = tuple(float(t) for t in knots)
    if not knots or list(knots) != sorted(knots, reverse=True) or knots[-1] <= -p.v_max or knots[0] < margin:
        raise ValueError(f"knots must decrease from >= margin {margin} and stay above -v_max {-p.v_max}, got {knots}")
    lower = knots[1:] + (-p.v_max,)          # each piece of phi runs from its knot down to the next
    terms = []
    for axis in axes:
        room = p.u_max - axis_drift(p, axis)
        if room <= 0:
            raise ValueError(f"axis {axis}: the drift {axis_drift(p, axis):.3g} uses the whole input {p.u_max}")
        slopes = [(margin - t) / room for t in lower]
        for sign in (1.0, -1.0):
            d = np.zeros(3)
            d[axis] = sign
            a = np.concatenate([d, np.zeros(3)])
            hinges = [(-(slopes[k] - (slopes[k - 1] if k else 0.0)), np.concatenate([np.zeros(3), -d]), knots[k])
                      for k in range(len(knots))]
            terms.append((a, -(p.radius + p.clearance), hinges))
    return terms
