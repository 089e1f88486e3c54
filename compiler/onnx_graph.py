"""Graph utilities for the ONNX frontend: safe loading, constant resolution, and the
split of the data path into single-input single-output segments.

The frontend must not depend on the order nodes are listed in (exporters and graph
tools shuffle it), so everything here works on edges: ``Graph.const`` folds constant
subgraphs on demand from initializers and ``Constant`` nodes, ``Graph.segments`` cuts
the data path at every tensor through which *all* data flows (a topological sweep whose
live set has one element), and ``Graph.expr`` turns a run of segments into an
expression tree over the run's input that the pattern matcher in ``frontend_onnx``
reads. Loading uses ``onnx`` protobuf parsing only: nothing is ever unpickled.
"""
from __future__ import annotations

import heapq
import os
from dataclasses import dataclass
from typing import Optional, Union

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.external_data_helper import load_external_data_for_tensor
from onnx.inliner import inline_local_functions

from .errors import ModelFormatError, ShapeError, UnsupportedOpError
from .limits import DEFAULT_LIMITS, Limits, elements

Dim = Optional[int]            # None: dynamic (symbolic or unknown) dimension
Shape = tuple[Dim, ...]


@dataclass(frozen=True)
class InputDim:
    """Dimension ``axis`` of the data entering a reshape, read by Shape (see ``onnx_shapes``)."""
    axis: int


Entry = Union[int, InputDim]  # one entry of a reshape target

# Ops that are folded when all their (value) inputs are constant. No Shape: a shape read
# from the data is not a constant, and models whose function depends on it are refused.
FOLDABLE = frozenset({"Constant", "Identity", "Cast", "CastLike", "Reshape", "Flatten", "Squeeze",
                      "Unsqueeze", "Transpose", "Concat", "Neg", "Add", "Sub", "Mul", "Div", "Sqrt",
                      "Reciprocal", "Pow"})
FLOAT_TYPES = {TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16}
# Deepest expression between two cuts of the data path (all data through one tensor) that the
# frontend's pattern matcher, which recurses on the expression, is given: far beyond any real
# network (a layer is a few ops), and far below Python's recursion limit.
MAX_EXPR_DEPTH = 400
# Element types a weight may have: real numbers and booleans (not strings, complex or undefined).
NUMERIC_TYPES = frozenset(TensorProto.DataType.values()) - {
    TensorProto.UNDEFINED, TensorProto.STRING, TensorProto.COMPLEX64, TensorProto.COMPLEX128}


def label(node: onnx.NodeProto) -> str:
    """How messages name a node: op type and node name (or its first output)."""
    if node.name:
        return f"{node.op_type} node {node.name!r}"
    return f"{node.op_type} node producing {node.output[0]!r}" if node.output else f"{node.op_type} node"


def attrs(node: onnx.NodeProto) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def value_inputs(node: onnx.NodeProto) -> list[str]:
    """Inputs whose *values* the node reads (CastLike only reads the type of its second)."""
    return list(node.input[:1]) if node.op_type == "CastLike" else list(node.input)


