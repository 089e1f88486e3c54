"""Reshapes in the ONNX frontend: shapes read from the data, and states with more than one axis.

``x.view(x.size(0), -1)`` exports as Shape -> Gather -> Unsqueeze -> Concat -> Reshape with a
dynamic batch. ``shape_expression`` evaluates such integer tensors symbolically: an entry is
an int, or ``InputDim(k)`` for dimension k of the reshaped data when it is dynamic, so
``onnx_graph.reshape_target`` can resolve -1 by cancelling the batch dimension on both sides.

A barrier whose input is (batch, 2, 3) is flattened to (batch, 6) before its first dense
layer: the state is then the C-order flattening of the trailing (2, 3). ``merged_rows`` finds
the trailing block of input axes a reshape merges into its last axis; the layers before it
acted on each row alone, so they become block-diagonal (``passes.repeat_per_row``).
Also here: the data-path ``State`` of the frontend and its reshape template.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
from onnx import TensorProto

from .errors import ShapeError, UnsupportedOpError
from .onnx_graph import Entry, Expr, InputDim, Shape, attrs, only_x, reshape_target


@dataclass(frozen=True)
class State:
    """Shape of the tensor on the data path and its number of features (last axis)."""
    shape: Shape
    width: int


Result = Optional[tuple[list, State]]          # layers (and MergeRows markers), state after them


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


# ---- the frontend's reshape template -------------------------------------------------

@dataclass(frozen=True)
class MergeRows:
    """Marker in a layer list: the layers before it acted on each of ``rows`` rows alone,
    which a reshape now merges into one state (``_convert`` makes them block-diagonal)."""
    rows: int


def _row_preserving(e: Expr, st: State, out: Shape) -> Result:
    if st.width == 1 or (out and out[-1] == st.width):
        return [], State(tuple(out), st.width)
    rows = merged_rows(st.shape, st.width, out)
    if rows is not None:
        return [MergeRows(rows)], State(tuple(out), st.width * rows)
    raise ShapeError(f"{e.where()}: reshapes {st.shape} to {tuple(out)}, which does not keep the {st.width} "
                     "features of each state together on the last axis (nor merges whole trailing axes into it)")


def _prod(dims) -> Optional[int]:
    return None if None in dims else int(np.prod(dims, dtype=np.int64))


def reshape_template(e: Expr, st: State) -> Result:
    if e.op not in ("Reshape", "Flatten", "Squeeze", "Unsqueeze") or not e.args or not e.args[0].is_x:
        return None
    at, shape = attrs(e.node), st.shape
    second = e.args[1] if len(e.args) > 1 else None
    target = second.value if second is not None and second.is_const else None
    if e.op == "Reshape" and target is None:
        target = shape_expression(second, shape)
    if second is not None and target is None:
        if not only_x(e):
            return None
        raise UnsupportedOpError(f"{e.where()}: the {e.op} shape/axes input must be constant or computed from "
                                 "the shape of the data (shapes computed from its values are not supported)")
    if e.op == "Reshape":
        out = reshape_target(shape, target, at.get("allowzero", 0), e.where())
    elif e.op == "Flatten":
        axis = at.get("axis", 1)
        axis = axis + len(shape) if axis < 0 else axis
        out = (_prod(shape[:axis]), _prod(shape[axis:]))
    else:
        axes = at.get("axes", None if second is None else [int(v) for v in np.ravel(second.value)])
        if e.op == "Squeeze":
            if not shape:
                raise ShapeError(f"{e.where()}: cannot squeeze a rank-0 tensor")
            if axes is None:
                if None in shape:
                    raise ShapeError(f"{e.where()}: Squeeze without axes on data of dynamic shape {shape}")
                axes = [k for k, d in enumerate(shape) if d == 1]
            axes = {a % len(shape) for a in axes}
            if any(shape[a] not in (1, None) for a in axes):
                raise ShapeError(f"{e.where()}: cannot squeeze axes {sorted(axes)} of shape {shape}")
            out = tuple(d for k, d in enumerate(shape) if k not in axes)
        else:
            rank = len(shape) + len(axes)
            axes = sorted(a % rank for a in axes)
            out = list(shape)
            for a in axes:
                out.insert(a, 1)
    return _row_preserving(e, st, tuple(out))
