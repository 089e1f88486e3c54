"""Where the training states come from, and which of them are known to be safe.

Positive labels must be states from which safety can actually be kept, not merely states
inside the constraint set: a car at the lane edge heading outward is inside the set and
already lost.  ``backup_safe`` decides this with a rollout under a greedy backup policy
(each input at the box corner that raises the constraint fastest, using the second time
derivative when the input does not reach the first -- relative degree 2); a state is a
positive only if the constraint stays >= 0 over the horizon.  That under-approximates the
viable set (the backup is not optimal), which is the safe direction for positive labels.

Positives must also keep a gap to the edge of the viable set: on that edge even the best
input only holds the constraint level, so a barrier condition with a margin cannot hold
there.  The trainer therefore asks the rollout to stay above safe_fraction * max(constraint).
States whose rollout leaves the set can optionally be labelled unsafe too: that is
conservative where the backup is not optimal (the certified set shrinks there), and it
removes the regions a local condition check only erodes slowly (a set that "looks"
invariant pointwise but whose trajectories must leave it far away).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
import sympy as sp


def uniform(rng: np.random.Generator, lo: np.ndarray, hi: np.ndarray, count: int) -> np.ndarray:
    """count states uniform in the box [lo, hi], float64 (count, n)."""
    return rng.uniform(lo, hi, size=(int(count), len(lo)))


def initial_box(system) -> tuple[np.ndarray, np.ndarray] | None:
    """(lo, hi) of the plant's initial set (``initial_set``: (lo, hi) per state), or None: the
    box ``cbfsim certify --initial-set plant`` proves h >= 0 on."""
    from training.certify.sets import boxes
    spec = getattr(system, "initial_set", None)
    return None if spec is None else boxes(["plant"], system.n, "initial_set", spec)[0]


def in_initial(system, x: np.ndarray) -> np.ndarray:
    """(K,) which states lie in the plant's initial set (all False without one)."""
    box = initial_box(system)
    if box is None:
        return np.zeros(len(x), dtype=bool)
    return np.all((x >= box[0]) & (x <= box[1]), axis=1)


def initial_states(system, rng: np.random.Generator, lo: np.ndarray, hi: np.ndarray, count: int) -> np.ndarray:
    """``count`` uniform states of the plant's initial set within [lo, hi] ((0, n) without one)."""
    box = initial_box(system)
    if box is None or count <= 0:
        return np.empty((0, len(lo)))
    return uniform(rng, np.maximum(box[0], lo), np.minimum(box[1], hi), count)


def grid(lo: np.ndarray, hi: np.ndarray, per_axis: int) -> np.ndarray:
    """The full tensor grid with per_axis points on every axis (endpoints included)."""
    axes = [np.linspace(a, b, int(per_axis)) for a, b in zip(lo, hi)]
    mesh = np.meshgrid(*axes, indexing="ij")
    return np.stack([m.reshape(-1) for m in mesh], axis=-1)


def level_set(value, rng: np.random.Generator, lo: np.ndarray, hi: np.ndarray, count: int,
              iters: int = 30) -> np.ndarray:
    """``count`` states on the boundary of {value >= 0} in the box, on its inside (value >= 0).

    Bisection between random pairs of uniform states, one inside and one outside, ``iters``
    halvings (2^-30 of the segment by default).  The boundary is where a barrier condition is
    tightest (alpha(h) = 0) and where a ReLU network's linear regions meet; a uniform sample
    of the box puts almost no states there.  ``value``: states (B, n) -> (B,)."""
    x = uniform(rng, lo, hi, 4 * int(count))
    v = np.asarray(value(x))
    inside, outside = x[v >= 0], x[v < 0]
    if count == 0 or not len(inside) or not len(outside):
        return np.empty((0, len(lo)))
    a = inside[rng.integers(len(inside), size=count)]
    b = outside[rng.integers(len(outside), size=count)]
    for _ in range(iters):
        mid = 0.5 * (a + b)
        ok = (np.asarray(value(mid)) >= 0)[:, None]
        a, b = np.where(ok, mid, a), np.where(ok, b, mid)
    return a