def load_model(source) -> tuple[onnx.ModelProto, Optional[str]]:
    """Parse a model from a path, bytes or a ModelProto; external data only next to a file.

    Anything that is not a well-formed ONNX model (empty, truncated, random bytes, a checker
    failure, recursive local functions) is a ``ModelFormatError``: "not an ONNX model (...)".
    """
    from google.protobuf.message import Error as ProtobufError
    try:
        if isinstance(source, onnx.ModelProto):
            model, base = source, None
        elif isinstance(source, (bytes, bytearray, memoryview)):
            model, base = onnx.load_model_from_string(bytes(source)), None
        else:
            path = os.path.abspath(os.fspath(source))
            model, base = onnx.load(path, load_external_data=False), os.path.dirname(path)
    except ProtobufError as exc:
        raise ModelFormatError(f"not an ONNX model (protobuf: {_one_line(exc)})") from exc
    if model.ByteSize() == 0:
        raise ModelFormatError("not an ONNX model (empty: no graph, no version)")
    external = [t for t in _tensors(model.graph) if t.data_location == TensorProto.EXTERNAL]
    if external and base is None:
        names = ", ".join(repr(t.name) for t in external)
        raise UnsupportedOpError(
            f"tensor {names} stores its data in an external file; load the model from its path "
            "so the data file next to it can be read")
    for tensor in external:
        location = {e.key: e.value for e in tensor.external_data}.get("location", "")
        full = os.path.realpath(os.path.join(base, location))
        if os.path.isabs(location) or not full.startswith(os.path.realpath(base) + os.sep):
            raise UnsupportedOpError(f"tensor {tensor.name!r}: external data location {location!r} "
                                     "is outside the model's directory")
        if not os.path.isfile(full):
            raise FileNotFoundError(f"tensor {tensor.name!r}: external data file {full} not found")
        load_external_data_for_tensor(tensor, base)
        tensor.data_location = TensorProto.DEFAULT
        del tensor.external_data[:]
    try:
        onnx.checker.check_model(_checkable(model))
        if model.functions:
            model = inline_local_functions(model)
    except onnx.checker.ValidationError as exc:
        raise ModelFormatError(f"not an ONNX model (checker: {_one_line(exc)})") from exc
    return model, base


def _checkable(model: onnx.ModelProto) -> onnx.ModelProto:
    """What the checker sees: the frontend accepts nodes in any order and outputs without a
    declared shape; the checker demands dependency order and shapes on graph outputs. So it
    checks a copy with the nodes sorted (a cycle stays unsorted and fails) and a placeholder
    shape on such outputs (check_model does no shape inference). No copy when nothing differs.
    Linear in the graph's size (``dependency_order``): a 258 KB chain of Identity nodes took 68 s
    with the old sort, which rescanned every waiting node after each wave."""
    nodes = list(model.graph.node)
    order = [nodes[i] for i in dependency_order(
        nodes, {t.name for t in model.graph.initializer} | {v.name for v in model.graph.input})]
    shapeless = [k for k, v in enumerate(model.graph.output)
                 if v.type.HasField("tensor_type") and not v.type.tensor_type.HasField("shape")]
    if not shapeless and all(a is b for a, b in zip(order, model.graph.node)):
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    del copy.graph.node[:]
    copy.graph.node.extend(order)
    for k in shapeless:
        copy.graph.output[k].type.tensor_type.shape.SetInParent()
    return copy


def dependency_order(nodes: list[onnx.NodeProto], known: set[str]) -> list[int]:
    """Indices of ``nodes`` in dependency order, given the tensors ``known`` at the start: the
    smallest such order (so an already sorted graph keeps its order); nodes that can never run
    (a cycle, an input nobody produces) follow in their original order. O(N log N), no recursion."""
    known = set(known) | {""}
    waiting = [0] * len(nodes)
    consumers: dict[str, list[int]] = {}
    for i, node in enumerate(nodes):
        for t in set(node.input) - known:
            consumers.setdefault(t, []).append(i)
            waiting[i] += 1
    ready = [i for i, w in enumerate(waiting) if w == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for t in nodes[i].output:
            if t not in known:
                known.add(t)
                for j in consumers.pop(t, []):
                    waiting[j] -= 1
                    if waiting[j] == 0:
                        heapq.heappush(ready, j)
    done = set(order)
    return order + [i for i in range(len(nodes)) if i not in done]


def _one_line(exc: BaseException) -> str:
    """The first non-empty line of an exception's message (onnx appends multi-line context)."""
    return next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)


def _tensors(graph: onnx.GraphProto):
    yield from graph.initializer
    for node in graph.node:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.TENSOR:
                yield a.t


def shape_of(value_info: onnx.ValueInfoProto) -> Optional[Shape]:
    t = value_info.type.tensor_type
    if not t.HasField("shape"):
        return None
    return tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in t.shape.dim)


