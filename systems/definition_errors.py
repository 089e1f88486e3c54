"""Errors in a plant's ``define()``, reported where the user can act: the plant, its file and
line, the field (``f[1]``, ``G``, ``constraint``, ``nominal['goal']``) and the fix.

Without this, writing ``np.cos`` instead of ``sp.cos`` surfaces as numpy's "loop of ufunc does
not support argument 0 of type Symbol", and a flat ``G=[0, 0, 1]`` as "'int' object is not
iterable", neither naming the file nor the field.  When ``define()`` itself raises, the field is
found by re-evaluating each entry of its ``Definition(...)`` call, in the failing frame, until
one raises the same error (``locate_field``).
"""
from __future__ import annotations

import ast
import inspect
import textwrap
from types import FrameType, TracebackType
from typing import Any, Callable, Iterator

from compiler.errors import CbfsimError

# sympy functions every derived form supports: numpy, torch (training), C++ (the firmware
# plant) and the interval enclosures (certification); docs/own-plant.md has the full table
PORTABLE_FUNCTIONS = ("sp.sin", "sp.cos", "sp.tan", "sp.atan", "sp.atan2", "sp.tanh", "sp.exp", "sp.log", "sp.sqrt")
SYMPY_FIX = ("use sympy functions on states and parameters: sp.cos, not np.cos or math.cos (they are sympy "
             "symbols; supported everywhere: " + ", ".join(PORTABLE_FUNCTIONS) + ", powers **, sp.pi)")
BRANCH_FIX = ("a Python if, min, max or comparison on a state cannot be decided on symbols: write it without "
              "branching, e.g. sp.sqrt(x**2 + c) for a smooth |x| (sp.Abs, sp.Min, sp.Piecewise are not "
              "certifiable, and Min, Max, Piecewise do not train)")


class PlantDefinitionError(CbfsimError, ValueError):
    """A plant whose ``define()`` cannot be built (the message names plant, field and fix)."""


def where(cls: type) -> str:
    """``Cart (my_cart.py:31)``: the plant class and where its define() is written."""
    fn = _define_function(cls)
    try:
        path = inspect.getsourcefile(fn) or "?"
        line = inspect.getsourcelines(fn)[1]
        return f"{cls.__name__} ({path}:{line})"
    except (OSError, TypeError):
        return cls.__name__


def field_error(cls: type, field: str, problem: str, fix: str = "") -> PlantDefinitionError:
    """``plant Cart (cart.py:31), define(): G: PROBLEM; FIX``."""
    return PlantDefinitionError(f"plant {where(cls)}, define(): {field}: {problem}" + (f"; {fix}" if fix else ""))


def raised_in_define(cls: type, exc: BaseException) -> PlantDefinitionError:
    """The error ``define()`` raised, with the field (or the source line) and the fix."""
    frame, line = _define_frame(cls, exc.__traceback__)
    field = locate_field(cls, frame, type(exc)) if frame is not None else None
    if field is None and line is not None:
        field = f"line {line[0]}: {line[1]}"
    return field_error(cls, field or "while running", _message(exc), fix_for(cls, exc))


def fix_for(cls: type, exc: BaseException) -> str:
    """The usual cause of ``exc`` in a define(), as advice."""
    text = f"{type(exc).__name__}: {exc}"
    if "truth value of Relational" in text or "cannot determine truth value" in text:
        return BRANCH_FIX
    if isinstance(exc, AttributeError) and "SimpleNamespace" in text:
        params = getattr(cls, "Params", None)
        names = [f.name for f in getattr(params, "__dataclass_fields__", {}).values()]
        return f"p holds the fields of {getattr(params, '__name__', 'Params')}: {', '.join(names)}"
    if any(word in text for word in ("Symbol", "ufunc", "sympy", "Expr", "Mul", "Add", "Pow", "must be real number",
                                        "convert expression to float")):
        return SYMPY_FIX
    return ""


def _message(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _define_function(cls: type) -> Callable[..., Any]:
    fn = inspect.getattr_static(cls, "define", None)
    return fn.__func__ if isinstance(fn, (staticmethod, classmethod)) else getattr(cls, "define")


def _define_frame(cls: type, tb: TracebackType | None) -> tuple[FrameType | None, tuple[int, str] | None]:
    """The define() frame of the traceback (the last one, for recursion) and its failing line."""
    code = getattr(_define_function(cls), "__code__", None)
    found: tuple[FrameType | None, tuple[int, str] | None] = (None, None)
    while tb is not None:
        if tb.tb_frame.f_code is code:
            import linecache
            text = linecache.getline(tb.tb_frame.f_code.co_filename, tb.tb_lineno).strip()
            found = (tb.tb_frame, (tb.tb_lineno, text))
        tb = tb.tb_next
    return found


def _definition_call(fn: Callable[..., Any]) -> ast.Call | None:
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return None
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call)
             and (getattr(node.func, "id", None) == "Definition" or getattr(node.func, "attr", None) == "Definition")]
    return calls[0] if calls else None


def _leaves(path: str, node: ast.expr) -> Iterator[tuple[str, ast.expr]]:
    """(``f[1]``, its expression) for every entry of a field, nested lists and dicts included."""
    if isinstance(node, (ast.List, ast.Tuple)):
        for i, item in enumerate(node.elts):
            yield from _leaves(f"{path}[{i}]", item)
    elif isinstance(node, ast.Dict):
        for key, value in zip(node.keys, node.values):
            label = repr(key.value) if isinstance(key, ast.Constant) else "?"
            yield from _leaves(f"{path}[{label}]", value)
    else:
        yield path, node


def locate_field(cls: type, frame: FrameType, kind: type[BaseException]) -> str | None:
    """The first entry of define()'s ``Definition(...)`` that raises ``kind`` when evaluated
    on its own in the failing frame (``f[1]``, ``nominal['goal'][0]``), or None."""
    call = _definition_call(_define_function(cls))
    if call is None:
        return None
    from .base import Definition
    import dataclasses
    names = [f.name for f in dataclasses.fields(Definition)]
    fields = list(zip(names, call.args)) + [(kw.arg, kw.value) for kw in call.keywords if kw.arg]
    for name, node in fields:
        for path, leaf in _leaves(name, node):
            try:
                code = compile(ast.fix_missing_locations(ast.Expression(body=leaf)), "<define>", "eval")
                eval(code, frame.f_globals, dict(frame.f_locals))      # noqa: S307 (the user's own define())
            except kind:
                return path
            except Exception:       # noqa: BLE001  another entry's problem: keep looking
                continue
    return None
