"""Hinge penalties for a neural CBF: safe states up, unsafe states down, the barrier
condition wherever the set {h >= 0} (and psi1 >= 0 for order 2) is, or is about to be.

Each penalty is zero once its margin is met, so a barrier that satisfies every condition
with margin has zero loss and training stops pulling on it (unlike a regression target).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .lie import Terms, psi1, residual


@dataclass
class Batch:
    """A minibatch: states with their precomputed plant terms and labels."""

    x: torch.Tensor
    f: torch.Tensor
    G: torch.Tensor
    Dff: torch.Tensor | None
    DfG: torch.Tensor | None
    pos: torch.Tensor        # bool: known safe (inner set AND backup-rollout safe)
    neg: torch.Tensor        # bool: outside the constraint set
    expand: torch.Tensor     # bool: inside the inner set but not proven safe


def _masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    count = mask.sum()
    return (values * mask).sum() / count.clamp(min=1)


def barrier_loss(t: Terms, batch: Batch, cfg, u_min, u_max, expand: bool,
                 w_safe: float | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """Weighted sum of the hinge penalties; also returns each part (floats) for logging.
    ``w_safe`` overrides cfg.w_safe (the trainer anneals it in the repair rounds)."""
    relu = torch.relu
    h = t.h
    parts: dict[str, torch.Tensor] = {}
    parts["safe"] = (cfg.w_safe if w_safe is None else w_safe) * _masked_mean(relu(cfg.safe_margin - h), batch.pos)
    parts["unsafe"] = cfg.w_unsafe * _masked_mean(relu(h + cfg.unsafe_margin), batch.neg)
    # The condition is an implication: h >= 0 (and psi1 >= 0)  =>  residual >= 0.  Its penalty
    # must not be met by *raising* h (the alpha(h) term would reward that), so h enters alpha
    # detached; a failing state is fixed by reshaping the gradient of h or, via "shrink", by
    # pushing h below the band (moving the boundary inward).  Residuals are divided by their
    # own (detached) magnitude + 1 so fast states do not drown every other penalty.
    td = Terms(t.h.detach(), t.Lf, t.LG, t.Lf2, t.LGLf)
    res, _, scale = residual(td, cfg.order, u_min, u_max, cfg.gamma, cfg.alpha1, cfg.alpha2)
    gate = h >= -cfg.band
    if cfg.order == 2:
        p1 = psi1(t, cfg.alpha1)
        gate = gate & (p1 >= -cfg.band)
    gate = gate.detach()
    shortfall = relu(cfg.condition_margin - res) / (1.0 + scale.detach())
    parts["condition"] = cfg.w_condition * _masked_mean(shortfall, gate)
    if cfg.w_shrink > 0:
        failing = gate & (res < 0).detach()
        region = relu(h + cfg.band)
        if cfg.order == 2:
            region = torch.minimum(region, relu(p1 + cfg.band))
        parts["shrink"] = cfg.w_shrink * _masked_mean(region, failing)
    if expand and cfg.w_expand > 0:
        grow = batch.pos | batch.expand
        term = _masked_mean(relu(cfg.safe_margin - h), batch.expand)
        if cfg.order == 2:
            term = term + _masked_mean(relu(cfg.safe_margin - p1), grow)
        parts["expand"] = cfg.w_expand * term
    total = sum(parts.values())
    return total, {k: float(v.detach()) for k, v in parts.items()}