def broadcast(a: Shape, b: Shape, where: str) -> Shape:
    """Numpy broadcasting of two shapes with dynamic dims; ShapeError when incompatible."""
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + tuple(a), (1,) * (n - len(b)) + tuple(b)
    out = []
    for x, y in zip(a, b):
        if x == 1:
            out.append(y)
        elif y == 1 or x == y or y is None:
            out.append(x)
        elif x is None:
            out.append(y)
        else:
            raise ShapeError(f"{where}: shapes {a} and {b} do not broadcast")
    return tuple(out)


@dataclass(eq=False)
class Expr:
    """Expression over the input ``X`` of a run of segments (kind 'x', 'const' or 'op')."""
    kind: str
    op: str = ""
    node: Optional[onnx.NodeProto] = None
    args: tuple = ()            # Expr or None (missing optional input / type-only input)
    value: Optional[np.ndarray] = None
    tensor: str = ""
    out_index: int = 0

    @property
    def is_x(self) -> bool:
        return self.kind == "x"

    @property
    def is_const(self) -> bool:
        return self.kind == "const"

    def where(self) -> str:
        if self.node is not None:
            return label(self.node)
        return f"constant {self.tensor!r}" if self.is_const else "the input"


def only_x(e: Expr) -> bool:
    """Every data operand of e's node is X itself (a template may then decide or raise)."""
    data = [a for a in e.args if a is not None and not a.is_const]
    return bool(data) and all(a.is_x for a in data)


@dataclass
class Segment:
    source: str          # tensor entering
    target: str          # tensor leaving (all data flows through it)
    nodes: list[int]


