"""Shared vocabulary of the safety filters: status codes, the batched result, the
``SafetyFilter`` protocol the simulator calls, and the reduction of barrier terms to
affine constraint rows  a + b.u >= 0  that every solver consumes.

Both filter conditions reduce to such rows:
* CBF (order 1):   a = L_f h + alpha(h),                                   b = L_G h
* HOCBF (order 2): a = L_f^2 h + alpha1'(h) L_f h + alpha2(L_f h + alpha1(h)), b = L_G L_f h
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Protocol, Sequence, runtime_checkable

import numpy as np

from compiler.errors import CbfsimError
from training.margin import Margin, margin_from

from ..barriers import LieTerms, LieTerms2, ShapeError, as_batch, check_shape
from ..classk import ClassK

#: Set to 0 to switch every single-state fast path off (filters, plants, simulator).
FAST_PATHS_ENV = "CBFSIM_FAST_PATHS"
#: Row norms inside [lo, hi] come from the plain sum of squares (neither overflows nor underflows).
NORM_RANGE = (1e-140, 1e140)

#: A step whose returned input violates a row by more than this is flagged SLACK_ACTIVE.
DEFAULT_SLACK_TOL = 1e-7


class FilterStatus(IntEnum):
    """Per-state outcome of one filter call (stored as int8 in trajectories).

    The one definition of the status codes: firmware/common/filter_status.hpp is generated
    from it (``python -m cbfsim.filters.cpp``), member X_Y becoming ``kXY`` there."""

    OK = 0            # the safety constraint (with its margin) holds at the returned input
    SLACK_ACTIVE = 1  # constraint infeasible under the input bounds; least-violation input returned
    SOLVER_ERROR = 2  # the solver's answer could not be verified; its best iterate (clipped) returned
    FALLBACK = 3      # fault (non-finite data, or data no solver can represent): the fault policy's input


@dataclass(frozen=True)
class FilterResult:
    """Batched filter output: u (B, m), slack (B,) = largest row violation a + b.u < 0
    at the returned u (0 when safe), status (B,) int8 FilterStatus, solve_time (B,) seconds."""

    u: np.ndarray
    slack: np.ndarray
    status: np.ndarray
    solve_time: np.ndarray


@runtime_checkable
class SafetyFilter(Protocol):
    """Anything the simulator can put between the nominal controller and the plant."""

    m: int
    order: int

    def filter(self, x: np.ndarray, u_nom: np.ndarray, terms: Any) -> FilterResult: ...

    def reset(self) -> None: ...


@runtime_checkable
class RowSolver(Protocol):
    """Solves  min 1/2||u - u_nom||^2 + rho * sum_i s_i  s.t.  a_i + b_i.u + s_i >= 0,
    s >= 0, u_min <= u <= u_max  for a batch: a (B, k), b (B, k, m), u_nom (B, m), on rows
    normalised by ``normalise_rows``; the reported slack is the violation of the rows as given."""

    m: int
    n_rows: int

    def solve(self, a: np.ndarray, b: np.ndarray, u_nom: np.ndarray) -> FilterResult: ...

    def reset(self) -> None: ...


def input_bounds(system_or_bounds: Any) -> tuple[np.ndarray, np.ndarray]:
    """(u_min, u_max) float64 arrays from a system (``.u_min``/``.u_max``) or a pair."""
    if hasattr(system_or_bounds, "u_min") and hasattr(system_or_bounds, "u_max"):
        lo, hi = system_or_bounds.u_min, system_or_bounds.u_max
    else:
        try:
            lo, hi = system_or_bounds
        except (TypeError, ValueError):
            raise TypeError("expected a system with u_min/u_max or a pair (u_min, u_max), "
                            f"got {type(system_or_bounds).__name__}") from None
    lo = np.atleast_1d(np.asarray(lo, dtype=np.float64)).copy()
    hi = np.atleast_1d(np.asarray(hi, dtype=np.float64)).copy()
    if lo.ndim != 1 or lo.shape != hi.shape:
        raise ShapeError(f"input bounds: expected u_min, u_max of equal shape (m,), got {lo.shape} and {hi.shape}")
    if np.isnan(lo).any() or np.isnan(hi).any() or (lo > hi).any():
        raise ValueError(f"input bounds must satisfy u_min <= u_max without NaN, got u_min={lo}, u_max={hi}")
    if lo.size == 0:
        name = getattr(system_or_bounds, "name", "the plant")
        raise NoInputError(f"{name} has no inputs (m = 0): there is nothing to filter; simulate it with no filter "
                           "(filter None, --filter none)")
    return lo, hi


class NoInputError(CbfsimError, ValueError):
    """A safety filter asked for an autonomous plant (m = 0): there is no input to choose."""


def check_penalty(slack_penalty: float) -> float:
    """The slack weight rho: > 0; +inf is allowed only where a solver supports it."""
    rho = float(slack_penalty)
    if not rho > 0 or math.isnan(rho):
        raise ValueError(f"slack_penalty must be > 0, got {slack_penalty!r}")
    return rho


def term_list(terms: Any, n_barriers: int, second_order: bool = False) -> list[LieTerms]:
    """Normalise one LieTerms or a sequence of them (one per barrier) to a checked list."""
    items: Sequence[Any] = [terms] if isinstance(terms, LieTerms) else list(terms)
    if len(items) != n_barriers:
        raise ShapeError(f"expected {n_barriers} barrier term set(s), got {len(items)}")
    need = LieTerms2 if second_order else LieTerms
    for t in items:
        if not isinstance(t, need):
            raise TypeError(f"expected {need.__name__}, got {type(t).__name__}")
    return list(items)


# Extreme Lie terms (|h|, |L_f h| near 1e308, or infinite) make a row overflow to +-inf, or
# NaN where two infinities cancel. That is IEEE arithmetic doing its job: the row solvers and
# the fault policy (row_filter.py, fallback.py) decide such rows, and the filter never returns
# NaN. So numpy is told not to print a RuntimeWarning for them (the probe saw one per step).
EXTREME_TERMS = {"over": "ignore", "invalid": "ignore", "divide": "ignore"}


def cbf_rows(terms: LieTerms, alpha: ClassK) -> tuple[np.ndarray, np.ndarray]:
    """First-order CBF row: L_f h + L_G h u >= -alpha(h)  ->  a = L_f h + alpha(h), b = L_G h
    (+-inf or NaN for extreme terms, without warnings: see EXTREME_TERMS)."""
    with np.errstate(**EXTREME_TERMS):
        a = terms.Lf + alpha(terms.h)
    return np.asarray(a, dtype=np.float64), np.asarray(terms.Lg, dtype=np.float64)


def stack_rows(rows: list[tuple[np.ndarray, np.ndarray]], u_nom: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Stack per-barrier rows into a (B, k) and b (B, k, m), checking every shape."""
    B, m = u_nom.shape
    if len(rows) == 1:   # the same arrays as np.stack gives (fresh, C-contiguous), minus its overhead
        return (check_shape(rows[0][0], (B,), "row 0 offset a").reshape(B, 1).copy(),
                check_shape(rows[0][1], (B, m), "row 0 gain b").reshape(B, 1, m).copy())
    a = np.stack([check_shape(r[0], (B,), f"row {i} offset a") for i, r in enumerate(rows)], axis=1)
    b = np.stack([check_shape(r[1], (B, m), f"row {i} gain b") for i, r in enumerate(rows)], axis=1)
    return a, b


