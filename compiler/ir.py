"""The closed intermediate representation every frontend produces and every backend consumes.

A model is a tuple of layers applied in order to the state x (length ``input_dim``):
``Dense`` (y = W a + b) and ``Activation`` (elementwise, from the table in
``compiler.activations``). ``Affine`` (y = scale * a + shift, elementwise) exists only
between frontend and ``passes.canonicalize``: it carries input normalisation and folded
BatchNorm until it is merged into a neighbouring Dense. ``validate`` checks the structure
after every pass so that a wrong model can never reach an emitter.
"""
from __future__ import annotations

import hashlib
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


Layer = Union[Dense, Affine, Activation]


@dataclass(frozen=True)
class Model:
    """A feed-forward scalar network h: R^input_dim -> R."""
    layers: tuple[Layer, ...]
    input_dim: int
    name: str = "model"
    source: str = field(default="", compare=False)   # file or module it came from

    def dense_layers(self) -> list[Dense]:
        return [layer for layer in self.layers if isinstance(layer, Dense)]

    def widths(self) -> list[int]:
        """[n_0, n_1, ..., n_d] as in the paper."""
        return [self.input_dim] + [d.out_dim for d in self.dense_layers()]

    def hidden_activations(self) -> list[Activation]:
        return [layer for layer in self.layers if isinstance(layer, Activation)]

    def fingerprint(self) -> str:
        """Content hash of structure and exact weight bits (never names or dates)."""
        digest = hashlib.sha256()
        digest.update(f"in={self.input_dim};".encode())
        for layer in self.layers:
            if isinstance(layer, Dense):
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

    ``canonical=True`` also demands the emitter's form: Dense (Activation Dense)*,
    with no Affine left and no two activations in a row.
    """
    from .activations import ACTIVATIONS

    if model.input_dim < 1:
        raise ShapeError(f"model input dimension must be >= 1, got {model.input_dim}")
    width = model.input_dim
    for index, layer in enumerate(model.layers):
        label = _describe(layer, index)
        if isinstance(layer, Dense):
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
        kinds = ["D" if isinstance(l, Dense) else "A" if isinstance(l, Affine) else "S" for l in model.layers]
        pattern = "".join(kinds)
        import re
        if not re.fullmatch(r"D(SD)*", pattern):
            raise UnsupportedOpError(
                f"model is not of the form Dense (Activation Dense)*: got {'-'.join(kinds)} "
                "(D = dense, S = activation, A = unfolded affine)")
    return model
