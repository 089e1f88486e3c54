"""Control-affine plants xdot = f(x) + G(x) u, defined once in sympy.

A system module writes its dynamics, constraint, input bounds, training box and nominal
controllers a single time as sympy expressions in state and parameter symbols
(``define``).  Everything else -- vectorised numpy, differentiable torch, the exact
Jacobian-vector product and the C++ header -- is derived here from that one definition,
so the simulator, the training code and the firmware cannot drift apart.
"""
from __future__ import annotations

import dataclasses
import math
import re
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Mapping, Sequence

import numpy as np
import sympy as sp
from sympy.printing.cxx import CXX17CodePrinter
from sympy.printing.precedence import PRECEDENCE

from . import _fast
from ._lambdify import NumPyExactPrinter, PythonExactPrinter, lambdify
from .periodic import PeriodicCoordinateError, checked_periods, wrap_states

from compiler.errors import CbfsimError

from .definition_errors import BRANCH_FIX, SYMPY_FIX, field_error, raised_in_define

if TYPE_CHECKING:  # torch is imported lazily, only by the torch functions
    import torch

    from .enclosure import PlantEnclosure

__all__ = ["ControlAffineSystem", "Controller", "Definition", "PeriodicCoordinateError"]


@dataclasses.dataclass(frozen=True)
class Definition:
    """The symbolic model a system module returns from ``define(x, p)``.

    Every entry is a sympy expression (or number) in the state symbols ``x`` and the
    parameter symbols ``p``; bounds and the training box may use parameters only.
    """

    f: Sequence[Any]                       # n entries
    G: Sequence[Sequence[Any]]             # n rows of m entries
    constraint: Any                        # >= 0 inside the set that must never be left
    u_min: Sequence[Any]                   # m entries
    u_max: Sequence[Any]
    domain: tuple[Sequence[Any], Sequence[Any]]   # (lo, hi), n entries each
    nominal: Mapping[str, Sequence[Any]]   # name -> m entries, state feedback u = k(x)
    # coordinate index -> period (e.g. {2: 2*pi} for a heading): x and x + P e_i are one state.
    # The domain must span exactly one period there, and f, G and the constraint must repeat.
    periodic: Mapping[int, Any] = dataclasses.field(default_factory=dict)


# ----------------------------------------------------------------------------- helpers

def _as_states(x: Any, n: int, what: str = "x") -> np.ndarray:
    """x as a float64 array, checked to be (n,) or (B, n)."""
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim not in (1, 2) or arr.shape[-1] != n:
        raise ValueError(f"{what} must have shape ({n},) or (B, {n}), got {arr.shape}")
    return arr


def _as_tensor_states(x: "torch.Tensor", n: int, what: str = "x") -> "torch.Tensor":
    if x.ndim not in (1, 2) or x.shape[-1] != n:
        raise ValueError(f"{what} must have shape ({n},) or (B, {n}), got {tuple(x.shape)}")
    return x


def _columns(x: Any, n: int) -> tuple[list[np.ndarray], tuple[int, ...]]:
    """The n state columns of x ((n,) or (B, n)) and the batch shape."""
    arr = _as_states(x, n)
    return [arr[..., i] for i in range(n)], arr.shape[:-1]


class UnknownControllerError(CbfsimError, KeyError):
    """A nominal controller name the system does not define."""

    def __str__(self) -> str:          # KeyError quotes its message; a CLI prints one clean line
        return str(self.args[0])


def _sympify_param(value: Any) -> sp.Expr:
    """Integral values become sympy Integers (cleaner expressions), others exact binary Floats."""
    v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"parameter value must be finite, got {value!r}")
    return sp.Integer(int(v)) if v.is_integer() and abs(v) < 2**53 else sp.Float(v)


