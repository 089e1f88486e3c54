"""Certified coverage: the share of vol(S & D) that lies in the proven safe set, soundly.

Lower bound of the numerator: proven boxes wholly inside the certified set (h_lo >= 0, order 2
also psi1_lo >= 0), after bisecting the proven boxes that straddle its boundary a few more
times (only the h / psi1 enclosures are needed there: the conditions are already proven).
Upper bound of the denominator: a grid of boxes over the domain, counting those where the
constraint enclosure reaches >= 0.  Dimensions nothing depends on cancel out.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from compiler.interval import Interval

from .branch import halve
from .problem import Problem
from .terms import lie_terms, plant_terms

GRID_CELLS = 1 << 16
REFINE_BOXES = 50_000


def constraint_volume(problem: Problem) -> float:
    """Upper bound of vol(S & D) / vol(D) over the splittable dimensions."""
    dims = np.flatnonzero(problem.splittable)
    k = max(1, int(GRID_CELLS ** (1.0 / max(len(dims), 1))))
    axes = [np.arange(k)] * len(dims)
    idx = np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, len(dims))
    lo = np.tile(problem.lo, (len(idx), 1))
    hi = np.tile(problem.hi, (len(idx), 1))
    span = (problem.hi - problem.lo)[dims]
    lo[:, dims] = problem.lo[dims] + idx * span / k
    hi[:, dims] = problem.lo[dims] + (idx + 1) * span / k
    hi[:, dims] = np.where(idx + 1 == k, problem.hi[dims], hi[:, dims])
    c = plant_terms(problem.plant, Interval(lo, hi), 1).constraint
    return float(np.mean(c.hi >= 0))


def refine_inside(problem: Problem, lo: np.ndarray, hi: np.ndarray, budget: int = REFINE_BOXES,
                  runner: Any = None) -> float:
    """Relative volume of the parts of the boxes (lo, hi) proven inside the certified set.
    ``runner`` (``shards.py``; None: this process) evaluates each round in fixed chunks."""
    from .branch import CHUNK
    span = problem.hi - problem.lo
    split = problem.splittable
    total = 0.0
    evaluated = 0
    while len(lo) and evaluated + len(lo) <= budget:
        chunks = [(lo[i:i + CHUNK], hi[i:i + CHUNK]) for i in range(0, len(lo), CHUNK)]
        parts = runner.map(0.0, chunks, task="set_masks") if runner is not None else \
            [set_masks(problem, 0.0, a, b) for a, b in chunks]
        inside = np.concatenate([p[0] for p in parts])
        meets = np.concatenate([p[1] for p in parts])
        if len(inside) != len(lo):
            raise RuntimeError("a refinement round came back with boxes missing")
        evaluated += len(lo)
        rel = (hi - lo) / span
        total += float(np.prod(np.where(split, rel, 1.0), axis=1)[inside].sum())
        keep = meets & ~inside
        lo, hi = lo[keep], hi[keep]
        lo, hi = halve(lo, hi, np.argmax(np.where(split, (hi - lo) / span, -1.0), axis=1))
    return total


def set_masks(problem: Problem, _eps: float, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(lies in the certified set, may meet it) per box: one chunk of ``refine_inside``."""
    box = Interval(lo, hi)
    t = lie_terms(problem.model, plant_terms(problem.plant, box, problem.order), box, problem.order,
                  problem.gains, float32=True)
    inside = t.h.lo >= 0
    meets = t.h.hi >= 0
    if problem.order == 2:
        inside &= t.psi1.lo >= 0
        meets &= t.psi1.hi >= 0
    return inside, meets
