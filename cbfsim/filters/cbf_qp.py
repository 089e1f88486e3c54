"""CBF-QP safety filter on OSQP, with a slack that keeps the problem always feasible.

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
"""
from __future__ import annotations

import math
import time
from typing import Any, Sequence

import numpy as np
import osqp
import scipy.sparse as sp

from ..barriers import LieTerms, check_shape
from ..classk import ClassK, Linear
from .base import (DEFAULT_SLACK_TOL, FilterResult, FilterStatus, cbf_rows, check_penalty, clip_np,
                   clip_same_np, input_bounds, max_np, min_np, nominal_batch, normalise_one, normalise_rows,
                   row_violation, single_row, stack_rows, status_from_slack, term_list)
from .refine import refine

_isfinite = math.isfinite
_SOLVED = osqp.SolverStatus.OSQP_SOLVED

#: OSQP settings: tight tolerances + polishing; max_iter bounds the time of a stalled solve
#: (refinement finishes it); a fixed rho-adaptation interval (0 would adapt on wall-clock
#: time, breaking determinism).
DEFAULT_OSQP_SETTINGS: dict[str, Any] = dict(
    eps_abs=1e-9, eps_rel=1e-9, eps_prim_inf=1e-12, eps_dual_inf=1e-12, max_iter=4000,
    polishing=True, polish_refine_iter=10, warm_starting=True, adaptive_rho_interval=25,
    verbose=False,
)


class _Workspace:
    """One OSQP instance (fixed sparsity) plus the last hard-phase iterate for warm starts."""

    def __init__(self, solver: osqp.OSQP):
        self.solver = solver
        self.hard_start: tuple[np.ndarray, np.ndarray] | None = None
        self.last_phase = "hard"
        # osqp >= 1.0 keeps its compiled solver in ``_solver``; calling it directly skips the
        # wrapper's per-call bookkeeping (~20 us: result namespaces, derivative cache) while
        # making exactly the calls the wrapper makes. Other versions use the public API.
        ext = getattr(solver, "_solver", None)
        needed = ("update_data_vec", "update_data_mat", "solve", "info", "solution")
        self.ext = ext if ext is not None and all(hasattr(ext, k) for k in needed) else None
        if self.ext is not None:
            self.infty = float(solver.constant("OSQP_INFTY"))


