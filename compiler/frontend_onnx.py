"""ONNX frontend: turn a feed-forward scalar ONNX graph into the IR, by pattern.

The data path is cut into segments (``onnx_graph.Graph.segments``); runs of up to
``MAX_RUN`` consecutive segments are read as expression trees and matched against exact
templates: Gemm, MatMul(+Add), row-preserving reshapes, activation ops, the patterns the
torch exporters lower SiLU / GELU / Softplus(beta, threshold) to, BatchNormalization and
affine maps by constants. A small dynamic programme picks the partition with the fewest
layers, so e.g. ``Mul(x, 2) -> Softplus -> Div(2)`` becomes one softplus(beta=2), not
Affine-softplus-Affine. Templates check constants (1/sqrt(2) to float32 precision, ...)
and refuse look-alikes; anything unmatched is refused naming the op and node.

Conventions, documented because they are choices:
* The state is the last axis of the graph input; other axes are batch axes. A reshape is
  accepted when it keeps every state's features together on the last axis (adding or
  removing unit dims, merging batch dims), or when its last axis takes a whole static
  trailing block of axes: a (batch, 2, 3) input flattened to (batch, 6) has a 6-feature
  state, its C-order flattening (``onnx_shapes``); anything else is refused.
* Plain ONNX ``Softplus`` has no threshold, so it maps to softplus(beta, threshold=1e30),
  which never switches to the identity. The legacy exporter drops PyTorch's threshold
  (it emits only ``Mul -> Softplus -> Div``): such a file computes log(1+exp(beta x))/beta
  everywhere and is loaded as such. The dynamo exporter keeps it (``Greater``/``Where``).
* A periodic input embedding (Slice, Mul, Sin, Cos, Concat from ``compiler.periodic``) is read
  from the first segment only (``onnx_periodic``); Sin or Cos anywhere else is refused.
* Activation parameters stored as float32 (attributes, scalar constants) are read back as
  the shortest decimal that rounds to them, e.g. 0.699999988 -> 0.7, which is what the
  PyTorch module held; weights and affine constants are used exactly as stored.
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Callable, Optional, Union

import numpy as np
import onnx

from .activations import ACTIVATIONS, GELU_TANH_COEF, SQRT_2_OVER_PI
from .errors import NonFiniteWeightError, ShapeError, UnsupportedOpError
from .ir import Activation, Affine, Dense, Layer, Model, validate
from .limits import DEFAULT_LIMITS, Limits, elements
from .onnx_graph import FLOAT_TYPES, Expr, Graph, attrs, broadcast, label, load_model, only_x, shape_of
from .onnx_shapes import MergeRows, Result, State, reshape_template
from .onnx_periodic import TRIG_OPS, periodic_segment
from .passes import repeat_per_row

SOFTPLUS_NO_THRESHOLD = 1e30   # plain ONNX Softplus: never switch to the identity
MAX_RUN = 4                    # longest run of segments one template may span
REL_TOL = 2.0 ** -20           # "equal to within float32 precision" for pattern constants

SUPPORTED = ("Gemm, MatMul (+Add bias), Identity, Dropout (inference), Cast (float), row-preserving "
             "Reshape/Flatten/Squeeze/Unsqueeze, Relu, LeakyRelu, PRelu (one slope), Clip, Elu, Tanh, Sigmoid, "
             "Softplus, Gelu, BatchNormalization (inference), Add/Sub/Mul/Div/Neg by constants, the "
             "exporter patterns of SiLU, GELU (erf and tanh forms) and Softplus(beta, threshold), and the periodic "
             "input embedding (Slice, Sin, Cos, Concat) as the first layer")
KNOWN_OPS = frozenset({"Sin", "Cos", "Slice", "Concat", "Gemm", "MatMul", "Add", "Sub", "Mul", "Div", "Neg", "Pow", "Reshape", "Flatten",
                       "Squeeze", "Unsqueeze", "Identity", "Dropout", "Cast", "CastLike", "Relu", "LeakyRelu",
                       "PRelu", "Clip", "Elu", "Tanh", "Sigmoid", "Softplus", "Gelu", "Erf", "Greater", "Less",
                       "Where", "BatchNormalization"})
HINTS = {"Conv": "convolutions", "ConvTranspose": "convolutions", "LSTM": "recurrent layers",
         "GRU": "recurrent layers", "RNN": "recurrent layers", "Softmax": "softmax / attention",
         "Attention": "attention", "MultiHeadAttention": "attention",
         "LayerNormalization": "normalisation across features", "Shape": "shapes read from the data (dynamic shapes)"}


def load_onnx(source: Union[str, os.PathLike, bytes, onnx.ModelProto], name: Optional[str] = None,
              limits: Limits = DEFAULT_LIMITS) -> Model:
    """Read an ONNX model of a scalar feed-forward network into a validated IR ``Model``.

    ``source`` is a path (external data is read from the model's directory), the
    serialized bytes, or a ``ModelProto``. ``name`` defaults to the file stem. ``limits``
    bound what constant folding and the network may allocate (checked before allocating).
    """
    model_proto, _ = load_model(source)
    if isinstance(source, (str, os.PathLike)):
        origin, default_name = os.fspath(source), Path(os.fspath(source)).stem
    else:
        origin, default_name = "<onnx model>", model_proto.graph.name or "model"
    g = Graph(model_proto, limits)
    start = _input_state(g)
    layers, end, rows = _convert(g, start)
    declared = shape_of(g.output)
    if end.width != 1 or (declared and declared[-1] not in (None, 1) and end.shape[-1:] != declared[-1:]):
        raise ShapeError(f"the output {g.output.name!r} has shape {end.shape} (declared {declared}), i.e. "
                         f"{end.width} values per state; a barrier must have one scalar output")
    model = Model(tuple(_merge_affine(layers)), input_dim=start.width * rows, name=name or default_name,
                  source=origin)
    return validate(model)


def _input_state(g: Graph) -> State:
    elem = g.input.type.tensor_type.elem_type
    if elem not in FLOAT_TYPES:
        raise UnsupportedOpError(f"input {g.input.name!r} has element type "
                                 f"{onnx.TensorProto.DataType.Name(elem)}; a floating-point state is required")
    shape = shape_of(g.input)
    if shape is None:
        raise ShapeError(f"input {g.input.name!r} has no shape; the state dimension must be static")
    if not shape:
        return State((), 1)
    if shape[-1] is None:
        raise ShapeError(f"input {g.input.name!r} has shape {shape}: the last (state) axis must be static")
    g.limits.check("max_weights", int(shape[-1]), f"input {g.input.name!r} of shape {shape} (one weight per feature "
                   "at least)")
    return State(shape, int(shape[-1]))


def _convert(g: Graph, start: State) -> tuple[list[Layer], State, int]:
    """Fewest-layer partition of the segments into template matches (left-to-right DP); also
    how many input rows form one state (a (batch, 2, 3) input flattened to (batch, 6): 2)."""
    segs = g.segments()
    best: list[Optional[tuple[int, list[Layer], State]]] = [None] * (len(segs) + 1)
    best[0] = (0, [], start)
    embedded = periodic_segment(g, segs[0], start) if segs else None
    if embedded is not None:
        best[0], best[1] = None, (1, [embedded[0]], embedded[1])
    for seg in segs[1:]:
        trig = next((g.nodes[i] for i in seg.nodes if g.nodes[i].op_type in TRIG_OPS), None)
        if trig is not None:
            raise UnsupportedOpError(f"{label(trig)}: Sin and Cos are supported only in the periodic input "
                                     "embedding, the first layer (compiler.periodic.PeriodicEmbedding)")
    for i in range(len(segs)):
        if best[i] is None:
            continue
        count, layers, state = best[i]
        for k in range(min(MAX_RUN, len(segs) - i), 0, -1):
            res = _match(g.expr(segs[i + k - 1].target, segs[i].source), state)
            if res is not None and (best[i + k] is None or count + len(res[0]) < best[i + k][0]):
                best[i + k] = (count + len(res[0]), layers + res[0], res[1])
    if best[-1] is None:
        stuck = max(i for i in range(len(segs)) if best[i] is not None)
        raise _diagnose([g.nodes[i] for i in segs[stuck].nodes])
    layers, rows = [], 1
    for layer in best[-1][1]:
        if isinstance(layer, MergeRows):
            layers, rows = repeat_per_row(layers, layer.rows, g.limits), rows * layer.rows
        else:
            layers.append(layer)
    return layers, best[-1][2], rows


def _diagnose(nodes: list[onnx.NodeProto]) -> UnsupportedOpError:
    """Name the most telling unsupported op of a segment (LSTM before the Shape feeding it)."""
    unknown = [n for n in nodes if n.domain not in ("", "ai.onnx") or n.op_type not in KNOWN_OPS]
    if unknown:
        node = min(unknown, key=lambda n: n.op_type not in HINTS or n.op_type == "Shape")
        domain = f" (domain {node.domain!r})" if node.domain not in ("", "ai.onnx") else ""
        hint = f" ({HINTS[node.op_type]})" if node.op_type in HINTS else ""
        others = sorted({n.op_type for n in unknown} - {node.op_type})
        also = f" (also unsupported here: {', '.join(others)})" if others else ""
        return UnsupportedOpError(f"{label(node)}{domain}: op {node.op_type}{hint} is not supported{also}. "
                                  f"Supported: {SUPPORTED}")
    return UnsupportedOpError(f"{', '.join(label(n) for n in nodes)} compute a function that matches no supported "
                              f"pattern. Supported: {SUPPORTED}")


def _match(e: Expr, st: State) -> Result:
    if e.is_x:
        return [], st
    if e.kind != "op" or e.out_index != 0 or e.node.domain not in ("", "ai.onnx"):
        return None
    for template in TEMPLATES:
        res = template(e, st)
        if res is not None:
            return res
    return None


# ---- helpers ------------------------------------------------------------------------

def _origin(e: Expr) -> str:
    return (e.node.name or e.tensor) if e.node is not None else e.tensor


def _finite(e: Expr) -> np.ndarray:
    """A constant as float64, refusing NaN/Inf with the tensor's (initializer's) name."""
    v = np.asarray(e.value, dtype=np.float64)
    if not np.all(np.isfinite(v)):
        idx = np.argwhere(~np.isfinite(v))[0].tolist()
        raise NonFiniteWeightError(f"constant {e.tensor!r} has a non-finite value {v[tuple(idx)]} at index {idx}")
    return v


def _param(v) -> float:
    """Activation parameter: the shortest decimal that rounds to a stored float32 value."""
    v = float(np.asarray(v, dtype=np.float64).reshape(-1)[0])
    f32 = np.float32(v)
    return float(str(f32)) if np.isfinite(f32) and float(f32) == v else v


def _scalar(v) -> Optional[float]:
    v = np.asarray(v)
    return float(v.reshape(-1)[0]) if v.size == 1 else None


def _close(v, target: float) -> bool:
    s = _scalar(v) if v is not None else None
    return s is not None and abs(s - target) <= REL_TOL * abs(target)


def _act(kind: str, e: Expr, **params: float) -> Activation:
    order = list(ACTIVATIONS[kind].defaults)
    return Activation(kind, tuple((k, float(params[k])) for k in order), _origin(e))


def _consts(e: Expr, seen=None):
    seen = set() if seen is None else seen
    if e is None or id(e) in seen:
        return
    seen.add(id(e))
    if e.is_const:
        yield e
    for a in e.args:
        yield from _consts(a, seen)


def _elementwise(e: Expr, st: State, layers: list[Layer], scalars_only: bool = True) -> Result:
    """Result of an elementwise template: output shape broadcast with the constants'."""
    shape = st.shape
    for c in _consts(e):
        if scalars_only and np.asarray(c.value).size != 1:
            return None
        shape = broadcast(shape, np.shape(c.value), e.where())
    return layers, State(shape, st.width)


