"""Walk the linear regions of a ReLU barrier along {h = 0}: the boundary condition, exactly,
region by region, on a plant with affine drift and constant G (the falsifier's last step).

On the region R of an activation pattern the network is affine, h = g . x + c, and its
pre-activations are affine too, so R is a polytope (each neuron's pre-activation keeps its
sign).  On a plant with f(x) = A x + f0 and a constant G, the boundary row there,
sup_u g . (A x + f0 + G u), is affine in x, and its minimum over the piece
S = R n D n {g . x + c = 0} is one linear program.  A negative minimum is a counterexample
(checked in float64 by ``counterexamples.check_points``, like every other one); a
non-negative one clears the whole piece at once, wherever it lies.

The pieces are found by walking from the patterns of states on {h = 0} (seeds) to their
neighbours: the neuron k is flipped when its facet {z_k = 0} meets S (one more LP per neuron,
the same constraints, another objective; only for neurons whose flip is new and whose facet
can meet the piece's bounding box).  Pieces are taken worst first (by the row's
minimum on the piece they were reached from), so a violation, which is where the row falls,
is met early: on the 3 x 16 spacecraft student the first confirmed one came after 3.1 s
(``benchmarks/region_walk.py``, about 6 ms a piece); the box search refuted it after 2,364 s.

It proves nothing.  A component of {h = 0} with no seed is never reached, and the LPs are not
rigorous; only the counterexamples it finds count, and each is confirmed independently.
"""
from __future__ import annotations

import heapq
import os
import sys
import time
from dataclasses import dataclass, field

import numpy as np


from .patterns import PieceMaps, supported

FACET_TOL = 1e-7           # a facet within HiGHS's feasibility tolerance of S counts as met (an extra
#                            neighbour costs one LP; a missed one loses the pieces behind it)
PULL = (1e-6, 1e-4, 1e-2)  # a piece's minimiser sits on its facets, where the reference may take the
#                            neighbour's pattern: candidates are moved this far toward its centre


@dataclass(frozen=True)
class LinearPlant:
    """f(x) = A x + f0 with G constant: the plants on which the row is affine on a piece."""
    A: np.ndarray              # (n, n)
    f0: np.ndarray             # (n,)
    G: np.ndarray              # (n, m)


def linear_plant(system) -> LinearPlant | None:
    """The plant's A, f0, G when its Jacobian and G read no state (sympy), else None."""
    if system.jacobian_expr.free_symbols or system.G_expr.free_symbols:
        return None
    zero = np.zeros(system.n)
    return LinearPlant(np.asarray(system.jacobian(zero), float), np.asarray(system.f(zero), float),
                       np.asarray(system.G(zero), float).reshape(system.n, system.m))


def applies(problem) -> bool:
    """The walk needs the boundary condition, a ReLU network and a linear plant."""
    return (problem.condition == "boundary" and problem.order == 1 and supported(problem.model)
            and linear_plant(problem.system) is not None)


@dataclass
class Piece:
    """One pattern's part of {h = 0} in D: the row's least value there and where."""
    pattern: np.ndarray        # (hidden,) bool, True where the neuron is active
    value: float               # min over the piece of sup_u g . (A x + f0 + G u)
    argmin: np.ndarray         # (n,)
    centre: np.ndarray         # (n,) a point of the piece away from its facets (Chebyshev, in the level plane)


@dataclass
class Walk:
    """What a walk met: the pieces it solved and, worst first, those with a negative row."""
    pieces: int = 0
    empty: int = 0             # patterns whose region misses {h = 0} in D
    exhausted: bool = False    # no neighbour left to visit (every piece reachable from the seeds was solved)
    negative: list[Piece] = field(default_factory=list)    # the pieces whose row fell below ``below``
    values: dict[bytes, float] = field(default_factory=dict)   # pattern (bool bytes) -> the row's minimum
    seconds: float = 0.0


