"""Counterexamples: candidate states (and inputs) rechecked in float64 outside interval arithmetic.

A box whose bound is negative is not yet a failure: interval bounds overestimate.  Its
candidates (centre, corners, the minimising input vertex) are rechecked by the float64
reference interpreter of the network (``compiler.reference``) and the plant's float64 numpy
functions; only a confirmed violation is reported as a counterexample.  Sampled data: a
candidate (x_k, u) with u admissible at x_k in float64 (a . u + b >= eps, so the filter
returns exactly u for the nominal input u) is integrated over one period with fine RK4, and
the run must leave the certified set.
"""
from __future__ import annotations

import itertools

import numpy as np

from compiler import reference

from .problem import Problem
from .sampled import _vertices

RK4_STEPS = 40
INSIDE = 1e-9        # admissible candidates keep this much inside a . u + b >= eps (rounding-proof)
ON_ZERO = 1e-9       # boundary condition: a candidate counts as on {h = 0} when |h| <= this, and as a
#                      violation when sup_u hdot < -ON_ZERO there (float64; by continuity a point of
#                      {h = 0} with sup_u hdot < 0 lies within about ON_ZERO / |grad h| of it)
PROJECT_STEPS = 30   # Newton steps onto {h = 0} at most; a point stops once |h| <= SETTLED before its step
SETTLED = 1e-3 * ON_ZERO


def point_terms(problem: Problem, x: np.ndarray) -> dict[str, np.ndarray]:
    """h, (psi1), constraint and the filter's constraint row (a, b) at states x (B, n), float64."""
    s, model, g = problem.system, problem.model, problem.gains
    f, G = s.f(x), s.G(x)
    out = {"constraint": np.asarray(s.constraint(x), dtype=float).reshape(len(x))}
    if problem.order == 1:
        h, Lf, LG = reference.lie(model, x, f, G)
        out.update(h=h, a=LG, b=Lf + g["gamma"] * h, level=h)
    else:
        h, Lf, _, L2, LGLf = reference.lie2(model, x, f, G, s.df(x, f), s.df(x, G))
        psi1 = Lf + g["alpha1"] * h
        out.update(h=h, psi1=psi1, a=LGLf, b=L2 + g["alpha1"] * Lf + g["alpha2"] * psi1,
                   level=np.minimum(h, psi1))
    return out


