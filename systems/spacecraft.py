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

import sympy as sp

from .base import ControlAffineSystem, Definition


@dataclass(frozen=True)
class SpacecraftParams:
    n_orbit: float = 0.0565   # mean motion [rad/s] (the benchmark's training model)
    u_max: float = 1.0
    radius: float = 0.25      # keep-out ball
    p_max: float = 2.0
    v_max: float = 1.0


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


def spacecraft(**params: float) -> Spacecraft:
    return Spacecraft(SpacecraftParams(**params))
