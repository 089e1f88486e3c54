"""Safety filters: CBF-QP (OSQP), HOCBF-QP and the exact closed-form projection.

All of them reduce barrier terms to affine rows a + b.u >= 0 and solve the same slack
problem P_rho (see cbf_qp.py / projection.py), so they are interchangeable in the simulator.
"""
from .base import (DEFAULT_SLACK_TOL, FilterResult, FilterStatus, RowSolver, SafetyFilter, cbf_rows,
                   input_bounds)
from .cbf_qp import CBFQP, QPRowSolver
from .hocbf import HOCBFQP, hocbf_rows, psi1
from .projection import CBFProjection, Projection, ProjectionRowSolver, project_halfspace_box

__all__ = [
    "CBFQP", "CBFProjection", "DEFAULT_SLACK_TOL", "FilterResult", "FilterStatus", "HOCBFQP", "Projection",
    "ProjectionRowSolver", "QPRowSolver", "RowSolver", "SafetyFilter", "cbf_rows", "hocbf_rows",
    "input_bounds", "project_halfspace_box", "psi1",
]