def _torch_namespace() -> dict[str, Callable[..., Any]]:
    """sympy function names -> torch functions that also accept python numbers."""
    import torch

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            ref = next((a for a in args if isinstance(a, torch.Tensor)), None)
            if ref is None:
                args = tuple(torch.as_tensor(a, dtype=torch.float64) for a in args)
            else:
                args = tuple(a if isinstance(a, torch.Tensor)
                             else torch.as_tensor(a, dtype=ref.dtype, device=ref.device) for a in args)
            return fn(*args)
        return call

    names = ["sin", "cos", "tan", "asin", "acos", "atan", "atan2", "sinh", "cosh", "tanh",
             "exp", "log", "sqrt"]
    ns: dict[str, Callable[..., Any]] = {k: wrap(getattr(torch, k)) for k in names}
    ns["abs"] = wrap(torch.abs)
    return ns


class _Field:
    """A fixed-shape array of sympy expressions in ``args``, evaluated over a batch.

    Constant entries are stored as floats and broadcast to the batch shape; the others are
    lambdified once (numpy at construction, torch on first use).
    """

    def __init__(self, exprs: Any, args: Sequence[sp.Symbol], shape: tuple[int, ...]):
        flat = [sp.sympify(e) for e in np.asarray(exprs, dtype=object).reshape(-1)]
        if len(flat) != int(np.prod(shape, dtype=int)):
            raise ValueError(f"expected {int(np.prod(shape, dtype=int))} expressions for shape {shape}, "
                             f"got {len(flat)}")
        allowed = set(args)
        for e in flat:
            extra = e.free_symbols - allowed
            if extra:
                raise ValueError(f"expression {e} has unknown symbols {sorted(map(str, extra))}")
        self.shape = shape
        self.args = tuple(args)
        self.exprs = flat
        self.const = {i: float(e) for i, e in enumerate(flat) if not e.free_symbols}
        self.var = [i for i, e in enumerate(flat) if e.free_symbols]
        var_exprs = [flat[i] for i in self.var]
        self._np = lambdify(self.args, var_exprs, "numpy", NumPyExactPrinter) if self.var else None
        self._torch: Callable[..., Any] | None = None
        self.n = len(self.args)
        self.twin = _fast.FieldTwin(self.args, flat, self.const, self.var, shape)

    def evaluate(self, x: Any) -> np.ndarray:
        """All entries at the states x ((n,) -> shape; (B, n) -> (B,) + shape)."""
        out = _fast.evaluate(self.twin, x, self.n)     # the float twin where it applies
        return self.numpy(*_columns(x, self.n)) if out is None else out

    def numpy(self, cols: Sequence[np.ndarray], batch: tuple[int, ...]) -> np.ndarray:
        out = np.empty(batch + (len(self.exprs),), dtype=np.float64)
        for i, c in self.const.items():
            out[..., i] = c
        if self._np is not None:
            for i, val in zip(self.var, self._np(*cols)):
                out[..., i] = val
        return out.reshape(batch + self.shape)

    def torch(self, cols: Sequence["torch.Tensor"], like: "torch.Tensor") -> "torch.Tensor":
        import torch

        if self._torch is None and self.var:
            self._torch = lambdify(self.args, [self.exprs[i] for i in self.var],
                                   _torch_namespace(), PythonExactPrinter)
        batch = tuple(like.shape)
        if not self.exprs:                  # an empty field (G of an autonomous plant, m = 0)
            return like.new_zeros(batch + self.shape)
        entries: list[Any] = [None] * len(self.exprs)
        for i, c in self.const.items():
            entries[i] = like.new_full(batch, c)
        if self._torch is not None:
            for i, val in zip(self.var, self._torch(*cols)):
                entries[i] = val.expand(batch) if isinstance(val, torch.Tensor) else like.new_full(batch, val)
        return torch.stack(entries, dim=-1).reshape(batch + self.shape)


# ----------------------------------------------------------------------------- C++ printing

_CPP_LITERAL_SUFFIX = {"float": "f", "double": "", "long double": "L"}
_CPP_IDENT = re.compile(r"[A-Za-z_]\w*")


