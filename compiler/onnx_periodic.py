"""The periodic input embedding in an ONNX graph (the first segment of the data path).

torch's legacy exporter writes ``compiler.periodic.PeriodicEmbedding`` as one Slice per state
coordinate (``x[..., i:i+1]``), a Mul by the constant w = 2 pi / P (stored as float32) and
Sin and Cos of it for each wrapped coordinate, and one Concat along the state axis:

    Concat(Slice(x, 0:1), Slice(x, 1:2), Sin(Mul(Slice(x, 2:3), w)), Cos(Mul(Slice(x, 2:3), w)))

``periodic_segment`` reads that pattern (slices of several columns, Div by a constant and a
missing Mul are accepted too) into an IR ``Periodic`` layer: every state coordinate once, in
order, as itself or as (sin, cos) of one w. Anything else that uses Sin or Cos is refused in
one line naming the node. The file holds only fl32(w), so the period is recovered as the
simplest value that rounds back to it (``period_from_frequency``): 2 pi / w for a w with a
short decimal (w = 1 -> 2 pi exactly), else the shortest decimal P (360, 1, ...); a period
the module held as such comes back bit for bit.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from .errors import ShapeError, UnsupportedOpError
from .ir import Periodic
from .onnx_graph import Expr, Graph, Segment, attrs, label
from .onnx_shapes import State

TRIG_OPS = ("Sin", "Cos")
SHAPE = ("the periodic input embedding: Concat along the state axis of Slice(x) columns and Sin, Cos of "
         "w * Slice(x, i:i+1), every state coordinate once, in order (as compiler.periodic.PeriodicEmbedding "
         "exports)")


def _digits(text: str) -> int:
    """Significant decimal digits of a number's shortest repr ('1.0' -> 1, '0.017453292' -> 8)."""
    mantissa = text.lower().lstrip("-").split("e")[0].replace(".", "").strip("0")
    return max(len(mantissa), 1)


def period_from_frequency(w32: float) -> float:
    """The period P whose float32 frequency fl32(2 pi / P) is ``w32``, the simplest one."""
    target = np.float32(w32)

    def rounds_back(p: float) -> bool:
        return p > 0 and math.isfinite(p) and np.float32(2.0 * math.pi / p) == target

    w_text = str(target)                                  # shortest decimal of the float32
    by_w = 2.0 * math.pi / float(w_text)
    p0 = 2.0 * math.pi / float(target)
    by_p, p_digits = p0, 18
    for d in range(1, 18):
        p = float(f"{p0:.{d}g}")
        if rounds_back(p):
            by_p, p_digits = p, d
            break
    if rounds_back(by_w) and _digits(w_text) <= p_digits:
        return by_w
    return by_p


def _ints(g: Graph, e: Expr, k: int, name: str, default: Optional[list[int]]) -> Optional[list[int]]:
    """Slice operand k (opset >= 10) or attribute ``name`` (older opsets), as ints."""
    if len(e.args) > k and e.args[k] is not None:
        if not e.args[k].is_const:
            raise UnsupportedOpError(f"{e.where()}: Slice {name} must be constants")
        return [int(v) for v in np.asarray(e.args[k].value).reshape(-1)]
    at = attrs(e.node)
    return [int(v) for v in at[name]] if name in at else default


def _slice_columns(g: Graph, e: Expr, st: State) -> Optional[list[int]]:
    """The state columns a Slice of the input on its last axis selects, or None if e is not one."""
    if e.kind != "op" or e.op != "Slice" or e.out_index or not e.args or not e.args[0].is_x:
        return None
    rank, n = len(st.shape), st.width
    starts, ends = _ints(g, e, 1, "starts", None), _ints(g, e, 2, "ends", None)
    axes = _ints(g, e, 3, "axes", list(range(len(starts or []))))
    steps = _ints(g, e, 4, "steps", [1] * len(starts or []))
    if starts is None or ends is None or not (len(starts) == len(ends) == len(axes) == len(steps) == 1):
        raise UnsupportedOpError(f"{e.where()}: only a Slice of one axis, the state axis, is supported in {SHAPE}")
    if axes[0] % rank != rank - 1 or steps[0] != 1:
        raise UnsupportedOpError(f"{e.where()}: slices axis {axes[0]} with step {steps[0]}; the embedding slices "
                                 f"the state axis ({rank - 1}) with step 1")
    lo, hi = (min(max(v + n if v < 0 else v, 0), n) for v in (starts[0], ends[0]))
    if hi <= lo:
        raise ShapeError(f"{e.where()}: selects no state coordinate")
    return list(range(lo, hi))


