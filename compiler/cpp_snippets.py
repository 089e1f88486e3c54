"""C++ text helpers shared by the activation bodies (compiler.activations) and the emitters:
round-trip literals, the branch-free select, and the stable sigmoid / tanh forms."""
from __future__ import annotations

from typing import Callable

from .errors import UnsupportedOpError

Literal = Callable[[float], str]


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


def array_literal(values, scalar: str, per_line: int = 8) -> str:
    """A C++ brace list of ``literal`` of every value, ``per_line`` to a line. The weights are
    most of a header's text: the float32 rounding is done once for the whole array and the
    formatting on Python floats (the same text as ``literal``, a third of its time)."""
    import numpy as np
    exact = np.asarray(values, dtype=np.float64).ravel()
    if scalar == "float":
        with np.errstate(over="ignore"):        # out of float32 range: inf, refused below as literal() does
            rounded = exact.astype(np.float32).astype(np.float64).tolist()
        form, suffix = "%.9g", "f"
    else:
        rounded, form, suffix = exact.tolist(), "%.17g", ""
    items = []
    for k, v in enumerate(rounded):
        text = form % v
        if "." not in text and "e" not in text and "n" not in text:
            text += ".0"
        if text in ("inf", "-inf", "nan"):
            raise UnsupportedOpError(f"cannot print non-finite constant {exact[k]}")
        items.append(text + suffix)
    rows = [", ".join(items[i:i + per_line]) for i in range(0, len(items), per_line)]
    return "{\n    " + ",\n    ".join(rows) + "}"


def sel(cond: str, a: str, b: str) -> str:
    """C++ for ``cond ? a : b`` through mx_select (no branch where loops should vectorize)."""
    return f"mx_select({cond}, {a}, {b})"


def sigmoid_lines(arg: str, L: Literal, complement: bool = True) -> list[str]:
    """s = sigmoid(arg) and (if asked) sc = 1 - s without cancellation, from e = exp(-|arg|) <= 1.
    Written so scalar cores take no sign-dependent branch: |arg| by mx_fabs, and s, sc as r times
    a select between 1 and e (the product by 1 is exact, so the values are those of
    'arg >= 0 ? r : e r'), which GCC turns into a conditional move, where it turned the two
    swapped selects of r and e r into a branch (instruction count per call then followed
    the number of negative pre-activations)."""
    pos = f"({arg}) >= {L(0)}"
    lines = [
        f"const scalar e = m_exp(-mx_fabs({arg}));",
        f"const scalar r = {L(1)} / ({L(1)} + e);",
        f"const scalar s = r * {sel(pos, L(1), 'e')};",
    ]
    if complement:
        lines.append(f"const scalar sc = r * {sel(pos, 'e', L(1))};")
    return lines


def tanh_lines(arg: str, L: Literal) -> list[str]:
    """t = tanh(arg) and sech2 = 1 - t^2 from em = expm1(-2|arg|) in (-1, 0]: no overflow,
    no cancellation near 0, and sech2 = 4 (em + 1) / (em + 2)^2 stays accurate in the tails."""
    neg = f"({arg}) < {L(0)}"
    return [
        f"const scalar ax = {sel(neg, f'-({arg})', f'({arg})')};",
        f"const scalar em = m_expm1({L(-2)} * ax);",
        f"const scalar den = em + {L(2)};",
        "const scalar ta = -em / den;",
        f"const scalar t = {sel(neg, '-ta', 'ta')};",
        f"const scalar sech2 = {L(4)} * (em + {L(1)}) / (den * den);",
    ]
