"""Branch and bound over the domain: split boxes until each is proven or refuted.

Best-first: every round takes the ``batch`` boxes with the worst bound (ties by the lower
corner: ``queue.py``, which spills a large open set to disk), cuts them into fixed chunks,
evaluates each chunk's conditions at once (numpy over boxes; here, on worker processes or on
Dask: ``shards.py``), merges the chunks in order, and
* keeps a box whose every bound is >= 0 (proven),
* rechecks a failing box's candidates in float64 (``counterexamples.py``): a confirmed
  violation marks the box refuted and ends the search after this round (the verdict is
  fixed: not certified),
* splits the others in two along the edge with the largest variation of h (width times the
  gradient bound, ``split_dimension``), among the dimensions anything depends on (never e.g.
  the bicycle's p_x, which neither the network nor the plant reads); while the open boxes
  are few, into 2^k pieces at once by the same rule (``eager_levels``): a round costs about
  the same for 1 box as for a chunk of them, so the first rounds would otherwise be spent on
  a handful of boxes each,
* or leaves them undecided once the edge is below ``min_width`` (relative), the box budget
  is spent or the deadline has passed.  Undecided is never proven.

Neither the worker count nor the spilling changes a number: the rounds, their chunks and the
merge order depend on the open boxes only.  (The clock does: a search cut by its time limit,
or a falsifier round cut by FALSIFY_SECONDS, may end elsewhere on a slower run.)
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from compiler.interval import Interval

from . import counterexamples as ce
from .conditions import NAMES, evaluate, open_faces
from .problem import Problem
from .ridges import to_ridge

FALSIFY_EVERY = 25                # rounds between the falsifier's local searches from the worst open boxes
FALSIFY_BOXES = 64
FALSIFY_SECONDS = 2.0
SAMPLED_CHECK_WIDTH = 1.0 / 16    # rollouts only for boxes narrower than this (relative)
MAX_ROLLOUT_BOXES = 128
MAX_LISTED = 20
CHUNK = 1024                      # boxes per chunk of a round at most (fixed: the worker count changes no number);
#                                   a chunk's numpy costs ~50 ms whatever its size: hi-ord8's search took 11.5 s
#                                   in chunks of 256, 6.3 s in chunks of 1,024 (in-process, profiled)
MIN_CHUNK = 256                   # ... but a round is cut in two chunks of at least this many, so two workers
#                                   share it: the trained 3 x 8 spacecraft ReLU student with --workers auto took
#                                   9.0 s in chunks of 1,024 (most of its rounds one chunk), 7.1 s in chunks of
#                                   512; the 4-D point robot's 10 ms search 47.1 s with 1,024, 53.8 s with 512
EAGER_LEVELS = 8                  # at most this many halvings of one box in one round (eager_levels)
EAGER_FILL = 512                  # ... while the next round stays within this many boxes (128, 512, 1024:
#                                   hi-ord8 4.5, 2.5, 2.3 s; OA 3-32-1 0.44, 0.30, 0.29 s; point robot 34, 29, 31 s)


@dataclass
class SearchResult:
    eps: float
    proven: int = 0
    refuted: int = 0
    undecided: int = 0
    evaluated: int = 0
    counterexamples: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: {k: [] for k in NAMES})
    failing: dict[str, int] = field(default_factory=lambda: {k: 0 for k in NAMES})   # undecided boxes per condition
    undecided_boxes: list[dict[str, Any]] = field(default_factory=list)
    volume_safe: float = 0.0        # proven boxes wholly inside the certified set (relative volume)
    straddling: list = field(default_factory=list)   # proven boxes meeting the set's boundary: (lo, hi)
    touched: Any = None             # bool (n, 2): a proven box that may meet the set touches the lower/upper face
    stopped: str = ""               # why the search ended early ("", "counterexample", "time", "budget")
    rounding: str = ""              # the float32 rounding bound's statement
    rounding_max: dict[str, float] = field(default_factory=lambda: {"h": 0.0, "grad": 0.0})

    @property
    def certified(self) -> bool:
        return self.refuted == 0 and self.undecided == 0 and self.proven > 0


@dataclass
class ChunkResult:
    """One chunk of a round, evaluated: everything the search needs from its boxes (``evaluate_chunk``)."""
    proven: np.ndarray            # (B,) bool
    refuted: np.ndarray           # (B,) bool: a confirmed counterexample in the box
    inside: np.ndarray            # (B,) bool: the box lies in the certified set
    meets: np.ndarray             # (B,) bool: the box may meet the certified set
    dim: np.ndarray               # (B, EAGER_LEVELS) int: the edges to halve, in turn (``split_sequence``)
    worst: np.ndarray             # (B,) the worst condition's bound (the children's priority)
    failing: np.ndarray           # (B, len(NAMES)) bool: the condition's bound is < 0
    sampled: np.ndarray           # (B,) the sampled-data bound (the falsifier starts from the worst)
    counterexamples: dict[str, list[dict[str, Any]]]
    rounding: tuple[str, float, float] | None    # (statement, largest h bound, largest grad bound)


def evaluate_chunk(problem: Problem, eps: float, blo: np.ndarray, bhi: np.ndarray) -> ChunkResult:
    """Bound, recheck and choose the split of one chunk of boxes: a pure function of its
    arguments, so a chunk gives the same numbers in this process, a worker process or on Dask."""
    span = problem.hi - problem.lo
    bounds = evaluate(problem, Interval(blo, bhi), eps)
    local = SearchResult(eps)
    _note_rounding(local, bounds.rounding)
    rel = (bhi - blo) / span
    proven = bounds.proven
    refuted = _refute(problem, local, blo, bhi, bounds, ~proven, rel, eps)
    # the tube filter's rows read f over every coordinate the plant uses: its weights stand for them
    weighted = problem.splittable if problem.condition == "tube" else problem.read_by_network
    dim = split_sequence(bhi - blo, np.where(weighted, bounds.grad_mag, 0.0), problem.splittable, span)
    scores = np.stack([bounds.scores[k] for k in NAMES])
    rounding = (local.rounding, local.rounding_max["h"], local.rounding_max["grad"]) if local.rounding else None
    return ChunkResult(proven, refuted, bounds.inside_set, bounds.meets_set, dim, np.min(scores, axis=0),
                       (scores < 0).T, bounds.scores["sampled_data"], local.counterexamples, rounding)


def search(problem: Problem, eps: float, deadline: float, max_boxes: int = 2_000_000,
           min_width: float = 2.0 ** -30, batch: int = 2048, progress: Any = None, runner: Any = None,
           spill_at: int | None = None, chunk: int | None = None) -> SearchResult:
    """Run the branch and bound at margin ``eps`` until done, refuted, or out of time/boxes.

    Each round takes the ``batch`` best open boxes in the queue's canonical order, cuts them
    into chunks of at most ``chunk`` boxes (None: CHUNK), in two where the round has at least
    2 MIN_CHUNK, and has ``runner`` (``shards.py``; None: this process) evaluate them; the
    results are merged in chunk order.  The chunking depends on neither the
    runner nor the worker count, so neither changes a number of the result.  ``spill_at``: open
    boxes held in memory before the rest is spilled to temporary files (``queue.py``)."""
    from .queue import OpenQueue
    from .shards import InProcess
    runner = runner if runner is not None else InProcess(problem)
    chunk = chunk or CHUNK
    span = problem.hi - problem.lo
    split = problem.splittable
    res = SearchResult(eps, touched=np.zeros((problem.n, 2), dtype=bool))
    done_volume = 0.0
    rounds = 0
    with OpenQueue(problem.n, spill_at) as queue:
        queue.push(problem.lo[None, :].copy(), problem.hi[None, :].copy(), np.zeros(1))
        while len(queue):
            if time.monotonic() > deadline or res.evaluated >= max_boxes or res.stopped:
                res.stopped = res.stopped or ("time" if time.monotonic() > deadline else "budget")
                for lo, hi in queue.drain(batch):
                    _leave_undecided(res, lo, hi, res.stopped)
                break
            blo, bhi = queue.pop(min(batch, max_boxes - res.evaluated))     # never past the budget
            size = min(chunk, max(MIN_CHUNK, -(-len(blo) // 2)))
            starts = range(0, len(blo), size)
            parts = runner.map(eps, [(blo[i:i + size], bhi[i:i + size]) for i in starts])
            if len(parts) != len(starts) or sum(len(p.proven) for p in parts) != len(blo):
                raise RuntimeError("a round came back with boxes missing: no verdict from a partial search")
            c = _merge(res, parts)
            res.evaluated += len(blo)
            rel = (bhi - blo) / span
            vol = np.prod(np.where(split, rel, 1.0), axis=1)
            proven, refuted = c.proven, c.refuted
            if refuted.any():
                res.stopped = "counterexample"
            rounds += 1
            if rounds % FALSIFY_EVERY == 0 and not refuted.any() and problem.dt > 0:
                refuted = _falsify_alongside(problem, res, blo, bhi, c.sampled, ~proven, eps)
            res.proven += int(proven.sum())
            res.refuted += int(refuted.sum())
            res.volume_safe += float(vol[proven & c.inside].sum())
            leaf = proven | refuted
            edge = proven & c.meets & ~c.inside
            if edge.any():
                res.straddling.append((blo[edge], bhi[edge]))
            reaching = leaf & c.meets
            res.touched[:, 0] |= np.any(reaching[:, None] & (blo <= problem.lo), axis=0)
            res.touched[:, 1] |= np.any(reaching[:, None] & (bhi >= problem.hi), axis=0)
            open_ = ~leaf
            too_small = rel[np.arange(len(blo)), c.dim[:, 0]] < min_width
            stuck = open_ & too_small
            if stuck.any():
                _leave_undecided(res, blo[stuck], bhi[stuck], "minimum width", c.failing[stuck])
            go = np.flatnonzero(open_ & ~too_small)
            if len(go):
                levels = eager_levels(len(queue), rel[go], c.dim[go], min_width)
                lo, hi = split_pieces(blo[go], bhi[go], c.dim[go], levels)
                queue.push(lo, hi, np.tile(c.worst[go], 2 ** levels))
            done_volume += float(vol[leaf | stuck].sum())
            if progress is not None:
                progress.n = round(min(done_volume, 1.0), 4)
                progress.set_postfix(boxes=res.evaluated, open=len(queue), refresh=False)
                progress.refresh()
    return res


def _merge(res: SearchResult, parts: list[ChunkResult]) -> ChunkResult:
    """The round's chunks as one, in chunk order; their counterexamples and rounding into ``res``."""
    for p in parts:
        for name, found in p.counterexamples.items():
            res.counterexamples[name].extend(found[:max(0, MAX_LISTED - len(res.counterexamples[name]))])
        if p.rounding is not None:
            res.rounding = p.rounding[0]
            res.rounding_max["h"] = max(res.rounding_max["h"], p.rounding[1])
            res.rounding_max["grad"] = max(res.rounding_max["grad"], p.rounding[2])
    join = {f: np.concatenate([getattr(p, f) for p in parts]) for f in
            ("proven", "refuted", "inside", "meets", "dim", "worst", "failing", "sampled")}
    return ChunkResult(**join, counterexamples={}, rounding=None)


