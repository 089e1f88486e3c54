"""Rewrites that bring any frontend's IR into the emitter's canonical form
(Periodic)? Dense (Activation Dense)*. Each pass is exact algebra; ``validate`` runs after each.
A periodic embedding stays the first layer and is never folded (it is not affine)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from .errors import SmoothnessError, UnsupportedOpError
from .activations import ACTIVATIONS
from .ir import Activation, Affine, Dense, Layer, Model, Periodic, validate
from .limits import DEFAULT_LIMITS, Limits


def drop_identities(model: Model) -> Model:
    """Identity activations, and a periodic embedding with no periodic coordinate, compute nothing."""
    layers = tuple(l for l in model.layers if not (isinstance(l, Activation) and l.kind == "identity")
                   and not (isinstance(l, Periodic) and not l.periods))
    return validate(replace(model, layers=layers))


def fold_affine(model: Model) -> Model:
    """Merge each elementwise Affine into the Dense after it (or, failing that, before it)."""
    layers: list[Layer] = list(model.layers)
    changed = True
    while changed:
        changed = False
        for i, layer in enumerate(layers):
            if not isinstance(layer, Affine):
                continue
            after = layers[i + 1] if i + 1 < len(layers) else None
            before = layers[i - 1] if i > 0 else None
            if isinstance(after, Dense):      # W (s*a + t) + b = (W diag s) a + (W t + b)
                merged = Dense(after.weight * layer.scale[None, :], after.weight @ layer.shift + after.bias,
                               origin=f"{layer.origin} + {after.origin}")
                layers[i:i + 2] = [merged]
            elif isinstance(before, Dense):   # s*(W a + b) + t = (diag s W) a + (s*b + t)
                merged = Dense(before.weight * layer.scale[:, None], before.bias * layer.scale + layer.shift,
                               origin=f"{before.origin} + {layer.origin}")
                layers[i - 1:i + 1] = [merged]
            elif after is None and before is None:
                raise UnsupportedOpError(f"{layer.origin}: a network that is only an elementwise affine map")
            elif isinstance(before, Periodic):
                raise UnsupportedOpError(f"{layer.origin}: an elementwise affine map after the periodic embedding "
                                         "must be followed by a Linear layer to be folded")
            else:
                raise UnsupportedOpError(
                    f"{layer.origin}: an elementwise affine map between two activations cannot be folded "
                    "into a dense layer; place normalisation next to a Linear layer")
            changed = True
            break
    return validate(replace(model, layers=tuple(layers)))


def merge_dense(model: Model, limits: Limits = DEFAULT_LIMITS) -> Model:
    """Dense followed directly by Dense is one Dense (W2 (W1 a + b1) + b2). The product can be
    far bigger than its factors (n x 1 times 1 x n), so its size is checked before it is formed."""
    layers: list[Layer] = []
    for layer in model.layers:
        if isinstance(layer, Dense) and layers and isinstance(layers[-1], Dense):
            first = layers.pop()
            limits.check("max_weights", layer.out_dim * first.in_dim,
                         f"merging {first.origin} and {layer.origin} (no activation between them)")
            layer = Dense(layer.weight @ first.weight, layer.weight @ first.bias + layer.bias,
                          origin=f"{first.origin} + {layer.origin}")
        layers.append(layer)
    return validate(replace(model, layers=tuple(layers)))


def repeat_per_row(layers: list[Layer], rows: int, limits: Limits = DEFAULT_LIMITS) -> list[Layer]:
    """Layers that acted on each of ``rows`` rows alone, as layers on the rows' concatenation
    (a state flattened in C order): Dense becomes block-diagonal, Affine repeats per row."""
    if rows == 1:
        return list(layers)
    out: list[Layer] = []
    for layer in layers:
        if isinstance(layer, Periodic):
            raise UnsupportedOpError(f"{layer.origin or 'the periodic embedding'}: a periodic embedding needs a "
                                     f"vector state, not {rows} rows")
        if isinstance(layer, Dense):
            limits.check("max_weights", rows * rows * layer.weight.size,
                         f"{layer.origin} applied to each of the {rows} rows of the state")
            layer = Dense(np.kron(np.eye(rows), layer.weight), np.tile(layer.bias, rows), layer.origin)
        elif isinstance(layer, Affine):
            layer = Affine(np.tile(layer.scale, rows), np.tile(layer.shift, rows), layer.origin)
        out.append(layer)
    return out


def canonicalize(model: Model, limits: Limits = DEFAULT_LIMITS) -> Model:
    """Identity removal, Affine folding, Dense merging; then check the canonical form and its size."""
    model = merge_dense(fold_affine(drop_identities(model)), limits)
    limits.check("max_weights", sum(d.weight.size + d.bias.size for d in model.dense_layers()),
                 f"the network {model.name!r} ({model.describe_widths()})")
    layers = model.layers[1:] if model.embedding is not None else model.layers
    if layers and isinstance(layers[0], Activation):
        raise UnsupportedOpError(f"{layers[0].origin}: the network starts with an activation; "
                                 "the first layer must be Linear (after the periodic embedding, if any)")
    return validate(model, canonical=True)


def require_smooth(model: Model) -> None:
    """Second order needs C^2 activations (the hyper-dual eps12 term uses sigma'')."""
    for layer in model.hidden_activations():
        if not ACTIVATIONS[layer.kind].smooth:
            raise SmoothnessError(
                f"{layer.origin or layer.kind}: activation {layer.kind} is not twice continuously differentiable, "
                "so second-order (relative-degree-2) Lie derivatives are not defined; use softplus, tanh, "
                "sigmoid, silu or gelu")
