"""The C++ of each activation: the body of ``eval`` returning sigma(a) and writing sigma'(a)
(and sigma''(a) for order 2), from the entry's ``cpp`` in compiler.activations. Each body is
branch-free so the activation loop vectorizes: every choice goes through ``mx_select`` of
the header's math (a bit-mask select on vector targets, ``c ? a : b`` on scalar cores) and
conditions combine with ``&``, because GCC sinks the arithmetic of a floating-point ``?:``
into a branch and then cannot vectorize the loop (the pendulum's Softplus layer: 5,696 -> 610
instructions per call). The bodies use the stable forms of ``compiler.activations``: exp is
only ever taken of a non-positive argument, so nothing overflows for any finite a."""
from __future__ import annotations

import re
from typing import Iterable

from .activations import ACTIVATIONS
from .cpp_snippets import literal, sel
from .errors import UnsupportedOpError

__all__ = ["activation_body", "literal", "sel", "math_functions"]


def activation_body(kind: str, params: dict, scalar: str, order: int) -> list[str]:
    """Statements computing ``y`` (returned), ``d1`` and, if order == 2, ``d2`` from ``a``."""
    spec = ACTIVATIONS.get(kind)
    if spec is None or spec.cpp is None:
        raise UnsupportedOpError(f"no C++ lowering for activation {kind!r}")
    lines, d2 = spec.cpp(params, lambda v: literal(v, scalar), order)
    if order == 2:
        lines = lines + [f"d2 = {d2};"]
    return lines + ["return y;"]


def math_functions(activations: Iterable[tuple[str, dict]], order: int) -> set[str]:
    """The header math functions (``exp`` for m_exp, ...) that these (kind, params) bodies call:
    read from the bodies themselves, so the table stays the only place that says it."""
    used: set[str] = set()
    for kind, params in activations:
        for o in sorted({1, order}):
            text = "\n".join(activation_body(kind, params, "float", o))
            used.update(re.findall(r"\bm_(\w+)\(", text))
    return used
