"""First-order CBF filters: min 1/2||u - u_nom||^2 s.t. L_f h_i + L_G h_i u + alpha(h_i) >= eps
and the input box, relaxed by an L1-penalised slack (P_rho, see cbf_qp.py / projection.py)."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from training.margin import Margin

from ..barriers import LieTerms
from ..classk import ClassK, Linear
from .base import DEFAULT_SLACK_TOL, cbf_rows, input_bounds, stack_rows, term_list
from .cbf_qp import QPRowSolver
from .fallback import Fallback
from .projection import ProjectionRowSolver
from .row_filter import RowFilter


class CBFQP(RowFilter):
    """CBF-QP on OSQP for ``n_barriers`` barriers (one class-K function each, or one for all).
    ``margin``: enforce each row with eps >= 0 (see row_filter.py); ``fallback``: the fault
    policy (see fallback.py; default: hold the last safe input); ``issf``: the input-to-state
    safe term ||L_G h||^2 / issf (row_filter.py)."""

    order = 1

    def __init__(self, system_or_bounds: Any, alpha: ClassK | Sequence[ClassK] = Linear(1.0),
                 n_barriers: int = 1, slack_penalty: float = 1e6, slack_tol: float = DEFAULT_SLACK_TOL,
                 margin: float | Margin = 0.0, fallback: Fallback | None = None, issf: float | None = None,
                 faces: Sequence[Any] = (), **osqp_settings: Any):
        lo, hi = input_bounds(system_or_bounds)
        self.n_barriers = int(n_barriers)
        self.alphas = list(alpha) if isinstance(alpha, (list, tuple)) else [alpha] * self.n_barriers
        if len(self.alphas) != self.n_barriers:
            raise ValueError(f"expected {self.n_barriers} class-K functions, got {len(self.alphas)}")
        super().__init__(system_or_bounds, QPRowSolver(lo, hi, self.n_barriers + len(faces), slack_penalty, slack_tol,
                                                       **osqp_settings), margin, fallback, issf, faces)

    def rows(self, terms: LieTerms | Sequence[LieTerms], u_nom: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        rows = [cbf_rows(t, al) for t, al in zip(term_list(terms, self.n_barriers), self.alphas)]
        return stack_rows(rows, u_nom)


class CBFProjection(RowFilter):
    """First-order CBF filter solved in closed form: a drop-in for ``CBFQP`` with one barrier."""

    order = 1
    n_barriers = 1

    def __init__(self, system_or_bounds: Any, alpha: ClassK = Linear(1.0), slack_penalty: float = 1e6,
                 slack_tol: float = DEFAULT_SLACK_TOL, margin: float | Margin = 0.0, fallback: Fallback | None = None,
                 issf: float | None = None):
        lo, hi = input_bounds(system_or_bounds)
        self.alpha = alpha
        self.alphas = [alpha]
        super().__init__(system_or_bounds, ProjectionRowSolver(lo, hi, slack_penalty, slack_tol), margin, fallback,
                         issf)

    def rows(self, terms: LieTerms, u_nom: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return stack_rows([cbf_rows(t, self.alpha) for t in term_list(terms, 1)], u_nom)
