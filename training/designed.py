"""Barriers written down, not trained: an affine h(x) = w.x + c as a Softplus network, so that a
barrier found by analysis (an invariant half-space of a linear plant, e.g.
``systems.hi_ord8:eigen_halfspace``) goes through the same header, certifier and simulator as
a trained one.

Each hidden unit computes softplus(w.x + c + b_j) with its lift b_j chosen so that the unit stays
in softplus's linear regime over the whole domain D: softplus(z) = z + log1p(e^-z), so the
network is w.x + c + mean_j log1p(e^-(w.x + c + b_j)), within e^-(least pre-activation) of the
affine function, and its gradient is w times a mean of sigmoids within as much of 1.  The
largest pre-activation stays below Softplus's threshold (20), where torch and the header
switch to the identity, so no unit crosses that kink either.
"""
from __future__ import annotations

import numpy as np

SOFTPLUS_THRESHOLD = 20.0
TOP = 19.0          # the largest pre-activation over D: one below the threshold
SPREAD = 1.0        # the units' lifts span [b - SPREAD, b]: a network of distinct units, the same function
MAX_ERROR = 1e-3    # refuse a domain so wide that the least pre-activation leaves more than this


def affine_softplus_network(w, offset: float, domain_lo, domain_hi, hidden: int = 16):
    """An ``nn.Sequential`` (Linear(n, hidden), Softplus, Linear(hidden, 1)), float32, computing
    w.x + offset within ``error`` over the box [domain_lo, domain_hi]; returns (network, error)."""
    import torch
    w = np.asarray(w, dtype=np.float64)
    lo, hi = np.asarray(domain_lo, dtype=np.float64), np.asarray(domain_hi, dtype=np.float64)
    if w.ndim != 1 or lo.shape != w.shape or hi.shape != w.shape or not np.all(lo <= hi):
        raise ValueError(f"w, domain_lo and domain_hi must be vectors of one length with lo <= hi, "
                         f"got shapes {w.shape}, {lo.shape}, {hi.shape}")
    if hidden < 1:
        raise ValueError(f"hidden must be >= 1, got {hidden}")
    z_lo = offset + float(np.sum(np.minimum(w * lo, w * hi)))
    z_hi = offset + float(np.sum(np.maximum(w * lo, w * hi)))
    lifts = (TOP - z_hi) - np.linspace(SPREAD, 0.0, hidden)
    error = float(np.log1p(np.exp(-(z_lo + lifts[0]))))
    if error > MAX_ERROR:
        raise ValueError(f"w.x + offset spans [{z_lo:.3g}, {z_hi:.3g}] over the domain: too wide for softplus's "
                         f"linear regime below its threshold {SOFTPLUS_THRESHOLD:g} (error {error:.2g} > {MAX_ERROR:g})")
    net = torch.nn.Sequential(torch.nn.Linear(len(w), hidden), torch.nn.Softplus(), torch.nn.Linear(hidden, 1))
    with torch.no_grad():
        net[0].weight.copy_(torch.as_tensor(np.tile(w, (hidden, 1))))
        net[0].bias.copy_(torch.as_tensor(offset + lifts))
        net[2].weight.fill_(1.0 / hidden)
        net[2].bias.fill_(-float(np.mean(lifts)))
    return net.float().eval(), error
