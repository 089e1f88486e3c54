"""Where the training states come from, and which of them are known to be safe.

Positive labels must be states from which safety can actually be kept, not merely states
inside the constraint set: a car at the lane edge heading outward is inside the set and
already lost.  ``backup_safe`` decides this with a rollout under a greedy backup policy
(each input at the box corner that raises the constraint fastest, using the second time
derivative when the input does not reach the first -- relative degree 2); a state is a
positive only if the constraint stays >= 0 over the horizon.  That under-approximates the
viable set (the backup is not optimal), which is the safe direction for positive labels.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import sympy as sp


def uniform(rng: np.random.Generator, lo: np.ndarray, hi: np.ndarray, count: int) -> np.ndarray:
    """count states uniform in the box [lo, hi], float64 (count, n)."""
    return rng.uniform(lo, hi, size=(int(count), len(lo)))


def grid(lo: np.ndarray, hi: np.ndarray, per_axis: int) -> np.ndarray:
    """The full tensor grid with per_axis points on every axis (endpoints included)."""
    axes = [np.linspace(a, b, int(per_axis)) for a, b in zip(lo, hi)]
    mesh = np.meshgrid(*axes, indexing="ij")
    return np.stack([m.reshape(-1) for m in mesh], axis=-1)


def neighbours(rng: np.random.Generator, x: np.ndarray, k: int, lo: np.ndarray, hi: np.ndarray,
               rel_sigma: float = 0.01) -> np.ndarray:
    """x plus k Gaussian neighbours of each row (sigma = rel_sigma * box width), clipped to the box."""
    if len(x) == 0 or k == 0:
        return x.copy()
    sigma = rel_sigma * (hi - lo)
    near = np.repeat(x, k, axis=0) + rng.normal(size=(len(x) * k, x.shape[1])) * sigma
    return np.concatenate([x, np.clip(near, lo, hi)])


def _vectorize(fn, count: int):
    """lambdify output -> list of (B,) arrays (constants broadcast)."""
    def call(x: np.ndarray) -> list[np.ndarray]:
        vals = fn(*[x[:, i] for i in range(x.shape[1])])
        return [np.broadcast_to(np.asarray(v, dtype=np.float64), (len(x),)) for v in vals]
    return call


@dataclass
class ConstraintTools:
    """Numpy constraint gradient and greedy-backup coefficients, derived from the sympy model."""

    system: object

    def __post_init__(self) -> None:
        s = self.system
        xs = list(s.x_sym)
        c = s.constraint_expr
        grad = [sp.diff(c, v) for v in xs]
        lfc = sum(g * fi for g, fi in zip(grad, s.f_expr))
        a1 = [sp.simplify(sum(grad[i] * s.G_expr[i, j] for i in range(s.n))) for j in range(s.m)]
        grad2 = [sp.diff(lfc, v) for v in xs]
        a2 = [sum(grad2[i] * s.G_expr[i, j] for i in range(s.n)) for j in range(s.m)]
        self.first_order = [a != 0 for a in a1]       # input j reaches dc/dt directly
        self._grad = _vectorize(sp.lambdify(xs, grad, "numpy"), s.n)
        self._lfc = _vectorize(sp.lambdify(xs, [lfc], "numpy"), 1)
        self._a1 = _vectorize(sp.lambdify(xs, a1, "numpy"), s.m)
        self._a2 = _vectorize(sp.lambdify(xs, a2, "numpy"), s.m)

    def constraint(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(self.system.constraint(x), dtype=np.float64).reshape(len(x))

    def distance(self, x: np.ndarray) -> np.ndarray:
        """|c| / |grad c|: first-order distance to the constraint boundary."""
        g = np.stack(self._grad(x), axis=-1)
        return np.abs(self.constraint(x)) / np.maximum(np.linalg.norm(g, axis=-1), 1e-12)

    def backup_input(self, x: np.ndarray, u_min: np.ndarray, u_max: np.ndarray,
                     hold: Sequence[int] = ()) -> np.ndarray:
        """Greedy backup.  An input that reaches dc/dt goes to the bound that raises dc/dt.  One
        that only reaches d2c/dt2 drives dc/dt toward 0: it raises d2c/dt2 while c decreases
        (brake the outward motion) and lowers it while c increases (stop the inward motion
        before it overshoots to the far side).  Box midpoint on ties and for held inputs."""
        a1 = np.stack(self._a1(x), axis=-1)
        a2 = np.stack(self._a2(x), axis=-1)
        lfc = self._lfc(x)[0]
        damp = np.where(lfc > 0, -1.0, 1.0)[:, None]
        score = np.where((np.asarray(self.first_order)[None, :]) & (a1 != 0), a1, a2 * damp)
        mid = 0.5 * (u_min + u_max)
        u = np.where(score > 0, u_max, np.where(score < 0, u_min, mid))
        if hold:
            u[:, list(hold)] = mid[list(hold)]
        return u


def near_boundary(rng: np.random.Generator, tools: ConstraintTools, lo: np.ndarray, hi: np.ndarray,
                  count: int, pool_factor: int = 8) -> np.ndarray:
    """count states closest to the constraint boundary out of pool_factor * count uniform ones."""
    if count == 0:
        return np.empty((0, len(lo)))
    pool = uniform(rng, lo, hi, count * pool_factor)
    order = np.argsort(tools.distance(pool))
    return pool[order[:count]]


def backup_safe(tools: ConstraintTools, x: np.ndarray, u_min: np.ndarray, u_max: np.ndarray,
                horizon: float, dt: float, hold: Sequence[int] = (), level: float = 0.0) -> np.ndarray:
    """True where the constraint stays >= level for ``horizon`` seconds under the greedy backup
    (RK4, input held constant over each dt step).  Only still-safe states are integrated.

    The trainer uses level > 0 (the inner set): positives then keep a gap to the edge of
    the viable set, which a barrier condition with a margin needs (on that edge even the
    best input only holds the constraint level, so no margin is possible there)."""
    system = tools.system
    x = np.array(x, dtype=np.float64)
    safe = tools.constraint(x) >= level
    alive = np.flatnonzero(safe)
    state = x[alive]
    for _ in range(int(np.ceil(horizon / dt))):
        if len(alive) == 0:
            break
        u = tools.backup_input(state, u_min, u_max, hold)

        def rhs(z: np.ndarray) -> np.ndarray:
            return system.f(z) + np.einsum("bij,bj->bi", system.G(z), u)

        k1 = rhs(state)
        k2 = rhs(state + 0.5 * dt * k1)
        k3 = rhs(state + 0.5 * dt * k2)
        k4 = rhs(state + dt * k3)
        state = state + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
        ok = np.all(np.isfinite(state), axis=-1)
        ok[ok] = tools.constraint(state[ok]) >= level
        safe[alive[~ok]] = False
        alive, state = alive[ok], state[ok]
    return safe


def system_terms(system, x: np.ndarray, order: int) -> dict[str, np.ndarray]:
    """f, G (and Dff = f' f, DfG = f' G for order 2) at x, float64 from the system's numpy model."""
    f = system.f(x)
    G = system.G(x)
    out = {"f": f, "G": G}
    if order == 2:
        out["Dff"] = system.df(x, f)
        out["DfG"] = system.df(x, G)
    return out