def neighbours(rng: np.random.Generator, x: np.ndarray, k: int, lo: np.ndarray, hi: np.ndarray,
               rel_sigma: float = 0.01, periodic: Mapping[int, float] | None = None) -> np.ndarray:
    """x plus k Gaussian neighbours of each row (sigma = rel_sigma * box width), clipped to the
    box; a periodic coordinate (``periodic``: {index: period}, the box one period wide there)
    is wrapped into [lo, lo + P) instead, so a neighbour across the seam is one, not the edge."""
    if len(x) == 0 or k == 0:
        return x.copy()
    sigma = rel_sigma * (hi - lo)
    raw = np.repeat(x, k, axis=0) + rng.normal(size=(len(x) * k, x.shape[1])) * sigma
    near = np.clip(raw, lo, hi)
    for i, period in (periodic or {}).items():
        w = lo[i] + np.mod(raw[:, i] - lo[i], period)
        near[:, i] = np.where(w >= lo[i] + period, lo[i], w)
    return np.concatenate([x, near])


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
        lf2c = sum(g * fi for g, fi in zip(grad2, s.f_expr))
        self.first_order = [a != 0 for a in a1]       # input j reaches dc/dt directly
        self._grad = _vectorize(sp.lambdify(xs, grad, "numpy"), s.n)
        self._lfc = _vectorize(sp.lambdify(xs, [lfc, lf2c], "numpy"), 2)
        self._a1 = _vectorize(sp.lambdify(xs, a1, "numpy"), s.m)
        self._a2 = _vectorize(sp.lambdify(xs, a2, "numpy"), s.m)

    def constraint(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(self.system.constraint(x), dtype=np.float64).reshape(len(x))

    def signed_distance(self, x: np.ndarray) -> np.ndarray:
        """c / |grad c|: first-order signed distance to the constraint boundary (> 0 inside)."""
        g = np.stack(self._grad(x), axis=-1)
        return self.constraint(x) / np.maximum(np.linalg.norm(g, axis=-1), 1e-12)

    def distance(self, x: np.ndarray) -> np.ndarray:
        return np.abs(self.signed_distance(x))

    def backup_input(self, x: np.ndarray, u_min: np.ndarray, u_max: np.ndarray,
                     hold: Sequence[int] = (), rate: float = 20.0) -> np.ndarray:
        """Greedy backup.  An input that reaches dc/dt goes to the bound that raises dc/dt.  The
        inputs that only reach d2c/dt2 drive dc/dt to 0 at ``rate`` [1/s]: d2c/dt2 = -rate dc/dt
        (min-norm over those inputs, then clipped to the box) -- full braking while the state
        moves outward fast, stop the inward motion before it overshoots to the far side, and
        hold still (e.g. against gravity) in between.  A smooth law, not bang-bang: chattering
        under a zero-order hold drifts where the drift is asymmetric (a pendulum held against
        gravity creeps outward) and would mislabel viable states.  Held inputs: box midpoint.
        For a plant that cannot stop (the Dubins car) the same law is its turn-away backup: the
        turn rate reaches d2c/dt2 and goes to full rate in the direction that turns the motion
        away from the boundary, until the car runs along it; where neither direction is better
        (heading straight at it) the tie is broken at the upper bound."""
        if self.system.m == 0:              # an autonomous plant: nothing to choose
            return np.zeros((len(x), 0))
        a1 = np.stack(self._a1(x), axis=-1)
        a2 = np.stack(self._a2(x), axis=-1)
        lfc, lf2c = self._lfc(x)
        mid = 0.5 * (u_min + u_max)
        free = np.ones(len(mid), dtype=bool)
        free[list(hold)] = False
        first = np.asarray(self.first_order) & free
        second = ~np.asarray(self.first_order) & free
        u = np.broadcast_to(mid, a1.shape).copy()
        if first.any():
            u[:, first] = np.where(a1[:, first] > 0, u_max[first], np.where(a1[:, first] < 0, u_min[first],
                                                                            mid[first]))
        if second.any():
            b = a2[:, second]
            rest = lf2c + (a2[:, ~second] * u[:, ~second]).sum(-1) + (b * mid[second]).sum(-1)
            need = -rate * lfc - rest                      # wanted change of b.u around mid
            norm = np.maximum((b * b).sum(-1), 1e-300)
            step = b * (need / norm)[:, None]
            u[:, second] = np.clip(mid[second] + step, u_min[second], u_max[second])
            # no input reaches d2c/dt2 at this instant but the constraint must turn upward (a car
            # heading straight at an obstacle or a wall: turning either way is equally good):
            # break the tie at the upper bound, or the rollout would drive straight on
            tie = ~np.any(b != 0, axis=-1) & (need > 0)
            if tie.any():
                u[np.ix_(tie, np.flatnonzero(second))] = u_max[second]
        return u


def near_boundary(rng: np.random.Generator, tools: ConstraintTools, lo: np.ndarray, hi: np.ndarray,
                  count: int, pool_factor: int = 8) -> np.ndarray:
    """count states closest to the constraint boundary out of pool_factor * count uniform ones."""
    if count == 0:
        return np.empty((0, len(lo)))
    pool = uniform(rng, lo, hi, count * pool_factor)
    order = np.argsort(tools.distance(pool))
    return pool[order[:count]]


def backup_margin(tools: ConstraintTools, x: np.ndarray, u_min: np.ndarray, u_max: np.ndarray,
                  horizon: float, dt: float, hold: Sequence[int] = (),
                  constant: Sequence[float] | None = None) -> np.ndarray:
    """The smallest constraint value along a ``horizon``-second rollout of the greedy backup
    from each state (RK4, input held over each dt step); a rollout stops at its first
    negative value, so < 0 means "the backup leaves the set" and >= level means "it keeps
    the constraint above level throughout".  ``constant``: hold this input (clipped to the box)
    instead of the greedy law, e.g. a full turn for a car that cannot stop: it circles, and the
    states it labels are those whose circle stays in the set."""
    system = tools.system
    x = np.array(x, dtype=np.float64)
    low = tools.constraint(x)
    alive = np.flatnonzero(low >= 0)
    state = x[alive]
    for _ in range(int(np.ceil(horizon / dt))):
        if len(alive) == 0:
            break
        u = (tools.backup_input(state, u_min, u_max, hold) if constant is None
             else np.broadcast_to(np.clip(np.asarray(constant, dtype=np.float64), u_min, u_max), (len(state), len(u_min))))

        def rhs(z: np.ndarray) -> np.ndarray:
            return system.f(z) + np.einsum("bij,bj->bi", system.G(z), u)

        with np.errstate(over="ignore", invalid="ignore"):      # a rollout that blows up (Darboux's
            k1 = rhs(state)                                     # x2^2) is non-finite: unsafe, below
            k2 = rhs(state + 0.5 * dt * k1)
            k3 = rhs(state + 0.5 * dt * k2)
            k4 = rhs(state + dt * k3)
            state = state + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
            c = np.full(len(state), -np.inf)
            finite = np.all(np.isfinite(state), axis=-1)
            c[finite] = tools.constraint(state[finite])
        low[alive] = np.minimum(low[alive], c)
        keep = c >= 0
        alive, state = alive[keep], state[keep]
    return low


def backup_safe(tools: ConstraintTools, x: np.ndarray, u_min: np.ndarray, u_max: np.ndarray,
                horizon: float, dt: float, hold: Sequence[int] = (), level: float = 0.0,
                constant: Sequence[float] | None = None) -> np.ndarray:
    """True where the greedy backup keeps the constraint >= level for ``horizon`` seconds."""
    return backup_margin(tools, x, u_min, u_max, horizon, dt, hold, constant) >= level


def system_terms(system, x: np.ndarray, order: int) -> dict[str, np.ndarray]:
    """f, G (and Dff = f' f, DfG = f' G for order 2) at x, float64 from the system's numpy model."""
    f = system.f(x)
    G = system.G(x)
    out = {"f": f, "G": G}
    if order == 2:
        out["Dff"] = system.df(x, f)
        out["DfG"] = system.df(x, G)
    return out
