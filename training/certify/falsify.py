"""The falsifier: look for a real violation before (and while) the branch and bound proves.

Interval bounds prove slowly and refute only boxes they have already shrunk; a barrier that is
wrong somewhere thin is better caught by looking where violations live:

* states on the certified set's boundary (bisection along segments between sampled states
  inside and outside the set), and states just inside it;
* at each, the containment and feasibility checks in float64, and the hardest inputs the
  filter may return for the sampled-data loop: the input box's vertices and the row-tight
  inputs (the admissible set's vertices), each held over one period and integrated (RK4,
  float64, ``counterexamples.rollout_minimum``);
* a local search: the worst candidates are perturbed with a shrinking radius, keeping moves
  that lower the level reached over the period;
* for the boundary condition of a ReLU network on a linear plant, the region walk
  (``regions.py``): from the patterns of those states, every linear piece of {h = 0} it reaches,
  worst first, with the row's exact minimum on each by one LP.  Its violations are thin pieces
  sampling misses (the 3 x 16 spacecraft student: refuted in seconds; the box search took 2,364 s).

Every violation it reports is confirmed the same way the branch and bound confirms its own
(``counterexamples.py``): no interval arithmetic, a state and an input the filter can return.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import counterexamples as ce
from . import regions
from .problem import Problem
from .ridges import to_ridge

BOUNDARY_STATES = 1024
SEARCH_RK4_STEPS = 8        # the search integrates coarsely; every violation it reports is re-integrated finely
LOCAL_ROUNDS = 6
LOCAL_KEEP = 32


@dataclass
class Found:
    """Confirmed violations per condition: (x, value, u or None)."""
    items: dict[str, list[tuple[np.ndarray, float, Any]]] = field(
        default_factory=lambda: {"containment": [], "feasibility": [], "sampled_data": [], "closure": [], "initial": []})

    walk: dict[str, Any] | None = None     # the region walk's summary (``Certificate.region_walk``), where it ran

    def __bool__(self) -> bool:
        return any(self.items.values())


def boundary_states(problem: Problem, rng: np.random.Generator, count: int = BOUNDARY_STATES) -> np.ndarray:
    """States on (and just inside) the certified set's boundary, by bisection between sampled
    states inside and outside it; the sampled inside states closest to the boundary when no
    pair straddles it."""
    x = rng.uniform(problem.lo, problem.hi, size=(8 * count, problem.n))
    level = ce.set_level(problem, x)
    inside, outside = x[level >= 0], x[level < 0]
    if len(inside) == 0:
        return np.empty((0, problem.n))
    if len(outside) == 0:
        return inside[np.argsort(level[level >= 0])[:count]]
    a = _bisect(problem, inside[rng.integers(len(inside), size=count)],
                outside[rng.integers(len(outside), size=count)], 30)
    near = inside[np.argsort(level[level >= 0])[:count // 4]]
    return np.concatenate([a, near])


def boundary_and_level_states(problem: Problem, seed: int = 0) -> np.ndarray:
    """``boundary_states`` and the same states moved onto {h = 0}: the seeds the falsifier's
    region walk starts from (the distillation's and ``benchmarks/region_walk.py``'s walks too)."""
    x = boundary_states(problem, np.random.default_rng(seed))
    return np.concatenate([x, ce.to_zero_level(problem, x, np.arange(len(x)))[0]])


def period_low(problem: Problem, x: np.ndarray, eps: float, steps: int = SEARCH_RK4_STEPS
               ) -> tuple[np.ndarray, np.ndarray]:
    """(lowest level reached over one held period under the worst admissible candidate input,
    that input) per state; +inf where no candidate is admissible or dt = 0."""
    batch = len(x)
    low, worst_u = np.full(batch, np.inf), np.tile(0.5 * (problem.u_lo + problem.u_hi), (batch, 1))
    if problem.dt == 0 or batch == 0:
        return low, worst_u
    t = ce.point_terms(problem, x)
    margin = problem.margin.with_eps(eps).at(x)
    inside = ce.set_level(problem, x) >= 0
    for u in ce.hard_inputs(problem, x, t, margin):
        ok = ce.admissible(problem, x, t, u, margin) & inside
        if not ok.any():
            continue
        reached = np.full(batch, np.inf)
        reached[ok] = ce.rollout_minimum(problem, x[ok], u[ok], steps=steps)
        better = reached < low
        low = np.where(better, reached, low)
        worst_u = np.where(better[:, None], u, worst_u)
    return low, worst_u


def falsify(problem: Problem, eps: float, deadline: float, seed: int = 0, rounds: int = LOCAL_ROUNDS,
            starts: np.ndarray | None = None, leaks: bool = True) -> Found:
    """Search for confirmed violations at margin eps until ``deadline`` (time.monotonic), from
    ``starts`` (None: ``boundary_states``); ``leaks``: also sample the open faces of D."""
    rng = np.random.default_rng(seed)
    found = Found()
    x = boundary_states(problem, rng) if starts is None else np.asarray(starts, float)
    x = x[ce.set_level(problem, x) >= 0] if len(x) else x
    if problem.initial and leaks:              # the initial set: h >= 0 asked on all of it
        _initial_states(problem, rng, found)
    if len(x) == 0:
        return found
    if problem.condition == "boundary":          # the Nagumo condition's candidates lie on {h = 0}
        on, _ = ce.to_zero_level(problem, x, np.arange(len(x)))
        x = np.concatenate([x, on] + ([to_ridge(problem, on, np.arange(len(on)))[0]] if problem.relu_like else []))
    for name, value in ce.check_points(problem, x, eps).items():
        for k in np.flatnonzero(~np.isnan(value))[:ce_limit()]:
            alone = ce.replayable(problem, x[k], name, eps)          # as --replay will check it
            if alone is not None:
                found.items[name].append((*alone, None))
    if leaks:
        _leaks(problem, eps, rng, found)
    if not found and problem.condition == "boundary" and regions.applies(problem):
        _walk_regions(problem, x, deadline, found)
    if found or problem.dt == 0 or problem.condition == "tube" or time.monotonic() > deadline:
        return found
    low, u = period_low(problem, x, eps)
    radius = 0.02 * (problem.hi - problem.lo)
    for _ in range(rounds):
        if np.any(low < 0) or time.monotonic() > deadline:
            break
        keep = np.argsort(low)[:LOCAL_KEEP]
        x, low, u = x[keep], low[keep], u[keep]
        trial = np.clip(x + rng.normal(size=x.shape) * radius, problem.lo, problem.hi)
        trial = np.concatenate([trial, _toward_edge(problem, x)])
        t_low, t_u = period_low(problem, trial, eps)
        x, low, u = np.concatenate([x, trial]), np.concatenate([low, t_low]), np.concatenate([u, t_u])
        radius = radius * 0.5
    _record_sampled(problem, found, x, low, u)
    return found


FACE_STATES = 4096


def _walk_regions(problem: Problem, x: np.ndarray, deadline: float, found: Found) -> None:
    """The region walk (``regions.py``) from the patterns of the states x on {h = 0}: each
    piece with a negative row gives candidates, confirmed in float64 like the rest."""
    w = regions.walk(problem, x, deadline)
    found.walk = {"pieces": w.pieces, "exhausted": w.exhausted, "violations": len(w.negative),
                  "least_row": min(w.values.values(), default=float("nan")), "seconds": round(w.seconds, 3)}
    for piece in w.negative:
        pts = regions.candidates(piece)
        value = ce.check_points(problem, pts, 0.0)["feasibility"]
        for k in np.flatnonzero(~np.isnan(value))[:1]:
            found.items["feasibility"].append((pts[k], float(value[k]), None))


def _leaks(problem: Problem, eps: float, rng: np.random.Generator, found: Found) -> None:
    """States of the set on an open face of D with an admissible input that leaves D."""
    from .conditions import open_faces
    for i, side in open_faces(problem):
        x = rng.uniform(problem.lo, problem.hi, size=(FACE_STATES, problem.n))
        x[:, i] = problem.lo[i] if side < 0 else problem.hi[i]
        x = x[ce.set_level(problem, x) >= 0]             # only states of the set can leak
        if not len(x):
            continue
        speed, u = ce.closure_violations(problem, x, i, side, eps)
        for k in np.flatnonzero(~np.isnan(speed))[:ce_limit()]:
            found.items["closure"].append((x[k], float(speed[k]), u[k]))


def _initial_states(problem: Problem, rng: np.random.Generator, found: Found) -> None:
    """Sampled states of the initial set (and its boxes' corners) where h < 0 in float64."""
    for lo, hi in problem.initial:
        x = np.concatenate([rng.uniform(lo, hi, size=(FACE_STATES, problem.n)), ce.candidates(lo[None], hi[None])[0]])
        bad = ce.initial_violations(problem, x, ce.point_terms(problem, x)["level"])
        for k in np.flatnonzero(~np.isnan(bad))[:ce_limit()]:
            found.items["initial"].append((x[k], float(bad[k]), None))


def _toward_edge(problem: Problem, x: np.ndarray) -> np.ndarray:
    """Each state moved halfway to the set's boundary along the segment to the domain's nearest
    corner (the tip of a set is where a held input overshoots first)."""
    corner = np.where(x - problem.lo < problem.hi - x, problem.lo, problem.hi)
    return _bisect(problem, x.copy(), corner, 20)


def _bisect(problem: Problem, inside: np.ndarray, outside: np.ndarray, steps: int) -> np.ndarray:
    """Per row, the last midpoint still in the certified set on the segment from ``inside`` to
    ``outside`` after ``steps`` halvings (the set's boundary, from within)."""
    a, b = inside, outside
    for _ in range(steps):
        mid = 0.5 * (a + b)
        ok = ce.set_level(problem, mid) >= 0
        a = np.where(ok[:, None], mid, a)
        b = np.where(ok[:, None], b, mid)
    return a


def _record_sampled(problem: Problem, found: Found, x: np.ndarray, low: np.ndarray, u: np.ndarray) -> None:
    """Confirm the coarse search's violations with the fine rollout (counterexamples.RK4_STEPS)."""
    idx = np.flatnonzero(low < 0)[:4 * ce_limit()]
    if not len(idx):
        return
    fine = ce.rollout_minimum(problem, x[idx], u[idx])
    for k, value in zip(idx[fine < 0][:ce_limit()], fine[fine < 0][:ce_limit()]):
        found.items["sampled_data"].append((x[k].copy(), float(value), u[k].copy()))


def ce_limit() -> int:
    return 20