class _CxxPrinter(CXX17CodePrinter):
    """sympy's C++17 printer with literals typed to ``scalar``, a configurable math
    namespace, integer powers as products (std::pow(float, int) would return double) and
    no M_PI-style macros."""

    def __init__(self, scalar: str, math_prefix: str, names: Mapping[sp.Symbol, str]):
        super().__init__()
        self.math_macros = {}
        self._ns = math_prefix
        self._scalar = scalar
        self._names = dict(names)

    def literal(self, value: float) -> str:
        v = float(value)
        if not math.isfinite(v):
            raise ValueError(f"cannot print non-finite constant {v} as a C++ literal")
        text = repr(v)
        if self._scalar in _CPP_LITERAL_SUFFIX:
            return text + _CPP_LITERAL_SUFFIX[self._scalar]
        return f"static_cast<{self._scalar}>({text})"

    def _print_Symbol(self, expr: sp.Symbol) -> str:
        return self._names.get(expr) or super()._print_Symbol(expr)

    def _print_Float(self, expr: sp.Float) -> str:
        return self.literal(float(expr))

    def _print_Integer(self, expr: sp.Integer) -> str:
        return self.literal(float(expr))

    def _print_Rational(self, expr: sp.Rational) -> str:
        return self.literal(float(expr))

    def _print_NumberSymbol(self, expr: sp.Expr) -> str:
        return self.literal(float(expr))

    _print_Pi = _print_Exp1 = _print_NumberSymbol

    def _print_Pow(self, expr: sp.Pow) -> str:
        base, exp = expr.base, expr.exp
        one = self.literal(1.0)
        if exp.is_Integer:
            k = int(exp)
            if k == 0:
                return one
            b = self.parenthesize(base, PRECEDENCE["Mul"], strict=False)
            prod = "*".join([b] * abs(k))
            if k > 0:
                return prod if k == 1 else f"({prod})"
            return f"({one}/{prod})" if abs(k) == 1 else f"({one}/({prod}))"
        if exp == sp.S.Half:
            return f"{self._ns}sqrt({self._print(base)})"
        if exp == -sp.S.Half:
            return f"({one}/{self._ns}sqrt({self._print(base)}))"
        return f"{self._ns}pow({self._print(base)}, {self._print(exp)})"


def _cpp_statements(printer: _CxxPrinter, scalar: str, exprs: Sequence[sp.Expr],
                    targets: Sequence[str] | None) -> list[str]:
    """Body lines computing ``exprs`` (with common subexpressions hoisted) into ``targets``,
    or ``return``-ing the single expression when targets is None."""
    temps = sp.numbered_symbols("cse_t")
    repl, reduced = sp.cse([sp.sympify(e) for e in exprs], symbols=temps)
    lines = [f"const {scalar} {sym} = {printer.doprint(val)};" for sym, val in repl]
    if targets is None:
        lines.append(f"return {printer.doprint(reduced[0])};")
    else:
        lines += [f"{t} = {printer.doprint(e)};" for t, e in zip(targets, reduced)]
    return lines


def _cpp_function(signature: str, body: list[str], params: Mapping[str, set[sp.Symbol]],
                  exprs: Sequence[sp.Expr]) -> str:
    """A C++ inline function; ``(void)p;`` for pointer parameters the expressions don't use
    (keeps -Wunused-parameter quiet for e.g. a constant G)."""
    used = set().union(*(sp.sympify(e).free_symbols for e in exprs)) if exprs else set()
    voids = [f"(void){name};" for name, syms in params.items() if not (syms & used)]
    inner = "\n".join("  " + line for line in voids + body)
    return f"{signature} {{\n{inner}\n}}"


# ----------------------------------------------------------------------------- controllers