class QPRowSolver:
    """OSQP ``RowSolver`` for k >= 1 rows (see module docstring for the problem)."""

    def __init__(self, u_min: Any, u_max: Any, n_rows: int = 1, slack_penalty: float = 1e6,
                 slack_tol: float = DEFAULT_SLACK_TOL, refine_kkt: bool = True, **osqp_settings: Any):
        self.u_min, self.u_max = input_bounds((u_min, u_max))
        self.m = self.u_min.shape[0]
        self.n_rows = int(n_rows)
        if self.n_rows < 1:
            raise ValueError(f"n_rows must be >= 1, got {n_rows!r}")
        self.slack_penalty = check_penalty(slack_penalty)
        if not np.isfinite(self.slack_penalty):
            raise ValueError("QPRowSolver needs a finite slack_penalty (use the projection for rho = inf)")
        self.slack_tol = float(slack_tol)
        self.refine = bool(refine_kkt)
        bounds = np.abs(np.concatenate([self.u_min, self.u_max]))        # refine()'s bound term, once
        self._bound = float(bounds[np.isfinite(bounds)].max(initial=0.0))
        self.settings = {**DEFAULT_OSQP_SETTINGS, **osqp_settings}
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
        # positions of b_ij (column-major over u_j) inside A's data vector
        self._b_slots = (np.arange(m)[:, None] * (k + 1) + np.arange(k)[None, :]).ravel()
        self._workspaces: list[_Workspace] = []
        self._templates()

    def reset(self) -> None:
        """Forget warm starts (call between independent simulations)."""
        self._workspaces = []

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
        return q, lo, hi

    def _templates(self) -> None:
        self._tmpl = {phase: self._vectors(phase) for phase in ("hard", "relaxed")}
        self._infty: float | None = None
        self._Ax_buf = self._Ax(np.zeros((self.n_rows, self.m)))

    def _workspace(self, i: int) -> _Workspace:
        while len(self._workspaces) <= i:
            k, m = self.n_rows, self.m
            A = sp.csc_matrix((self._Ax(np.ones((k, m))), self._A_rows, self._A_indptr), shape=(2 * k + m, m + k))
            q, lo, hi = self._vectors("hard")
            solver = osqp.OSQP()
            solver.setup(P=self._P, q=q, A=A, l=lo, u=hi, **self.settings)
            ws = _Workspace(solver)
            if ws.ext is not None and self._infty is None:
                # OSQP.update clamps l, u to +-OSQP_INFTY; clamp the constant entries once
                self._infty = ws.infty
                for _, t_lo, t_hi in self._tmpl.values():
                    np.maximum(t_lo, -ws.infty, out=t_lo)
                    np.minimum(t_hi, ws.infty, out=t_hi)
            self._workspaces.append(ws)
        return self._workspaces[i]

    def _run(self, ws: _Workspace, phase: str, a: np.ndarray, b: np.ndarray, u_nom: np.ndarray):
        """Load one phase's data into the workspace, warm start sensibly, solve: (x, y, status)."""
        m, k = self.m, self.n_rows
        q, lo, hi = self._tmpl[phase]
        q[:m] = -u_nom
        lo[:k] = -a
        self._Ax_buf[self._b_slots] = b.T.ravel()
        return self._solve_loaded(ws, phase, q, lo, hi, u_nom)

    def _run_hard_one(self, ws: _Workspace, a: float, b: float, u_nom: float):
        """``_run(ws, "hard", ...)`` for k = m = 1 with float data (the same values loaded)."""
        q, lo, hi = self._tmpl["hard"]
        q[0] = -u_nom
        v, inf = -a, ws.infty if ws.ext is not None else math.inf
        lo[0] = v if v > -inf else -inf       # np.maximum(-a, -OSQP_INFTY), as OSQP.update would
        self._Ax_buf[self._b_slots[0]] = b
        return self._solve_loaded(ws, "hard", q, lo, hi, None, clamped=True)

    def _solve_loaded(self, ws: _Workspace, phase: str, q: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                      u_nom: np.ndarray | None, clamped: bool = False):
        """Send the loaded phase to OSQP, warm start sensibly, solve: (x, y, status).
        ``clamped``: lo already holds +-OSQP_INFTY-clamped values (the templates are)."""
        k, m = self.n_rows, self.m
        Ax = self._Ax_buf
        ext = ws.ext
        if ext is None:
            if phase == ws.last_phase:
                ws.solver.update(q=q, l=lo, Ax=Ax)
            else:
                ws.solver.update(q=q, l=lo, u=hi, Ax=Ax)
        else:   # what OSQP.update does: clamp l, u to +-OSQP_INFTY, then the two data updates
            ext.update_data_vec(q=q, l=lo if clamped else np.maximum(lo, -ws.infty),
                                u=None if phase == ws.last_phase else np.minimum(hi, ws.infty))
            ext.update_data_mat(P_x=None, P_i=None, A_x=Ax, A_i=None)
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

    def _accept_one(self, a: float, b: float, u_nom: float, lam0: float) -> bool:
        """refine()'s first test for k = m = 1 on floats: is clip(lam0, 0, rho) already exact,
        i.e. kkt_residual <= 1e-10 * scale? The same operations as refine.py in the same
        order (matmuls over one term = 0.0 + term), so the same decision."""
        lo, hi, rho = self.u_min.item(), self.u_max.item(), self.slack_penalty
        lam = clip_np(lam0, 0.0, rho)
        # max(initial=0.0) of one |value| and the sum over one term are that value
        scale = 1.0 + abs(a) + abs(b) * max(1.0, self._bound, abs(u_nom))
        u = clip_same_np(u_nom + (0.0 + b * lam), lo, hi)
        g = a + (0.0 + b * u)
        bb = 0.0 + b * b
        neg = min_np(max_np(0.0, -g), (rho - lam) * bb)
        pos = min_np(max_np(0.0, g), lam * bb)
        return max_np(0.0, max_np(neg, pos)) <= 1e-10 * scale

    def _exact(self, res: Any, a: np.ndarray, b: np.ndarray, u_nom: np.ndarray) -> np.ndarray | None:
        """Exact P_rho multipliers from an OSQP result (x, y, status), or None (see refine.py)."""
        m, k = self.m, self.n_rows
        x, y, _ = res
        if x is None or not (all(map(_isfinite, x[:m].tolist())) and all(map(_isfinite, y[:k].tolist()))):
            return None
        lam0 = -y[:k]
        if k == 1 and m == 1 and self._accept_one(a.item(), b.item(), u_nom.item(), lam0.item()):
            # what refine returns in this case: np.clip(lam0, 0.0, rho) (scalar bounds)
            return np.array([clip_np(lam0.item(), 0.0, self.slack_penalty)])
        for start, u0 in ((lam0, x[:m]), (lam0, None), (np.zeros(k), None)):
            lam = refine(a, b, u_nom, self.u_min, self.u_max, self.slack_penalty, start, u0=u0)
            if lam is not None:
                return lam
        return None

    def _u_of(self, lam: np.ndarray, b: np.ndarray, u_nom: np.ndarray) -> np.ndarray:
        """clip(u_nom + b^T lam) (floats for k = m = 1: the matmul over one term is 0.0 + term)."""
        if lam.shape == (1,) and b.shape == (1, 1):
            return np.array([clip_same_np(u_nom.item() + (0.0 + b.item() * lam.item()),
                                          self.u_min.item(), self.u_max.item())])
        return np.clip(u_nom + b.T @ lam, self.u_min, self.u_max)

    def _solve_one(self, i: int, a: np.ndarray, b: np.ndarray, u_nom: np.ndarray,
                   hard: tuple | None = None) -> tuple[np.ndarray, bool]:
        """(u, ok) for one state: hard phase first, relaxed phase when it cannot answer.
        ``hard``: the hard phase's result when the caller has already run it."""
        ws = self._workspace(i)
        if hard is None:
            self.stats["solves"] += 1
            hard = self._run(ws, "hard", a, b, u_nom)
        res = hard
        if res[2] == _SOLVED:
            if not self.refine:                      # raw OSQP (for measurements only)
                if (-res[1][:self.n_rows] <= self.slack_penalty).all():
                    self.stats["hard"] += 1
                    return np.clip(res[0][:self.m], self.u_min, self.u_max), True
            else:
                lam = self._exact(res, a, b, u_nom)
                if lam is not None:                  # exact solution of P_rho
                    self.stats["hard"] += 1
                    self.stats["refined"] += 1
                    return self._u_of(lam, b, u_nom), True
        self.stats["relaxed"] += 1
        res = self._run(ws, "relaxed", a, b, u_nom)
        lam = self._exact(res, a, b, u_nom) if self.refine else None
        if lam is not None:
            self.stats["refined"] += 1
            return self._u_of(lam, b, u_nom), True
        x, _, status = res
        solved = status == _SOLVED
        if x is not None and np.isfinite(x[:self.m]).all():
            self.stats["failed"] += not solved
            return np.clip(x[:self.m], self.u_min, self.u_max), solved
        self.stats["failed"] += 1
        return np.clip(u_nom, self.u_min, self.u_max), False

    def _solve_one_float(self, a: float, b: float, u_nom: float) -> tuple[float, bool]:
        """``_solve_one(0, ...)`` for k = m = 1 on floats: the same OSQP calls and decisions.
        Its common case -- the hard phase solved and refine()'s first test accepting OSQP's
        multiplier -- stays on floats; everything else continues in ``_solve_one``."""
        ws = self._workspace(0)
        self.stats["solves"] += 1
        hard = self._run_hard_one(ws, a, b, u_nom)
        x, y, status = hard
        if status == _SOLVED and self.refine and x is not None:
            x0, y0 = x.item(0), y.item(0)
            if _isfinite(x0) and _isfinite(y0) and self._accept_one(a, b, u_nom, -y0):
                self.stats["hard"] += 1
                self.stats["refined"] += 1
                lam = clip_np(-y0, 0.0, self.slack_penalty)
                return clip_same_np(u_nom + (0.0 + b * lam), self.u_min.item(), self.u_max.item()), True
        u, ok = self._solve_one(0, np.array([a]), np.array([[b]]), np.array([u_nom]), hard=hard)
        return u.item(), ok

    def _solve_single(self, a: float, b: float, u_nom: float) -> FilterResult | None:
        """``solve`` for B = k = m = 1 with finite data, on floats around the same _solve_one
        (normalise_rows / row_violation / status_from_slack replicated operation for
        operation), so bit-identical to the array path; None: use the array path."""
        if not (_isfinite(a) and _isfinite(b) and _isfinite(u_nom)):
            return None
        an, bn = normalise_one(a, b)
        start = time.perf_counter()
        u, ok = self._solve_one_float(an, bn, u_nom)
        elapsed = time.perf_counter() - start
        slack = max_np(0.0, -(a + (0.0 + b * u)))
        if not _isfinite(slack):
            slack = 0.0
        if not ok:
            status = FilterStatus.SOLVER_ERROR
        else:
            status = FilterStatus.SLACK_ACTIVE if slack > self.slack_tol else FilterStatus.OK
        return FilterResult(u=np.array([[u]]), slack=np.array([slack]), status=np.array([status], dtype=np.int8),
                            solve_time=np.array([elapsed]))

    def solve(self, a: np.ndarray, b: np.ndarray, u_nom: np.ndarray) -> FilterResult:
        u_nom = nominal_batch(u_nom, self.m)
        B, m, k = u_nom.shape[0], self.m, self.n_rows
        a = check_shape(a, (B, k), "row offsets a")
        b = check_shape(b, (B, k, m), "row gains b")
        if B == 1 and k == 1 and m == 1:
            one = self._solve_single(a.item(), b.item(), u_nom.item())
            if one is not None:
                return one
        u = np.clip(u_nom, self.u_min, self.u_max)
        status = np.full(B, FilterStatus.OK, dtype=np.int8)
        times = np.zeros(B)
        finite = np.isfinite(a).all(axis=1) & np.isfinite(b).all(axis=(1, 2)) & np.isfinite(u_nom).all(axis=1)
        with np.errstate(invalid="ignore", over="ignore"):
            an, bn = normalise_rows(a, b)
        for i in range(B):
            start = time.perf_counter()
            if finite[i]:
                u[i], ok = self._solve_one(i, an[i], bn[i], u_nom[i])
            else:
                ok = False
            if not ok:
                status[i] = FilterStatus.SOLVER_ERROR
            times[i] = time.perf_counter() - start
        slack = row_violation(a, b, u)
        slack = np.where(np.isfinite(slack), slack, 0.0)
        ok = status == FilterStatus.OK
        status[ok] = status_from_slack(slack[ok], self.slack_tol)
        return FilterResult(u=u, slack=slack, status=status, solve_time=times)


