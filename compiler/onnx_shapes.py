"""Reshapes in the ONNX frontend: shapes read from the data, and states with more than one axis.

``x.view(x.size(0), -1)`` exports as Shape -> Gather -> Unsqueeze -> Concat -> Reshape with a
dynamic batch. ``shape_expression`` evaluates such integer tensors symbolically: an entry is
an int, or ``InputDim(k)`` for dimension k of the reshaped data when it is dynamic, so
``onnx_graph.reshape_target`` can resolve -1 by cancelling the batch dimension on both sides.

A barrier whose input is (batch, 2, 3) is flattened to (batch, 6) before its first dense
layer: the state is then the C-order flattening of the trailing (2, 3). ``merged_rows`` finds
the trailing block of input axes a reshape merges into its last axis; the layers before it
acted on each row alone, so they become block-diagonal (``passes.repeat_per_row``).
"""
from __future__ import annotations

from typing import Optional

import numpy as np
from onnx import TensorProto

from .onnx_graph import Entry, Expr, InputDim, Shape, attrs

INT_TYPES = {TensorProto.INT64, TensorProto.INT32}
# on static dims only: x.reshape(-1, x.shape[1] * x.shape[2]) multiplies two of them
ARITHMETIC = {"Mul": lambda a, b: a * b, "Add": lambda a, b: a + b, "Sub": lambda a, b: a - b,
              "Div": lambda a, b: a // b}




def shape_expression(e: Expr, shape: Shape) -> Optional[list[Entry]]:
    """The 1-D integer tensor ``e`` computes from the shape of X (of ``shape``), or None when
    it is anything else (a shape that depends on the data's values is never accepted)."""
    value = _evaluate(e, shape)
    return None if value is None or value[1] else value[0]


def _evaluate(e: Expr, shape: Shape) -> Optional[tuple[list[Entry], bool]]:
    """(entries, is_scalar) of an integer tensor built from Shape(X) and constants."""
    if e is None:
        return None
    if e.is_const:
        v = np.asarray(e.value)
        return ([int(t) for t in v.reshape(-1)], v.ndim == 0) if v.dtype.kind in "iu" and v.ndim <= 1 else None
    if e.kind != "op" or e.out_index != 0 or e.node.domain not in ("", "ai.onnx"):
        return None
    at, op = attrs(e.node), e.op
    if op == "Shape" and e.args[0].is_x:
        dims = [d if d is not None else InputDim(k) for k, d in enumerate(shape)]
        return dims[slice(at.get("start", 0), at.get("end"))], False
    args = [_evaluate(a, shape) if a is not None else None for a in e.args]
    if not args or args[0] is None:
        return None
    (data, scalar), rest = args[0], args[1:]
    if op == "Cast" and at.get("to") in INT_TYPES:
        return data, scalar
    if op == "Gather" and at.get("axis", 0) == 0 and not scalar and rest and rest[0] is not None:
        index, index_scalar = rest[0]
        if any(isinstance(i, InputDim) or not -len(data) <= i < len(data) for i in index):
            return None
        return [data[i] for i in index], index_scalar
    if op in ("Unsqueeze", "Squeeze"):
        axes = at.get("axes", rest[0][0] if rest and rest[0] is not None else None)
        if op == "Unsqueeze" and scalar and list(axes or []) == [0]:
            return data, False
        if op == "Squeeze" and not scalar and len(data) == 1 and list(axes or [0]) in ([0], [-1]):
            return data, True
        return None
    if op in ARITHMETIC and len(rest) == 1 and rest[0] is not None:
        other, other_scalar = rest[0]
        size = max(len(data), len(other))
        if (any(isinstance(t, InputDim) for t in data + other) or {len(data), len(other)} - {1, size}
                or (op == "Div" and 0 in other)):
            return None
        data, other = (data * size if len(data) == 1 else data), (other * size if len(other) == 1 else other)
        return [ARITHMETIC[op](a, b) for a, b in zip(data, other)], scalar and other_scalar
    if op == "Concat" and at.get("axis") in (0, -1) and all(a is not None and not a[1] for a in args):
        return [entry for a in args for entry in a[0]], False
    if op == "Slice" and not scalar and all(a is not None and not a[1] for a in rest):
        starts, ends, axes, steps = ([a[0] for a in rest] + [None, None])[:4]
        if any(isinstance(t, InputDim) for part in rest for t in part[0]) or (axes not in (None, [0], [-1])):
            return None
        return data[slice(starts[0], ends[0], steps[0] if steps else 1)], False
    return None


def merged_rows(in_shape: Shape, width: int, out: Shape) -> Optional[int]:
    """How many rows of ``width`` features a reshape of ``in_shape`` to ``out`` merges into one
    state: its last axis must take exactly a static trailing block of input axes (C order
    keeps each block contiguous, so no state is mixed with another); None otherwise."""
    if not in_shape or in_shape[-1] != width or not out or out[-1] is None:
        return None
    block = 1
    for d in reversed(in_shape):
        if d is None:
            return None
        block *= d
        if block == out[-1]:
            return block // width
        if block > out[-1]:
            return None
    return None