class Graph:
    """Edge index of a model's main graph with on-demand constant folding."""

    def __init__(self, model: onnx.ModelProto, limits: Limits = DEFAULT_LIMITS):
        self.model = model
        self.limits = limits
        self.folded_elements = 0            # running total, bounded by limits.max_folded_elements
        g = model.graph
        self.nodes = list(g.node)
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
        self.initializers = {t.name: t for t in g.initializer}
        self.producer: dict[str, int] = {}
        self.consumers: dict[str, list[int]] = {}
        for i, node in enumerate(self.nodes):
            for t in node.output:
                if t:
                    if t in self.producer or t in self.initializers:
                        raise UnsupportedOpError(f"tensor {t!r} is produced twice (by {label(node)})")
                    self.producer[t] = i
            for t in value_inputs(node):
                if t:
                    self.consumers.setdefault(t, []).append(i)
        self.value_info = {v.name: v for v in list(g.input) + list(g.value_info) + list(g.output)}
        self._cache: dict[str, np.ndarray] = {}
        self._constness: dict[str, bool] = {}
        inputs = [v for v in g.input if v.name not in self.initializers]
        if len(inputs) != 1:
            names = ", ".join(repr(v.name) for v in inputs) or "none"
            raise UnsupportedOpError(
                f"the graph has {len(inputs)} non-constant inputs ({names}); a barrier takes exactly one "
                "input, the state: weights must be initializers or Constant nodes, not graph inputs")
        self.input = inputs[0]
        if len(g.output) != 1:
            desc = ", ".join(f"{o.name!r} {shape_of(o)}" for o in g.output)
            raise ShapeError(f"the graph has {len(g.output)} outputs ({desc}); a barrier has exactly one scalar output")
        self.output = g.output[0]
        self.data_nodes = self._data_path()

    # ---- constants ----------------------------------------------------------------
    def is_const(self, t: str) -> bool:
        """Structurally constant: an initializer or a foldable node over constants. Iterative
        (a depth-first walk with its own stack): a chain of 600 constant Neg nodes once ran
        out of Python's recursion limit. A cycle is not constant."""
        if t in self._constness:
            return self._constness[t]
        stack, expanded = [t], set()
        while stack:
            u = stack[-1]
            if u in self._constness:
                stack.pop()
                continue
            deps = self._foldable_inputs(u)
            if deps is None:
                self._constness[u] = u in self.initializers
                stack.pop()
            elif u not in expanded:
                expanded.add(u)
                stack.extend(d for d in deps if d not in self._constness and d not in expanded)
            else:                       # its inputs are decided (or on a cycle through u: not constant)
                self._constness[u] = all(self._constness.get(d, False) for d in deps)
                stack.pop()
        return self._constness[t]

    def _foldable_inputs(self, t: str) -> Optional[list[str]]:
        """The inputs of the foldable node producing ``t``, or None (an initializer, a graph
        input, or a node that cannot be folded)."""
        if t in self.initializers or t not in self.producer:
            return None
        node = self.nodes[self.producer[t]]
        if node.domain not in ("", "ai.onnx") or node.op_type not in FOLDABLE:
            return None
        return [i for i in value_inputs(node) if i]

    def const(self, t: str) -> Optional[np.ndarray]:
        """The value of constant tensor ``t`` (dtype as stored), or None if it is not constant.
        Folds the constants it depends on first, in dependency order, without recursion."""
        if not t or not self.is_const(t):
            return None
        stack, expanded = [t], set()
        while stack:
            u = stack[-1]
            if u in self._cache:
                stack.pop()
            elif u in self.initializers:
                self._cache[u] = self._initializer(u)
                stack.pop()
            elif u not in expanded:
                expanded.add(u)
                stack.extend(d for d in self._foldable_inputs(u) or [] if d not in self._cache)
            else:
                node = self.nodes[self.producer[u]]
                ins = [self._cache[i] if i else None for i in value_inputs(node)]
                self._reserve(node, ins)
                try:
                    out = _fold(node, ins, self)
                except (ValueError, IndexError, TypeError, KeyError) as exc:
                    raise UnsupportedOpError(f"{label(node)}: cannot fold constant: {exc}") from exc
                self._cache[u] = np.asarray(out)
                stack.pop()
        return self._cache[t]

    def _initializer(self, t: str) -> np.ndarray:
        """An initializer's values; one that is not numbers (strings, ...) is refused in one line
        naming the tensor and the node that reads it."""
        tensor = self.initializers[t]
        if tensor.data_type not in NUMERIC_TYPES:
            user = self.consumers.get(t, [])
            where = f", read by {label(self.nodes[user[0]])}," if user else ""
            kind = TensorProto.DataType.Name(tensor.data_type) if tensor.data_type in TensorProto.DataType.values() \
                else str(tensor.data_type)
            raise UnsupportedOpError(f"initializer {t!r}{where} has element type {kind}; weights must be numbers "
                                     "(float, double, float16, integer or bool)")
        try:
            return numpy_helper.to_array(tensor)
        except (ValueError, TypeError, KeyError, IndexError) as exc:
            raise ModelFormatError(f"initializer {t!r}: cannot read its values ({_one_line(exc)})") from exc

    def _reserve(self, node: onnx.NodeProto, ins: list) -> None:
        """Refuse a fold whose result would take the folded total over the limit, before computing it."""
        count = _folded_size(node, ins)
        self.limits.check("max_folded_elements", self.folded_elements + count,
                          f"constant folding of {label(node)}")
        self.folded_elements += count

    def elem_type(self, t: str) -> int:
        if t in self.value_info:
            return self.value_info[t].type.tensor_type.elem_type
        return self.input.type.tensor_type.elem_type

    # ---- the data path --------------------------------------------------------------
    def _data_path(self) -> set[int]:
        """Indices of nodes computing from the input and contributing to the output.

        Any other node must be pure constant computation; everything else is refused here.
        """
        data = {self.input.name}
        reached: set[int] = set()
        stack = [self.input.name]
        while stack:
            for i in self.consumers.get(stack.pop(), []):
                if i not in reached:
                    reached.add(i)
                    for t in self.nodes[i].output:
                        if t and t not in data:
                            data.add(t)
                            stack.append(t)
        if self.output.name not in data:
            raise UnsupportedOpError(f"the output {self.output.name!r} does not depend on the input {self.input.name!r}")
        useful: set[int] = set()
        stack = [self.output.name]
        while stack:
            t = stack.pop()
            i = self.producer.get(t)
            if i is not None and i in reached and i not in useful:
                useful.add(i)
                stack.extend(x for x in value_inputs(self.nodes[i]) if x in data)
        for i in sorted(useful):
            for t in value_inputs(self.nodes[i]):
                if t and t not in data and not self.is_const(t):
                    raise UnsupportedOpError(
                        f"input {t!r} of {label(self.nodes[i])} is not a constant; weights and parameters must "
                        "be initializers or Constant nodes (foldable: " + ", ".join(sorted(FOLDABLE)) + ")")
        for i, node in enumerate(self.nodes):
            if i in reached and i not in useful:
                raise UnsupportedOpError(
                    f"{label(node)} computes from the input but does not contribute to the output; "
                    "only a single chain from input to output is supported")
            if i not in reached and not all(self.is_const(t) for t in node.output if t):
                bad = [t for t in value_inputs(node) if t and not self.is_const(t)]
                why = f"its input {bad[0]!r} is not constant" if bad else f"{node.op_type} is not a foldable op"
                raise UnsupportedOpError(
                    f"{label(node)} is neither constant computation nor on the path from input to output "
                    f"({why})")
        return useful

    def segments(self) -> list[Segment]:
        """Cut the data path where all data flows through one tensor (order-independent)."""
        uses: dict[str, int] = {}
        for i in self.data_nodes:
            for t in value_inputs(self.nodes[i]):
                if t and not self.is_const(t):
                    uses[t] = uses.get(t, 0) + 1
        waiting = {i: sum(1 for t in value_inputs(self.nodes[i]) if t and not self.is_const(t))
                   for i in self.data_nodes}
        live = {self.input.name}
        for i in dict.fromkeys(self.consumers.get(self.input.name, [])):
            if i in self.data_nodes:
                waiting[i] -= value_inputs(self.nodes[i]).count(self.input.name)
        ready = sorted(i for i in self.data_nodes if waiting[i] == 0)
        segments, current, start, done = [], [], self.input.name, set()
        while ready:
            i = ready.pop(0)
            done.add(i)
            current.append(i)
            node = self.nodes[i]
            for t in value_inputs(node):
                if t in uses:
                    uses[t] -= 1
                    if uses[t] == 0:
                        live.discard(t)
            for t in node.output:
                if t and (uses.get(t, 0) > 0 or t == self.output.name):
                    live.add(t)
                    for j in dict.fromkeys(self.consumers.get(t, [])):
                        if j in self.data_nodes:
                            waiting[j] -= value_inputs(self.nodes[j]).count(t)
                            if waiting[j] == 0:
                                ready.append(j)
            ready.sort()
            if len(live) == 1:
                (target,) = live
                segments.append(Segment(start, target, current))
                start, current = target, []
        if len(done) != len(self.data_nodes) or live != {self.output.name}:
            raise UnsupportedOpError("the data path from input to output is not a single chain (cycle or branch)")
        return segments

    def expr(self, target: str, source: str) -> Expr:
        """Expression tree of ``target`` over ``source``; Identity, float Cast and inference
        Dropout are seen through."""
        memo: dict[str, Optional[Expr]] = {"": None}
        depth: dict[str, int] = {"": 0}     # ops on the longest path from the source
        stack, expanded = [target], set()
        while stack:                  # depth first with its own stack: no recursion limit
            t = stack[-1]
            if t in memo:
                stack.pop()
                continue
            if t == source:
                memo[t], depth[t] = Expr("x", tensor=t), 0
            elif self.is_const(t):
                memo[t], depth[t] = Expr("const", value=self.const(t), tensor=t), 0
            else:
                node = self.nodes[self.producer[t]]
                out_index = list(node.output).index(t)
                passthrough = _passthrough(node, self) if out_index == 0 else None
                needs = [passthrough] if passthrough is not None else \
                    [i for k, i in enumerate(node.input) if k < len(value_inputs(node))]
                missing = [i for i in needs if i not in memo]
                if missing:
                    if t in expanded:
                        raise UnsupportedOpError(f"{label(node)} depends on its own output (a cycle through {t!r})")
                    expanded.add(t)
                    stack.extend(missing)
                    continue
                if passthrough is not None:
                    memo[t], depth[t] = memo[passthrough], depth[passthrough]
                else:
                    args = tuple(memo[i] if k < len(value_inputs(node)) else None for k, i in enumerate(node.input))
                    memo[t] = Expr("op", op=node.op_type, node=node, args=args, tensor=t, out_index=out_index)
                    depth[t] = 1 + max((depth[i] for i in needs), default=0)
                    if depth[t] > MAX_EXPR_DEPTH:
                        raise UnsupportedOpError(
                            f"{label(node)} is {depth[t]} ops after {source!r} with no tensor between them that "
                            f"carries all the data; the pattern matcher reads at most {MAX_EXPR_DEPTH} such ops")
            stack.pop()
        return memo[target]


