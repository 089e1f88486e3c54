"""Single-state fast paths of the plants: float twins of the array code in base.py.

A simulated trajectory asks the plant and its nominal controller about ONE state at a
time, and there numpy's per-call overhead costs more than the arithmetic. Each twin here
evaluates the same sympy expressions on Python floats with the same IEEE operations, in
the same order, as the numpy code in base.py, so it returns the same bits
(tests/test_fast_paths.py checks that with np.array_equal over random and edge cases):

* + - * / are the same operations on floats and arrays. numpy evaluates ``arr**2`` as
  ``square`` (x*x) and ``arr**-1`` as ``reciprocal`` (1/x), whereas Python floats would
  call ``pow()`` (not correctly rounded: ~1 in 1000 results differ), so those two powers
  are printed as the operations numpy performs. Any other power, any function (sin,
  sqrt, ...) and any symbolic constant (pi, E) leaves the field without a twin.
* xdot = f + G u (single-input plants only): numpy's einsum sums G_i0 u_0 from 0.0, so
  entry i is f_i + (0.0 + G_i0 * u_0).

A twin answers None, and the caller runs the array code (with numpy's usual warnings),
whenever it cannot guarantee the bits: a Python float exception (division by zero) or a
non-finite result.

Switch: the environment variable ``CBFSIM_FAST_PATHS=0`` turns every fast path off (the
plants' here, the simulator's and the filters' in cbfsim read the same variable). It is
read once, by ``fast_paths_enabled``; a process that changes it (a test comparing both
paths) calls ``fast_paths_enabled.cache_clear()`` afterwards.
``evaluate`` is the one entry point (base.py: ``_Field.evaluate`` and ``xdot``).
"""
from __future__ import annotations

import functools
import math
import os
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import sympy as sp
from sympy.printing.precedence import PRECEDENCE

from ._lambdify import NumPyExactPrinter, lambdify

FAST_PATHS_ENV = "CBFSIM_FAST_PATHS"
_F64 = np.dtype(np.float64)
_isfinite = math.isfinite


class _UNBUILT:
    """The sentinel of a twin not built yet: a class, so it pickles by reference and is still
    itself in a worker process that unpickled the plant (an ``object()`` would come back as
    another object, and the twin would call it)."""


@functools.cache
def fast_paths_enabled() -> bool:
    """False when the environment sets CBFSIM_FAST_PATHS=0. Read once (an os.environ lookup
    of an unset variable costs about as much as the twin saves); after changing the variable
    in-process call ``fast_paths_enabled.cache_clear()``."""
    return os.environ.get(FAST_PATHS_ENV, "1") != "0"


class _NotExact(Exception):
    """The expression uses an operation the float twin cannot reproduce bit for bit."""


class _ScalarPrinter(NumPyExactPrinter):
    """The numpy printer's code, for Python floats, with exactly numpy's array arithmetic
    (x**2 -> x*x, x**-1 -> 1/x); any other power raises ``_NotExact``."""

    def _print_Pow(self, expr: sp.Pow, rational: bool = False) -> str:
        base = self.parenthesize(expr.base, PRECEDENCE["Pow"], strict=False)
        if expr.exp == 2:
            return f"({base}*{base})"
        if expr.exp == -1:
            return f"(1/{base})"
        raise _NotExact(f"power {expr.exp}")


def _exprs_ok(exprs: Sequence[sp.Expr]) -> bool:
    """Only symbols, finite rational/float numbers, +, * and powers (checked by the printer)."""
    for e in exprs:
        for node in sp.preorder_traversal(e):
            if isinstance(node, (sp.Symbol, sp.Add, sp.Mul, sp.Pow)):
                continue
            if isinstance(node, (sp.Integer, sp.Rational, sp.Float)) and node.is_finite:
                continue
            return False
    return True


