"""The activation table: every supported activation is one entry, and every consumer reads it.

For every kind: parameter checks (a per-entry validator), whether it is twice continuously differentiable
(required for second order), its supplemental derivative cost c_sigma (paper,
Prop. 2), and a numerically stable float64 numpy reference returning value, first and
second derivative. Derivative conventions at kinks follow PyTorch's autograd exactly
(ReLU'(0) = 0, LeakyReLU'(0) = slope, ELU'(0) = alpha, Hardtanh' = 0 on its bounds,
Softplus linear above its threshold), so the compiled code differentiates the
function PyTorch trained. Each entry also carries its C++ body (compiler.cpp_activations
wraps it), its torch module (constructor from params and the params read back), its ONNX
op, its training names (training.architectures) and an empty slot for its interval
enclosure. Adding an activation is one entry here plus its tests; tests/test_activation_table.py
checks that every consumer covers exactly these keys.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .bounds_activations import ENCLOSURES as _ENCLOSURES
from .cpp_snippets import Literal, sel, sigmoid_lines, tanh_lines
from .errors import UnsupportedOpError

Triple = tuple[np.ndarray, np.ndarray, np.ndarray]
Body = tuple[list[str], str]   # C++ statements (y, d1) and the expression for d2

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
        from scipy.special import erf       # here, not at the top: scipy.special is 0.3 s of every CLI start
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


# ---- C++ bodies: statements computing y and d1 from a, and the d2 expression ----------
# Branch-free (see compiler/cpp_activations.py); the stable forms of the references above.

def _relu_cpp(p: dict, L: Literal, order: int) -> Body:
    return [f"const bool on = a > {L(0)};", f"d1 = {sel('on', L(1), L(0))};",
            f"const scalar y = {sel('on', 'a', L(0))};"], L(0)


def _leaky_relu_cpp(p: dict, L: Literal, order: int) -> Body:
    s = L(p["negative_slope"])
    return [f"const bool on = a > {L(0)};", f"d1 = {sel('on', L(1), s)};",
            f"const scalar y = {sel('on', 'a', f'{s} * a')};"], L(0)


def _hardtanh_cpp(p: dict, L: Literal, order: int) -> Body:
    lo, hi = L(p["min_val"]), L(p["max_val"])
    return [f"d1 = {sel(f'(a > {lo}) & (a < {hi})', L(1), L(0))};",
            f"const scalar y = {sel(f'a < {lo}', lo, sel(f'a > {hi}', hi, 'a'))};"], L(0)


def _elu_cpp(p: dict, L: Literal, order: int) -> Body:
    al = L(p["alpha"])
    return [f"const bool on = a > {L(0)};",
            f"const scalar em = m_expm1({sel('on', L(0), 'a')});",
            f"d1 = {sel('on', L(1), f'{al} * (em + {L(1)})')};",
            f"const scalar y = {sel('on', 'a', f'{al} * em')};"], sel("on", L(0), f"{al} * (em + {L(1)})")


def _tanh_cpp(p: dict, L: Literal, order: int) -> Body:
    return tanh_lines("a", L) + ["d1 = sech2;", "const scalar y = t;"], f"{L(-2)} * t * sech2"


def _sigmoid_cpp(p: dict, L: Literal, order: int) -> Body:
    return sigmoid_lines("a", L) + ["d1 = s * sc;", "const scalar y = s;"], "s * sc * (sc - s)"


def _softplus_cpp(p: dict, L: Literal, order: int) -> Body:
    beta, threshold = p["beta"], p["threshold"]
    z = "a" if beta == 1.0 else f"({L(beta)} * a)"
    soft = f"({sel(f'({z}) > {L(0)}', f'({z})', L(0))} + m_log1p(e))"
    if beta != 1.0:
        soft = f"{soft} / {L(beta)}"
    lines = sigmoid_lines(z, L, complement=order == 2) + [
        f"const bool lin = ({z}) > {L(threshold)};",
        f"d1 = {sel('lin', L(1), 's')};",
        f"const scalar y = {sel('lin', 'a', soft)};",
    ]
    return lines, sel("lin", L(0), "s * sc" if beta == 1.0 else f"{L(beta)} * s * sc")


def _silu_cpp(p: dict, L: Literal, order: int) -> Body:
    return (sigmoid_lines("a", L) + ["d1 = s + a * s * sc;", "const scalar y = a * s;"],
            f"s * sc * ({L(2)} + a * (sc - s))")


def _gelu_cpp(p: dict, L: Literal, order: int) -> Body:
    if p["approximate"] == 0.0:
        lines = [f"const scalar cdf = {L(0.5)} * ({L(1)} + m_erf(a * {L(1 / math.sqrt(2))}));",
                 f"const scalar pdf = {L(1 / math.sqrt(2 * math.pi))} * m_exp({L(-0.5)} * a * a);",
                 "d1 = cdf + a * pdf;", "const scalar y = a * cdf;"]
        return lines, f"pdf * ({L(2)} - a * a)"
    c, k = SQRT_2_OVER_PI, GELU_TANH_COEF
    tails = f"sech2 > {L(0)}"   # no 0 * inf for huge |a|
    lines = [f"const scalar u = {L(c)} * (a + {L(k)} * a * a * a);",
             f"const scalar du = {L(c)} * ({L(1)} + {L(3 * k)} * a * a);"]
    lines += tanh_lines("u", L)
    lines += [f"const scalar sd = {sel(tails, 'sech2 * du', L(0))};",
              f"d1 = {L(0.5)} * ({L(1)} + t) + {L(0.5)} * a * sd;",
              f"const scalar y = {L(0.5)} * a * ({L(1)} + t);"]
    d2 = (f"sd + {L(0.5)} * a * ({L(-2)} * t * sd * {sel(tails, 'du', L(0))} "
          f"+ {sel(tails, f'sech2 * {L(6 * c * k)} * a', L(0))})")
    return lines, d2


def _identity_cpp(p: dict, L: Literal, order: int) -> Body:
    return [f"d1 = {L(1)};", "const scalar y = a;"], L(0)


# ---- parameter validators: the problem in words, or None ----------------------------

def _softplus_check(p: dict) -> str | None:
    return None if p["beta"] > 0 else f"softplus beta must be > 0, got {p['beta']}"


def _hardtanh_check(p: dict) -> str | None:
    return None if p["min_val"] < p["max_val"] else f"hardtanh needs min_val < max_val, got {p}"


def _gelu_check(p: dict) -> str | None:
    return None if p["approximate"] in (0.0, 1.0) else "gelu approximate must be 'none' or 'tanh'"


# ---- torch: read params back from a module (the constructor takes them as keywords) ---

def _no_params(module) -> dict:
    return {}


def _read(*names: str) -> Callable[[object], dict]:
    return lambda module: {key: float(getattr(module, key)) for key in names}


def _gelu_read(module) -> dict:
    if module.approximate not in ("none", "tanh"):
        raise UnsupportedOpError(f"GELU approximate={module.approximate!r} is not 'none' or 'tanh'")
    return {"approximate": 0.0 if module.approximate == "none" else 1.0}


def _gelu_args(p: dict) -> dict:
    return {"approximate": "tanh" if p.get("approximate") == 1.0 else "none"}


def _same_args(p: dict) -> dict:
    return dict(p)


@dataclass(frozen=True)
class ActivationSpec:
    kind: str
    defaults: dict
    smooth: bool                     # C^2 everywhere: allowed for second order
    c_sigma: int                     # extra FLOPs per neuron for sigma' given sigma (paper Prop. 2)
    reference: Callable[[np.ndarray, dict], Triple]
    # The fields below default to "none" so a spec can be built from the five above (tests do);
    # every table entry fills cpp and torch_class, which tests/test_activation_table.py checks.
    cpp: Callable[[dict, Literal, int], Body] | None = None   # C++ body (compiler.cpp_activations wraps it)
    torch_class: str | None = None   # torch.nn class name (imported lazily)
    torch_read: Callable[[object], dict] = _no_params      # params read back from a module
    torch_args: Callable[[dict], dict] = _same_args        # constructor keywords from params
    onnx_op: str | None = None       # the single ONNX op computing it, if any (patterns: frontend_onnx)
    presets: dict = field(default_factory=dict)   # training names -> params (training.architectures)
    piecewise_linear: bool = False   # sigma'' = 0 almost everywhere (exact affine pieces)
    not_smooth: str = ""             # why it is not C^2, for refusals at config and compile time
    check: Callable[[dict], str | None] | None = None       # extra parameter rule beyond finiteness
    # Sound interval enclosure of (sigma, sigma', sigma'') over a box of inputs, with its kinks
    # (compiler/bounds_activations.py builds them; compiler/bounds.py and the certifier read them here)
    enclosure: Callable | None = None

    def check_params(self, params: dict, where: str) -> None:
        unknown = set(params) - set(self.defaults)
        missing = set(self.defaults) - set(params)
        if unknown or missing:
            raise UnsupportedOpError(
                f"{where}: activation {self.kind} takes parameters {sorted(self.defaults)}, got {sorted(params)}")
        for key, value in params.items():
            if not math.isfinite(value):
                raise UnsupportedOpError(f"{where}: {self.kind} parameter {key}={value} is not finite")
        problem = self.check(params) if self.check else None
        if problem:
            raise UnsupportedOpError(f"{where}: {problem}")

    def torch_module(self, params: dict | None = None):
        """A fresh torch module computing this activation with ``params`` (defaults for the rest)."""
        import torch.nn as nn
        if self.torch_class is None:
            raise UnsupportedOpError(f"activation {self.kind} has no torch module")
        return getattr(nn, self.torch_class)(**self.torch_args({**self.defaults, **(params or {})}))


_KINK = "zero second derivative almost everywhere"
ACTIVATIONS: dict[str, ActivationSpec] = {spec.kind: spec for spec in (
    ActivationSpec("relu", {}, False, 0, _relu, _relu_cpp, "ReLU", onnx_op="Relu", presets={"relu": {}},
                   piecewise_linear=True, not_smooth=_KINK,
                   enclosure=_ENCLOSURES["relu"]),
    ActivationSpec("leaky_relu", {"negative_slope": 0.01}, False, 0, _leaky_relu, _leaky_relu_cpp, "LeakyReLU",
                   _read("negative_slope"), onnx_op="LeakyRelu", presets={"leaky_relu": {}},
                   piecewise_linear=True, not_smooth=_KINK,
                   enclosure=_ENCLOSURES["leaky_relu"]),
    ActivationSpec("hardtanh", {"min_val": -1.0, "max_val": 1.0}, False, 0, _hardtanh, _hardtanh_cpp, "Hardtanh",
                   _read("min_val", "max_val"), onnx_op="Clip", presets={"hardtanh": {}},
                   piecewise_linear=True, not_smooth=_KINK, check=_hardtanh_check,
                   enclosure=_ENCLOSURES["hardtanh"]),
    ActivationSpec("elu", {"alpha": 1.0}, False, 1, _elu, _elu_cpp, "ELU", _read("alpha"), onnx_op="Elu",
                   presets={"elu": {}}, not_smooth="its second derivative jumps at 0: alpha e^a on the left, 0 on the right",
                   enclosure=_ENCLOSURES["elu"]),
    ActivationSpec("tanh", {}, True, 2, _tanh, _tanh_cpp, "Tanh", onnx_op="Tanh", presets={"tanh": {}},
                   enclosure=_ENCLOSURES["tanh"]),
    ActivationSpec("sigmoid", {}, True, 2, _sigmoid_act, _sigmoid_cpp, "Sigmoid", onnx_op="Sigmoid",
                   presets={"sigmoid": {}},
                   enclosure=_ENCLOSURES["sigmoid"]),
    ActivationSpec("softplus", {"beta": 1.0, "threshold": 20.0}, True, 2, _softplus, _softplus_cpp, "Softplus",
                   _read("beta", "threshold"), onnx_op="Softplus", presets={"softplus": {}}, check=_softplus_check,
                   enclosure=_ENCLOSURES["softplus"]),
    ActivationSpec("silu", {}, True, 5, _silu, _silu_cpp, "SiLU", presets={"silu": {}},
                   enclosure=_ENCLOSURES["silu"]),
    ActivationSpec("gelu", {"approximate": 0.0}, True, 8, _gelu, _gelu_cpp, "GELU",   # approximate: 0 none, 1 tanh
                   _gelu_read, _gelu_args, onnx_op="Gelu", presets={"gelu": {}, "gelu_tanh": {"approximate": 1.0}},
                   check=_gelu_check,
                   enclosure=_ENCLOSURES["gelu"]),
    ActivationSpec("identity", {}, True, 0, _identity, _identity_cpp, "Identity",
                   enclosure=_ENCLOSURES["identity"]),   # not offered for training
)}


def preset(name: str) -> tuple[ActivationSpec, dict]:
    """The entry and params behind a training name such as 'gelu_tanh' (KeyError if unknown)."""
    for spec in ACTIVATIONS.values():
        if name in spec.presets:
            return spec, dict(spec.presets[name])
    raise KeyError(name)


def evaluate(kind: str, params: dict, x: np.ndarray) -> Triple:
    """Value, first and second derivative of activation ``kind`` at x (float64)."""
    return ACTIVATIONS[kind].reference(np.asarray(x, dtype=np.float64), params)