def _passthrough(node: onnx.NodeProto, g: Graph) -> Optional[str]:
    """The input a node forwards unchanged on the data path, if it is such a node."""
    if node.domain not in ("", "ai.onnx"):
        return None
    if node.op_type == "Identity":
        return node.input[0]
    if node.op_type == "Cast" and attrs(node).get("to") in FLOAT_TYPES:
        return node.input[0]
    if node.op_type == "CastLike" and g.elem_type(node.input[1]) in FLOAT_TYPES:
        return node.input[0]
    if node.op_type == "Dropout":       # inference unless training_mode is a constant True
        if len(node.input) <= 2 or not node.input[2]:
            return node.input[0]
        training = g.const(node.input[2])
        if training is not None and not bool(np.asarray(training).reshape(-1)[0]):
            return node.input[0]
    return None


def _axes(node: onnx.NodeProto, ins: list, a: dict) -> Optional[list[int]]:
    if "axes" in a:
        return list(a["axes"])
    if len(ins) > 1 and ins[1] is not None:
        return [int(v) for v in np.asarray(ins[1]).reshape(-1)]
    return None


def reshape_target(in_shape: Shape, target, allowzero: int, where: str) -> Shape:
    """ONNX Reshape semantics on dims that may be dynamic (None). ``target`` holds ints or
    ``InputDim``s; -1 is resolved when every dynamic input dim is copied into the target."""
    tgt = [t if isinstance(t, InputDim) else int(t) for t in
           (target if isinstance(target, list) else np.asarray(target).reshape(-1))]
    if tgt.count(-1) > 1:
        raise ShapeError(f"{where}: reshape target {_show(tgt)} has more than one -1")
    out: list[Entry] = []
    for k, d in enumerate(tgt):
        if isinstance(d, int) and d == 0 and not allowzero:
            if k >= len(in_shape):
                raise ShapeError(f"{where}: reshape target {_show(tgt)} copies dim {k} of a rank-{len(in_shape)} "
                                 "tensor")
            out.append(InputDim(k))
        else:
            out.append(d)
    if -1 in out:
        k = out.index(-1)
        rest = [d for j, d in enumerate(out) if j != k]
        dynamic = sorted(i for i, d in enumerate(in_shape) if d is None)
        copied = sorted(d.axis for d in rest if isinstance(d, InputDim) and in_shape[d.axis] is None)
        if copied != dynamic:
            out[k] = None
        else:
            total = elements(d for d in in_shape if d is not None)
            part = elements(in_shape[d.axis] if isinstance(d, InputDim) else d for d in rest
                            if not (isinstance(d, InputDim) and in_shape[d.axis] is None))
            if part == 0 or total % part:
                raise ShapeError(f"{where}: cannot reshape {in_shape} to {_show(tgt)}")
            out[k] = total // part
    return tuple(in_shape[d.axis] if isinstance(d, InputDim) else d for d in out)


