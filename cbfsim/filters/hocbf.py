"""High-order CBF filter for barriers of relative degree 2 (L_G h = 0).

With psi0 = h and psi1 = L_f h + alpha1(h), the condition psi1' + alpha2(psi1) >= 0 reads

    L_f^2 h + L_G L_f h u + alpha1'(h) L_f h + alpha2(L_f h + alpha1(h)) >= 0,

because d/dt alpha1(h) = alpha1'(h) h' = alpha1'(h) L_f h when L_G h = 0. (The paper
printed it without alpha1'(h) L_f h; that term is nonzero whenever the state moves along
grad h, for every class-K alpha1, and tests/test_simulate.py shows the mismatch.)
It is again one affine row a + b.u >= 0, solved by the same row solvers as the CBF-QP.
The derivation assumes L_G h = 0; it is the caller's job to use it for such barriers.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from training.margin import Margin

from ..barriers import LieTerms2
from ..classk import ClassK, Linear
from .base import DEFAULT_SLACK_TOL, RowSolver, input_bounds, stack_rows, term_list
from .cbf_qp import QPRowSolver
from .fallback import Fallback
from .projection import ProjectionRowSolver
from .row_filter import RowFilter


def psi1(terms: LieTerms2, alpha1: ClassK) -> np.ndarray:
    """First HOCBF function psi1 = L_f h + alpha1(h), shape (B,)."""
    return np.asarray(terms.Lf + alpha1(terms.h), dtype=np.float64)


def hocbf_rows(terms: LieTerms2, alpha1: ClassK, alpha2: ClassK) -> tuple[np.ndarray, np.ndarray]:
    """Row of psi1' + alpha2(psi1) >= 0: a = Lf2 + alpha1'(h) Lf + alpha2(psi1), b = LgLf."""
    a = terms.Lf2 + alpha1.derivative(terms.h) * terms.Lf + alpha2(psi1(terms, alpha1))
    return np.asarray(a, dtype=np.float64), np.asarray(terms.LgLf, dtype=np.float64)


class HOCBFQP(RowFilter):
    """HOCBF-QP (order 2) filter; ``solver`` is "osqp" (any number of barriers) or
    "projection" (closed form, one barrier). Both solve the same slack problem P_rho.
    ``margin`` and ``fallback`` as for ``CBFQP`` (see row_filter.py and fallback.py)."""

    order = 2

    def __init__(self, system_or_bounds: Any, alpha1: ClassK = Linear(1.0), alpha2: ClassK = Linear(1.0),
                 n_barriers: int = 1, slack_penalty: float = 1e6, solver: str = "osqp",
                 slack_tol: float = DEFAULT_SLACK_TOL, margin: float | Margin = 0.0, fallback: Fallback | None = None,
                 faces: Sequence[Any] = (), **osqp_settings: Any):
        lo, hi = input_bounds(system_or_bounds)
        self.alpha1, self.alpha2 = alpha1, alpha2
        self.n_barriers = int(n_barriers)
        row_solver: RowSolver
        if solver == "osqp":
            row_solver = QPRowSolver(lo, hi, self.n_barriers + len(faces), slack_penalty, slack_tol, **osqp_settings)
        elif solver == "projection":
            if self.n_barriers != 1 or osqp_settings or faces:
                raise ValueError("solver='projection' handles exactly one barrier and takes no OSQP settings or faces")
            row_solver = ProjectionRowSolver(lo, hi, slack_penalty, slack_tol)
        else:
            raise ValueError(f"solver must be 'osqp' or 'projection', got {solver!r}")
        super().__init__(system_or_bounds, row_solver, margin, fallback, faces=faces)

    def rows(self, terms: LieTerms2 | Sequence[LieTerms2], u_nom: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        rows = [hocbf_rows(t, self.alpha1, self.alpha2) for t in term_list(terms, self.n_barriers, second_order=True)]
        return stack_rows(rows, u_nom)