class Controller:
    """A nominal state-feedback controller u = k(x) given by sympy expressions.

    Outputs are not clipped to the input bounds: clipping is the safety filter's job.
    """

    def __init__(self, name: str, x_sym: Sequence[sp.Symbol], expr: Sequence[Any]):
        if not _CPP_IDENT.fullmatch(name):
            raise ValueError(f"controller name must be a C identifier, got {name!r}")
        self.name = name
        self.x_sym = tuple(x_sym)
        self.n = len(self.x_sym)
        self.expr = sp.Matrix([sp.sympify(e) for e in expr])
        self.m = self.expr.shape[0]
        self._field = _Field(list(self.expr), self.x_sym, (self.m,))

    def __call__(self, x: Any) -> np.ndarray:
        """(n,) -> (m,); (B, n) -> (B, m)."""
        return self._field.evaluate(x)

    def torch(self, x: "torch.Tensor") -> "torch.Tensor":
        """(B, n) -> (B, m) (or (n,) -> (m,)), differentiable, dtype/device of x."""
        x = _as_tensor_states(x, self.n)
        return self._field.torch([x[..., i] for i in range(self.n)], x[..., 0])

    def __repr__(self) -> str:
        return f"Controller({self.name!r}, u = {list(self.expr)})"


# ----------------------------------------------------------------------------- systems