class CBFQP:
    """First-order CBF-QP filter: min 1/2||u - u_nom||^2 s.t. L_f h_i + L_G h_i u >= -alpha(h_i)
    for each of ``n_barriers`` barriers and the input box, relaxed by an L1-penalised slack."""

    order = 1

    def __init__(self, system_or_bounds: Any, alpha: ClassK | Sequence[ClassK] = Linear(1.0),
                 n_barriers: int = 1, slack_penalty: float = 1e6, slack_tol: float = DEFAULT_SLACK_TOL,
                 **osqp_settings: Any):
        lo, hi = input_bounds(system_or_bounds)
        self.n_barriers = int(n_barriers)
        self.alphas = list(alpha) if isinstance(alpha, (list, tuple)) else [alpha] * self.n_barriers
        if len(self.alphas) != self.n_barriers:
            raise ValueError(f"expected {self.n_barriers} class-K functions, got {len(self.alphas)}")
        self.solver = QPRowSolver(lo, hi, self.n_barriers, slack_penalty, slack_tol, **osqp_settings)
        self.m = self.solver.m

    def reset(self) -> None:
        self.solver.reset()

    def filter(self, x: np.ndarray, u_nom: np.ndarray, terms: LieTerms | Sequence[LieTerms]) -> FilterResult:
        u_nom = nominal_batch(u_nom, self.m)
        if self.n_barriers == 1 and isinstance(self.solver, QPRowSolver):
            row = single_row(terms, self.alphas[0], u_nom)
            if row is not None:
                one = self.solver._solve_single(*row)
                if one is not None:
                    return one
        rows = [cbf_rows(t, al) for t, al in zip(term_list(terms, self.n_barriers), self.alphas)]
        a, b = stack_rows(rows, u_nom)
        return self.solver.solve(a, b, u_nom)
