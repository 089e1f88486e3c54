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


# (printer, module name, arguments, expressions) -> the function: a plant is built again for
# every simulation, filter and test (same parameters, same expressions), and printing and
# compiling its functions was half of the 5-13 ms a construction took. sympy's equality is
# structural and strict (Float(2.0) != Integer(2), a Float by its exact value, a Symbol by its
# name and assumptions), and equal Add/Mul keep their arguments in one canonical order, so
# equal keys print the same code.
_CACHE: dict[tuple, Callable[..., Any]] = {}
_CACHE_SIZE = 1024


def lambdify(args: Sequence[sp.Symbol], exprs: list[sp.Expr], namespace: Any,
             printer: type) -> Callable[..., Any]:
    """sympy.lambdify with one of the exact-float printers, configured the way lambdify
    configures its own. With a module name (not a dict of functions) the function is made once
    per distinct key and shared: a generated function keeps no state."""
    if not isinstance(namespace, str):
        return _lambdify(args, exprs, namespace, printer)
    key = (printer, namespace, tuple(args), tuple(exprs))
    found = _CACHE.get(key)
    if found is None:
        found = _lambdify(args, exprs, namespace, printer)
        if len(_CACHE) >= _CACHE_SIZE:
            _CACHE.clear()
        _CACHE[key] = found
    return found


def _lambdify(args: Sequence[sp.Symbol], exprs: list[sp.Expr], namespace: Any, printer: type) -> Callable[..., Any]:
    user = {k: k for k in namespace} if isinstance(namespace, dict) else {}
    settings = {"fully_qualified_modules": False, "inline": True, "allow_unknown_functions": True,
                "user_functions": user}
    modules = [namespace, "math"] if isinstance(namespace, dict) else namespace
    return sp.lambdify(args, exprs, modules=modules, printer=printer(settings), cse=True)
