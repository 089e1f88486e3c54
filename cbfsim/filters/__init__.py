"""Safety filters: CBF-QP (OSQP), HOCBF-QP, the exact closed-form projection, and the tube
filter for ReLU barriers in a sampled loop (tube.py).

All of them reduce barrier terms to affine rows a + b.u >= eps and solve the same slack
problem P_rho (see cbf_qp.py / projection.py), so they are interchangeable in the simulator;
a fault (non-finite data) applies the fallback policy (fallback.py) and is flagged.
"""
from .base import (DEFAULT_SLACK_TOL, FilterResult, FilterStatus, RowSolver, SafetyFilter, cbf_rows,
                   input_bounds)
from .cbf import CBFQP, CBFProjection
from .cbf_qp import QPRowSolver
from .fallback import Fallback, FallbackKind
from .hocbf import HOCBFQP, hocbf_rows, psi1
from .projection import Projection, ProjectionRowSolver, project_halfspace_box
from .row_filter import RowFilter
from .tube import TubeFilter

__all__ = [
    "CBFQP", "CBFProjection", "DEFAULT_SLACK_TOL", "Fallback", "FallbackKind", "FilterResult", "FilterStatus",
    "HOCBFQP", "Projection", "ProjectionRowSolver", "QPRowSolver", "RowFilter", "RowSolver", "SafetyFilter", "TubeFilter",
    "cbf_rows", "hocbf_rows", "input_bounds", "project_halfspace_box", "psi1",
]
