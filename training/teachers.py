"""Barriers written down for the literature's plants (``training.designed``), sized by the hidden
widths asked for: the teachers a config names in ``teacher`` (``cbfsim train --teacher
training.teachers:spacecraft_slabs``) and the designed rows of ``benchmarks/certify_suite.py``.

Each function is ``(system, widths) -> nn.Sequential`` (float32, raw states).  A ReLU student
distilled from one of these keeps its teacher's margin where a trained Softplus teacher has
little: the spacecraft's 3 x 8 students of a Softplus teacher stayed refuted after 108 rounds,
the one of ``spacecraft_slabs`` certifies after 7 (docs/training.md).
"""
from __future__ import annotations

from typing import Any

from .designed import relu_max_network, relu_min_network

# the spacecraft's braking slabs (systems.spacecraft:braking_terms), per first-layer width:
# each slab takes 1 + len(knots) units of layer 1, four slabs (+-x, +-y)
SLAB_KNOTS = {8: (0.2,), 16: (0.2, -0.3, -0.65)}
# Darboux's curve (systems.darboux:lower_curve), per first-layer width: (segments, slack); the
# curve takes segments + 1 units of layer 1
CURVE_SEGMENTS = {32: (16, 0.05), 256: (128, 0.02)}


def _plant(system: Any, plant: str, what: str) -> None:
    if getattr(system, "name", None) != plant:
        raise ValueError(f"{what} is designed for the {plant} plant, got {getattr(system, 'name', system)!r}")


def _design(table: dict, widths: list[int] | tuple[int, ...], what: str, system: Any, plant: str) -> Any:
    """(widths, the table's design for them), or a one-line ValueError naming what does not fit."""
    _plant(system, plant, what)
    widths = tuple(int(w) for w in widths)
    if not widths or widths[0] not in table:
        raise ValueError(f"{what} is designed for first hidden widths {sorted(table)}, got widths {list(widths)}")
    return widths, table[widths[0]]


def spacecraft_slabs(system: Any, widths: list[int] | tuple[int, ...]):
    """max over d = +-x, +-y of the braking slab h_d (``braking_terms``), sup_u hdot >= 0.1 on
    {h = 0}; one knot at widths (8, ...), three at (16, ...)."""
    from systems.spacecraft import braking_terms
    widths, knots = _design(SLAB_KNOTS, widths, "spacecraft_slabs", system, "spacecraft")
    return relu_max_network(braking_terms(system.params, knots), *system.domain, widths)


def darboux_curve(system: Any, widths: list[int] | tuple[int, ...]):
    """min(x1 + 0.3, x2 - phi(x1)) with phi a piecewise-linear curve the flow crosses upward
    (``lower_curve``): 16 segments at widths (32, ...), 128 at (256, ...)."""
    from systems.darboux import barrier_terms, lower_curve
    widths, (segments, slack) = _design(CURVE_SEGMENTS, widths, "darboux_curve", system, "darboux")
    return relu_min_network(barrier_terms(*lower_curve(segments, slack)), *system.domain, widths)


def hi_ord8_eigen(system: Any, widths: list[int] | tuple[int, ...]):
    """w.x + 1.8 with w A's left eigenvector for -1 (``systems.hi_ord8:eigen_halfspace``: hdot = 1.8 - h,
    1.8 on {h = 0}), as a one-layer Softplus network in its linear regime."""
    from systems.hi_ord8 import EIGEN_OFFSET, left_eigenvector
    from .designed import affine_softplus_network
    _plant(system, "hi_ord8", "hi_ord8_eigen")
    widths = tuple(int(w) for w in widths)
    if len(widths) != 1:
        raise ValueError(f"hi_ord8_eigen is one hidden layer, got widths {list(widths)}")
    return affine_softplus_network(left_eigenvector(), EIGEN_OFFSET, *system.domain, hidden=widths[0])[0]