def nominal_batch(u_nom: Any, m: int) -> np.ndarray:
    """u_nom as a float64 (B, m) array; a single (m,) input becomes a batch of one."""
    return as_batch(u_nom, m, "u_nom")


_fast_paths = os.environ.get(FAST_PATHS_ENV, "1") != "0"


def fast_paths_enabled() -> bool:
    """False when CBFSIM_FAST_PATHS=0 was set as cbfsim.filters was imported (read once: an
    environment lookup costs a fifth of a single-state filter call), or after
    ``set_fast_paths(False)``."""
    return _fast_paths


def set_fast_paths(enabled: bool) -> bool:
    """Switch the filters' fast paths on or off at run time (tests compare both paths in
    one process); returns the previous setting."""
    global _fast_paths
    previous, _fast_paths = _fast_paths, bool(enabled)
    return previous


def check_margin(margin: float | Margin) -> Margin:
    """The row margin: a float eps (finite, >= 0) or a state-scaled ``training.margin.Margin``."""
    return margin_from(margin)


def normalise_rows(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows scaled to unit gain, (a_i, b_i) / ||b_i|| (rows with b_i = 0 are kept as they are).

    The penalty rho then bounds the row multiplier in input units (distance moved in u per
    unit violation) instead of in units of 1/||L_G h||, so one default rho suits barriers
    of any scale (ACC: ||L_G h|| ~ 1e-3 per newton). Scaling a row does not change the hard
    QP or the least-violation point, only which problems count as "lam > rho". Every row
    solver applies it, so OSQP and the projection solve the same normalised P_rho.

    Gains whose squares overflow (|b| > ~1e154) or underflow are scaled by max_j |b_ij| first,
    so every finite nonzero row gets unit gain (the plain formula would give 0 or a NaN row);
    a / ||b|| may then overflow to +-inf, which the solvers treat as the decided row it is.
    Rows whose norm is in NORM_RANGE use the plain formula (the same bits as always)."""
    with np.errstate(over="ignore", under="ignore"):
        norm = np.sqrt(np.einsum("bkm,bkm->bk", b, b))
        scale = np.where(norm > 0, norm, 1.0)
        an, bn = a / scale, b / scale[..., None]
    odd = (norm < NORM_RANGE[0]) | (norm > NORM_RANGE[1])             # (a NaN row is left as it is)
    if odd.any():
        big = np.abs(b).max(axis=-1, initial=0.0)
        odd &= (big > 0) & np.isfinite(big)
        if odd.any():
            bs = b[odd] / big[odd][:, None]
            n2 = np.sqrt(np.einsum("rm,rm->r", bs, bs))             # in [1, sqrt(m)]: no overflow
            with np.errstate(over="ignore"):
                an[odd] = (a[odd] / big[odd]) / n2
            bn[odd] = bs / n2[:, None]
    return an, bn


def row_violation(a: np.ndarray, b: np.ndarray, u: np.ndarray, an: np.ndarray, bn: np.ndarray) -> np.ndarray:
    """Largest violation max_i max(0, -(a_i + b_i.u)) per state, shape (B,). Where the raw
    rows overflow (NaN or inf), the normalised rows (an, bn) decide: 0 if they hold, else inf."""
    with np.errstate(invalid="ignore", over="ignore"):
        g = a + np.einsum("bkm,bm->bk", b, u)
        slack = np.maximum(0.0, -g.min(axis=1))
        bad = ~np.isfinite(slack)
        if bad.any():
            gn = an[bad] + np.einsum("bkm,bm->bk", bn[bad], u[bad])
            slack[bad] = np.where(gn.min(axis=1) >= 0, 0.0, np.inf)
    return slack


def placeholder_input(u_nom: np.ndarray, u_min: np.ndarray, u_max: np.ndarray) -> np.ndarray:
    """The finite in-box input a row solver returns with FALLBACK (the filter's fault policy
    replaces it): the clipped nominal, with its non-finite entries taken as 0."""
    return np.clip(np.where(np.isfinite(u_nom), u_nom, 0.0), u_min, u_max)


def status_from_slack(slack: np.ndarray, slack_tol: float) -> np.ndarray:
    """OK where the returned input satisfies every row to ``slack_tol``, else SLACK_ACTIVE."""
    return np.where(slack > slack_tol, FilterStatus.SLACK_ACTIVE, FilterStatus.OK).astype(np.int8)