def _trig(g: Graph, e: Expr, st: State) -> tuple[str, int, float]:
    """(kind, coordinate, w) of Sin / Cos (w * x_i)."""
    from .frontend_onnx import _product, _scalar
    coef, factors = _product(e.args[0])
    cols = _slice_columns(g, factors[0], st) if len(factors) == 1 else None
    w = _scalar(coef)
    if cols is None or len(cols) != 1 or w is None:
        raise UnsupportedOpError(f"{e.where()}: Sin and Cos are supported only of w * x_i (one state coordinate "
                                 f"times a constant) in {SHAPE}")
    if not (math.isfinite(w) and w > 0):
        raise UnsupportedOpError(f"{e.where()}: the frequency w = {w} of the periodic embedding must be a finite "
                                 "number > 0")
    return e.op.lower(), cols[0], float(np.float32(w))


def periodic_segment(g: Graph, seg: Segment, st: State) -> Optional[tuple[Periodic, State]]:
    """The Periodic layer the graph's first segment computes, or None when it uses no Sin/Cos."""
    if not any(g.nodes[i].op_type in TRIG_OPS for i in seg.nodes):
        return None
    e = g.expr(seg.target, seg.source)
    if seg.source != g.input.name:
        raise UnsupportedOpError(f"{e.where()}: {SHAPE} must be the first layer")
    if e.kind != "op" or e.op != "Concat":
        raise UnsupportedOpError(f"{e.where()}: expected a Concat closing {SHAPE}")
    rank = len(st.shape)
    if rank == 0 or attrs(e.node).get("axis", 0) % rank != rank - 1:
        raise UnsupportedOpError(f"{e.where()}: concatenates along axis {attrs(e.node).get('axis')}, not the state "
                                 "axis")
    parts: list[tuple[str, int, float]] = []
    for arg in e.args:
        if arg.is_x:
            parts += [("x", i, 0.0) for i in range(st.width)]
        elif arg.kind == "op" and arg.op in TRIG_OPS and not arg.out_index:
            parts.append(_trig(g, arg, st))
        else:
            cols = _slice_columns(g, arg, st)
            if cols is None:
                raise UnsupportedOpError(f"{arg.where()}: not a part of {SHAPE}")
            parts += [("x", i, 0.0) for i in cols]
    return _layer(parts, st, e)


def _layer(parts: list[tuple[str, int, float]], st: State, e: Expr) -> tuple[Periodic, State]:
    """Check the column order (x_i, or sin_i then cos_i with one w, for i = 0..n-1) and build the layer."""
    shown = ", ".join(f"x{i}" if k == "x" else f"{k}({w:.9g} x{i})" for k, i, w in parts)
    periods, at, i = [], 0, 0
    while at < len(parts):
        kind, coord, w = parts[at]
        if coord != i:
            break
        if kind == "x":
            at, i = at + 1, i + 1
            continue
        nxt = parts[at + 1] if at + 1 < len(parts) else None
        if kind != "sin" or nxt is None or nxt[:2] != ("cos", coord) or nxt[2] != w:
            break
        periods.append((coord, period_from_frequency(w)))
        at, i = at + 2, i + 1
    if at != len(parts) or i != st.width:
        raise UnsupportedOpError(f"{e.where()}: its columns [{shown}] are not {SHAPE}")
    layer = Periodic(tuple(periods), st.width, origin=label(e.node))
    return layer, State(st.shape[:-1] + (layer.out_dim,), layer.out_dim)
