"""The C++ op table: for each activation kind, the body of ``eval`` returning sigma(a) and
writing sigma'(a) (and sigma''(a) for order 2). Each body is branch-free so the activation
loop vectorizes: every choice goes through ``mx_select`` of the header's math (a bit-mask
select on vector targets, ``c ? a : b`` on scalar cores) and conditions combine with ``&``,
because GCC sinks the arithmetic of a floating-point ``?:`` into a branch and then cannot
vectorize the loop (the pendulum's Softplus layer: 5,696 -> 610 instructions per call).
The bodies use the stable forms of ``compiler.activations``: exp is only ever taken of a
non-positive argument, so nothing overflows for any finite a."""
from __future__ import annotations

import math

from .errors import UnsupportedOpError


def literal(value: float, scalar: str) -> str:
    """Round-trip literal: %.9g of the float32 value for float, %.17g for double."""
    import numpy as np
    if scalar == "float":
        text = "%.9g" % float(np.float32(value))
    else:
        text = "%.17g" % float(value)
    if not any(ch in text for ch in ".en"):
        text += ".0"
    if text in ("inf", "-inf", "nan"):
        raise UnsupportedOpError(f"cannot print non-finite constant {value}")
    return text + ("f" if scalar == "float" else "")


def sel(cond: str, a: str, b: str) -> str:
    """C++ for ``cond ? a : b`` through mx_select (no branch where loops should vectorize)."""
    return f"mx_select({cond}, {a}, {b})"


def _sigmoid_lines(arg: str, L, complement: bool = True) -> list[str]:
    """s = sigmoid(arg) and (if asked) sc = 1 - s without cancellation, from e = exp(-|arg|) <= 1."""
    pos = f"({arg}) >= {L(0)}"
    lines = [
        f"const scalar e = m_exp(-{sel(f'({arg}) < {L(0)}', f'-({arg})', f'({arg})')});",
        f"const scalar r = {L(1)} / ({L(1)} + e);",
        f"const scalar s = {sel(pos, 'r', 'e * r')};",
    ]
    if complement:
        lines.append(f"const scalar sc = {sel(pos, 'e * r', 'r')};")
    return lines


def activation_body(kind: str, params: dict, scalar: str, order: int) -> list[str]:
    """Statements computing ``y`` (returned), ``d1`` and, if order == 2, ``d2`` from ``a``."""
    L = lambda v: literal(v, scalar)  # noqa: E731
    if kind == "relu":
        lines = [f"const bool on = a > {L(0)};", f"d1 = {sel('on', L(1), L(0))};",
                 f"const scalar y = {sel('on', 'a', L(0))};"]
        d2 = L(0)
    elif kind == "leaky_relu":
        s = L(params["negative_slope"])
        lines = [f"const bool on = a > {L(0)};", f"d1 = {sel('on', L(1), s)};",
                 f"const scalar y = {sel('on', 'a', f'{s} * a')};"]
        d2 = L(0)
    elif kind == "hardtanh":
        lo, hi = L(params["min_val"]), L(params["max_val"])
        lines = [f"d1 = {sel(f'(a > {lo}) & (a < {hi})', L(1), L(0))};",
                 f"const scalar y = {sel(f'a < {lo}', lo, sel(f'a > {hi}', hi, 'a'))};"]
        d2 = L(0)
    elif kind == "elu":
        al = L(params["alpha"])
        lines = [f"const bool on = a > {L(0)};",
                 f"const scalar em = m_expm1({sel('on', L(0), 'a')});",
                 f"d1 = {sel('on', L(1), f'{al} * (em + {L(1)})')};",
                 f"const scalar y = {sel('on', 'a', f'{al} * em')};"]
        d2 = sel("on", L(0), f"{al} * (em + {L(1)})")
    elif kind == "tanh":
        lines = _tanh_lines("a", L) + ["d1 = sech2;", "const scalar y = t;"]
        d2 = f"{L(-2)} * t * sech2"
    elif kind == "sigmoid":
        lines = _sigmoid_lines("a", L) + ["d1 = s * sc;", "const scalar y = s;"]
        d2 = "s * sc * (sc - s)"
    elif kind == "softplus":
        beta, threshold = params["beta"], params["threshold"]
        z = "a" if beta == 1.0 else f"({L(beta)} * a)"
        soft = f"({sel(f'({z}) > {L(0)}', f'({z})', L(0))} + m_log1p(e))"
        if beta != 1.0:
            soft = f"{soft} / {L(beta)}"
        lines = _sigmoid_lines(z, L, complement=order == 2) + [
            f"const bool lin = ({z}) > {L(threshold)};",
            f"d1 = {sel('lin', L(1), 's')};",
            f"const scalar y = {sel('lin', 'a', soft)};",
        ]
        d2 = sel("lin", L(0), "s * sc" if beta == 1.0 else f"{L(beta)} * s * sc")
    elif kind == "silu":
        lines = _sigmoid_lines("a", L) + ["d1 = s + a * s * sc;", "const scalar y = a * s;"]
        d2 = f"s * sc * ({L(2)} + a * (sc - s))"
    elif kind == "gelu" and params["approximate"] == 0.0:
        lines = [f"const scalar cdf = {L(0.5)} * ({L(1)} + m_erf(a * {L(1 / math.sqrt(2))}));",
                 f"const scalar pdf = {L(1 / math.sqrt(2 * math.pi))} * m_exp({L(-0.5)} * a * a);",
                 "d1 = cdf + a * pdf;", "const scalar y = a * cdf;"]
        d2 = f"pdf * ({L(2)} - a * a)"
    elif kind == "gelu":
        c, k = math.sqrt(2 / math.pi), 0.044715
        tails = f"sech2 > {L(0)}"   # no 0 * inf for huge |a|
        lines = [f"const scalar u = {L(c)} * (a + {L(k)} * a * a * a);",
                 f"const scalar du = {L(c)} * ({L(1)} + {L(3 * k)} * a * a);"]
        lines += _tanh_lines("u", L)
        lines += [f"const scalar sd = {sel(tails, 'sech2 * du', L(0))};",
                  f"d1 = {L(0.5)} * ({L(1)} + t) + {L(0.5)} * a * sd;",
                  f"const scalar y = {L(0.5)} * a * ({L(1)} + t);"]
        d2 = (f"sd + {L(0.5)} * a * ({L(-2)} * t * sd * {sel(tails, 'du', L(0))} "
              f"+ {sel(tails, f'sech2 * {L(6 * c * k)} * a', L(0))})")
    elif kind == "identity":
        lines = [f"d1 = {L(1)};", "const scalar y = a;"]
        d2 = L(0)
    else:
        raise UnsupportedOpError(f"no C++ lowering for activation {kind!r}")
    if order == 2:
        lines.append(f"d2 = {d2};")
    lines.append("return y;")
    return lines


def _tanh_lines(arg: str, L) -> list[str]:
    """t = tanh(arg) and sech2 = 1 - t^2 from em = expm1(-2|arg|) in (-1, 0]: no overflow,
    no cancellation near 0, and sech2 = 4 (em + 1) / (em + 2)^2 stays accurate in the tails."""
    neg = f"({arg}) < {L(0)}"
    return [
        f"const scalar ax = {sel(neg, f'-({arg})', f'({arg})')};",
        f"const scalar em = m_expm1({L(-2)} * ax);",
        f"const scalar den = em + {L(2)};",
        f"const scalar ta = -em / den;",
        f"const scalar t = {sel(neg, '-ta', 'ta')};",
        f"const scalar sech2 = {L(4)} * (em + {L(1)}) / (den * den);",
    ]
