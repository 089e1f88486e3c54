"""PyTorch ``nn.Sequential`` -> IR. Reads parameters only; never runs or unpickles anything.

A state need not be a vector: given ``state_shape`` (e.g. (2, 3) for two agents of three
features), the IR state is its C-order flattening, layers before an ``nn.Flatten`` act on
the last axis of every row (a Linear becomes block-diagonal, the same weights per row), and
``nn.Flatten`` merges the rows into one vector, exactly as torch computes it."""
from __future__ import annotations

import numpy as np

from .activations import ACTIVATIONS
from .errors import ShapeError, UnsupportedOpError
from .ir import Activation, Affine, Dense, Layer, Model, Periodic, validate
from .limits import DEFAULT_LIMITS, Limits, elements
from .passes import repeat_per_row

SUPPORTED = ("PeriodicEmbedding (compiler.periodic; first layer only), Linear, ReLU, LeakyReLU, Hardtanh, ELU, Tanh, Sigmoid, Softplus, SiLU, GELU, "
             "Identity, Flatten, Dropout, BatchNorm1d (eval mode), nested Sequential")


def _array(tensor) -> np.ndarray:
    return tensor.detach().cpu().double().numpy().copy()


def _flatten(module, prefix: str):
    """Yield (qualified name, leaf module) in execution order through nested Sequentials."""
    import torch.nn as nn
    if isinstance(module, nn.Sequential):
        # _modules, not named_children(): the latter skips a module instance used twice,
        # which torch nevertheless executes twice.
        for child_name, child in module._modules.items():
            if child is None:
                continue
            yield from _flatten(child, f"{prefix}.{child_name}" if prefix else child_name)
    else:
        yield prefix or type(module).__name__, module


def _periodic(where: str, module) -> Periodic:
    """The IR of a ``compiler.periodic.PeriodicEmbedding`` (its own class, not a subclass)."""
    from .periodic import PeriodicEmbedding, check_periods
    if type(module) is not PeriodicEmbedding:
        raise UnsupportedOpError(f"{where}: a subclass of PeriodicEmbedding may compute something else; "
                                 "use compiler.periodic.periodic_embedding")
    try:
        periods = check_periods(module.n, module.periods)
    except ValueError as exc:
        raise UnsupportedOpError(f"{where}: {exc}") from None
    return Periodic(tuple(periods.items()), int(module.n), origin=where)


def _convert(name: str, module) -> list[Layer]:
    import torch.nn as nn
    from .periodic import is_periodic_embedding
    where = f"{name} ({type(module).__name__})"
    if is_periodic_embedding(module):
        return [_periodic(where, module)]
    if isinstance(module, nn.Linear):
        bias = _array(module.bias) if module.bias is not None else np.zeros(module.out_features)
        return [Dense(_array(module.weight), bias, origin=where)]
    if isinstance(module, (nn.Identity, nn.Dropout, nn.Flatten)):
        if isinstance(module, nn.Flatten) and module.start_dim != 1:
            raise UnsupportedOpError(f"{where}: only Flatten(start_dim=1) is a no-op on a state vector")
        return []
    if isinstance(module, nn.BatchNorm1d):
        if module.training:
            raise UnsupportedOpError(f"{where}: BatchNorm1d is in training mode; call model.eval() before compiling")
        if module.running_mean is None or module.running_var is None:
            raise UnsupportedOpError(f"{where}: BatchNorm1d without running statistics cannot be folded")
        scale = 1.0 / np.sqrt(_array(module.running_var) + module.eps)
        shift = -_array(module.running_mean) * scale
        if module.affine:
            gamma, beta = _array(module.weight), _array(module.bias)
            scale, shift = scale * gamma, shift * gamma + beta
        return [Affine(scale, shift, origin=where)]
    if type(module) is nn.ReLU6:   # a Hardtanh subclass with fixed bounds
        return [Activation("hardtanh", (("min_val", 0.0), ("max_val", 6.0)), origin=where)]
    for kind, spec in ACTIVATIONS.items():   # exact types: subclasses may compute something else
        if spec.torch_class and type(module) is getattr(nn, spec.torch_class):
            try:
                params = spec.torch_read(module)
            except UnsupportedOpError as exc:
                raise UnsupportedOpError(f"{where}: {exc}") from None
            return [Activation(kind, tuple((k, params[k]) for k in spec.defaults), origin=where)]
    raise UnsupportedOpError(f"{where}: unsupported layer; supported: {SUPPORTED}")


