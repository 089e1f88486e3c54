"""The closed intermediate representation every frontend produces and every backend consumes.

A model is a tuple of layers applied in order to the state x (length ``input_dim``):
``Dense`` (y = W a + b) and ``Activation`` (elementwise, from the table in
``compiler.activations``), optionally preceded by one ``Periodic`` layer, the input
embedding of wrapped coordinates (``compiler.periodic``): coordinate i with period P_i
becomes the pair (sin, cos)(2 pi x_i / P_i) in place, so the first Dense reads
n + (number of periodic coordinates) values while the model's ``input_dim`` stays n. ``Affine`` (y = scale * a + shift, elementwise) exists only
between frontend and ``passes.canonicalize``: it carries input normalisation and folded
BatchNorm until it is merged into a neighbouring Dense. ``validate`` checks the structure
after every pass so that a wrong model can never reach an emitter.
"""
from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass, field
from typing import Union

import numpy as np

from .errors import NonFiniteWeightError, ShapeError, UnsupportedOpError


@dataclass(frozen=True)
class Dense:
    """y = weight @ a + bias; weight has shape (out, in), float64."""
    weight: np.ndarray
    bias: np.ndarray
    origin: str = ""          # where it came from (layer or node name), for messages

    @property
    def in_dim(self) -> int:
        return int(self.weight.shape[1])

    @property
    def out_dim(self) -> int:
        return int(self.weight.shape[0])


@dataclass(frozen=True)
class Affine:
    """Elementwise y = scale * a + shift (normalisation, BatchNorm); removed by canonicalize."""
    scale: np.ndarray
    shift: np.ndarray
    origin: str = ""


@dataclass(frozen=True)
class Activation:
    """Elementwise activation ``kind`` with its parameters (see compiler.activations)."""
    kind: str
    params: tuple[tuple[str, float], ...] = ()
    origin: str = ""

    def param(self, name: str) -> float:
        return dict(self.params)[name]


@dataclass(frozen=True)
class Periodic:
    """The periodic input embedding, only ever the first layer: x (n) -> (n + k) with
    coordinate i of ``periods`` replaced in place by (sin w_i x_i, cos w_i x_i),
    w_i = 2 pi / P_i (the float64 frequency ``compiler.periodic.PeriodicEmbedding`` uses);
    every other coordinate passes through. ``periods`` is sorted by coordinate."""
    periods: tuple[tuple[int, float], ...]
    in_dim: int
    origin: str = ""

    @property
    def out_dim(self) -> int:
        return self.in_dim + len(self.periods)

    def frequencies(self) -> dict[int, float]:
        """{coordinate: w = 2 pi / P} in float64, computed as the torch module computes it."""
        return {i: 2.0 * math.pi / p for i, p in self.periods}

    def columns(self) -> list[tuple[int, str]]:
        """(source coordinate, "x" | "sin" | "cos") for each embedded column, in order."""
        periodic = dict(self.periods)
        out: list[tuple[int, str]] = []
        for i in range(self.in_dim):
            out += [(i, "sin"), (i, "cos")] if i in periodic else [(i, "x")]
        return out


Layer = Union[Periodic, Dense, Affine, Activation]


@dataclass(frozen=True)
class Model:
    """A feed-forward scalar network h: R^input_dim -> R."""
    layers: tuple[Layer, ...]
    input_dim: int
    name: str = "model"
    source: str = field(default="", compare=False)   # file or module it came from

    def dense_layers(self) -> list[Dense]:
        return [layer for layer in self.layers if isinstance(layer, Dense)]

    @property
    def embedding(self) -> Periodic | None:
        """The periodic input embedding, if the model starts with one."""
        return self.layers[0] if self.layers and isinstance(self.layers[0], Periodic) else None

    @property
    def embedded_dim(self) -> int:
        """Width the first Dense reads: n, or n + k after a periodic embedding of k coordinates."""
        emb = self.embedding
        return emb.out_dim if emb is not None else self.input_dim

    def widths(self) -> list[int]:
        """[n_0, n_1, ..., n_d] as in the paper: the Dense layers' widths, n_0 = ``embedded_dim``
        (the state dimension ``input_dim`` when there is no periodic embedding)."""
        return [self.embedded_dim] + [d.out_dim for d in self.dense_layers()]

    def reads_state(self) -> np.ndarray:
        """bool (input_dim,): the state coordinates the network reads, i.e. those with a nonzero
        first-layer weight on one of their (embedded) columns."""
        read = np.any(self.dense_layers()[0].weight != 0.0, axis=0)
        emb = self.embedding
        if emb is None:
            return read
        out = np.zeros(self.input_dim, dtype=bool)
        for col, (i, _) in enumerate(emb.columns()):
            out[i] |= bool(read[col])
        return out

    def describe_widths(self) -> str:
        """'3-32-32-1', or '3>4-32-32-1' with a periodic embedding of one coordinate (n > n_0)."""
        text = "-".join(map(str, self.widths()))
        return f"{self.input_dim}>{text}" if self.embedding is not None else text

    def hidden_activations(self) -> list[Activation]:
        return [layer for layer in self.layers if isinstance(layer, Activation)]

    def fingerprint(self) -> str:
        """Content hash of structure and exact weight bits (never names or dates)."""
        digest = hashlib.sha256()
        digest.update(f"in={self.input_dim};".encode())
        for layer in self.layers:
            if isinstance(layer, Periodic):
                digest.update(f"P{layer.in_dim};".encode())
                digest.update(";".join(f"{i}:{float(p).hex()}" for i, p in layer.periods).encode())
            elif isinstance(layer, Dense):
                digest.update(b"D")
                digest.update(np.ascontiguousarray(layer.weight, dtype=np.float64).tobytes())
                digest.update(np.ascontiguousarray(layer.bias, dtype=np.float64).tobytes())
            elif isinstance(layer, Affine):
                digest.update(b"A")
                digest.update(np.ascontiguousarray(layer.scale, dtype=np.float64).tobytes())
                digest.update(np.ascontiguousarray(layer.shift, dtype=np.float64).tobytes())
            else:
                digest.update(f"S{layer.kind}{layer.params!r}".encode())
        return digest.hexdigest()


