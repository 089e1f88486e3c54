"""The OSQP row solver of the CBF-QP and HOCBF-QP filters, with a slack that keeps the problem
always feasible.

Decision variables z = (u (m), s (k)); the problem P_rho solved per state is

    min  1/2 ||u - u_nom||^2 + rho * sum_i s_i
    s.t. a_i + b_i.u + s_i >= 0   (row i of the safety condition, one per barrier)
         u_min <= u <= u_max,  s_i >= 0.

Rows arrive normalised to unit gain (``base.normalise_rows``), so rho bounds multipliers in
input units. It is feasible for any data. The L1 penalty is exact: if the hard QP (s = 0) is feasible
with row multipliers <= rho, P_rho has the same solution with s = 0. Otherwise u =
clip(u_nom + sum_i lam_i b_i) with lam_i = rho on every relaxed row (s_i > 0); for one row
this is exactly the point ``projection.project_halfspace_box(..., slack_penalty=rho)``
computes in closed form, so the two filters solve the same problem. As rho -> inf it tends
to the least-violation input.

How OSQP is used (measured, see the report in tests/test_filters.py): ADMM on P_rho itself
stalls, because s >= 0 always carries a multiplier of size rho (1e6): on 1000 random
single-row problems plain OSQP (eps 1e-9, polish on) was off by up to 4e-3 and hit
max_iter on ~3%, and warm-started closed loops still needed ~600 iterations on average.
So each step runs two phases on ONE workspace whose sparsity never changes:
  1. hard phase: s pinned to 0 by its bounds ([0, 0]) and priced 0: a well-conditioned QP
     (~40 warm-started iterations). Accepted when solved with multipliers <= rho.
  2. relaxed phase (only if 1 is infeasible / unsolved / needs lam > rho): s in [0, inf)
     priced rho, i.e. P_rho itself.
Either phase's answer is finished by ``refine.refine``, an exact active-set step that is
accepted only if it satisfies the KKT conditions of P_rho to ~1e-10 (OSQP's own polish is
regularised by delta*|y| and fails for large multipliers). With it OSQP and the closed form
agree to ~1e-14. If refinement cannot verify, OSQP's iterate is returned (SOLVER_ERROR
unless OSQP reported solved).

Each step only calls ``update(q=, l=, [u=,] Ax=)``; every b_ij is a structural nonzero.
One workspace per batch index keeps warm starts per trajectory, which also makes a batched
run equal to single runs.

Data at the edges of OSQP's range (it treats |v| >= 1e30 as infinite and rejects l > u):
* finite input bounds beyond +-1e30 are refused at construction (one-line error);
* a row whose normalised offset |a_i| exceeds both DECIDE_OFFSET and the most the box can
  change the row (its reach sum_j |b_ij| max(|u_min_j|, |u_max_j|)) is decided exactly
  without OSQP: it holds everywhere in the box (multiplier 0, dropped) or fails everywhere
  (multiplier rho: u_nom shifts by rho b_i, the row is dropped); refine()'s tolerance,
  relative to |a|, would otherwise accept anything for such rows;
* a nominal coordinate farther from the box than rho sum_i |b_ij| + 1 is always clipped to
  the same bound, whatever the multipliers; it is moved to that distance (exact);
* a row still out of range (|a_i| >= 1e30 with an unbounded box) is flagged FALLBACK.
"""
from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import osqp
import scipy.sparse as sp

from ..barriers import check_shape
from .base import (DEFAULT_SLACK_TOL, FilterResult, FilterStatus, check_penalty, fast_paths_enabled, input_bounds,
                   nominal_batch, normalise_rows, placeholder_input, row_violation, status_from_slack)
from .refine import refine

_isfinite = math.isfinite
_SOLVED = osqp.SolverStatus.OSQP_SOLVED
#: OSQP's infinity: finite data at or beyond it cannot be represented.
OSQP_INFINITY = float(osqp.constant("OSQP_INFTY"))
#: Rows (and nominal coordinates) beyond this size, and beyond what the box can reach, are decided exactly.
DECIDE_OFFSET = 1e6

