"""Interval enclosures of a plant, printed from its one sympy definition.

The certifier needs f, G, their Jacobians and the constraint over whole boxes of states.
They are generated here from the very sympy expressions the simulator, the trainer and the
C++ header are derived from (``systems/base.py``), printed lambdify-style into an interval
namespace the caller passes in (``compiler.interval.NAMESPACE``, or ``mpmath.iv`` functions
in tests): systems/ never imports the interval type.

Printing keeps what an interval type needs to be tight and sound:
- integer powers stay powers (``x**2`` of [-1, 2] is [0, 4]; ``x*x`` would be [-2, 4]);
  negative ones become ``1/x**k``, exponents +-1/2 ``sqrt``;
- every number is the float64 value the simulator uses, printed round-trip (``_lambdify._exact_float``);
  symbolic constants (pi, E) likewise; the enclosure treats these values as exact;
- every function is called by its sympy name (``sin``, ``Abs``, ...) from the namespace only:
  no fallback to ``math``. An expression needing a function the namespace lacks, a
  piecewise or logical expression, or a non-constant exponent is refused with a one-line
  ``UnsupportedExpressionError`` naming it, so the certifier can never silently mis-bound.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import sympy as sp
from sympy.core.function import Application
from sympy.printing.precedence import PRECEDENCE

from compiler.errors import CbfsimError

from ._lambdify import PythonExactPrinter
from .base import ControlAffineSystem

__all__ = ["PlantEnclosure", "UnsupportedExpressionError", "plant_enclosure"]


class UnsupportedExpressionError(CbfsimError, ValueError):
    """A plant expression the interval namespace cannot bound soundly (message names it)."""


class _IntervalPrinter(PythonExactPrinter):
    """Python code for interval objects: powers kept, functions by sympy name, exact floats."""

    def _print(self, expr: Any, **kwargs: Any) -> str:
        if isinstance(expr, Application):
            args = ", ".join(self._print(a) for a in expr.args)
            return f"{type(expr).__name__}({args})"
        if isinstance(expr, sp.NumberSymbol):
            return repr(float(expr))
        return super()._print(expr, **kwargs)

    def _print_Pow(self, expr: sp.Pow, rational: bool = False) -> str:
        base, exp = expr.base, expr.exp
        if exp == sp.S.Half:
            return f"sqrt({self._print(base)})"
        if exp == -sp.S.Half:
            return f"(1/sqrt({self._print(base)}))"
        b = self.parenthesize(base, PRECEDENCE["Pow"], strict=False)
        if exp.is_Integer:
            k = int(exp)
            if k >= 0:
                return f"{b}**{k}"
            return f"(1/{b})" if k == -1 else f"(1/{b}**{-k})"
        return f"{b}**{float(exp)!r}"


def _refusal(expr: sp.Expr, namespace: Mapping[str, Any]) -> str | None:
    """Why ``expr`` cannot be enclosed with ``namespace`` (None when it can)."""
    for node in sp.preorder_traversal(expr):
        if isinstance(node, (sp.Symbol, sp.NumberSymbol, sp.Add, sp.Mul)):
            continue
        if isinstance(node, sp.Number):
            if node.is_finite:
                continue
            return f"the non-finite number {node}"
        if isinstance(node, sp.Pow):
            if not (node.exp.is_Number and node.exp.is_finite):
                return f"the power {node} with a non-constant exponent"
            if abs(node.exp) == sp.S.Half and "sqrt" not in namespace:
                return "sqrt"
            continue
        if isinstance(node, Application) and not isinstance(node, sp.Piecewise):
            name = type(node).__name__
            if name not in namespace:
                return name
            if all(isinstance(a, sp.Expr) for a in node.args):
                continue
        return type(node).__name__
    return None


class _IntervalField:
    """A fixed-shape array of sympy expressions evaluated on interval objects.

    Constant entries are returned as Python floats (exact: the simulator's own values); the
    others are lambdified once into the namespace.
    """

    def __init__(self, exprs: Sequence[Any], args: Sequence[sp.Symbol], shape: tuple[int, ...],
                 namespace: Mapping[str, Any], where: str, system: str):
        flat = [sp.sympify(e) for e in exprs]
        for idx, e in enumerate(flat):
            why = _refusal(e, namespace)
            if why is not None:
                at = "".join(f"[{i}]" for i in np.unravel_index(idx, shape)) if shape else ""
                raise UnsupportedExpressionError(
                    f"{system}: {where}{at} = {e} uses {why}, which the interval namespace "
                    f"cannot bound (it provides: {', '.join(sorted(namespace))})")
        self.shape = shape
        self.n_args = len(args)
        self.const = {i: float(e) for i, e in enumerate(flat) if not e.free_symbols}
        self.var = [i for i, e in enumerate(flat) if e.free_symbols]
        self._fn: Callable[..., Any] | None = None
        if self.var:
            settings = {"fully_qualified_modules": False, "inline": True,
                        "allow_unknown_functions": True, "user_functions": {}}
            self._fn = sp.lambdify(list(args), [flat[i] for i in self.var], modules=[dict(namespace)],
                                   printer=_IntervalPrinter(settings), cse=True)

    def __call__(self, xs: Sequence[Any]) -> Any:
        if len(xs) != self.n_args:
            raise ValueError(f"expected {self.n_args} state intervals, got {len(xs)}")
        out: list[Any] = [None] * (len(self.const) + len(self.var))
        for i, c in self.const.items():
            out[i] = c
        if self._fn is not None:
            for i, val in zip(self.var, self._fn(*xs)):
                out[i] = val
        return _nest(out, self.shape)


def _nest(flat: list[Any], shape: tuple[int, ...]) -> Any:
    """A flat row-major list as nested lists of ``shape`` (a scalar for shape ())."""
    if not shape:
        return flat[0]
    if len(shape) == 1:
        return flat
    if shape[0] == 0:                  # e.g. jac_G of an autonomous plant (m = 0): no matrices
        return []
    step = len(flat) // shape[0]
    return [_nest(flat[k * step:(k + 1) * step], shape[1:]) for k in range(shape[0])]


@dataclasses.dataclass(frozen=True)
class PlantEnclosure:
    """Interval functions of a plant. Each takes a list of n interval objects (the state
    components, any batch shape the interval type supports) and returns interval objects
    or plain Python floats (exact constants):

    f(xs): n entries; G(xs): n rows of m; jac_f(xs): n x n (d f_i / d x_k);
    jac_G(xs): m matrices n x n (d G[i][j] / d x_k for input j); constraint(xs): one value;
    constraint_grad(xs): n entries (d constraint / d x_k), None where the namespace cannot bound
    them (a constraint built from min and max: its derivative jumps); constraint_hess(xs): n x n
    (d2 constraint / d x_j d x_k), None likewise.
    """

    name: str
    n: int
    m: int
    f: Callable[[Sequence[Any]], list[Any]]
    G: Callable[[Sequence[Any]], list[list[Any]]]
    jac_f: Callable[[Sequence[Any]], list[list[Any]]]
    jac_G: Callable[[Sequence[Any]], list[list[list[Any]]]]
    constraint: Callable[[Sequence[Any]], Any]
    u_min: np.ndarray
    u_max: np.ndarray
    domain: tuple[np.ndarray, np.ndarray]
    constraint_grad: Callable[[Sequence[Any]], list[Any]] | None = None
    constraint_hess: Callable[[Sequence[Any]], list[list[Any]]] | None = None


def plant_enclosure(system: ControlAffineSystem, namespace: Mapping[str, Any]) -> PlantEnclosure:
    """The enclosures of ``system`` printed into ``namespace`` (sympy function name -> interval
    function). Raises ``UnsupportedExpressionError`` for an expression it cannot bound."""
    n, m, x = system.n, system.m, system.x_sym

    def field(exprs: Sequence[Any], shape: tuple[int, ...], where: str) -> _IntervalField:
        return _IntervalField(exprs, x, shape, namespace, where, system.name)

    jac_G = [system.G_expr[:, j].jacobian(sp.Matrix(x)) for j in range(m)]
    jac_G_flat = [e for J in jac_G for e in J]          # input j, row i, column k
    try:
        constraint_grad = field([sp.diff(system.constraint_expr, xi) for xi in x], (n,), "constraint_grad")
    except UnsupportedExpressionError:
        constraint_grad = None
    try:
        constraint_hess = field(list(sp.hessian(system.constraint_expr, x)), (n, n), "constraint_hess")
    except UnsupportedExpressionError:
        constraint_hess = None
    return PlantEnclosure(
        name=system.name, n=n, m=m,
        f=field(list(system.f_expr), (n,), "f"),
        G=field(list(system.G_expr), (n, m), "G"),
        jac_f=field(list(system.jacobian_expr), (n, n), "jac_f"),
        jac_G=field(jac_G_flat, (m, n, n), "jac_G"),
        constraint=field([system.constraint_expr], (), "constraint"),
        u_min=system.u_min, u_max=system.u_max, domain=system.domain, constraint_grad=constraint_grad,
        constraint_hess=constraint_hess,
    )
