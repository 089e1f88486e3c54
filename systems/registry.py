"""Name -> factory lookup, so configs, cards and CLIs can name a system by string.

Three ways a name resolves, and ``system_origin`` says which:

* ``"builtin"``: the plants shipped in this package (``van_der_pol``, ``bicycle``, ...);
* ``"registered"``: a plant registered at run time with ``register(name, factory)``, usable as
  a decorator on a ``ControlAffineSystem`` subclass or on a factory function;
* ``"import"``: an import path ``package.module:Name`` naming such a class or factory, so a
  plant defined in the user's own file works in every CLI and model card without registration
  (the module must be importable: on ``PYTHONPATH`` or installed).
"""
from __future__ import annotations

import importlib
import inspect
from typing import Any, Callable, TypeVar

from compiler.errors import CbfsimError

from .acc import acc
from .base import ControlAffineSystem
from .bicycle import bicycle
from .darboux import darboux
from .hi_ord8 import hi_ord8
from .obstacle_avoidance import obstacle_avoidance
from .spacecraft import spacecraft
from .double_integrator import double_integrator
from .point_robot import point_robot
from .dubins import dubins
from .inverted_pendulum import inverted_pendulum
from .unicycle import unicycle
from .van_der_pol import van_der_pol

Factory = Callable[..., ControlAffineSystem]
T = TypeVar("T")

BUILTIN: dict[str, Factory] = {
    "van_der_pol": van_der_pol,
    "bicycle": bicycle,
    "inverted_pendulum": inverted_pendulum,
    "acc": acc,
    "unicycle": unicycle,
    "double_integrator": double_integrator,
    "point_robot": point_robot,
    "darboux": darboux,
    "obstacle_avoidance": obstacle_avoidance,
    "spacecraft": spacecraft,
    "hi_ord8": hi_ord8,
    "dubins": dubins,
}
SYSTEM_NAMES: tuple[str, ...] = tuple(BUILTIN)
_REGISTERED: dict[str, Factory] = {}


class UnknownSystemError(CbfsimError, KeyError):
    """A system name that is neither built in, registered, nor an importable ``module:Name``."""

    def __str__(self) -> str:          # KeyError quotes its message; a CLI prints one clean line
        return str(self.args[0])


class SystemParameterError(CbfsimError, TypeError):
    """A parameter name the system does not have (e.g. a card or --param for another plant)."""


def _as_factory(obj: Any, where: str) -> Factory:
    """A ControlAffineSystem subclass becomes ``lambda **p: cls(cls.Params(**p))``."""
    if inspect.isclass(obj):
        if not issubclass(obj, ControlAffineSystem):
            raise TypeError(f"{where}: {obj.__name__} is not a systems.ControlAffineSystem subclass")
        cls = obj

        def factory(**params: float) -> ControlAffineSystem:
            return cls(cls.Params(**params))
        return factory
    if callable(obj):
        return obj
    raise TypeError(f"{where}: {obj!r} is neither a ControlAffineSystem subclass nor a factory function")


def register(name: str, factory: Any = None, *, replace: bool = False) -> Any:
    """Make ``name`` resolve to ``factory`` (a ControlAffineSystem subclass or a function
    returning one). As a decorator: ``@systems.register("cart")`` above the class."""
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"system name must be an identifier, got {name!r}")
    if name in BUILTIN:
        raise ValueError(f"{name!r} is a built-in system; choose another name")

    def add(obj: T) -> T:
        if name in _REGISTERED and not replace:
            raise ValueError(f"system {name!r} is already registered (pass replace=True to replace it)")
        _REGISTERED[name] = _as_factory(obj, f"register({name!r})")
        return obj

    return add if factory is None else add(factory)


def unregister(name: str) -> None:
    """Remove a run-time registration (tests, notebooks)."""
    _REGISTERED.pop(name, None)


def available() -> dict[str, str]:
    """Every name that resolves without an import path -> its origin ("builtin" or "registered")."""
    return {**{k: "builtin" for k in BUILTIN}, **{k: "registered" for k in _REGISTERED}}


def system_origin(name: str) -> str:
    """"builtin", "registered" or "import" (``module:Name``); raises UnknownSystemError otherwise."""
    if name in BUILTIN:
        return "builtin"
    if name in _REGISTERED:
        return "registered"
    if ":" in name:
        return "import"
    raise _unknown(name)


def _unknown(name: str) -> UnknownSystemError:
    return UnknownSystemError(f"unknown system {name!r}; known: {', '.join(available())}; "
                              "or give an import path package.module:ClassName")


def _import_factory(path: str) -> Factory:
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise _unknown(path)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UnknownSystemError(f"system {path!r}: cannot import module {module_name!r} ({exc})") from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise UnknownSystemError(f"system {path!r}: module {module_name!r} has no {attr!r}")
        obj = getattr(obj, part)
    try:
        return _as_factory(obj, f"system {path!r}")
    except TypeError as exc:
        raise UnknownSystemError(str(exc)) from None


def get_system(name: str, **param_overrides: float) -> ControlAffineSystem:
    """The system ``name`` (built in, registered, or ``module:Name``) with its default
    parameters, overridden by ``param_overrides``."""
    origin = system_origin(name)
    factory = {"builtin": BUILTIN.get, "registered": _REGISTERED.get}.get(origin, lambda _: None)(name)
    if factory is None:
        factory = _import_factory(name)
    try:
        return factory(**param_overrides)
    except TypeError as exc:            # a parameter the plant does not have (its Params dataclass says so)
        if "unexpected keyword argument" not in str(exc):
            raise
        raise SystemParameterError(f"system {name!r}: {exc}") from None