#: OSQP settings: tight tolerances + polishing; max_iter bounds the time of a stalled solve
#: (refinement finishes it); a fixed rho-adaptation interval (0 would adapt on wall-clock
#: time, breaking determinism).
DEFAULT_OSQP_SETTINGS: dict[str, Any] = dict(
    eps_abs=1e-9, eps_rel=1e-9, eps_prim_inf=1e-12, eps_dual_inf=1e-12, max_iter=4000,
    polishing=True, polish_refine_iter=10, warm_starting=True, adaptive_rho_interval=25,
    verbose=False,
)


class Workspace:
    """One OSQP instance (fixed sparsity) plus the last hard-phase iterate for warm starts."""

    def __init__(self, solver: osqp.OSQP):
        self.solver = solver
        self.hard_start: tuple[np.ndarray, np.ndarray] | None = None
        self.last_phase = "hard"
        # osqp >= 1.0 keeps its compiled solver in ``_solver``; calling it directly skips the
        # wrapper's per-call bookkeeping (~20 us: result namespaces, derivative cache) while
        # making exactly the calls the wrapper makes. Other versions, and CBFSIM_FAST_PATHS=0,
        # use the public API.
        ext = getattr(solver, "_solver", None) if fast_paths_enabled() else None
        needed = ("update_data_vec", "update_data_mat", "solve", "info", "solution")
        self.ext = ext if ext is not None and all(hasattr(ext, k) for k in needed) else None