class ControlAffineSystem:
    """xdot = f(x) + G(x) u with a state constraint, input box and nominal controllers.

    Subclasses set ``name``, ``state_names``, ``input_names``, ``Params`` (a frozen
    dataclass of floats) and implement ``define(x, p) -> Definition`` -- the only place the
    dynamics are written.  Instances are immutable; ``with_params`` builds a new one.
    """

    name: ClassVar[str]
    state_names: ClassVar[tuple[str, ...]]
    input_names: ClassVar[tuple[str, ...]]
    Params: ClassVar[type]

    @staticmethod
    def define(x: tuple[sp.Symbol, ...], p: SimpleNamespace) -> Definition:
        raise NotImplementedError

    def __init__(self, params: Any = None):
        if params is None:
            params = self.Params()
        if not isinstance(params, self.Params):
            raise TypeError(f"{type(self).__name__} needs {self.Params.__name__}, got {type(params).__name__}")
        self.params = params
        self.n = len(self.state_names)
        self.m = len(self.input_names)
        n, m = self.n, self.m

        self.x_sym: tuple[sp.Symbol, ...] = tuple(sp.Symbol(k, real=True) for k in self.state_names)
        names = [fld.name for fld in dataclasses.fields(params)]
        clash = set(names) & set(self.state_names)
        if clash:
            raise ValueError(f"parameter names {sorted(clash)} clash with state names")
        self.p_sym: dict[str, sp.Symbol] = {k: sp.Symbol(k, real=True) for k in names}
        # the generic model, in parameter symbols (for documentation / papers); a mistake in
        # define() is reported naming the plant, the field and the fix (definition_errors.py)
        cls = type(self)
        try:
            self.symbolic: Definition = self.define(self.x_sym, SimpleNamespace(**self.p_sym))
        except CbfsimError:
            raise
        except Exception as exc:                # noqa: BLE001  any mistake in the user's define()
            raise raised_in_define(cls, exc) from exc
        if not isinstance(self.symbolic, Definition):
            raise field_error(cls, "return value", f"got {type(self.symbolic).__name__}",
                              "return systems.base.Definition(f=..., G=..., constraint=..., u_min=..., u_max=..., "
                              "domain=..., nominal=...)")
        values = {self.p_sym[k]: _sympify_param(getattr(params, k)) for k in names}
        allowed = set(self.x_sym)

        def sub(e: Any, field: str, symbols: set = allowed) -> sp.Expr:
            try:
                expr = sp.sympify(e).xreplace(values)
            except (sp.SympifyError, TypeError, ValueError, AttributeError) as exc:
                raise field_error(cls, field, f"{e!r} is not an expression ({' '.join(str(exc).split())})",
                                  SYMPY_FIX) from None
            if not isinstance(expr, sp.Expr):
                raise field_error(cls, field, f"{e!r} is not a number-valued expression", BRANCH_FIX)
            extra = expr.free_symbols - symbols
            if extra:
                raise field_error(cls, field, f"unknown symbols {sorted(map(str, extra))} in {expr}",
                                  f"use the states x = ({', '.join(self.state_names)}) and the parameters p."
                                  + (" (bounds and the domain may use parameters only)" if not symbols else ""))
            return expr

        def entries(seq: Any, k: int, field: str, shape: str) -> list[Any]:
            if isinstance(seq, (str, bytes)) or not hasattr(seq, "__len__") or len(seq) != k:
                got = len(seq) if hasattr(seq, "__len__") and not isinstance(seq, (str, bytes)) else None
                raise field_error(cls, field, f"expected {shape}, got " + (f"{got} entries" if got is not None
                                                                           else repr(seq)))
            return list(seq)

        d = self.symbolic
        nm = f"n = {n} state{'s' if n != 1 else ''} ({', '.join(self.state_names)})"
        mm = f"m = {m} input{'s' if m != 1 else ''} ({', '.join(self.input_names)})"
        f_entries = entries(d.f, n, "f", f"a list of n entries, {nm}")
        self.f_expr = sp.Matrix(n, 1, [sub(e, f"f[{i}]") for i, e in enumerate(f_entries)])
        g_shape = f"G is a list of n rows of m entries ({nm}; {mm}), e.g. G=[{', '.join(['[' + ', '.join(['0'] * m) + ']'] * n)}]"
        flat = not isinstance(d.G, (str, bytes)) and hasattr(d.G, "__len__") and len(d.G) > 0 \
            and not any(hasattr(r, "__len__") for r in d.G)
        if flat:                                # G=[0, 0, 1]: the rows' brackets left out
            hint = ", ".join("[" + ", ".join(map(str, list(d.G)[i * m:(i + 1) * m])) + "]" for i in range(n)) \
                if len(d.G) == n * m else None
            raise field_error(cls, "G", f"got a flat list {list(d.G)!r}",
                              g_shape if hint is None else f"G is a list of n rows of m entries ({nm}; {mm}): "
                                                           f"G=[{hint}]")
        rows = entries(d.G, n, "G", g_shape)
        for i, r in enumerate(rows):
            if isinstance(r, (str, bytes)) or not hasattr(r, "__len__") or len(r) != m:
                raise field_error(cls, f"G[{i}]", f"expected a row of m = {m} entries, got {r!r}", g_shape)
        self.G_expr = sp.Matrix(n, m, [sub(e, f"G[{i}][{j}]") for i, r in enumerate(rows) for j, e in enumerate(r)])
        if isinstance(d.constraint, (list, tuple)) or (hasattr(d.constraint, "shape") and getattr(d.constraint, "shape", ())):
            raise field_error(cls, "constraint", f"expected one expression (>= 0 on the safe set), got {d.constraint!r}",
                              "the constraint is one expression, >= 0 inside the safe set; for several, train "
                              "one barrier per constraint (one plant class each)")
        self.constraint_expr = sub(d.constraint, "constraint")
        self.jacobian_expr = self.f_expr.jacobian(sp.Matrix(self.x_sym))

        def numbers(seq: Sequence[Any], k: int, what: str) -> np.ndarray:
            vals = [sub(e, f"{what}[{i}]", set()) for i, e in enumerate(entries(seq, k, what, f"{k} numbers"))]
            return np.array([float(v) for v in vals], dtype=np.float64)

        self._u_min = numbers(d.u_min, m, "u_min")
        self._u_max = numbers(d.u_max, m, "u_max")
        if not np.all(self._u_min <= self._u_max):
            raise field_error(cls, "u_min", f"{self._u_min} exceeds u_max {self._u_max}")
        domain = entries(d.domain, 2, "domain", "(lo, hi), two lists of n numbers")
        self._domain = (numbers(domain[0], n, "domain[0]"), numbers(domain[1], n, "domain[1]"))
        if not isinstance(d.nominal, Mapping):
            raise field_error(cls, "nominal", f"expected a dict name -> m entries, got {type(d.nominal).__name__}",
                              "e.g. nominal={'zero': [0] * m}")
        self.nominals: dict[str, Controller] = {}
        for k, u in d.nominal.items():
            field = f"nominal[{k!r}]"
            exprs = [sub(e, f"{field}[{j}]") for j, e in enumerate(entries(u, m, field, f"a list of m entries, {mm}"))]
            try:
                self.nominals[k] = Controller(k, self.x_sym, exprs)
            except ValueError as exc:
                raise field_error(cls, field, str(exc)) from None

        self._f = _Field(list(self.f_expr), self.x_sym, (n,))
        self._G = _Field(list(self.G_expr), self.x_sym, (n, m))
        self._J = _Field(list(self.jacobian_expr), self.x_sym, (n, n))
        self._h = _Field([self.constraint_expr], self.x_sym, ())
        self._xdot_twin = _fast.XdotTwin(self._f.twin, self._G.twin)
        if not isinstance(d.periodic, Mapping):
            raise field_error(cls, "periodic", f"expected a dict state index -> period, got {type(d.periodic).__name__}",
                              "e.g. periodic={2: 2*sp.pi} for a heading x[2]")
        self._periodic = checked_periods(self, {k: sub(v, f"periodic[{k!r}]", set()) for k, v in d.periodic.items()})

    # -- bounds and domain: fresh copies so callers cannot mutate the system
    @property
    def u_min(self) -> np.ndarray:
        return self._u_min.copy()

    @property
    def u_max(self) -> np.ndarray:
        return self._u_max.copy()

    @property
    def domain(self) -> tuple[np.ndarray, np.ndarray]:
        """(lo, hi) box of the training domain."""
        return self._domain[0].copy(), self._domain[1].copy()

    @property
    def nominal_names(self) -> tuple[str, ...]:
        return tuple(self.nominals)

    # -- periodic coordinates
    @property
    def periodic(self) -> dict[int, float]:
        """{coordinate index: period} of the coordinates that wrap (an angle: {i: 2 pi}); {} if none."""
        return dict(self._periodic)

    def wrap(self, x: Any) -> np.ndarray:
        """x with every periodic coordinate i mapped into [lo_i, lo_i + P_i) (lo_i: the domain's
        lower bound), the representative the simulators keep: (n,) -> (n,), (B, n) -> (B, n).
        Entries already inside keep their bits (see systems/periodic.py)."""
        return wrap_states(_as_states(x, self.n), self._domain[0], self._periodic)

    # -- numpy (one state ((n,) or (1, n) float64) takes the float twin where it exists:
    # same bits, a fraction of numpy's per-call cost; see systems/_fast.py)
    def f(self, x: Any) -> np.ndarray:
        """Drift: (n,) -> (n,); (B, n) -> (B, n)."""
        return self._f.evaluate(x)

    def G(self, x: Any) -> np.ndarray:
        """Input matrix: (n,) -> (n, m); (B, n) -> (B, n, m)."""
        return self._G.evaluate(x)

    def xdot(self, x: Any, u: Any) -> np.ndarray:
        """f(x) + G(x) u: (n,), (m,) -> (n,); (B, n), (B, m) -> (B, n)."""
        out = _fast.evaluate(self._xdot_twin, x, self.n, u, self.m)     # the float twin where it applies
        return self._xdot_array(x, u) if out is None else out

    def _xdot_array(self, x: Any, u: Any) -> np.ndarray:
        xa = _as_states(x, self.n)
        ua = np.asarray(u, dtype=np.float64)
        if ua.shape != xa.shape[:-1] + (self.m,):
            raise ValueError(f"u must have shape {xa.shape[:-1] + (self.m,)} for x of shape {xa.shape}, "
                             f"got {ua.shape}")
        return self.f(xa) + np.einsum("...ij,...j->...i", self.G(xa), ua)

    def float_xdot(self) -> Callable[..., tuple[float, ...]] | None:
        """The float twin of ``xdot`` for one state of a single-input plant,
        ``fn(x_0, ..., x_{n-1}, u_0) -> (xdot_0, ..., xdot_{n-1})``, bit-identical to the array
        code where its result is finite (it may raise ArithmeticError / ValueError where numpy
        gives inf), or None where there is none. The simulator's RK4 twin calls it; the
        caller checks the CBFSIM_FAST_PATHS switch."""
        return self._xdot_twin.function()

    def jacobian(self, x: Any) -> np.ndarray:
        """f'(x): (n,) -> (n, n); (B, n) -> (B, n, n)."""
        return self._J.numpy(*_columns(x, self.n))

    def df(self, x: Any, v: Any) -> np.ndarray:
        """Exact Jacobian-vector product f'(x) v.

        v has the shape of x, or one extra trailing axis of k directions:
        (n,)->(n,), (B,n)->(B,n), (n,k)->(n,k), (B,n,k)->(B,n,k).
        """
        xa = _as_states(x, self.n)
        va = np.asarray(v, dtype=np.float64)
        batch = xa.shape[:-1]
        J = self.jacobian(xa)
        if va.shape == xa.shape:
            return np.einsum("...ij,...j->...i", J, va)
        if va.ndim == xa.ndim + 1 and va.shape[:-1] == xa.shape:
            return np.einsum("...ij,...jk->...ik", J, va)
        raise ValueError(f"v must have shape {batch + (self.n,)} or {batch + (self.n,)} + (k,) "
                         f"for x of shape {xa.shape}, got {va.shape}")

    def constraint(self, x: Any) -> np.ndarray | float:
        """>= 0 inside the constraint set: (n,) -> float; (B, n) -> (B,)."""
        out = self._h.numpy(*_columns(x, self.n))
        return float(out) if out.ndim == 0 else out

    # -- interval enclosures (for the certifier)
    def enclosure(self, namespace: Mapping[str, Any]) -> "PlantEnclosure":
        """f, G, their Jacobians and the constraint as functions over interval boxes, printed
        from this system's sympy expressions into ``namespace`` (sympy function name ->
        interval function, e.g. ``compiler.interval.NAMESPACE``); see systems/enclosure.py."""
        from .enclosure import plant_enclosure
        return plant_enclosure(self, namespace)

    # -- torch
    def _tcols(self, x: "torch.Tensor") -> list["torch.Tensor"]:
        x = _as_tensor_states(x, self.n)
        return [x[..., i] for i in range(self.n)]

    def f_torch(self, x: "torch.Tensor") -> "torch.Tensor":
        """(B, n) -> (B, n), differentiable, dtype/device of x."""
        return self._f.torch(self._tcols(x), x[..., 0])

    def G_torch(self, x: "torch.Tensor") -> "torch.Tensor":
        """(B, n) -> (B, n, m)."""
        return self._G.torch(self._tcols(x), x[..., 0])

    def xdot_torch(self, x: "torch.Tensor", u: "torch.Tensor") -> "torch.Tensor":
        """(B, n), (B, m) -> (B, n)."""
        return self.f_torch(x) + (self.G_torch(x) @ u.unsqueeze(-1)).squeeze(-1)

    def constraint_torch(self, x: "torch.Tensor") -> "torch.Tensor":
        """(B, n) -> (B,)."""
        return self._h.torch(self._tcols(x), x[..., 0])

    # -- nominal controllers and parameters
    def nominal(self, name: str) -> Controller:
        try:
            return self.nominals[name]
        except KeyError:
            raise UnknownControllerError(f"{self.name} has no nominal controller {name!r}; "
                                         f"available: {sorted(self.nominals)}") from None

    def with_params(self, **overrides: float) -> "ControlAffineSystem":
        """A new system with some parameters replaced (the params stay frozen)."""
        valid = {fld.name for fld in dataclasses.fields(self.params)}
        unknown = set(overrides) - valid
        if unknown:
            raise TypeError(f"{self.name}: unknown parameters {sorted(unknown)}; valid: {sorted(valid)}")
        return type(self)(dataclasses.replace(self.params, **overrides))

    # -- C++
    def cpp_source(self, namespace: str, scalar: str = "float", math_prefix: str = "std::") -> str:
        """C++17 text defining, in ``namespace``: kStateDim, kInputDim, kUMin, kUMax and the
        inline functions f, G (n*m row-major), df, constraint and nominal_<name>, all in
        ``scalar`` with matching literal suffixes (clean under -Wdouble-promotion).

        Math functions are called as ``<math_prefix>sin`` etc. so firmware can supply its
        own; the 'math functions:' comment line lists those used.  ``#include <cmath>`` is
        emitted only for the std:: prefix (and only if a function is used), at the top.
        """
        if not all(_CPP_IDENT.fullmatch(part) for part in namespace.split("::")):
            raise ValueError(f"invalid C++ namespace {namespace!r}")
        if not re.fullmatch(r"([A-Za-z_]\w*::)*\w*", math_prefix) or math_prefix[:1].isdigit():
            raise ValueError(f"invalid math_prefix {math_prefix!r} (e.g. 'std::' or 'detail::m_')")
        if not re.fullmatch(r"[A-Za-z_][\w:<> ]*", scalar):
            raise ValueError(f"invalid scalar type {scalar!r}")
        n, m, T = self.n, self.m, scalar
        v_sym = tuple(sp.Symbol(f"__v{i}", real=True) for i in range(n))
        names = {s: f"x[{i}]" for i, s in enumerate(self.x_sym)}
        names.update({s: f"v[{i}]" for i, s in enumerate(v_sym)})
        pr = _CxxPrinter(T, math_prefix, names)
        xs, vs = set(self.x_sym), set(v_sym)

        def vec(name: str, seq: Sequence[Any]) -> str:
            if not len(seq):        # no inputs (m = 0): ISO C++ has no zero-size arrays
                return f"inline constexpr const {T}* {name} = nullptr;"
            return f"inline constexpr {T} {name}[{len(seq)}] = {{{', '.join(pr.literal(s) for s in seq)}}};"

        f_list = list(self.f_expr)
        G_list = list(self.G_expr)                       # row-major
        df_list = list(self.jacobian_expr * sp.Matrix(v_sym))
        funcs = [
            ("// drift f(x), n entries", f"inline void f(const {T}* x, {T}* out)", f_list,
             [f"out[{i}]" for i in range(n)], {"x": xs}),
            ("// input matrix G(x), n*m entries, row-major", f"inline void G(const {T}* x, {T}* out)", G_list,
             [f"out[{i}]" for i in range(n * m)], {"x": xs}),
            ("// exact Jacobian-vector product f'(x) v", f"inline void df(const {T}* x, const {T}* v, {T}* out)",
             df_list, [f"out[{i}]" for i in range(n)], {"x": xs, "v": vs}),
            ("// >= 0 inside the constraint set", f"inline {T} constraint(const {T}* x)",
             [self.constraint_expr], None, {"x": xs}),
        ]
        for k, c in self.nominals.items():
            funcs.append((f"// nominal controller {k!r} (unclipped)", f"inline void nominal_{k}(const {T}* x, {T}* u)",
                          list(c.expr), [f"u[{j}]" for j in range(m)], {"x": xs}))
        blocks = []
        for comment, sig, exprs, targets, params in funcs:
            if targets is not None and not targets:     # m = 0: G and the nominals write nothing
                params = {**params, sig[sig.rindex("*") + 1:].strip(" )"): set()}
            body = _cpp_statements(pr, T, exprs, targets)
            blocks.append(comment + "\n" + _cpp_function(sig, body, params, exprs))
        code = "\n\n".join(blocks)
        used = sorted(set(re.findall(re.escape(math_prefix) + r"(\w+)\(", code)))
        params_txt = ", ".join(f"{fld.name}={getattr(self.params, fld.name)!r}"
                               for fld in dataclasses.fields(self.params))
        head = [
            f"// system {self.name!r}: xdot = f(x) + G(x) u, generated from the sympy model in systems/.",
            f"// x = [{', '.join(self.state_names)}], u = [{', '.join(self.input_names)}]",
            f"// params: {params_txt}",
            f"// math functions: {', '.join(used) if used else '(none)'}",
        ]
        if used and math_prefix == "std::":
            head.append("#include <cmath>")
        decls = [
            f"namespace {namespace} {{",
            "",
            f"inline constexpr int kStateDim = {n};",
            f"inline constexpr int kInputDim = {m};",
            vec("kUMin", self._u_min),
            vec("kUMax", self._u_max),
            "",
            code,
            "",
            f"}}  // namespace {namespace}",
            "",
        ]
        return "\n".join(head + [""] + decls)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.params!r})"