def _per_feature(c: np.ndarray, st: State, where: str) -> np.ndarray:
    """A constant operand as one value per feature; refuse ones that vary along batch axes."""
    c = np.asarray(c, dtype=np.float64)
    if c.size == 1:
        return np.full(st.width, c.reshape(-1)[0])
    if st.width > 1 and c.shape[-1] == st.width and all(d == 1 for d in c.shape[:-1]):
        return c.reshape(-1).copy()
    raise ShapeError(f"{where}: a constant of shape {c.shape} does not act per feature on data of shape "
                     f"{st.shape} ({st.width} features); constants varying along batch axes are not supported")


def _grown(a, b, e: Expr):
    """``a``, after checking that combining it with ``b`` does not broadcast to a bigger array.

    Constants that act per feature (scalars, or one value per feature) never grow when
    combined; an outer product of constants would be refused later anyway, so it is refused
    here, before numpy allocates it (a 480 KB file can otherwise ask for 13.4 GiB).
    """
    try:
        shape = np.broadcast_shapes(np.shape(a), np.shape(b))
    except ValueError as exc:
        raise ShapeError(f"{e.where()}: constants of shapes {np.shape(a)} and {np.shape(b)} do not broadcast") from exc
    if elements(shape) > max(np.size(a), np.size(b)):
        raise ShapeError(f"{e.where()}: constants of shapes {np.shape(a)} and {np.shape(b)} combine into shape "
                         f"{shape}; constants must act per feature (one value, or one per feature)")
    return a


