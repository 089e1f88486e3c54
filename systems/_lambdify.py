"""sympy expressions -> Python functions whose float constants are the exact doubles.

Shared by the array code (base.py: numpy and torch) and its float twins (_fast.py), so
all of them read the same constants bit for bit.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import sympy as sp
from sympy.printing.numpy import NumPyPrinter
from sympy.printing.pycode import PythonCodePrinter


def _exact_float(self: Any, expr: sp.Float) -> str:
    """Floats as the shortest repr that round-trips the double (sympy prints 15 digits), so
    numpy, torch and C++ all see bit-identical constants."""
    return repr(float(expr))


class NumPyExactPrinter(NumPyPrinter):
    _print_Float = _exact_float


class PythonExactPrinter(PythonCodePrinter):
    _print_Float = _exact_float


def lambdify(args: Sequence[sp.Symbol], exprs: list[sp.Expr], namespace: Any,
             printer: type) -> Callable[..., Any]:
    """sympy.lambdify with one of the exact-float printers, configured the way lambdify
    configures its own."""
    user = {k: k for k in namespace} if isinstance(namespace, dict) else {}
    settings = {"fully_qualified_modules": False, "inline": True, "allow_unknown_functions": True,
                "user_functions": user}
    modules = [namespace, "math"] if isinstance(namespace, dict) else namespace
    return sp.lambdify(args, exprs, modules=modules, printer=printer(settings), cse=True)