class FieldTwin:
    """Float twin of a base._Field: all entries (flat, row-major) at one point given as
    Python floats. The function of the varying entries is built on first use."""

    def __init__(self, args: Sequence[sp.Symbol], exprs: Sequence[sp.Expr], const: Mapping[int, float],
                 var: Sequence[int], shape: tuple[int, ...]):
        self.args, self.exprs, self.const, self.var = tuple(args), list(exprs), dict(const), list(var)
        self.shape = shape
        self._template = [self.const.get(i, 0.0) for i in range(len(self.exprs))]
        self._fn: Any = _UNBUILT

    def function(self) -> Callable[..., Any] | None:
        """``fn(*args) -> [varying entries]`` on floats, or None where there is no twin."""
        if self._fn is _UNBUILT:
            self._fn = self._build()
        return self._fn

    def _build(self) -> Callable[..., Any] | None:
        if not self.var:
            return lambda *vals: []        # not called: values() returns the constants directly
        exprs = [self.exprs[i] for i in self.var]
        if not _exprs_ok(exprs):
            return None
        try:
            return lambdify(self.args, exprs, "numpy", _ScalarPrinter)
        except _NotExact:
            return None

    def values(self, vals: Sequence[float]) -> list[float] | None:
        """Every entry at the point ``vals``, or None (no twin, float exception, non-finite)."""
        fn = self._fn
        if fn is _UNBUILT:
            fn = self.function()
        if fn is None:
            return None
        if not self.var:
            return self._template.copy()
        try:
            values = fn(*vals)
        except (ArithmeticError, ValueError):
            return None
        if not all(map(_isfinite, values)):
            return None
        if len(values) == len(self._template):
            return values                      # every entry varies: the fresh list lambdify built
        out = self._template.copy()
        for i, v in zip(self.var, values):
            out[i] = v
        return out


class XdotTwin:
    """Float twin of f(x) + G(x) u for single-input plants whose f and G have twins:
    ``fn(x_0, ..., x_{n-1}, u_0) -> (xdot_0, ..., xdot_{n-1})`` generated on first use with
    the entries unrolled (the simulator's RK4 twin calls it directly)."""

    def __init__(self, f: FieldTwin, G: FieldTwin):
        self.f, self.G = f, G
        self.shape = f.shape
        self._fn: Any = _UNBUILT

    def function(self) -> Callable[..., tuple[float, ...]] | None:
        """The unrolled float function, or None where there is no twin. It may raise
        ArithmeticError / ValueError (e.g. a division by zero) where numpy gives inf, and
        return non-finite values."""
        if self._fn is _UNBUILT:
            self._fn = self._build()
        return self._fn

    def _build(self) -> Callable[..., tuple[float, ...]] | None:
        f, G = self.f, self.G
        n = len(f.exprs)
        if G.shape != (n, 1) or f.function() is None or G.function() is None \
                or not all(map(_isfinite, [*f.const.values(), *G.const.values()])):
            return None
        call = ", ".join(f"x{i}" for i in range(n))

        def entries(twin: FieldTwin, name: str) -> list[str]:
            slot = {i: j for j, i in enumerate(twin.var)}
            return [f"{name}[{slot[i]}]" if i in slot else repr(twin.const[i]) for i in range(len(twin.exprs))]
        lines = [f"def xdot_float({call}, u0):"]
        if f.var:
            lines.append(f"    f = f_fn({call})")
        if G.var:
            lines.append(f"    G = G_fn({call})")
        terms = [f"{fi} + (0.0 + {gi} * u0)" for fi, gi in zip(entries(f, "f"), entries(G, "G"))]
        lines.append(f"    return ({', '.join(terms)},)")
        namespace = {"f_fn": f.function(), "G_fn": G.function()}
        exec("\n".join(lines), namespace)      # generated from the twins' own layout only
        return namespace["xdot_float"]

    def values(self, vals: Sequence[float]) -> list[float] | None:
        """xdot at the point ``vals`` (n states then the input), or None."""
        fn = self.function()
        if fn is None:
            return None
        try:
            out = fn(*vals)
        except (ArithmeticError, ValueError):
            return None
        return list(out) if all(map(_isfinite, out)) else None


def evaluate(twin: FieldTwin | XdotTwin, x: Any, n: int, u: Any = None, m: int = 0) -> np.ndarray | None:
    """The twin's answer for one float64 state x ((n,) or (1, n); with the input u of shape
    x.shape[:-1] + (m,) for xdot) as an array of shape x.shape[:-1] + twin.shape, or None:
    fast paths switched off, not one float64 state, or no guaranteed twin answer."""
    if not (type(x) is np.ndarray and x.dtype == _F64 and 1 <= x.ndim <= 2 and x.shape[-1] == n
            and x.size == n and fast_paths_enabled()):
        return None
    vals = x.ravel().tolist()
    if u is not None:
        if type(u) is not np.ndarray or u.dtype != _F64 or u.shape != x.shape[:-1] + (m,):
            return None
        vals += u.ravel().tolist()
    out = twin.values(vals)
    if out is None:
        return None
    if len(twin.shape) == 1:
        return np.array([out] if x.ndim == 2 else out)
    return np.array(out).reshape(x.shape[:-1] + twin.shape)
