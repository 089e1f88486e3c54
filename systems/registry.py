"""Name -> factory lookup, so configs and CLIs can name a system by string."""
from __future__ import annotations

from typing import Callable

from .acc import acc
from .base import ControlAffineSystem
from .bicycle import bicycle
from .double_integrator import double_integrator
from .inverted_pendulum import inverted_pendulum
from .unicycle import unicycle
from .van_der_pol import van_der_pol

FACTORIES: dict[str, Callable[..., ControlAffineSystem]] = {
    "van_der_pol": van_der_pol,
    "bicycle": bicycle,
    "inverted_pendulum": inverted_pendulum,
    "acc": acc,
    "unicycle": unicycle,
    "double_integrator": double_integrator,
}
SYSTEM_NAMES: tuple[str, ...] = tuple(FACTORIES)


def get_system(name: str, **param_overrides: float) -> ControlAffineSystem:
    """The system ``name`` with its default parameters, overridden by ``param_overrides``."""
    try:
        factory = FACTORIES[name]
    except KeyError:
        raise KeyError(f"unknown system {name!r}; known: {', '.join(SYSTEM_NAMES)}") from None
    return factory(**param_overrides)
