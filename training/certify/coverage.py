"""Certified coverage: the share of vol(S & D) that lies in the proven safe set, soundly.

Lower bound of the numerator: proven boxes wholly inside the certified set (h_lo >= 0, order 2
also psi1_lo >= 0), after bisecting the proven boxes that straddle its boundary a few more
times (only the h / psi1 enclosures are needed there: the conditions are already proven),
and, order 1, the cells of the boxes still straddling it where the box's linear lower bound of h
is >= 0 (``plane_inside``: a grid of cells per box, one dot product each).
Upper bound of the denominator: a grid of boxes over the coordinates the constraint reads,
whose cells that straddle the constraint's boundary are bisected further, counting the cells
where the constraint enclosure reaches >= 0.  Coordinates the constraint does not read cancel
out of the ratio (its set is a cylinder along them), and so do those the certified set's
enclosures do not read in ``refine_inside``: splitting them would spend the budget for nothing.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import sympy as sp

from compiler.interval import TINY, Interval

from .branch import halve
from .problem import Problem
from .terms import lie_terms, plant_terms

GRID_CELLS = 1 << 16
REFINE_BOXES = 50_000
REFINE_BOXES_BEFORE_PLANE = 10_000   # order 1: the planes decide the rest for less (cart: 61.10% vs 61.12%, 7 s less)
EDGE_CELLS = 400_000     # constraint cells evaluated while bisecting the straddling ones


def constraint_reads(problem: Problem) -> np.ndarray:
    """bool (n,): the coordinates the constraint reads (the only ones its volume depends on)."""
    s = problem.system
    free = sp.sympify(s.constraint_expr).free_symbols
    reads = np.array([x in free for x in s.x_sym]) & problem.splittable
    return reads if reads.any() else problem.splittable.copy()


def constraint_volume(problem: Problem, budget: int = EDGE_CELLS) -> float:
    """Upper bound of vol(S & D) / vol(D) over the splittable dimensions: a grid over the
    coordinates the constraint reads, then the cells whose enclosure straddles 0 bisected
    (longest relative edge) while the budget lasts; every cell that may meet S counts whole."""
    reads = constraint_reads(problem)
    dims = np.flatnonzero(reads)
    k = max(1, int(GRID_CELLS ** (1.0 / max(len(dims), 1))))
    axes = [np.arange(k)] * len(dims)
    idx = np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, len(dims))
    lo = np.tile(problem.lo, (len(idx), 1))
    hi = np.tile(problem.hi, (len(idx), 1))
    span = (problem.hi - problem.lo)[dims]
    lo[:, dims] = problem.lo[dims] + idx * span / k
    hi[:, dims] = problem.lo[dims] + (idx + 1) * span / k
    hi[:, dims] = np.where(idx + 1 == k, problem.hi[dims], hi[:, dims])
    rel_span = np.where(reads, problem.hi - problem.lo, 1.0)
    total, evaluated = 0.0, 0
    while True:
        c = plant_terms(problem.plant, Interval(lo, hi), 1).constraint
        evaluated += len(lo)
        vol = np.prod(np.where(reads, (hi - lo) / rel_span, 1.0), axis=1)
        total += float(vol[c.lo >= 0].sum())
        edge = (c.hi >= 0) & ~(c.lo >= 0)
        if not edge.any() or evaluated + 2 * int(edge.sum()) > budget:
            return min(1.0, total + float(vol[edge].sum()))
        lo, hi = lo[edge], hi[edge]
        lo, hi = halve(lo, hi, np.argmax(np.where(reads, (hi - lo) / rel_span, -1.0), axis=1))


def refine_inside(problem: Problem, lo: np.ndarray, hi: np.ndarray, budget: int | None = None,
                  runner: Any = None) -> float:
    """Relative volume of the parts of the boxes (lo, hi) proven inside the certified set.
    Order 1 splits only the coordinates the network reads (the set is {h >= 0}); order 2 also
    those f reads (psi1 = L_f h + alpha1 h).  ``budget``: boxes the bisection may evaluate
    (None: REFINE_BOXES, order 1 REFINE_BOXES_BEFORE_PLANE, and the planes decide the boxes it
    leaves).  ``runner`` (``shards.py``; None: this process) evaluates each round in fixed chunks."""
    from .branch import CHUNK
    span = problem.hi - problem.lo
    split = problem.splittable
    cut = _refine_cut(problem)
    if budget is None:
        budget = REFINE_BOXES if problem.order == 2 else REFINE_BOXES_BEFORE_PLANE
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
        lo, hi = halve(lo, hi, np.argmax(np.where(cut, (hi - lo) / span, -1.0), axis=1))
    if problem.order == 1 and len(lo):       # the same chunks, summed in order, in-process or on the runner
        chunks = [(lo[i:i + CHUNK], hi[i:i + CHUNK]) for i in range(0, len(lo), CHUNK)]
        parts = runner.map(0.0, chunks, task="plane_volume") if runner is not None else \
            [plane_volume(problem, 0.0, a, b) for a, b in chunks]
        if len(parts) != len(chunks):
            raise RuntimeError("a coverage round came back with chunks missing")
        total += sum(parts)
    return total


def _refine_cut(problem: Problem) -> np.ndarray:
    """The coordinates the refinement cuts: order 1 those the network reads, order 2 all."""
    cut = problem.read_by_network & problem.splittable if problem.order == 1 else problem.splittable
    return cut if cut.any() else problem.splittable


def plane_volume(problem: Problem, _eps: float, lo: np.ndarray, hi: np.ndarray) -> float:
    """``plane_inside`` over one chunk of order-1 boxes, cut as ``refine_inside`` cuts: a
    runner's task."""
    return plane_inside(problem, lo, hi, _refine_cut(problem))