def _show(target: list[Entry]) -> list:
    return [f"dim{d.axis}" if isinstance(d, InputDim) else d for d in target]


BROADCASTING = frozenset({"Add", "Sub", "Mul", "Div", "Pow"})


def _folded_size(node: onnx.NodeProto, ins: list) -> int:
    """Elements ``_fold`` will produce, from the input shapes alone (nothing allocated).
    Only Concat and broadcasting ops can grow; the others keep their first input's size."""
    arrays = [np.asarray(v) for v in ins if v is not None]
    if node.op_type == "Concat":
        return sum(a.size for a in arrays)
    if node.op_type in BROADCASTING and len(arrays) == 2:
        try:
            return elements(np.broadcast_shapes(arrays[0].shape, arrays[1].shape))
        except ValueError:
            return 0                        # _fold raises the shape error with the node's name
    return arrays[0].size if arrays else 0


def _fold(node: onnx.NodeProto, ins: list, g: Graph) -> np.ndarray:
    """Evaluate one foldable node on constant inputs (numpy, in the stored dtype)."""
    op, a = node.op_type, attrs(node)
    if op == "Constant":
        if "value" in a:
            return numpy_helper.to_array(a["value"])
        if "value_float" in a:
            return np.array(a["value_float"], dtype=np.float32)
        if "value_floats" in a:
            return np.array(a["value_floats"], dtype=np.float32)
        if "value_int" in a:
            return np.array(a["value_int"], dtype=np.int64)
        if "value_ints" in a:
            return np.array(a["value_ints"], dtype=np.int64)
        raise ValueError(f"Constant attribute {sorted(a)} is not supported")
    x = ins[0] if ins else None
    if op == "Identity":
        return x
    if op in ("Cast", "CastLike"):
        to = a["to"] if op == "Cast" else (g.const(node.input[1]).dtype if g.is_const(node.input[1])
                                           else helper.tensor_dtype_to_np_dtype(g.elem_type(node.input[1])))
        dtype = helper.tensor_dtype_to_np_dtype(to) if isinstance(to, int) else to
        return np.asarray(x).astype(dtype)
    if op == "Reshape":
        shape = reshape_target(x.shape, ins[1], a.get("allowzero", 0), label(node))
        return np.reshape(x, shape)
    if op == "Flatten":
        axis = a.get("axis", 1) % (x.ndim + 1) if x.ndim else 0
        return np.reshape(x, (int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis:]))))
    if op == "Squeeze":
        axes = _axes(node, ins, a)
        return np.squeeze(x, axis=None if axes is None else tuple(axes))
    if op == "Unsqueeze":
        axes = _axes(node, ins, a)
        rank = x.ndim + len(axes)
        for ax in sorted(v % rank for v in axes):
            x = np.expand_dims(x, ax)
        return x
    if op == "Transpose":
        return np.transpose(x, a.get("perm"))
    if op == "Concat":
        return np.concatenate([np.asarray(v) for v in ins], axis=a["axis"])
    if op == "Neg":
        return -x
    if op == "Sqrt":
        return np.sqrt(x)
    if op == "Reciprocal":
        return np.reciprocal(x)
    y = ins[1]
    if op == "Add":
        return x + y
    if op == "Sub":
        return x - y
    if op == "Mul":
        return x * y
    if op == "Div":
        if np.issubdtype(np.asarray(x).dtype, np.integer):
            return np.trunc(np.asarray(x) / y).astype(np.asarray(x).dtype)
        return x / y
    if op == "Pow":
        return np.power(x, y).astype(np.asarray(x).dtype)
    raise ValueError(f"{op} cannot be folded")