def _poly(e: Expr, max_degree: int = 3) -> Optional[dict[int, np.ndarray]]:
    """Coefficients of e as a polynomial in X built from + - * / by constants, Neg, Pow."""
    if e is None:
        return None
    if e.is_x:
        return {1: np.ones(())}
    if e.is_const:
        return {0: _finite(e)}
    if e.kind != "op" or e.out_index != 0 or e.node.domain not in ("", "ai.onnx"):
        return None
    op, args = e.op, e.args
    try:
        if op in ("Add", "Sub") and len(args) == 2:
            a, b = _poly(args[0], max_degree), _poly(args[1], max_degree)
            if a is None or b is None:
                return None
            sign = 1.0 if op == "Add" else -1.0
            out = dict(a)
            for d, c in b.items():
                out[d] = _grown(out[d], c, e) + sign * c if d in out else sign * c
            return out
        if op == "Neg":
            a = _poly(args[0], max_degree)
            return None if a is None else {d: -c for d, c in a.items()}
        if op == "Mul" and len(args) == 2:
            a, b = _poly(args[0], max_degree), _poly(args[1], max_degree)
            return None if a is None or b is None else _poly_mul(a, b, max_degree, e)
        if op == "Div" and len(args) == 2 and args[1].is_const:
            a, c = _poly(args[0], max_degree), _finite(args[1])
            if a is None:
                return None
            if np.any(c == 0):
                raise NonFiniteWeightError(f"{e.where()} divides by constant {args[1].tensor!r}, which contains 0")
            return {d: _grown(v, c, e) / c for d, v in a.items()}
        if op == "Pow" and len(args) == 2 and args[1].is_const:
            n = _scalar(args[1].value)
            a = _poly(args[0], max_degree)
            if a is None or n is None or n != int(n) or not 1 <= n <= max_degree:
                return None
            out = a
            for _ in range(int(n) - 1):
                out = _poly_mul(out, a, max_degree, e)
                if out is None:
                    return None
            return out
    except ValueError as exc:           # numpy broadcasting of incompatible constants
        raise ShapeError(f"{e.where()}: {exc}") from exc
    return None


