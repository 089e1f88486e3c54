"""PyTorch ``nn.Sequential`` -> IR. Reads parameters only; never runs or unpickles anything."""
from __future__ import annotations

import numpy as np

from .errors import ShapeError, UnsupportedOpError
from .ir import Activation, Affine, Dense, Layer, Model, validate

SUPPORTED = ("Linear, ReLU, LeakyReLU, Hardtanh, ELU, Tanh, Sigmoid, Softplus, SiLU, GELU, "
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


def _convert(name: str, module) -> list[Layer]:
    import torch.nn as nn
    where = f"{name} ({type(module).__name__})"
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
    simple = {nn.ReLU: ("relu", ()), nn.Tanh: ("tanh", ()), nn.Sigmoid: ("sigmoid", ()), nn.SiLU: ("silu", ())}
    for cls, (kind, params) in simple.items():
        if type(module) is cls:
            return [Activation(kind, params, origin=where)]
    if type(module) is nn.LeakyReLU:
        return [Activation("leaky_relu", (("negative_slope", float(module.negative_slope)),), origin=where)]
    if type(module) is nn.ELU:
        return [Activation("elu", (("alpha", float(module.alpha)),), origin=where)]
    if type(module) is nn.Hardtanh:   # also catches nothing else: ReLU6 is a subclass, handled below
        return [Activation("hardtanh", (("min_val", float(module.min_val)), ("max_val", float(module.max_val))),
                           origin=where)]
    if type(module) is nn.ReLU6:
        return [Activation("hardtanh", (("min_val", 0.0), ("max_val", 6.0)), origin=where)]
    if type(module) is nn.Softplus:
        return [Activation("softplus", (("beta", float(module.beta)), ("threshold", float(module.threshold))),
                           origin=where)]
    if type(module) is nn.GELU:
        if module.approximate not in ("none", "tanh"):
            raise UnsupportedOpError(f"{where}: GELU approximate={module.approximate!r} is not 'none' or 'tanh'")
        return [Activation("gelu", (("approximate", 0.0 if module.approximate == "none" else 1.0),), origin=where)]
    raise UnsupportedOpError(f"{where}: unsupported layer; supported: {SUPPORTED}")


def load_torch(module, name: str | None = None, input_dim: int | None = None) -> Model:
    """Convert an ``nn.Sequential`` (or a single supported layer) into an IR model."""
    import torch.nn as nn
    if not isinstance(module, nn.Module):
        raise UnsupportedOpError(f"expected a torch.nn.Module, got {type(module).__name__}")
    layers: list[Layer] = []
    for qualified, leaf in _flatten(module, ""):
        if not isinstance(module, nn.Sequential) and leaf is module and not isinstance(leaf, nn.Linear):
            raise UnsupportedOpError(f"{type(module).__name__}: only nn.Sequential models (or a single Linear) "
                                     f"can be compiled; supported layers: {SUPPORTED}")
        layers.extend(_convert(qualified, leaf))
    dense = [layer for layer in layers if isinstance(layer, Dense)]
    if not dense:
        raise ShapeError("the model has no Linear layer, so its input dimension is unknown")
    width = input_dim if input_dim is not None else dense[0].in_dim
    return validate(Model(tuple(layers), width, name=name or "model", source=type(module).__name__))
