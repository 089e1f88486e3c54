"""Hinge penalties for a neural CBF: safe states up, unsafe states down, the barrier
condition wherever the set {h >= 0} (and psi1 >= 0 for order 2) is, or is about to be.

Each penalty is zero once its margin is met, so a barrier that satisfies every condition
with margin has zero loss and training stops pulling on it (unlike a regression target).
For order 2 the certified set is {h >= 0, psi1 >= 0}; labels about membership use
s = min(h, psi1), containment (outside the constraint set) uses h itself.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .lie import Terms, psi1, residual
from .margin import condition_margin


@dataclass
class Batch:
    """A minibatch: states with their precomputed plant terms and labels."""

    x: torch.Tensor
    f: torch.Tensor
    G: torch.Tensor
    Dff: torch.Tensor | None
    DfG: torch.Tensor | None
    pos: torch.Tensor        # bool: known safe (backup rollout stays in the inner set)
    neg: torch.Tensor        # bool: outside the constraint set
    lost: torch.Tensor       # bool: inside, but the backup rollout leaves the set


def _masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (values * mask).sum() / mask.sum().clamp(min=1)


def _drift_scale(t: Terms, order: int, u_min, u_max) -> torch.Tensor:
    """|L_f h| + sum_j |L_Gj h| max|u_j| (order 1), the same with L_f^2 h, L_G L_f h (order 2)."""
    bound = torch.as_tensor(np.maximum(np.abs(u_min), np.abs(u_max)), dtype=t.h.dtype)
    if order == 1:
        return t.Lf.abs() + (t.LG.abs() * bound).sum(-1)
    return t.Lf2.abs() + (t.LGLf.abs() * bound).sum(-1)


def barrier_loss(t: Terms, batch: Batch, cfg, u_min, u_max) -> tuple[torch.Tensor, dict[str, float]]:
    """Weighted sum of the hinge penalties; also returns each part (floats) for logging."""
    relu = torch.relu
    h = t.h
    p1 = psi1(t, cfg.alpha1) if cfg.order == 2 else None
    s = torch.minimum(h, p1) if cfg.order == 2 else h
    parts: dict[str, torch.Tensor] = {}
    # positives lift h only: for order 2, psi1 >= 0 on every viable state is out of reach of a
    # linear alpha1 near the boundary (psi1 = 0 is a line there, the viable edge a parabola)
    parts["safe"] = cfg.w_safe * _masked_mean(relu(cfg.safe_margin - h), batch.pos)
    parts["unsafe"] = cfg.w_unsafe * (_masked_mean(relu(h + cfg.unsafe_margin), batch.neg)
                                      + _masked_mean(relu(s + cfg.unsafe_margin), batch.lost))
    # The condition is an implication: s >= 0  =>  residual >= 0.  A failing state can be
    # fixed two ways -- reshape the gradient of h so the residual rises, or push s below
    # -band so the state leaves the set -- and the penalty is the smaller of the two
    # shortfalls, so each state takes the cheaper fix (one just inside the set that cannot
    # be held is dropped, a deep one is reshaped).  Positives belong in {h >= 0}: they may
    # leave the set only through psi1 (order 2), never by lowering h.  h enters alpha(h)
    # detached, or the penalty would reward raising h to meet the condition.  Residuals are
    # divided by the (detached) size of the dynamics terms + 1 so fast states do not drown
    # every other penalty (class-K terms are left out: alpha1 alpha2 h alone would mute
    # every order-2 residual).
    td = Terms(h.detach(), t.Lf, t.LG, t.Lf2, t.LGLf)
    res, _, _ = residual(td, cfg.order, u_min, u_max, cfg.gamma, cfg.alpha1, cfg.alpha2)
    shortfall = relu(condition_margin(cfg, batch.x) - res) / (1.0 + _drift_scale(t, cfg.order, u_min, u_max).detach())
    if cfg.order == 1:
        leave = relu(h + cfg.band)
        pos_cost = shortfall
    else:
        # leaving through psi1 may only turn the slope (psi1 with h detached): lowering h to
        # cut psi1 would drag the whole barrier down and the boundary inward with it
        p1_slope = t.Lf + cfg.alpha1 * h.detach()
        leave = relu(torch.minimum(h, p1_slope) + cfg.band)
        pos_cost = torch.minimum(shortfall, relu(p1_slope + cfg.band))
    per_state = torch.where(batch.pos, pos_cost, torch.minimum(shortfall, leave))
    parts["condition"] = cfg.w_condition * per_state.mean()
    total = sum(parts.values())
    return total, {k: float(v.detach()) for k, v in parts.items()}
