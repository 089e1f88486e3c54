"""The tube filter: the CBF-QP for a ReLU barrier in a sampled loop, whose rows hold over the
whole control period on every linear piece the period can reach (``training/tube_rows.py``).

    min 1/2 ||u - u_nom||^2  s.t.  a_p + b_p . u >= DELTA for every row p,  u in U

Where the one-row filter's held input can cross a kink onto a piece with another gradient
(every ReLU barrier's 10 ms column is refuted so), an input satisfying these rows keeps
h(x(t)) >= h(x_k) (1 - gamma t) >= 0 over the period.  ``cbfsim certify --condition tube``
proves that on every sampled state of the set it has one.  The rows change in number from
state to state (one per sign combination of the neurons that may change sign), so an OSQP
row solver is kept per row count.  The input returned is checked against every row (float64
rounding taken off); a state where the rows cannot be formed (the tube did not close: a
state outside the domain the filter was made for) or an input that fails a row is a fault,
and the fault policy answers it.
"""
from __future__ import annotations

import time
from typing import Any

import numpy as np

from training.tube_rows import DELTA, MAX_UNSTABLE, PieceNet, row_values, tube_spec

from .base import FilterResult, FilterStatus, input_bounds, nominal_batch
from .cbf_qp import QPRowSolver
from .fallback import Fallback, FaultPolicy


class TubeFilter:
    """The tube filter for ``model`` (a torch ``nn.Sequential`` of Linear and ReLU, an ONNX path
    or a compiler IR model) on ``system``, for inputs held ``dt`` seconds and states in
    ``domain`` ((lo, hi); the system's training domain when None), with d/dt h >= -gamma h."""

    order = 1

    def __init__(self, model: Any, system: Any, dt: float, gamma: float = 1.0, domain: Any = None,
                 fallback: Fallback | None = None, slack_penalty: float = 1e6,
                 max_unstable: int = MAX_UNSTABLE, **osqp_settings: Any):
        from training.certify.problem import load_network, plant_enclosure
        self.model = model if hasattr(model, "layers") else load_network(model)[0]
        self.net = PieceNet(self.model)
        if self.net.n != system.n:
            raise ValueError(f"the network reads {self.net.n} inputs but system {system.name!r} has {system.n} states")
        self.plant = plant_enclosure(system)
        self.u_min, self.u_max = input_bounds(system)
        lo, hi = domain if domain is not None else system.domain
        self.spec = tube_spec(self.plant, lo, hi, self.u_min, self.u_max, dt, gamma, max_unstable)
        self.m = len(self.u_min)
        self._penalty, self._osqp = slack_penalty, osqp_settings
        self._solvers: dict[int, QPRowSolver] = {}
        self.faults = FaultPolicy(fallback or Fallback(), self.u_min, self.u_max, system)
        #: rows per call, for diagnostics: the last call's row count per state
        self.last_rows = np.zeros(0, dtype=int)

    def _solver(self, k: int) -> QPRowSolver:
        if k not in self._solvers:
            self._solvers[k] = QPRowSolver(self.u_min, self.u_max, k, self._penalty, **self._osqp)
        return self._solvers[k]

    def reset(self) -> None:
        """Forget warm starts and held inputs (call between independent simulations)."""
        for s in self._solvers.values():
            s.reset()
        self.faults.reset()

    def rows(self, x: np.ndarray) -> list:
        """The rows (``tube_rows.Rows``, None where they cannot be formed) at states x (B, n)."""
        from compiler.interval import Interval
        x = np.atleast_2d(np.asarray(x, dtype=np.float64))
        return self.net.rows(self.plant, Interval(x, x.copy()), self.spec)[0]

    def filter(self, x: np.ndarray, u_nom: np.ndarray, terms: Any = None) -> FilterResult:
        """The filtered inputs at states x (B, n); ``terms`` (the barrier's) is not needed."""
        u_nom = nominal_batch(u_nom, self.m)
        B = u_nom.shape[0]
        u = np.clip(np.where(np.isfinite(u_nom), u_nom, 0.0), self.u_min, self.u_max)
        slack, times = np.zeros(B), np.zeros(B)
        status = np.full(B, FilterStatus.OK, dtype=np.int8)
        x = np.atleast_2d(np.asarray(x, dtype=np.float64))
        finite = np.isfinite(x).all(axis=1) & np.isfinite(u_nom).all(axis=1)
        rows = self.rows(np.where(finite[:, None], x, 0.0))
        self.last_rows = np.array([0 if r is None else len(r.a) for r in rows])
        for i, r in enumerate(rows):
            start = time.perf_counter()
            if not finite[i] or r is None:
                status[i] = FilterStatus.FALLBACK
            else:
                res = self._solver(len(r.a)).solve((r.a - DELTA)[None], r.b[None], u_nom[i:i + 1])
                u[i], status[i] = res.u[0], res.status[0]
                low = float(row_values(r, u[i])[0])
                slack[i] = max(0.0, -low)
                if status[i] == FilterStatus.OK and low < 0:
                    status[i] = FilterStatus.SOLVER_ERROR
            times[i] = time.perf_counter() - start
        return self.faults.apply(x, FilterResult(u=u, slack=slack, status=status, solve_time=times))