def _poly_mul(a: dict, b: dict, max_degree: int, e: Expr) -> Optional[dict]:
    out: dict[int, np.ndarray] = {}
    for da, ca in a.items():
        for db, cb in b.items():
            if da + db > max_degree:
                return None
            term = _grown(ca, cb, e) * cb
            out[da + db] = _grown(out[da + db], term, e) + term if da + db in out else term
    return out


def _product(e: Expr) -> tuple[np.ndarray, list[Expr]]:
    """e = coefficient * product(factors), flattening Mul, Neg and Div by constants."""
    if e.is_const:
        return _finite(e), []
    if e.kind == "op" and e.out_index == 0:
        if e.op == "Mul":
            (ca, fa), (cb, fb) = _product(e.args[0]), _product(e.args[1])
            return _grown(ca, cb, e) * cb, fa + fb
        if e.op == "Div" and e.args[1].is_const:
            ca, fa = _product(e.args[0])
            c = _finite(e.args[1])
            return _grown(ca, c, e) / c, fa
        if e.op == "Neg":
            ca, fa = _product(e.args[0])
            return -ca, fa
    return np.ones(()), [e]


def _sum(e: Expr) -> tuple[np.ndarray, list[tuple[np.ndarray, list[Expr]]]]:
    """e = constant + sum(coef * product(factors)), flattening Add and Sub."""
    if e.kind == "op" and e.out_index == 0 and e.op in ("Add", "Sub"):
        ka, ta = _sum(e.args[0])
        kb, tb = _sum(e.args[1])
        sign = 1.0 if e.op == "Add" else -1.0
        return _grown(ka, kb, e) + sign * kb, ta + [(sign * c, f) for c, f in tb]
    c, f = _product(e)
    return (c, []) if not f else (np.zeros(()), [(c, f)])