def load_torch(module, name: str | None = None, input_dim: int | None = None,
               state_shape: tuple[int, ...] | None = None, limits: Limits = DEFAULT_LIMITS) -> Model:
    """Convert an ``nn.Sequential`` (or a single supported layer) into an IR model.

    ``state_shape``: the shape of one state when it is not a vector (see the module docstring);
    the model's input dimension is then its product.
    """
    import torch.nn as nn
    if not isinstance(module, nn.Module):
        raise UnsupportedOpError(f"expected a torch.nn.Module, got {type(module).__name__}")
    shape = None if state_shape is None else _checked_state_shape(state_shape, input_dim)
    from .periodic import is_periodic_embedding
    layers: list[Layer] = []
    for qualified, leaf in _flatten(module, ""):
        if not isinstance(module, nn.Sequential) and leaf is module and not isinstance(leaf, nn.Linear):
            raise UnsupportedOpError(f"{type(module).__name__}: only nn.Sequential models (or a single Linear) "
                                     f"can be compiled; supported layers: {SUPPORTED}")
        if is_periodic_embedding(leaf):
            if layers:
                raise UnsupportedOpError(f"{qualified} (PeriodicEmbedding): the periodic embedding must be the "
                                         f"first layer (it reads the state), but it follows {layers[-1].origin}")
            if shape is not None and len(shape) > 1:
                raise UnsupportedOpError(f"{qualified} (PeriodicEmbedding): a periodic embedding needs a vector "
                                         f"state, not state_shape {shape}")
        if shape is None:
            layers.extend(_convert(qualified, leaf))
        elif isinstance(leaf, nn.Flatten):
            shape = _flattened(shape, leaf, f"{qualified} (Flatten)")
        else:
            converted, shape = _per_row(_convert(qualified, leaf), shape, leaf, limits)
            layers.extend(converted)
    dense = [layer for layer in layers if isinstance(layer, Dense)]
    if not dense:
        raise ShapeError("the model has no Linear layer, so its input dimension is unknown")
    first = layers[0] if isinstance(layers[0], Periodic) else None
    width = elements(state_shape) if state_shape is not None else input_dim if input_dim is not None \
        else first.in_dim if first is not None else dense[0].in_dim
    return validate(Model(tuple(layers), width, name=name or "model", source=type(module).__name__))


def _checked_state_shape(state_shape, input_dim: int | None) -> tuple[int, ...]:
    shape = tuple(int(d) for d in state_shape)
    if not shape or any(d < 1 for d in shape):
        raise ShapeError(f"state_shape {tuple(state_shape)} must be one or more positive dimensions")
    if input_dim is not None and input_dim != elements(shape):
        raise ShapeError(f"input_dim {input_dim} is not the size {elements(shape)} of state_shape {shape}")
    return shape


def _flattened(shape: tuple[int, ...], flatten, where: str) -> tuple[int, ...]:
    """The state shape after ``nn.Flatten`` (its dims count the batch axis as 0)."""
    rank = len(shape) + 1
    start, end = flatten.start_dim % rank, flatten.end_dim % rank
    if start == 0:
        raise UnsupportedOpError(f"{where}: start_dim=0 merges the batch axis, mixing states across the batch")
    start, end = start - 1, end - 1
    return shape[:start] + (elements(shape[start:end + 1]),) + shape[end + 1:]


def _per_row(layers: list[Layer], shape: tuple[int, ...], leaf, limits: Limits) -> tuple[list[Layer], tuple]:
    """Layers acting on the last axis of a state of ``shape``, as layers on its C-order flattening."""
    import torch.nn as nn
    rows = elements(shape[:-1])
    if rows > 1 and isinstance(leaf, nn.BatchNorm1d):
        raise UnsupportedOpError(f"{layers[0].origin}: BatchNorm1d before the Flatten of a state of shape {shape} "
                                 "normalises axis 1, not the features; place it after the Flatten")
    for layer in layers:
        if isinstance(layer, Periodic):
            if layer.in_dim != shape[-1]:
                raise ShapeError(f"{layer.origin}: embeds {layer.in_dim} coordinates but the state has {shape[-1]}")
            shape = shape[:-1] + (layer.out_dim,)
        if isinstance(layer, Dense):
            if layer.in_dim != shape[-1]:
                raise ShapeError(f"{layer.origin}: expects {layer.in_dim} inputs but the state's last axis has "
                                 f"{shape[-1]} (state shape {shape})")
            shape = shape[:-1] + (layer.out_dim,)
    return repeat_per_row(layers, rows, limits), shape
