"""The filter's row margin: the filter enforces  a + b.u >= eps * sigma(x),  sigma affine in x.

Why a state-dependent margin: the margin pays for how much the condition can degrade between
two control samples (training/certify/sampled.py), and for some plants that need scales with
the state.  The kinematic bicycle is the case in point: its lane barrier reads (p_y, psi)
only, and in arclength s = v t its condition is speed-free, so d/dt h = v dh/ds.  The steering
room at the set's edge then grows like v (it is smallest at the lowest speed), while the
sampled-data need, about T/2 max(-d2h/dt2) = T v^2/2 max(-d2h/ds2), grows like v^2.  One
constant eps must cover the need at the top speed out of the room at the bottom one; a margin
eps v / v_ref asks only for room T v_max/2 max(-d2h/ds2) per unit arclength rate, v_max/v_min
times less (7.5x on [2, 15] m/s).

sigma(x) = bias + weights . x must be >= 0 on the domain (a negative margin would let the
filter accept a violated row); ``sigma`` None is the constant margin (sigma = 1), which keeps
every filter's bits unchanged.  The certifier proves the loop for the margin the filter
enforces: over a box it uses the smallest eps sigma for the sampled-data routes (the filter
enforces at least that) and the largest for feasibility.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from compiler.errors import CbfsimError


class MarginError(CbfsimError, ValueError):
    """A margin or margin scale that is not finite, negative, or the wrong size (one line)."""


@dataclass(frozen=True)
class Margin:
    """eps * sigma(x), sigma(x) = bias + weights . x (weights None: sigma = 1)."""

    eps: float = 0.0
    bias: float = 1.0
    weights: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.eps) and self.eps >= 0):
            raise MarginError(f"margin must be a finite number >= 0, got {self.eps!r}")
        if not math.isfinite(self.bias) or (self.weights is not None
                                            and not all(math.isfinite(w) for w in self.weights)):
            raise MarginError(f"margin scale must be finite, got bias {self.bias!r}, weights {self.weights!r}")
        if self.weights is None and self.bias != 1.0:
            raise MarginError("a constant margin has no bias: put the factor into eps")

    @property
    def constant(self) -> bool:
        return self.weights is None

    @property
    def scale(self) -> list[float] | None:
        """[bias, w_1, ..., w_n] (the card's and certificate's ``margin_scale``), None if constant."""
        return None if self.weights is None else [self.bias, *self.weights]

    def with_eps(self, eps: float) -> "Margin":
        return Margin(float(eps), self.bias, self.weights)

    def plus(self, extra: float) -> "Margin":
        """This margin plus a constant (a disturbance margin): eps (sigma + extra / eps)."""
        if self.weights is None:
            return Margin(self.eps + float(extra))
        if self.eps == 0:
            raise MarginError("a state-scaled margin with eps 0 cannot absorb a constant")
        return Margin(self.eps, self.bias + float(extra) / self.eps, self.weights)

    def to_dict(self) -> dict[str, Any]:
        """For summaries and metadata: {"margin": eps, "margin_scale": [bias, w...] or None}."""
        return {"margin": self.eps, "margin_scale": self.scale}

    def at(self, x: Any) -> Any:
        """eps * sigma at states x (B, n) -> (B,), numpy or torch (the trainer's batches); a
        constant margin returns the float eps."""
        if self.weights is None:
            return self.eps
        if type(x).__module__.startswith("torch"):
            return self.eps * (self.bias + x @ x.new_tensor(self.weights))
        x = np.asarray(x, dtype=np.float64)
        return self.eps * (self.bias + x @ np.asarray(self.weights))

    def bounds(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(min, max) of eps * sigma over the boxes [lo, hi] (B, n), widened by the rounding of
        evaluating it in float32 (the firmware) or float64: (n + 2) half-ulps of float32 of
        eps (|bias| + sum |w_i x_i|), so it holds the margin either filter computes."""
        lo, hi = np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)
        if self.weights is None:
            full = np.full(lo.shape[0], self.eps)
            return full, full
        w = np.asarray(self.weights)
        size = abs(self.bias) + (np.abs(w) * np.maximum(np.abs(lo), np.abs(hi))).sum(-1)
        slack = (len(w) + 2) * 2.0 ** -23 * size
        low = self.bias + np.minimum(w * lo, w * hi).sum(-1) - slack
        high = self.bias + np.maximum(w * lo, w * hi).sum(-1) + slack
        return (np.nextafter(self.eps * np.maximum(low, 0.0), -np.inf).clip(min=0.0),
                np.nextafter(self.eps * high, np.inf))

    def check_domain(self, n: int, lo: Sequence[float], hi: Sequence[float]) -> None:
        """One-line error unless the scale has n weights and sigma >= 0 on the box [lo, hi]."""
        if self.weights is None:
            return
        if len(self.weights) != n:
            raise MarginError(f"margin_scale needs 1 + {n} numbers (bias, one weight per state), "
                              f"got 1 + {len(self.weights)}")
        w, lo, hi = np.asarray(self.weights), np.asarray(lo, float), np.asarray(hi, float)
        least = self.bias + np.minimum(w * lo, w * hi).sum()
        if least < 0:
            raise MarginError(f"margin_scale bias + weights . x falls to {least:g} < 0 on the domain: "
                              "the filter would accept violated rows")


def margin_from(eps: float | Margin, scale: Sequence[float] | None = None) -> Margin:
    """A Margin from a float eps (and the card's ``margin_scale`` [bias, w_1..w_n] or None),
    or a Margin passed through."""
    if isinstance(eps, Margin):
        return eps if scale is None else Margin(eps.eps, *_split(scale))
    try:
        value = float(eps)
    except (TypeError, ValueError):
        raise MarginError(f"margin must be a finite number >= 0, got {eps!r}") from None
    return Margin(value) if scale is None else Margin(value, *_split(scale))


def _split(scale: Sequence[float]) -> tuple[float, tuple[float, ...]]:
    values = [float(v) for v in scale]
    if len(values) < 2:
        raise MarginError(f"margin_scale is [bias, w_1, ..., w_n], got {list(scale)!r}")
    return values[0], tuple(values[1:])


def card_scale(config: dict[str, Any]) -> list[float] | None:
    """The card config's ``margin_scale`` (None: constant margin)."""
    scale = config.get("margin_scale")
    return None if scale is None else [float(v) for v in scale]


def condition_margin(cfg: Any, x: Any) -> Any:
    """The trainer's condition margin at states x (numpy or torch): condition_margin, scaled
    like the filter's margin when the config has a ``margin_scale``, so the room trained and
    checked for is the room the certified filter needs at every state."""
    return margin_from(cfg.condition_margin, cfg.margin_scale).at(x)