def halve(lo: np.ndarray, hi: np.ndarray, dim: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Both halves of every box (lo, hi) cut at the middle of edge ``dim``: (2B, n) lo and hi."""
    rows = np.arange(len(dim))
    mid = 0.5 * (lo[rows, dim] + hi[rows, dim])
    left_hi, right_lo = hi.copy(), lo.copy()
    left_hi[rows, dim] = mid
    right_lo[rows, dim] = mid
    return np.concatenate([lo, right_lo]), np.concatenate([left_hi, hi])


def eager_levels(queued: int, rel: np.ndarray, dims: np.ndarray, min_width: float) -> int:
    """How many times to halve each of the boxes about to be split (relative widths ``rel``
    (k, n), edge sequences ``dims`` (k, EAGER_LEVELS)): 1, or more while the next round, with
    the ``queued`` open boxes, stays within EAGER_FILL boxes and no edge halved falls below
    ``min_width``.  It depends on the open boxes only, so no worker count changes it."""
    k = len(rel)
    levels = 1
    width = rel.copy()
    rows = np.arange(k)
    width[rows, dims[:, 0]] /= 2
    while levels < dims.shape[1] and queued + k * 2 ** (levels + 1) <= EAGER_FILL:
        edge = dims[:, levels]
        if np.any(width[rows, edge] < min_width):
            break
        width[rows, edge] /= 2
        levels += 1
    return levels


def split_pieces(lo: np.ndarray, hi: np.ndarray, dims: np.ndarray, levels: int) -> tuple[np.ndarray, np.ndarray]:
    """The 2^levels pieces of every box (lo, hi) (k, n), halved along ``dims[:, 0]``, then each
    half along ``dims[:, 1]``, ...: (2^levels k, n) lo and hi, box j's pieces at j, j + k, ..."""
    for level in range(levels):
        lo, hi = halve(lo, hi, np.tile(dims[:, level], 2 ** level))
    return lo, hi


def split_sequence(width: np.ndarray, grad_mag: np.ndarray, split: np.ndarray, span: np.ndarray,
                   levels: int = EAGER_LEVELS) -> np.ndarray:
    """(B, levels) the edges ``split_dimension`` picks for a box and then, with the same
    gradient bound, for its halves in turn (all pieces of one level share their widths)."""
    width = np.array(width, dtype=float)
    rows = np.arange(len(width))
    out = np.empty((len(width), levels), dtype=int)
    for level in range(levels):
        out[:, level] = split_dimension(width, grad_mag, split, span)
        width[rows, out[:, level]] /= 2
    return out


def split_dimension(width: np.ndarray, grad_mag: np.ndarray, split: np.ndarray, span: np.ndarray) -> np.ndarray:
    """The edge to halve: the largest w_i |dh/dx_i| + (w_i / span_i) m among the splittable
    dimensions -- the variation of h along the edge, plus a share m (the smallest nonzero
    variation of h across the domain) for the plant's dependence, so that a dimension the
    network ignores but f reads (the bicycle's v) is still split. Callers pass 0 for the
    dimensions the network does not read: their outward-rounded gradient bound is a tiny
    nonzero width, which would make m tiny and starve those dimensions of splits."""
    g = np.where(np.isfinite(grad_mag), grad_mag, 1e300)
    across = np.where(split & (g > 0), g * span, np.inf)
    m = np.min(across, axis=1, keepdims=True)
    m = np.where(np.isfinite(m), m, 1.0)
    score = width * g + width / span * m
    return np.argmax(np.where(split, score, -1.0), axis=1)


def _note_rounding(res: SearchResult, rounding: Any) -> None:
    """Keep the statement and the largest float32 error bound met (h and grad h)."""
    if rounding is None:
        return
    res.rounding = rounding.statement
    for key in ("h", "grad"):
        value = getattr(rounding, key)
        if value is not None and np.size(value):
            res.rounding_max[key] = max(res.rounding_max[key], float(np.max(value)))


def _leave_undecided(res: SearchResult, lo: np.ndarray, hi: np.ndarray, why: str,
                     failing_mask: np.ndarray | None = None) -> None:
    """Count boxes as undecided (never proven); ``failing_mask`` (k, len(NAMES)): which bounds failed."""
    res.undecided += len(lo)
    for i in range(len(lo)):
        failing = [] if failing_mask is None else [k for k, bad in zip(NAMES, failing_mask[i]) if bad]
        for k in failing:
            res.failing[k] += 1
        if len(res.undecided_boxes) < MAX_LISTED:
            res.undecided_boxes.append({"lo": lo[i].tolist(), "hi": hi[i].tolist(), "why": why,
                                        "failing": failing})


def _refute(problem: Problem, res: SearchResult, blo: np.ndarray, bhi: np.ndarray, bounds, open_: np.ndarray,
            rel: np.ndarray, eps: float) -> np.ndarray:
    """Recheck candidates of the failing boxes in float64; mark boxes with a confirmed violation."""
    refuted = np.zeros(len(blo), dtype=bool)
    point_fail = open_ & ((bounds.scores["containment"] < 0) | (bounds.scores["feasibility"] < 0)
                          | (bounds.scores["initial"] < 0))
    idx = np.flatnonzero(point_fail)
    if len(idx):
        # the tube filter's rows cost an LP a state: its candidates are the centres alone
        pts, owner = ce.candidates(blo[idx], bhi[idx], corners=problem.condition != "tube")
        if problem.initial:                      # the initial set's candidates: the same, clipped into it
            from .sets import clip_into
            pts, owner = np.concatenate([pts, clip_into(problem.initial, pts)]), np.concatenate([owner, owner])
        if problem.condition == "boundary":      # the Nagumo condition's candidates lie on {h = 0}:
            # the box centres' projections (the corners' would cost 2^n times more, and the
            # centres of a split box sample the level more densely anyway)
            centres = slice(0, len(idx))
            on, on_owner = ce.to_zero_level(problem, pts[centres], owner[centres])
            if problem.relu_like:                # and on its ridges (the common-input form)
                ridge, ridge_owner = to_ridge(problem, on, on_owner)
                on, on_owner = np.concatenate([on, ridge]), np.concatenate([on_owner, ridge_owner])
            inside = np.all((blo[idx][on_owner] <= on) & (on <= bhi[idx][on_owner]), axis=1)
            pts, owner = np.concatenate([pts, on[inside]]), np.concatenate([owner, on_owner[inside]])
        bad = ce.check_points(problem, pts, eps)
        for name, value in bad.items():
            for k in np.flatnonzero(~np.isnan(value)):
                box = idx[owner[k]]
                if refuted[box]:
                    continue
                alone = ce.replayable(problem, pts[k], name, eps)   # as --replay will check it
                if alone is not None:
                    refuted[box] = True
                    _record(res, name, *alone, problem)
    for i, side in open_faces(problem):
        on = open_ & ~refuted & (bounds.scores["closure"] < 0) & ((blo[:, i] <= problem.lo[i]) if side < 0
                                                                   else (bhi[:, i] >= problem.hi[i]))
        idx = np.flatnonzero(on)
        if not len(idx):
            continue
        pts, owner = ce.candidates(blo[idx], bhi[idx])
        pts[:, i] = problem.lo[i] if side < 0 else problem.hi[i]
        speed, u = ce.closure_violations(problem, pts, i, side, eps)
        for k in np.flatnonzero(~np.isnan(speed)):
            box = idx[owner[k]]
            if not refuted[box]:
                refuted[box] = True
                _record(res, "closure", pts[k], speed[k], problem, u=u[k])
    small = open_ & ~refuted & (bounds.scores["sampled_data"] < 0) & (np.max(np.where(problem.splittable, rel, 0), 1)
                                                                      < SAMPLED_CHECK_WIDTH)
    idx = np.flatnonzero(small)[:MAX_ROLLOUT_BOXES]
    if len(idx) and problem.dt > 0:
        pts, owner = ce.candidates(blo[idx], bhi[idx], corners=False)
        for x, u, low in ce.sampled_candidates(problem, pts, bounds.worst_u[idx][owner], eps):
            box = idx[np.flatnonzero(np.all((blo[idx] <= x) & (x <= bhi[idx]), axis=1))[0]]
            if not refuted[box]:
                refuted[box] = True
                _record(res, "sampled_data", x, low, problem, u=u)
    if refuted.any():
        res.stopped = "counterexample"
    return refuted


def _falsify_alongside(problem: Problem, res: SearchResult, blo: np.ndarray, bhi: np.ndarray, sampled: np.ndarray,
                       open_: np.ndarray, eps: float) -> np.ndarray:
    """The falsifier's local search (falsify.py) from the centres of the open boxes whose
    sampled-data bound is worst: a real violation ends the search now, not after the boxes
    around it have been split down to it."""
    from .falsify import falsify
    refuted = np.zeros(len(blo), dtype=bool)
    score = np.where(open_, sampled, np.inf)
    idx = np.argsort(score)[:FALSIFY_BOXES]
    idx = idx[np.isfinite(score[idx]) & (score[idx] < 0)]
    if not len(idx):
        return refuted
    found = falsify(problem, eps, time.monotonic() + FALSIFY_SECONDS, starts=0.5 * (blo[idx] + bhi[idx]), rounds=2,
                    leaks=False)
    for name, items in found.items.items():
        for x, value, u in items:
            inside = np.flatnonzero(np.all((blo <= x) & (x <= bhi), axis=1))
            if len(inside):
                refuted[inside[0]] = True
            _record(res, name, x, value, problem, u=u)
    if found:
        res.stopped = "counterexample"
        res.refuted += int(not refuted.any())     # a violation outside this round's boxes still refutes
    return refuted


def _record(res: SearchResult, name: str, x: np.ndarray, value: float, problem: Problem, u=None) -> None:
    if len(res.counterexamples[name]) >= MAX_LISTED:
        return
    quantity = {"containment": "constraint (with x in the certified set)",
                "feasibility": (("sup_u min over the pieces met at x of (L_f h + L_G h.u) on h = 0" if problem.relu_like
                                 else "sup_u (L_f h + L_G h.u) on h = 0") if problem.condition == "boundary"
                                else "max_u min over the tube filter's rows (no input satisfies them all)"
                                if problem.condition == "tube" else "sup_u (a.u + b) - margin"),
                "sampled_data": "min level over the period (h" + (", psi1)" if problem.order == 2 else ")"),
                "closure": "outward speed through an open face of the domain, from a state of the set",
                "initial": "h (with x in the initial set)" if problem.order == 1 else "min(h, psi1) (with x in the initial set)"}[name]
    entry = {"x": [float(v) for v in x], "quantity": quantity, "value": float(value)}
    if u is not None:
        entry["u"] = [float(v) for v in u]
    res.counterexamples[name].append(entry)