def _describe(layer: Layer, index: int) -> str:
    where = f" ({layer.origin})" if layer.origin else ""
    return f"layer {index} {type(layer).__name__}{where}"


def validate(model: Model, *, canonical: bool = False) -> Model:
    """Check dimensions chain, weights are finite and the output is scalar.

    ``canonical=True`` also demands the emitter's form: (Periodic)? Dense (Activation Dense)*,
    with no Affine left and no two activations in a row.
    """
    from .activations import ACTIVATIONS

    if model.input_dim < 1:
        raise ShapeError(f"model input dimension must be >= 1, got {model.input_dim}")
    width = model.input_dim
    for index, layer in enumerate(model.layers):
        label = _describe(layer, index)
        if isinstance(layer, Periodic):
            width = _check_periodic(layer, index, label, model.input_dim)
        elif isinstance(layer, Dense):
            w, b = layer.weight, layer.bias
            if w.ndim != 2 or b.shape != (w.shape[0],):
                raise ShapeError(f"{label}: weight {w.shape} and bias {b.shape} do not form a dense layer")
            if w.shape[1] != width:
                raise ShapeError(f"{label}: expects {w.shape[1]} inputs but receives {width}")
            for what, arr in (("weight", w), ("bias", b)):
                if not np.all(np.isfinite(arr)):
                    bad = np.argwhere(~np.isfinite(arr))[0].tolist()
                    raise NonFiniteWeightError(f"{label}: {what} has a non-finite value {arr[tuple(bad)]} at index {bad}")
            width = w.shape[0]
        elif isinstance(layer, Affine):
            for what, arr in (("scale", layer.scale), ("shift", layer.shift)):
                if arr.shape != (width,):
                    raise ShapeError(f"{label}: {what} has shape {arr.shape}, expected ({width},)")
                if not np.all(np.isfinite(arr)):
                    raise NonFiniteWeightError(f"{label}: {what} has a non-finite value")
        elif isinstance(layer, Activation):
            if layer.kind not in ACTIVATIONS:
                raise UnsupportedOpError(f"{label}: unknown activation {layer.kind!r}; supported: {', '.join(sorted(ACTIVATIONS))}")
            ACTIVATIONS[layer.kind].check_params(dict(layer.params), label)
        else:
            raise UnsupportedOpError(f"{label}: not an IR layer")
    if width != 1:
        raise ShapeError(f"the barrier must have one scalar output, but the last layer gives {width}")
    if canonical:
        kinds = ["P" if isinstance(l, Periodic) else "D" if isinstance(l, Dense) else "A" if isinstance(l, Affine)
                 else "S" for l in model.layers]
        pattern = "".join(kinds)
        if not re.fullmatch(r"P?D(SD)*", pattern):
            raise UnsupportedOpError(
                f"model is not of the form (Periodic)? Dense (Activation Dense)*: got {'-'.join(kinds)} "
                "(P = periodic embedding, D = dense, S = activation, A = unfolded affine)")
    return model


def _check_periodic(layer: Periodic, index: int, label: str, n: int) -> int:
    """A periodic embedding: first, on the whole state, with sorted in-range coordinates and
    finite positive periods. Returns its output width."""
    if index != 0:
        raise UnsupportedOpError(f"{label}: the periodic embedding must be the first layer (it reads the state)")
    if layer.in_dim != n:
        raise ShapeError(f"{label}: embeds a {layer.in_dim}-state but the model's input dimension is {n}")
    seen: list[int] = []
    for i, p in layer.periods:
        if not (isinstance(i, int) and 0 <= i < n):
            raise ShapeError(f"{label}: periodic coordinate {i!r} is not a state index in 0..{n - 1}")
        if not (isinstance(p, float) and math.isfinite(p) and p > 0):
            raise NonFiniteWeightError(f"{label}: coordinate {i}: the period must be a finite float > 0, got {p!r}")
        if seen and i <= seen[-1]:
            raise ShapeError(f"{label}: periodic coordinates must be listed once each in increasing order, "
                             f"got {[c for c, _ in layer.periods]}")
        seen.append(i)
    return layer.out_dim
