"""The activation table: what each supported activation means.

For every kind: parameter checks, whether it is twice continuously differentiable
(required for second order), its supplemental derivative cost c_sigma (paper,
Prop. 2), and a numerically stable float64 numpy reference returning value, first and
second derivative. Derivative conventions at kinks follow PyTorch's autograd exactly
(ReLU'(0) = 0, LeakyReLU'(0) = slope, ELU'(0) = alpha, Hardtanh' = 0 on its bounds,
Softplus linear above its threshold), so the compiled code differentiates the
function PyTorch trained.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
from scipy.special import erf

from .errors import UnsupportedOpError

Triple = tuple[np.ndarray, np.ndarray, np.ndarray]

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
GELU_TANH_COEF = 0.044715


def _sigmoid(x: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def _relu(x, p) -> Triple:
    pos = x > 0
    return np.where(pos, x, 0.0), pos.astype(float), np.zeros_like(x)


def _leaky_relu(x, p) -> Triple:
    s = p["negative_slope"]
    pos = x > 0
    return np.where(pos, x, s * x), np.where(pos, 1.0, s), np.zeros_like(x)


def _hardtanh(x, p) -> Triple:
    lo, hi = p["min_val"], p["max_val"]
    inside = (x > lo) & (x < hi)
    return np.clip(x, lo, hi), inside.astype(float), np.zeros_like(x)


def _elu(x, p) -> Triple:
    a = p["alpha"]
    pos = x > 0
    xn = np.minimum(x, 0.0)
    return np.where(pos, x, a * np.expm1(xn)), np.where(pos, 1.0, a * np.exp(xn)), np.where(pos, 0.0, a * np.exp(xn))


def _tanh(x, p) -> Triple:
    t = np.tanh(x)
    d1 = 1.0 - t * t
    return t, d1, -2.0 * t * d1


def _sigmoid_act(x, p) -> Triple:
    s = _sigmoid(x)
    d1 = s * (1.0 - s)
    return s, d1, d1 * (1.0 - 2.0 * s)


def _softplus(x, p) -> Triple:
    beta, threshold = p["beta"], p["threshold"]
    z = beta * x
    linear = z > threshold
    value = (np.maximum(z, 0.0) + np.log1p(np.exp(-np.abs(z)))) / beta
    s = _sigmoid(z)
    return (np.where(linear, x, value), np.where(linear, 1.0, s),
            np.where(linear, 0.0, beta * s * (1.0 - s)))


def _silu(x, p) -> Triple:
    s = _sigmoid(x)
    return x * s, s * (1.0 + x * (1.0 - s)), s * (1.0 - s) * (2.0 + x * (1.0 - 2.0 * s))


def _gelu(x, p) -> Triple:
    if p["approximate"] == 0.0:
        cdf = 0.5 * (1.0 + erf(x / math.sqrt(2.0)))
        pdf = INV_SQRT_2PI * np.exp(-0.5 * x * x)
        return x * cdf, cdf + x * pdf, pdf * (2.0 - x * x)
    u = SQRT_2_OVER_PI * (x + GELU_TANH_COEF * x ** 3)
    du = SQRT_2_OVER_PI * (1.0 + 3.0 * GELU_TANH_COEF * x * x)
    ddu = SQRT_2_OVER_PI * 6.0 * GELU_TANH_COEF * x
    t = np.tanh(u)
    sech2 = 1.0 - t * t
    value = 0.5 * x * (1.0 + t)
    d1 = 0.5 * (1.0 + t) + 0.5 * x * sech2 * du
    d2 = sech2 * du + 0.5 * x * (-2.0 * t * sech2 * du * du + sech2 * ddu)
    return value, d1, d2


def _identity(x, p) -> Triple:
    return x.copy(), np.ones_like(x), np.zeros_like(x)


@dataclass(frozen=True)
class ActivationSpec:
    kind: str
    defaults: dict
    smooth: bool                     # C^2 everywhere: allowed for second order
    c_sigma: int                     # extra FLOPs per neuron for sigma' given sigma (paper Prop. 2)
    reference: Callable[[np.ndarray, dict], Triple]

    def check_params(self, params: dict, where: str) -> None:
        unknown = set(params) - set(self.defaults)
        missing = set(self.defaults) - set(params)
        if unknown or missing:
            raise UnsupportedOpError(
                f"{where}: activation {self.kind} takes parameters {sorted(self.defaults)}, got {sorted(params)}")
        for key, value in params.items():
            if not math.isfinite(value):
                raise UnsupportedOpError(f"{where}: {self.kind} parameter {key}={value} is not finite")
        if self.kind == "softplus" and params["beta"] <= 0:
            raise UnsupportedOpError(f"{where}: softplus beta must be > 0, got {params['beta']}")
        if self.kind == "hardtanh" and not params["min_val"] < params["max_val"]:
            raise UnsupportedOpError(f"{where}: hardtanh needs min_val < max_val, got {params}")
        if self.kind == "gelu" and params["approximate"] not in (0.0, 1.0):
            raise UnsupportedOpError(f"{where}: gelu approximate must be 'none' or 'tanh'")


ACTIVATIONS: dict[str, ActivationSpec] = {spec.kind: spec for spec in (
    ActivationSpec("relu", {}, False, 0, _relu),
    ActivationSpec("leaky_relu", {"negative_slope": 0.01}, False, 0, _leaky_relu),
    ActivationSpec("hardtanh", {"min_val": -1.0, "max_val": 1.0}, False, 0, _hardtanh),
    ActivationSpec("elu", {"alpha": 1.0}, False, 1, _elu),
    ActivationSpec("tanh", {}, True, 2, _tanh),
    ActivationSpec("sigmoid", {}, True, 2, _sigmoid_act),
    ActivationSpec("softplus", {"beta": 1.0, "threshold": 20.0}, True, 2, _softplus),
    ActivationSpec("silu", {}, True, 5, _silu),
    ActivationSpec("gelu", {"approximate": 0.0}, True, 8, _gelu),   # approximate: 0 none, 1 tanh
    ActivationSpec("identity", {}, True, 0, _identity),
)}


def evaluate(kind: str, params: dict, x: np.ndarray) -> Triple:
    """Value, first and second derivative of activation ``kind`` at x (float64)."""
    return ACTIVATIONS[kind].reference(np.asarray(x, dtype=np.float64), params)