class _PieceLP:
    """The LPs of one pattern with HiGHS: the constraints are built once, the objectives vary."""

    def __init__(self, lo: np.ndarray, hi: np.ndarray):
        import highspy
        self._hs = highspy
        self.solver = _quiet(highspy.Highs)
        self.solver.setOptionValue("output_flag", False)
        self.solver.setOptionValue("presolve", "off")
        self.lo, self.hi = lo, hi

    def load(self, signs: np.ndarray, Z: np.ndarray, z0: np.ndarray, g: np.ndarray, c: float,
             cost: np.ndarray) -> bool:
        """sign_k (Z_k x + z0_k) >= 0 for every neuron, g . x + c = 0, x in D; minimise cost . x.
        False when the piece is empty."""
        hs, n = self._hs, len(g)
        rows = np.vstack([signs[:, None] * Z, g[None]])
        lp = hs.HighsLp()
        lp.num_col_, lp.num_row_ = n, rows.shape[0]
        lp.col_cost_, lp.col_lower_, lp.col_upper_ = cost, self.lo, self.hi
        lp.row_lower_ = np.concatenate([-signs * z0, [-c]])
        lp.row_upper_ = np.concatenate([np.full(len(z0), hs.kHighsInf), [-c]])
        lp.a_matrix_.format_ = hs.MatrixFormat.kRowwise
        lp.a_matrix_.start_ = np.arange(0, rows.size + 1, n, dtype=np.int32)
        lp.a_matrix_.index_ = np.tile(np.arange(n, dtype=np.int32), rows.shape[0])
        lp.a_matrix_.value_ = rows.ravel()
        self.solver.clearModel()
        self.solver.passModel(lp)
        return self._run()

    def minimise(self, cost: np.ndarray) -> bool:
        self.solver.changeColsCost(len(cost), np.arange(len(cost), dtype=np.int32), cost)
        return self._run()

    def _run(self) -> bool:
        self.solver.run()
        return self.solver.getModelStatus() == self._hs.HighsModelStatus.kOptimal

    @property
    def value(self) -> float:
        return float(self.solver.getInfo().objective_function_value)

    @property
    def point(self) -> np.ndarray:
        return np.array(self.solver.getSolution().col_value, dtype=float)