def _const_arg(e: Expr, k: int) -> Optional[Expr]:
    """Operand k of e's node, which must be a constant when present."""
    arg = e.args[k] if len(e.args) > k else None
    if arg is not None and not arg.is_const:
        raise UnsupportedOpError(f"{e.where()}: operand {k} ({arg.tensor!r}) must be a constant")
    return arg


# ---- templates: linear layers and shapes ---------------------------------------------

def _linear_input(e: Expr, st: State) -> None:
    if not st.shape or st.shape[-1] != st.width:
        raise ShapeError(f"{e.where()}: contracts the last axis of data of shape {st.shape}, which is a batch "
                         f"axis, not the {st.width} state features")


def _gemm(e: Expr, st: State) -> Result:
    if e.op != "Gemm" or not only_x(e):
        return None
    a_, b_ = e.args[0], e.args[1]
    c_ = e.args[2] if len(e.args) > 2 else None
    at = attrs(e.node)
    if not a_.is_x:
        raise UnsupportedOpError(f"{e.where()}: the data must be Gemm operand A (weights as B)")
    if not b_.is_const or (c_ is not None and not c_.is_const):
        raise UnsupportedOpError(f"{e.where()}: Gemm operands B and C must be constants")
    if at.get("transA", 0):
        raise UnsupportedOpError(f"{e.where()}: Gemm with transA=1 on the data operand is not supported "
                                 "(it would transpose batch and features)")
    if len(st.shape) != 2:
        raise ShapeError(f"{e.where()}: Gemm needs 2-D data (batch, features), got shape {st.shape}")
    _linear_input(e, st)
    w = _finite(b_)
    if w.ndim != 2:
        raise ShapeError(f"{e.where()}: Gemm weight {b_.tensor!r} has shape {w.shape}, expected 2-D")
    w = w.T if at.get("transB", 0) else w
    if w.shape[0] != st.width:
        raise ShapeError(f"{e.where()}: weight {b_.tensor!r} expects {w.shape[0]} inputs but receives {st.width}")
    out = State((st.shape[0], w.shape[1]), int(w.shape[1]))
    bias = np.zeros(out.width)
    if c_ is not None:
        c = _finite(c_)
        if c.ndim > 2:
            raise ShapeError(f"{e.where()}: Gemm C {c_.tensor!r} has rank {c.ndim} > 2")
        bias = _param(at.get("beta", 1.0)) * _per_feature(c, out, e.where())
    return [Dense(_param(at.get("alpha", 1.0)) * w.T, bias, _origin(e))], out


def _matmul(e: Expr, st: State) -> Result:
    if e.op != "MatMul" or not only_x(e):
        return None
    a_, b_ = e.args
    if not (a_.is_const or b_.is_const):
        raise UnsupportedOpError(f"{e.where()}: one MatMul operand must be a constant weight, the other the data")
    if a_.is_x:                                   # x @ W, W of shape (in, out) or (in,)
        _linear_input(e, st)
        w = _finite(b_)
        if w.ndim > 2 and any(d != 1 for d in w.shape[:-2]):
            raise ShapeError(f"{e.where()}: batched weight {b_.tensor!r} of shape {w.shape} is not supported")
        lead = (1,) * (w.ndim - 2)
        w = w.reshape(w.shape[-2:]) if w.ndim >= 2 else w[:, None]
        if w.shape[0] != st.width:
            raise ShapeError(f"{e.where()}: weight {b_.tensor!r} expects {w.shape[0]} inputs, receives {st.width}")
        tail = (int(w.shape[1]),) if np.ndim(b_.value) >= 2 else ()
        shape = broadcast(st.shape[:-1], lead, e.where()) + tail
        return [Dense(w.T.copy(), np.zeros(w.shape[1]), _origin(e))], State(shape, int(w.shape[1]))
    w = _finite(a_)                               # W @ x: only for 1-D data
    if len(st.shape) != 1:
        raise ShapeError(f"{e.where()}: W @ x contracts axis -2 of data of shape {st.shape}; with the weight on "
                         "the left only 1-D data is supported")
    w = w if w.ndim == 2 else w[None, :]
    if w.ndim != 2 or w.shape[1] != st.width:
        raise ShapeError(f"{e.where()}: weight {a_.tensor!r} of shape {np.shape(a_.value)} does not take "
                         f"{st.width} inputs")
    shape = (int(w.shape[0]),) if np.ndim(a_.value) == 2 else ()
    return [Dense(w.copy(), np.zeros(w.shape[0]), _origin(e))], State(shape, int(w.shape[0]))