PLANE_CELLS = 512        # cells per leftover box that its linear lower bound of h decides
PLANE_CHUNK = 256        # boxes per plane evaluation (its cells are (boxes, PLANE_CELLS, n) arrays)


def plane_inside(problem: Problem, lo: np.ndarray, hi: np.ndarray, cut: np.ndarray) -> float:
    """Relative volume of the cells of the boxes (lo, hi) where the box's linear lower bound of
    the header's h (``compiler.bounds_linear.lower_plane``, float32 rounding included) is >= 0:
    order 1, the set is {h >= 0}.  Each box is cut into a grid of about PLANE_CELLS cells along
    the coordinates ``cut``; deciding a cell costs one dot product, no network evaluation, so
    the boxes the bisection's budget leaves straddling the set's edge still count their inner
    part.  Any cell where the plane is >= 0 lies in the set, so the sum is a lower bound."""
    return sum(float((inside.sum(axis=1) * cell_rel).sum())
               for _, inside, cell_rel in plane_cells(problem, lo, hi, cut))


def plane_cells(problem: Problem, lo: np.ndarray, hi: np.ndarray, cut: np.ndarray):
    """Per chunk of boxes: (the cells (B, K, n), whether each lies in {h >= 0} by its box's
    lower plane (B, K), each cell's volume relative to D's (B,)); see ``plane_inside``."""
    from compiler.bounds import enclose
    from compiler.bounds_linear import lower_plane
    dims = np.flatnonzero(cut)
    k = max(2, int(round(PLANE_CELLS ** (1.0 / len(dims)))))
    grid = np.stack(np.meshgrid(*[np.arange(k)] * len(dims), indexing="ij"), -1).reshape(-1, len(dims))
    span = problem.hi - problem.lo
    for i in range(0, len(lo), PLANE_CHUNK):
        a, b = lo[i:i + PLANE_CHUNK], hi[i:i + PLANE_CHUNK]
        box = Interval(a, b)
        plane = lower_plane(problem.model, box, enclose(problem.model, box, order=0, float32=True).rounding.h)
        if plane is None:
            return
        step = (b - a)[:, dims] / k
        cell_lo = np.repeat(a[:, None, :], len(grid), axis=1)
        cell_hi = np.repeat(b[:, None, :], len(grid), axis=1)
        cell_lo[:, :, dims] = a[:, None, dims] + grid[None] * step[:, None, :]
        cell_hi[:, :, dims] = np.where(grid[None] + 1 == k, b[:, None, dims],
                                       a[:, None, dims] + (grid[None] + 1) * step[:, None, :])
        # each cell widened by a few ulps (its float ends carry two roundings), within the box:
        # the checked cells cover the real grid, whose cells have exactly the volume counted
        pad = 8 * 2.0 ** -52 * np.maximum(np.abs(a), np.abs(b))[:, None, :] + TINY
        cells = Interval(np.maximum(cell_lo - pad, a[:, None, :]), np.minimum(cell_hi + pad, b[:, None, :]),
                         check=False)
        cell_rel = np.prod(np.where(problem.splittable, (b - a) / span, 1.0), axis=1) / len(grid)
        yield cells, plane.over(cells) >= 0, cell_rel


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