def _quiet(make):
    """make() with the C library's stdout sent to /dev/null: HiGHS prints its banner when a
    solver is built, before any option can silence it."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:                  # no stdout to silence
        return make()
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            return make()
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def walk(problem, seeds: np.ndarray, deadline: float, max_pieces: int | None = None, stop_at_negative: int = 8,
         below: float = 0.0) -> Walk:
    """Solve the pieces of {h = 0} reachable from the patterns of ``seeds`` (states on or near
    it), worst first, until ``deadline`` (time.monotonic), ``max_pieces``, or
    ``stop_at_negative`` pieces whose row falls below ``below`` (0: the violations; the
    distillation asks for a slack) (module docstring)."""
    began = time.monotonic()
    plant = linear_plant(problem.system)
    if plant is None:
        raise ValueError(f"the region walk needs f affine and G constant, but {problem.system.name}'s are not")
    net = PieceMaps(problem.model)
    lp = _PieceLP(np.asarray(problem.lo, float), np.asarray(problem.hi, float))
    u_lo, u_hi = np.asarray(problem.u_lo, float), np.asarray(problem.u_hi, float)
    out = Walk()
    queue: list[tuple[float, int, bytes]] = []
    seen: set[bytes] = set()
    for pattern in net.patterns(np.asarray(seeds, float).reshape(-1, net.n)):
        key = pattern.tobytes()
        if key not in seen:
            seen.add(key)
            queue.append((-np.inf, len(seen), key))
    heapq.heapify(queue)
    while queue and time.monotonic() < deadline and (max_pieces is None or out.pieces < max_pieces):
        _, _, key = heapq.heappop(queue)
        pattern = np.frombuffer(key, dtype=bool)
        Z, z0, g, c = net.affine(pattern)
        row = g @ plant.A
        gG = g @ plant.G
        constant = float(g @ plant.f0 + np.maximum(gG * u_lo, gG * u_hi).sum())
        signs = np.where(pattern, 1.0, -1.0)
        if not lp.load(signs, Z, z0, g, c, row):
            out.empty += 1
            continue
        out.pieces += 1
        value, argmin = lp.value + constant, lp.point
        out.values[key] = value
        if value < below:
            out.negative.append(Piece(pattern.copy(), value, argmin, _centre(signs, Z, z0, g, c, lp.lo, lp.hi)))
            if len(out.negative) >= stop_at_negative:
                queue.append((value, 0, key))           # its neighbours were not looked for: not exhausted
                break
        flips = [k for k in range(net.hidden) if _flipped(pattern, k) not in seen]   # the rest are queued already
        if len(flips) > 2 * net.n:
            flips = np.intersect1d(flips, _facets_to_try(lp, signs[:, None] * Z, signs * z0))
        for k in flips:
            if lp.minimise(signs[k] * Z[k]) and lp.value + signs[k] * z0[k] <= FACET_TOL:
                seen.add(_flipped(pattern, k))
                heapq.heappush(queue, (value, len(seen), _flipped(pattern, k)))
    out.exhausted = not queue
    out.negative.sort(key=lambda p: p.value)
    out.seconds = time.monotonic() - began
    return out


def _flipped(pattern: np.ndarray, k: int) -> bytes:
    flipped = pattern.copy()
    flipped[k] = not flipped[k]
    return flipped.tobytes()


def _facets_to_try(lp: _PieceLP, rows: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """The neurons whose facet may meet the piece: those whose margin rows @ x + offsets (>= 0
    on the piece) can reach 0 on the piece's bounding box (2 n LPs: the caller asks when more
    than 2 n facets are left to try)."""
    n = rows.shape[1]
    lo, hi = np.empty(n), np.empty(n)
    for i in range(n):
        unit = np.zeros(n)
        unit[i] = 1.0
        if not lp.minimise(unit):
            return np.arange(len(rows))
        lo[i] = lp.value
        if not lp.minimise(-unit):
            return np.arange(len(rows))
        hi[i] = -lp.value
    spread = 1e-9 * (1.0 + np.abs(lo) + np.abs(hi))           # the LP's own tolerance on the box's faces
    least = offsets + np.minimum(rows * (lo - spread), rows * (hi + spread)).sum(axis=1)
    return np.flatnonzero(least <= FACET_TOL * (1.0 + np.abs(rows).sum(axis=1)))


def _centre(signs, Z, z0, g, c, lo, hi) -> np.ndarray:
    """The centre of the largest ball inside the piece, within the plane g . x + c = 0 (one LP
    over (x, r) with scipy's HiGHS); nan where that LP fails (``candidates`` then takes the minimiser)."""
    from scipy.optimize import linprog
    n = len(g)
    plane = np.eye(n) - np.outer(g, g) / max(float(g @ g), 1e-300)     # projects onto the level plane
    faces = np.vstack([-signs[:, None] * Z, np.eye(n), -np.eye(n)])     # faces @ x <= bound
    bound = np.concatenate([signs * z0, hi, -lo])
    reach = np.linalg.norm(faces @ plane, axis=1)
    res = linprog(np.r_[np.zeros(n), -1.0], A_ub=np.c_[faces, reach], b_ub=bound,
                  A_eq=np.r_[g, 0.0][None], b_eq=[-c], bounds=[(None, None)] * n + [(0, None)], method="highs")
    return res.x[:n] if res.status == 0 else np.full(n, np.nan)


def candidates(piece: Piece) -> np.ndarray:
    """States of a negative piece to confirm: its minimiser moved toward its centre by PULL
    (the row is affine on the piece, so each keeps most of the minimum)."""
    if not np.all(np.isfinite(piece.centre)):
        return piece.argmin[None]
    t = np.asarray(PULL)[:, None]
    return piece.argmin[None] + t * (piece.centre - piece.argmin)[None]