def _matmul_add(e: Expr, st: State) -> Result:
    if e.op != "Add" or len(e.args) != 2:
        return None
    for mm, c in (e.args, e.args[::-1]):
        if c.is_const and mm.kind == "op" and mm.op == "MatMul" and mm.out_index == 0:
            res = _matmul(mm, st)
            if res is None:
                return None
            (dense,), out = res
            bias = _per_feature(_finite(c), out, e.where())
            shape = broadcast(out.shape, np.shape(c.value), e.where())
            return [Dense(dense.weight, bias, _origin(e))], State(shape, out.width)
    return None


# ---- templates: activations ----------------------------------------------------------

SIMPLE = {spec.onnx_op: kind for kind, spec in ACTIVATIONS.items() if spec.onnx_op and not spec.defaults}


def _single_activation(e: Expr, st: State) -> Result:
    if not only_x(e) or not e.args[0].is_x:
        return None
    op, at = e.op, attrs(e.node)
    if op in SIMPLE:
        return _elementwise(e, st, [_act(SIMPLE[op], e)])
    if op == "LeakyRelu":
        return _elementwise(e, st, [_act("leaky_relu", e, negative_slope=_param(at.get("alpha", 0.01)))])
    if op == "Elu":
        return _elementwise(e, st, [_act("elu", e, alpha=_param(at.get("alpha", 1.0)))])
    if op == "Gelu":
        mode = at.get("approximate", b"none")
        mode = mode.decode() if isinstance(mode, bytes) else mode
        if mode not in ("none", "tanh"):
            raise UnsupportedOpError(f"{e.where()}: Gelu approximate={mode!r} is not supported")
        return _elementwise(e, st, [_act("gelu", e, approximate=0.0 if mode == "none" else 1.0)])
    if op == "PRelu":
        slope = _finite(_const_arg(e, 1))
        if np.any(slope != slope.reshape(-1)[0]):
            raise UnsupportedOpError(f"{e.where()}: PRelu with per-channel slopes {slope.shape} is not supported "
                                     "(only one slope, i.e. LeakyReLU)")
        return _elementwise(e, st, [_act("leaky_relu", e, negative_slope=_param(slope))])
    if op == "Clip":
        return _clip(e, st, at)
    if op == "BatchNormalization":
        return _batchnorm(e, st, at)
    return None


def _clip(e: Expr, st: State, at: dict) -> Result:
    bounds = [at.get("min"), at.get("max")]
    for k in (0, 1):
        arg = _const_arg(e, k + 1)
        if arg is not None:
            if np.asarray(arg.value).size != 1:
                raise UnsupportedOpError(f"{e.where()}: Clip bound {arg.tensor!r} of shape {np.shape(arg.value)} "
                                         "is not a scalar")
            bounds[k] = float(np.asarray(arg.value).reshape(-1)[0])
    lo, hi = (None if b is None or math.isnan(b) or abs(b) >= 3.4e38 else _param(b) for b in bounds)
    if lo is None and hi is None:
        return [], st
    if hi is None and lo == 0.0:
        return _elementwise(e, st, [_act("relu", e)])
    if lo is None or hi is None:
        raise UnsupportedOpError(f"{e.where()}: Clip with only min={lo} / max={hi} is not supported "
                                 "(both bounds -> hardtanh, or min=0 alone -> relu)")
    return _elementwise(e, st, [_act("hardtanh", e, min_val=lo, max_val=hi)])


def _batchnorm(e: Expr, st: State, at: dict) -> Result:
    if at.get("training_mode", 0):
        raise UnsupportedOpError(f"{e.where()}: BatchNormalization in training mode is not supported")
    if len(st.shape) != 2:
        raise ShapeError(f"{e.where()}: BatchNormalization normalises axis 1; only (batch, features) data is "
                         f"supported, got shape {st.shape}")
    gamma, beta, mean, var = (_finite(_const_arg(e, k)) for k in range(1, 5))
    scale = gamma / np.sqrt(var + _param(at.get("epsilon", 1e-5)))
    where = e.where()
    return [Affine(_per_feature(scale, st, where), _per_feature(beta - mean * scale, st, where), _origin(e))], st