class QPRowSolver:
    """OSQP ``RowSolver`` for k >= 1 rows (see module docstring for the problem).

    Besides ``solve``, its steps are public for the single-state fast path (``_fast.py``):
    ``workspace``, ``buffers`` (the phase data the next ``solve_loaded`` sends), ``solve_loaded``
    and ``finish`` (everything after the hard phase)."""

    def __init__(self, u_min: Any, u_max: Any, n_rows: int = 1, slack_penalty: float = 1e6,
                 slack_tol: float = DEFAULT_SLACK_TOL, refine_kkt: bool = True, **osqp_settings: Any):
        self.u_min, self.u_max = input_bounds((u_min, u_max))
        bounds = np.abs(np.concatenate([self.u_min, self.u_max]))
        finite = bounds[np.isfinite(bounds)]
        if (finite >= OSQP_INFINITY).any():
            raise ValueError(f"input bounds {list(self.u_min)}, {list(self.u_max)} reach OSQP's infinity "
                             f"({OSQP_INFINITY:g}); use +-inf for no bound, or the projection filter")
        self.m = self.u_min.shape[0]
        self.n_rows = int(n_rows)
        if self.n_rows < 1:
            raise ValueError(f"n_rows must be >= 1, got {n_rows!r}")
        self.slack_penalty = check_penalty(slack_penalty)
        if not np.isfinite(self.slack_penalty):
            raise ValueError("QPRowSolver needs a finite slack_penalty (use the projection for rho = inf)")
        self.slack_tol = float(slack_tol)
        self.refine = bool(refine_kkt)
        #: refine()'s bound term: the largest finite |bound|
        self.bound_scale = float(finite.max(initial=0.0))
        self._extent = np.maximum(np.abs(self.u_min), np.abs(self.u_max))   # for a row's reach
        self.settings = {**DEFAULT_OSQP_SETTINGS, **osqp_settings}
        self._osqp_settings = dict(osqp_settings)
        #: diagnostics: solves, hard-phase answers, relaxed-phase solves, exact refinements, failures
        self.stats = dict(solves=0, hard=0, relaxed=0, refined=0, failed=0)
        m, k = self.m, self.n_rows
        self._P = sp.csc_matrix((np.ones(m), np.arange(m), np.concatenate([np.arange(m + 1), np.full(k, m)])),
                                shape=(m + k, m + k))
        # columns u_j: rows 0..k-1 hold b_ij, row k+j the box; columns s_i: row i and row k+m+i
        rows_u = np.hstack([np.tile(np.arange(k), (m, 1)), (k + np.arange(m))[:, None]]).ravel()
        rows_s = np.stack([np.arange(k), k + m + np.arange(k)], axis=1).ravel()
        self._A_rows = np.concatenate([rows_u, rows_s])
        self._A_indptr = np.concatenate([np.arange(m + 1) * (k + 1), m * (k + 1) + 2 * np.arange(1, k + 1)])
        #: positions of b_ij (column-major over u_j) inside A's data vector
        self.b_slots = (np.arange(m)[:, None] * (k + 1) + np.arange(k)[None, :]).ravel()
        self._workspaces: list[Workspace] = []
        self._reduced: dict[int, QPRowSolver] = {}
        # (q, l, u) per phase, with OSQP's clamp to +-OSQP_INFINITY applied once; the A data
        self._tmpl = {phase: self._vectors(phase) for phase in ("hard", "relaxed")}
        self.gains = self._Ax(np.zeros((k, m)))

    def reset(self) -> None:
        """Forget warm starts (call between independent simulations)."""
        self._workspaces = []
        for sub in self._reduced.values():
            sub.reset()

    def _Ax(self, b: np.ndarray) -> np.ndarray:
        """CSC data of A for gains b (k, m), in the fixed sparsity order."""
        u_cols = np.hstack([b.T, np.ones((self.m, 1))]).ravel()
        return np.concatenate([u_cols, np.ones(2 * self.n_rows)])

    def _vectors(self, phase: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(q, l, u) templates; the hard phase pins s = 0, the relaxed phase prices it at rho."""
        m, k = self.m, self.n_rows
        s_hi = np.zeros(k) if phase == "hard" else np.full(k, np.inf)
        q = np.concatenate([np.zeros(m), np.zeros(k) if phase == "hard" else np.full(k, self.slack_penalty)])
        lo = np.concatenate([np.zeros(k), self.u_min, np.zeros(k)])
        hi = np.concatenate([np.full(k, np.inf), self.u_max, s_hi])
        return q, np.maximum(lo, -OSQP_INFINITY), np.minimum(hi, OSQP_INFINITY)

    def problem(self, phase: str = "hard") -> tuple[sp.csc_matrix, np.ndarray, sp.csc_matrix, np.ndarray, np.ndarray]:
        """(P, q, A, l, u) of the workspace as set up: the fixed sparsity (every b_ij a
        structural nonzero, at ``b_slots`` of A's data) with unit gains. The device's
        generated solver (cbfsim/device/qp.py) is set up from the same data."""
        k, m = self.n_rows, self.m
        A = sp.csc_matrix((self._Ax(np.ones((k, m))), self._A_rows, self._A_indptr), shape=(2 * k + m, m + k))
        q, lo, hi = self._vectors(phase)
        return self._P.copy(), q, A, lo, hi

    def workspace(self, i: int) -> Workspace:
        """The OSQP workspace of batch index i (created on first use)."""
        while len(self._workspaces) <= i:
            P, q, A, lo, hi = self.problem("hard")
            solver = osqp.OSQP()
            solver.setup(P=P, q=q, A=A, l=lo, u=hi, **self.settings)
            self._workspaces.append(Workspace(solver))
        return self._workspaces[i]

    def buffers(self, phase: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The (q, l, u) vectors ``solve_loaded`` sends for ``phase``: q[:m] = -u_nom and
        l[:k] = -a are the caller's to write, and ``gains[b_slots]`` = b column-major."""
        return self._tmpl[phase]

    def _run(self, ws: Workspace, phase: str, a: np.ndarray, b: np.ndarray, u_nom: np.ndarray):
        """Load one phase's data into the buffers and solve it: (x, y, status)."""
        m, k = self.m, self.n_rows
        q, lo, _ = self._tmpl[phase]
        q[:m] = -u_nom
        lo[:k] = -a
        self.gains[self.b_slots] = b.T.ravel()
        return self.solve_loaded(ws, phase, u_nom)

    def solve_loaded(self, ws: Workspace, phase: str, u_nom: np.ndarray | None):
        """Send the loaded phase to OSQP, warm start sensibly, solve: (x, y, status).
        ``u_nom`` is only read by the relaxed phase (its warm start)."""
        k, m = self.n_rows, self.m
        q, lo, hi = self._tmpl[phase]
        ext = ws.ext
        if ext is None:
            if phase == ws.last_phase:
                ws.solver.update(q=q, l=lo, Ax=self.gains)
            else:
                ws.solver.update(q=q, l=lo, u=hi, Ax=self.gains)
        else:   # what OSQP.update does (l, u are already within +-OSQP_INFINITY)
            ext.update_data_vec(q=q, l=lo, u=None if phase == ws.last_phase else hi)
            ext.update_data_mat(P_x=None, P_i=None, A_x=self.gains, A_i=None)
        if phase == "hard" and ws.last_phase != "hard" and ws.hard_start is not None:
            ws.solver.warm_start(x=ws.hard_start[0], y=ws.hard_start[1])
        elif phase == "relaxed":
            # start from "no row active": s = 0 and the multiplier rho on s >= 0
            ws.solver.warm_start(x=np.concatenate([np.clip(u_nom, self.u_min, self.u_max), np.zeros(k)]),
                                 y=np.concatenate([np.zeros(k + m), np.full(k, -self.slack_penalty)]))
        ws.last_phase = phase
        if ext is None:
            res = ws.solver.solve(raise_error=False)
            x, y, status = res.x, res.y, res.info.status_val
        else:
            ext.solve()
            solution = ext.solution
            x, y, status = solution.x, solution.y, ext.info.status_val   # fresh arrays on every access
        if phase == "hard" and x is not None and all(map(_isfinite, x.tolist())) and all(map(_isfinite, y.tolist())):
            ws.hard_start = (x.copy(), y.copy()) if ext is None else (x, y)
        return x, y, status

    def _exact(self, res: Any, a: np.ndarray, b: np.ndarray, u_nom: np.ndarray) -> np.ndarray | None:
        """Exact P_rho multipliers from an OSQP result (x, y, status), or None (see refine.py)."""
        m, k = self.m, self.n_rows
        x, y, _ = res
        if x is None or not (all(map(_isfinite, x[:m].tolist())) and all(map(_isfinite, y[:k].tolist()))):
            return None
        lam0 = -y[:k]
        for start, u0 in ((lam0, x[:m]), (lam0, None), (np.zeros(k), None)):
            lam = refine(a, b, u_nom, self.u_min, self.u_max, self.slack_penalty, start, u0=u0)
            if lam is not None:
                return lam
        return None

    def _u_of(self, lam: np.ndarray, b: np.ndarray, u_nom: np.ndarray) -> np.ndarray:
        """clip(u_nom + b^T lam)."""
        return np.clip(u_nom + b.T @ lam, self.u_min, self.u_max)

    def finish(self, i: int, a: np.ndarray, b: np.ndarray, u_nom: np.ndarray, hard: tuple) -> tuple[np.ndarray, int]:
        """(u, code) for one state from its hard phase's result: refined, or the relaxed phase.
        code: OK (exact answer of P_rho), SOLVER_ERROR (OSQP's unverified iterate, clipped)
        or FALLBACK (no finite answer)."""
        ws = self.workspace(i)
        res = hard
        if res[2] == _SOLVED:
            if not self.refine:                      # raw OSQP (for measurements only)
                if (-res[1][:self.n_rows] <= self.slack_penalty).all():
                    self.stats["hard"] += 1
                    return np.clip(res[0][:self.m], self.u_min, self.u_max), FilterStatus.OK
            else:
                lam = self._exact(res, a, b, u_nom)
                if lam is not None:                  # exact solution of P_rho
                    self.stats["hard"] += 1
                    self.stats["refined"] += 1
                    return self._u_of(lam, b, u_nom), FilterStatus.OK
        self.stats["relaxed"] += 1
        res = self._run(ws, "relaxed", a, b, u_nom)
        lam = self._exact(res, a, b, u_nom) if self.refine else None
        if lam is not None:
            self.stats["refined"] += 1
            return self._u_of(lam, b, u_nom), FilterStatus.OK
        x, _, status = res
        if x is not None and np.isfinite(x[:self.m]).all():
            self.stats["failed"] += status != _SOLVED
            return np.clip(x[:self.m], self.u_min, self.u_max), FilterStatus.OK if status == _SOLVED \
                else FilterStatus.SOLVER_ERROR
        self.stats["failed"] += 1
        return placeholder_input(u_nom, self.u_min, self.u_max), FilterStatus.FALLBACK

    def _decided(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Rows decided without OSQP: |a_i| > DECIDE_OFFSET and beyond the box's reach."""
        with np.errstate(invalid="ignore"):
            reach = np.where(b != 0, np.abs(b) * self._extent, 0.0).sum(axis=1)
        return (np.abs(a) > DECIDE_OFFSET) & (np.abs(a) > reach * (1 + 1e-9))

    def _far_nominal(self, b: np.ndarray, u_nom: np.ndarray) -> np.ndarray:
        """u_nom with coordinates that no multiplier in [0, rho] can pull into the box moved
        to that distance (u is the same bound either way)."""
        pull = self.slack_penalty * np.abs(b).sum(axis=0) + 1.0
        return np.clip(u_nom, self.u_min - pull, self.u_max + pull)

    def solve_state(self, i: int, a: np.ndarray, b: np.ndarray, u_nom: np.ndarray) -> tuple[np.ndarray, int]:
        """(u, code) for one state with finite normalised rows a (k,), b (k, m) and finite u_nom."""
        if np.abs(u_nom).max() > DECIDE_OFFSET:
            u_nom = self._far_nominal(b, u_nom)
        decided = self._decided(a, b)
        if decided.any():
            return self._solve_decided(i, a, b, u_nom, decided)
        if not (np.abs(a) < OSQP_INFINITY).all():
            return placeholder_input(u_nom, self.u_min, self.u_max), FilterStatus.FALLBACK
        self.stats["solves"] += 1
        hard = self._run(self.workspace(i), "hard", a, b, u_nom)
        return self.finish(i, a, b, u_nom, hard)

    def _solve_decided(self, i: int, a: np.ndarray, b: np.ndarray, u_nom: np.ndarray,
                       decided: np.ndarray) -> tuple[np.ndarray, int]:
        """Drop the decided rows (multiplier rho where the row fails everywhere, 0 where it
        holds everywhere) and solve the rest with a solver for fewer rows."""
        failing = decided & (a < 0)
        shifted = u_nom + self.slack_penalty * b[failing].sum(axis=0) if failing.any() else u_nom
        keep = ~decided
        if not keep.any():
            return np.clip(shifted, self.u_min, self.u_max), FilterStatus.OK
        k = int(keep.sum())
        if k not in self._reduced:
            self._reduced[k] = QPRowSolver(self.u_min, self.u_max, k, self.slack_penalty, self.slack_tol,
                                           self.refine, **self._osqp_settings)
        return self._reduced[k].solve_state(i, a[keep], b[keep], shifted)

    def solve(self, a: np.ndarray, b: np.ndarray, u_nom: np.ndarray) -> FilterResult:
        u_nom = nominal_batch(u_nom, self.m)
        B, m, k = u_nom.shape[0], self.m, self.n_rows
        a = check_shape(a, (B, k), "row offsets a")
        b = check_shape(b, (B, k, m), "row gains b")
        u = placeholder_input(u_nom, self.u_min, self.u_max)
        status = np.full(B, FilterStatus.OK, dtype=np.int8)
        times = np.zeros(B)
        finite = np.isfinite(a).all(axis=1) & np.isfinite(b).all(axis=(1, 2)) & np.isfinite(u_nom).all(axis=1)
        with np.errstate(invalid="ignore", over="ignore"):
            an, bn = normalise_rows(a, b)
        for i in range(B):
            start = time.perf_counter()
            if finite[i]:
                u[i], status[i] = self.solve_state(i, an[i], bn[i], u_nom[i])
            else:
                status[i] = FilterStatus.FALLBACK
            times[i] = time.perf_counter() - start
        slack = row_violation(a, b, u, an, bn)
        slack[status == FilterStatus.FALLBACK] = 0.0
        ok = status == FilterStatus.OK
        status[ok] = status_from_slack(slack[ok], self.slack_tol)
        return FilterResult(u=u, slack=slack, status=status, solve_time=times)