def value_and_gradient(problem: Problem, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(h (K,), grad h (K, n)) at states x (K, n), float64: the Lie derivatives along the axes."""
    k, n = x.shape
    h, _, grad = reference.lie(problem.model, x, np.zeros((k, n)), np.broadcast_to(np.eye(n), (k, n, n)))
    return h, grad


def replayable(problem: Problem, x: np.ndarray, name: str, eps: float) -> tuple[np.ndarray, float] | None:
    """(a state violating condition ``name`` when checked alone, as ``--replay`` checks it, and the
    violated quantity there): ``x`` itself, or, for containment, ``x`` moved into {h > 0} along
    grad h (by 1e-12 to 1e-4 of D's span) while the constraint still fails; None when neither
    does.  A batch of states is evaluated with other BLAS kernels than one state, so a containment
    failure found at h = +1e-16 replayed at h = -1e-16 (the 3 x 16 spacecraft student, 2026-11-28)
    and was no counterexample to the user who replayed it."""
    def alone(state: np.ndarray) -> tuple[np.ndarray, float] | None:
        value = check_points(problem, state[None], eps)[name][0]
        return None if np.isnan(value) else (state, float(value))

    x = np.asarray(x, dtype=float)
    found = alone(x)
    if found is not None or name != "containment" or problem.order != 1:
        return found
    _, grad = value_and_gradient(problem, x[None])
    norm = float(np.linalg.norm(grad))
    if not np.isfinite(norm) or norm == 0.0:
        return None
    span = float(np.max(problem.hi - problem.lo))
    for step in 10.0 ** np.arange(-12, -3):
        found = alone(np.clip(x + step * span * grad[0] / norm, problem.lo, problem.hi))
        if found is not None:
            return found
    return None


def candidates(lo: np.ndarray, hi: np.ndarray, corners: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(points (K, n), index of their box (K,)): centres, and the corners when asked."""
    pts = [0.5 * (lo + hi)]
    if corners and lo.shape[1] <= 4:
        for c in itertools.product((0, 1), repeat=lo.shape[1]):
            pts.append(np.where(np.array(c) == 0, lo, hi))
    owner = np.tile(np.arange(len(lo)), len(pts))
    return np.concatenate(pts), owner


def to_zero_level(problem: Problem, x: np.ndarray, owner: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """States x (K, n) moved onto {h = 0} by Newton steps along grad h (float64), kept when they
    end inside D with |h| <= ON_ZERO: (points, their owners).  The boundary condition's
    counterexamples live there only; box centres and corners almost never lie on it."""
    x = np.array(x, dtype=float)
    if len(x) == 0:
        return x, owner
    active = np.arange(len(x))            # Newton converges in a few steps: only the unsettled points go on
    for _ in range(PROJECT_STEPS):
        h, grad = value_and_gradient(problem, x[active])
        at = x[active]
        down = -h[:, None] * grad             # a coordinate on a face of D the step would leave stays put:
        held = ((at <= problem.lo) & (down < 0)) | ((at >= problem.hi) & (down > 0))   # projected Newton
        grad = np.where(held, 0.0, grad)
        norm = np.sum(grad * grad, axis=1)
        step = np.where(norm > 0, h / np.where(norm > 0, norm, 1.0), 0.0)
        x[active] = np.clip(at - step[:, None] * grad, problem.lo, problem.hi)
        active = active[~(np.abs(h) <= SETTLED)]
        if not len(active):
            break
    h = reference.value(problem.model, x)
    keep = np.isfinite(h) & (np.abs(h) <= ON_ZERO)
    return x[keep], owner[keep]


def best_row(problem: Problem, t: dict[str, np.ndarray]) -> np.ndarray:
    """sup over the input box of the filter's row a . u + b at each state of ``t`` (``point_terms``)."""
    return t["b"] + np.maximum(t["a"] * problem.u_lo, t["a"] * problem.u_hi).sum(-1)


def check_points(problem: Problem, x: np.ndarray, eps: float) -> dict[str, np.ndarray]:
    """Per condition, the violated quantity's value at each state (nan where it holds)."""
    t = point_terms(problem, x)
    initial = initial_violations(problem, x, t["level"])
    if problem.condition == "boundary":          # Nagumo on {h = 0}: no class-K term, no margin
        on = np.abs(t["h"]) <= ON_ZERO
        cont = np.where((t["level"] >= 0) & (t["constraint"] < 0), t["constraint"], np.nan)
        rate = best_row(problem, t) - problem.gains.get("gamma", 0.0) * t["h"]
        if problem.relu_like and on.any():         # at a ridge, one input for every piece met there
            from .ridges import ridge_rate
            rate[on] = ridge_rate(problem, x[on], rate[on])
        return {"containment": cont, "feasibility": np.where(on & (rate < -ON_ZERO), rate, np.nan), "initial": initial}
    in_set = t["level"] >= 0
    cont = np.where(in_set & (t["constraint"] < 0), t["constraint"], np.nan)
    if problem.condition == "tube":              # the tube filter's own rows at x admit no input
        from .tube_condition import point_violations
        return {"containment": cont, "feasibility": point_violations(problem, x, in_set), "initial": initial}
    phi = best_row(problem, t)
    eps = problem.margin.with_eps(eps).at(x)          # the filter's margin at each state
    feas = np.where(in_set & (phi < eps), phi - eps, np.nan)
    return {"containment": cont, "feasibility": feas, "initial": initial}


def initial_violations(problem: Problem, x: np.ndarray, level: np.ndarray) -> np.ndarray:
    """The level (h; order 2: min(h, psi1)) at states of the initial set where it is < 0, nan
    elsewhere (``sets.py``; all nan without an initial set)."""
    if not problem.initial:
        return np.full(len(x), np.nan)
    from .sets import inside
    return np.where(inside(problem.initial, x) & (level < 0), level, np.nan)


def closure_violations(problem: Problem, x: np.ndarray, coord: int, side: int, eps: float
                       ) -> tuple[np.ndarray, np.ndarray]:
    """States x (B, n) on the open face x_coord = its bound (side -1 lower, +1 upper) that lie in
    the certified set, and an input the filter may return there that moves the state out of D:
    (outward speed, nan where no such state/input; the input (B, m))."""
    t = point_terms(problem, x)
    margin = problem.margin.with_eps(eps).at(x)
    inside = set_level(problem, x) >= 0
    speed = np.full(len(x), np.nan)
    best = np.tile(0.5 * (problem.u_lo + problem.u_hi), (len(x), 1))
    f, G = problem.system.f(x), problem.system.G(x)
    for u in hard_inputs(problem, x, t, margin):
        ok = admissible(problem, x, t, u, margin) & inside
        v = side * (f[:, coord] + (G[:, coord, :] * u).sum(-1))
        better = ok & (v > 0) & ~(v <= speed)
        speed = np.where(better, v, speed)
        best = np.where(better[:, None], u, best)
    return speed, best


def face_levels(problem: Problem, x: np.ndarray) -> np.ndarray:
    """min over the enforced faces of c(x) >= 0 (+inf without faces; faces.py)."""
    out = np.full(len(x), np.inf)
    for face in problem.faces:
        out = np.minimum(out, face.level(x))
    return out


def set_level(problem: Problem, x: np.ndarray) -> np.ndarray:
    """The certified set's level at x: h (order 2: min(h, psi1)), and the enforced faces' c
    (float64; only the terms the level needs: h, and L_f h for order 2)."""
    x = np.asarray(x, dtype=float)
    if problem.order == 1:
        level = reference.value(problem.model, x)
    else:
        jet = reference.first_order(problem.model, x, problem.system.f(x)[:, :, None])
        level = np.minimum(jet.h, jet.directional[:, 0] + problem.gains["alpha1"] * jet.h)
    return np.minimum(level, face_levels(problem, x))


def admissible(problem: Problem, x: np.ndarray, t: dict[str, np.ndarray], u: np.ndarray, eps: np.ndarray,
               inside: float = 0.5 * INSIDE) -> np.ndarray:
    """The filter may return u at x: its barrier row and every face row hold with their margins."""
    ok = (t["a"] * u).sum(-1) + t["b"] >= eps + inside
    if problem.faces:
        f, G = problem.system.f(x), problem.system.G(x)
        for face in problem.faces:
            b, a = face.row(f, G, x)
            ok &= (a * u).sum(-1) + b >= face.margin + inside
    return ok


def rollout_minimum(problem: Problem, x0: np.ndarray, u: np.ndarray, steps: int = RK4_STEPS) -> np.ndarray:
    """The smallest certified-set level (h, order 2: min(h, psi1); and the enforced faces' c)
    along one held period, RK4."""
    s = problem.system
    dt = problem.dt / steps
    x = np.array(x0, dtype=float)
    low = set_level(problem, x)

    def rhs(z):
        return s.f(z) + np.einsum("bij,bj->bi", s.G(z), u)

    for _ in range(steps):
        k1 = rhs(x)
        k2 = rhs(x + 0.5 * dt * k1)
        k3 = rhs(x + 0.5 * dt * k2)
        k4 = rhs(x + dt * k3)
        x = x + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
        low = np.minimum(low, set_level(problem, x))
    return low


def hard_inputs(problem: Problem, x: np.ndarray, t: dict[str, np.ndarray], eps: np.ndarray) -> list[np.ndarray]:
    """Candidate held inputs (B, m) each: the input box's vertices and every row's admissible
    vertices (just inside its half-space: the barrier's and each enforced face's)."""
    out = list(_vertices(t["a"], eps + INSIDE - t["b"], problem.u_lo, problem.u_hi))
    if problem.faces:
        f, G = problem.system.f(x), problem.system.G(x)
        for face in problem.faces:
            b, a = face.row(f, G, x)
            out += list(_vertices(a, face.margin + INSIDE - b, problem.u_lo, problem.u_hi))
    return out


def sampled_candidates(problem: Problem, x: np.ndarray, worst_u: np.ndarray, eps: float):
    """(x_k, u, min level over the period) for admissible inputs: the bound's minimising
    vertex and the vertices of the admissible set at x_k; only runs that leave the set."""
    keep = set_level(problem, x) >= 0
    x, worst_u = x[keep], worst_u[keep]
    if len(x) == 0 or problem.dt == 0:
        return []
    t = point_terms(problem, x)
    eps = problem.margin.with_eps(eps).at(x)          # the filter's margin at each state
    inputs = [np.clip(worst_u, problem.u_lo, problem.u_hi)] + hard_inputs(problem, x, t, eps)
    found = []
    for u in inputs:
        ok = admissible(problem, x, t, u, eps)
        if not ok.any():
            continue
        low = rollout_minimum(problem, x[ok], u[ok])
        for xi, ui, li in zip(x[ok], u[ok], low):
            if li < 0:
                found.append((xi, ui, float(li)))
    return found