def _silu(e: Expr, st: State) -> Result:
    c, fs = _product(e)
    if (len(fs) == 2 and _close(c, 1.0) and any(f.is_x for f in fs)
            and any(f.kind == "op" and f.op == "Sigmoid" and f.out_index == 0 and f.args[0].is_x for f in fs)):
        return _elementwise(e, st, [_act("silu", e)])
    return None


def _gelu(e: Expr, st: State) -> Result:
    """c * x * (k + m * erf(x / sqrt 2)) or the tanh form, with c k = c m = 1/2."""
    c, fs = _product(e)
    if len(fs) != 2 or not any(f.is_x for f in fs) or _scalar(c) is None:
        return None
    other = fs[1] if fs[0].is_x else fs[0]
    k, terms = _sum(other)
    if len(terms) != 1 or len(terms[0][1]) != 1:
        return None
    m, (inner,) = terms[0]
    if not (_close(c * k, 0.5) and _close(c * m, 0.5)) or inner.kind != "op" or inner.out_index:
        return None
    p = _poly(inner.args[0]) if inner.op in ("Erf", "Tanh") else None
    if p is None:
        return None
    if inner.op == "Erf" and set(p) == {1} and _close(p[1], 1 / math.sqrt(2.0)):
        return _elementwise(e, st, [_act("gelu", e, approximate=0.0)])
    if (inner.op == "Tanh" and set(p) == {1, 3} and _close(p[1], SQRT_2_OVER_PI)
            and _close(p[3], SQRT_2_OVER_PI * GELU_TANH_COEF)):
        return _elementwise(e, st, [_act("gelu", e, approximate=1.0)])
    return None


def _softplus_beta(e: Expr) -> Optional[float]:
    """beta if e == Softplus(beta x) / beta (beta a positive scalar), else None."""
    c, fs = _product(e)
    if len(fs) != 1 or fs[0].kind != "op" or fs[0].op != "Softplus" or fs[0].out_index:
        return None
    p = _poly(fs[0].args[0])
    beta = _scalar(p[1]) if p is not None and set(p) == {1} else None
    if beta is None or beta <= 0 or not _close(c, 1.0 / beta):
        return None
    return _param(beta)


def _softplus(e: Expr, st: State) -> Result:
    beta = _softplus_beta(e)
    if beta is None:
        return None
    return _elementwise(e, st, [_act("softplus", e, beta=beta, threshold=SOFTPLUS_NO_THRESHOLD)])


def _softplus_threshold(e: Expr, st: State) -> Result:
    """Where(beta x > threshold, x, Softplus(beta x) / beta): PyTorch's Softplus exactly."""
    if e.op != "Where" or len(e.args) != 3 or not e.args[1].is_x:
        return None
    cond, beta = e.args[0], _softplus_beta(e.args[2])
    if beta is None or cond.kind != "op" or cond.op not in ("Greater", "Less") or cond.out_index:
        return None
    z, t = cond.args if cond.op == "Greater" else cond.args[::-1]
    p = _poly(z)
    if not t.is_const or _scalar(t.value) is None or p is None or set(p) != {1} or not _close(p[1], beta):
        return None
    return _elementwise(e, st, [_act("softplus", e, beta=beta, threshold=_param(_finite(t)))])


def _affine(e: Expr, st: State) -> Result:
    p = _poly(e, max_degree=1)
    if p is None or 1 not in p:
        return None
    where = e.where()
    scale = _per_feature(p[1], st, where)
    shift = _per_feature(p.get(0, np.zeros(())), st, where)
    res = _elementwise(e, st, [], scalars_only=False)
    if np.all(scale == 1.0) and np.all(shift == 0.0):
        return res
    return [Affine(scale, shift, _origin(e))], res[1]


TEMPLATES: tuple[Callable[[Expr, State], Result], ...] = (
    _gemm, _matmul, _matmul_add, reshape_template, _single_activation, _silu, _gelu, _softplus, _softplus_threshold,
    _affine)


def _merge_affine(layers: list[Layer]) -> list[Layer]:
    """Compose adjacent Affine layers (e.g. input normalisation followed by BatchNorm)."""
    out: list[Layer] = []
    for layer in layers:
        if isinstance(layer, Affine) and out and isinstance(out[-1], Affine):
            prev = out.pop()
            layer = Affine(layer.scale * prev.scale, layer.scale * prev.shift + layer.shift,
                           f"{prev.origin}+{layer.origin}")
        out.append(layer)
    return out
