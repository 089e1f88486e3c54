"""Extended class-K functions alpha: R -> R (strictly increasing, alpha(0) = 0).

They appear in the CBF condition L_f h + L_G h u >= -alpha(h); the HOCBF condition also
needs alpha'(h), so each function carries its exact derivative. Objects are small frozen
dataclasses (hashable, printable, safe to store in metadata via ``describe``). Both
``__call__`` and ``derivative`` are vectorised over numpy arrays and also accept torch
tensors (the ops used exist in both libraries).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class ClassK(Protocol):
    """What filters need from a class-K function: its value and its derivative."""

    def __call__(self, s: Any) -> Any: ...

    def derivative(self, s: Any) -> Any: ...


def _is_torch(s: Any) -> bool:
    return type(s).__module__.startswith("torch")


def _check_positive(name: str, value: float) -> float:
    value = float(value)
    if not (math.isfinite(value) and value > 0.0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return value


def _as_array(s: Any) -> Any:
    return s if _is_torch(s) else np.asarray(s, dtype=np.float64)


def describe(alpha: ClassK) -> dict:
    """JSON-friendly description (kind + parameters) for trajectory metadata."""
    params = asdict(alpha) if hasattr(alpha, "__dataclass_fields__") else {}
    return {"kind": type(alpha).__name__, **params}


@dataclass(frozen=True)
class Linear:
    """alpha(s) = gain * s: the usual choice; exponential approach to the boundary."""

    gain: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "gain", _check_positive("Linear.gain", self.gain))

    def __call__(self, s: Any) -> Any:
        return self.gain * _as_array(s)

    def derivative(self, s: Any) -> Any:
        return _full_like(_as_array(s), self.gain)


@dataclass(frozen=True)
class Cubic:
    """alpha(s) = gain * s^3: flat at the boundary (alpha'(0) = 0), steep far from it."""

    gain: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "gain", _check_positive("Cubic.gain", self.gain))

    def __call__(self, s: Any) -> Any:
        s = _as_array(s)
        return self.gain * s * s * s

    def derivative(self, s: Any) -> Any:
        s = _as_array(s)
        return 3.0 * self.gain * s * s


@dataclass(frozen=True)
class Power:
    """alpha(s) = gain * sign(s) |s|^p, p > 0 (p < 1 gives finite-time convergence).

    The derivative gain * p * |s|^(p-1) at s = 0 is 0 for p > 1, gain for p = 1 and
    +inf for p < 1 (returned without warnings: it is the true one-sided limit).
    """

    gain: float = 1.0
    p: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "gain", _check_positive("Power.gain", self.gain))
        object.__setattr__(self, "p", _check_positive("Power.p", self.p))

    def __call__(self, s: Any) -> Any:
        s = _as_array(s)
        if _is_torch(s):
            import torch

            return self.gain * torch.sign(s) * torch.abs(s) ** self.p
        return self.gain * np.sign(s) * np.abs(s) ** self.p

    def derivative(self, s: Any) -> Any:
        s = _as_array(s)
        if self.p == 1.0:
            return _full_like(s, self.gain)
        if _is_torch(s):
            import torch

            a = torch.abs(s)
            at_zero = torch.full_like(s, 0.0 if self.p > 1.0 else math.inf)
            safe = torch.where(a > 0, a, torch.ones_like(a))
            return torch.where(a > 0, self.gain * self.p * safe ** (self.p - 1.0), at_zero)
        a = np.abs(s)
        safe = np.where(a > 0, a, 1.0)
        at_zero = 0.0 if self.p > 1.0 else math.inf
        return np.where(a > 0, self.gain * self.p * safe ** (self.p - 1.0), at_zero)


@dataclass(frozen=True)
class Tanh:
    """alpha(s) = gain * scale * tanh(s / scale): slope ``gain`` near 0, saturating at
    +-gain*scale so a large h cannot license arbitrarily fast approach to the boundary."""

    gain: float = 1.0
    scale: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "gain", _check_positive("Tanh.gain", self.gain))
        object.__setattr__(self, "scale", _check_positive("Tanh.scale", self.scale))

    def __call__(self, s: Any) -> Any:
        return self.gain * self.scale * _tanh(_as_array(s) / self.scale)

    def derivative(self, s: Any) -> Any:
        t = _tanh(_as_array(s) / self.scale)
        return self.gain * (1.0 - t * t)


def _full_like(s: Any, value: float) -> Any:
    if _is_torch(s):
        import torch

        return torch.full_like(s, value)
    return np.full(np.shape(s), value, dtype=np.float64)


def _tanh(s: Any) -> Any:
    return s.tanh() if _is_torch(s) else np.tanh(s)
