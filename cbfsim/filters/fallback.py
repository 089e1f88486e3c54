"""The fault policy: what a filter applies when it cannot trust its own answer.

A fault is a step whose data is not finite -- a NaN or infinite barrier term (a finite but
huge state can produce one), a NaN nominal input -- or a row no solver can represent.
Applying the clipped nominal input there fails open: the barrier said nothing and the
nominal controller is not safe. So the policy is explicit, and fail-safe by default:

  hold        the last input this filter returned with status OK (the constraint held at
              the state it was computed for); before the first such step, ``u_safe``
  controller  a backup: one of the plant's nominal controllers (systems/), clipped to the
              input box; ``u_safe`` where its output is not finite
  input       the named safe input ``u_safe``

``u_safe`` defaults to the box point nearest 0. The step is flagged FilterStatus.FALLBACK.
The firmware applies the same rules (firmware/common/step.hpp, with the constants
``cbfsim.filters.cpp.config_lines`` generates), so host and device agree on faults too.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import IntEnum
from typing import Any

import numpy as np

from .base import FilterResult, FilterStatus


class FallbackKind(IntEnum):
    """The fault policies a filter can apply; the codes are shared with the firmware."""

    HOLD = 0
    CONTROLLER = 1
    INPUT = 2


@dataclass(frozen=True)
class Fallback:
    """A fault policy: ``kind`` 'hold' | 'controller' | 'input'; ``u_safe`` the safe input
    (m floats, default: the box point nearest 0); ``controller`` the name of one of the
    plant's nominal controllers (kind 'controller' only)."""

    kind: str = "hold"
    u_safe: tuple[float, ...] | None = None
    controller: str | None = None

    def __post_init__(self) -> None:
        names = [k.name.lower() for k in FallbackKind]
        if self.kind not in names:
            raise ValueError(f"fallback kind must be one of {', '.join(names)}, got {self.kind!r}")
        if (self.kind == "controller") != (self.controller is not None):
            raise ValueError("a fallback controller is named exactly when kind is 'controller'")
        if self.u_safe is not None:
            object.__setattr__(self, "u_safe", tuple(float(v) for v in np.ravel(self.u_safe)))
            if not all(map(math.isfinite, self.u_safe)):
                raise ValueError(f"fallback u_safe must be finite, got {self.u_safe}")

    @property
    def code(self) -> FallbackKind:
        return FallbackKind[self.kind.upper()]

    def safe_input(self, u_min: np.ndarray, u_max: np.ndarray) -> np.ndarray:
        """u_safe as an (m,) array, checked against the box (default: clip(0))."""
        if self.u_safe is None:
            return np.clip(np.zeros_like(u_min), u_min, u_max)
        u = np.array(self.u_safe, dtype=np.float64)
        if u.shape != u_min.shape or (u < u_min).any() or (u > u_max).any():
            raise ValueError(f"fallback u_safe {list(u)} must have {u_min.size} entries inside the input box "
                             f"[{list(u_min)}, {list(u_max)}]")
        return u


class FaultPolicy:
    """A ``Fallback`` bound to one filter: the box, the backup controller, per-run memory."""

    def __init__(self, fallback: Fallback, u_min: np.ndarray, u_max: np.ndarray, system: Any = None):
        self.fallback = fallback
        self.u_min, self.u_max = u_min, u_max
        self.u_safe = fallback.safe_input(u_min, u_max)
        self.controller = None
        if fallback.kind == "controller":
            if not hasattr(system, "nominal"):
                raise ValueError(f"fallback controller {fallback.controller!r} needs the plant: "
                                 "construct the filter from the system, not from bounds")
            self.controller = system.nominal(fallback.controller)
        self._last: np.ndarray | None = None

    def reset(self) -> None:
        """Forget the held inputs (call between independent simulations)."""
        self._last = None

    def apply(self, x: Any, result: FilterResult) -> FilterResult:
        """Replace the FALLBACK rows' inputs by the policy's and remember the OK rows' inputs."""
        status, u = result.status, result.u
        B = status.shape[0]
        if self._last is None or self._last.shape[0] != B:
            self._last = np.tile(self.u_safe, (B, 1))
        if B == 1:                                   # one run: the same decisions on one element
            code = status.item()
            if code == FilterStatus.OK:
                self._last[0] = u[0]
            if code != FilterStatus.FALLBACK:
                return result
        fault = status == FilterStatus.FALLBACK
        if fault.any():
            u = u.copy()
            u[fault] = self._inputs(x, fault)
            result = replace(result, u=u)
        np.copyto(self._last, u, where=(status == FilterStatus.OK)[:, None])
        return result

    def _inputs(self, x: Any, fault: np.ndarray) -> np.ndarray:
        kind = self.fallback.kind
        if kind == "hold":
            return self._last[fault]
        if kind == "input":
            return np.tile(self.u_safe, (int(fault.sum()), 1))
        if x is None:
            raise ValueError("the fallback controller needs the state x (filter(x, u_nom, terms))")
        with np.errstate(all="ignore"):
            u = np.clip(np.asarray(self.controller(np.asarray(x, dtype=np.float64)[fault]), dtype=np.float64),
                        self.u_min, self.u_max)
        return np.where(np.isfinite(u).all(axis=1, keepdims=True), u, self.u_safe)
