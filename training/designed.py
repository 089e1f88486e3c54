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


# --- a maximum of piecewise-linear terms, as an exact ReLU network -----------------------------

def _interval(weights: np.ndarray, bias: float, lo: np.ndarray, hi: np.ndarray) -> tuple[float, float]:
    """The range of weights.x + bias over the box [lo, hi]."""
    return (bias + float(np.sum(np.minimum(weights * lo, weights * hi))),
            bias + float(np.sum(np.maximum(weights * lo, weights * hi))))


def _term_range(term: tuple, lo: np.ndarray, hi: np.ndarray) -> tuple[float, float]:
    """An enclosure over the box of a.x + b + sum_k w_k relu(c_k.x + d_k)."""
    a, b, hinges = term
    low, high = _interval(np.asarray(a, dtype=np.float64), float(b), lo, hi)
    for w, c, d in hinges:
        z_lo, z_hi = _interval(np.asarray(c, dtype=np.float64), float(d), lo, hi)
        r_lo, r_hi = max(z_lo, 0.0), max(z_hi, 0.0)
        low += min(w * r_lo, w * r_hi)
        high += max(w * r_lo, w * r_hi)
    return low, high


def relu_max_network(terms: list[tuple], domain_lo, domain_hi, widths: tuple[int, ...] = (8, 8, 8)):
    """An ``nn.Sequential`` of Linear/ReLU layers of the given hidden ``widths`` computing, exactly
    on the box [domain_lo, domain_hi], max_j term_j(x) with term_j = a.x + b + sum_k w_k relu(c_k.x + d_k)
    (each term a tuple (a, b, [(w_k, c_k, d_k), ...])).

    Why a maximum: {max_j h_j >= 0} is the union of the sets {h_j >= 0}, and on each piece of its
    zero level the network's gradient is one term's, so a union of barriers written down term by
    term (each holding its condition on its own zero level) is one ReLU barrier the header, the
    certifier and the simulator take as they take a trained one.

    Layer 1 holds every hinge and, per term, a unit relu(a.x + L) with L lifting a.x above zero
    on the box (so the unit is the identity plus L there); each later layer halves the list by
    max(u, v) = relu(u - v) + relu(v + M) - M, M lifting v above zero likewise, and passes a lone
    value on as relu(v + M) - M.  Unused units get weight 0 and bias -1: always off."""
    import torch
    lo, hi = np.asarray(domain_lo, dtype=np.float64), np.asarray(domain_hi, dtype=np.float64)
    n = lo.shape[0]
    if not terms:
        raise ValueError("relu_max_network needs at least one term")
    if lo.ndim != 1 or hi.shape != lo.shape or not np.all(lo <= hi):
        raise ValueError(f"domain_lo and domain_hi must be vectors of one length with lo <= hi, got {lo}, {hi}")
    for j, (a, _, hinges) in enumerate(terms):
        shapes = [np.shape(a)] + [np.shape(c) for _, c, _ in hinges]
        if any(s != (n,) for s in shapes):
            raise ValueError(f"term {j}: every a and c_k must have the domain's length {n}, got shapes {shapes}")
    levels = int(np.ceil(np.log2(len(terms))))
    if len(widths) < 1 + levels:
        raise ValueError(f"{len(terms)} terms need 1 + {levels} hidden layers (a maximum of pairs per layer), "
                         f"got {len(widths)}")

    # layer 1: units as (row over x, bias); each term's value as (row over units, bias)
    units: list[tuple[np.ndarray, float]] = []
    values: list[tuple[dict[int, float], float]] = []
    ranges = []
    for a, b, hinges in terms:
        a = np.asarray(a, dtype=np.float64)
        lift = 1.0 - _interval(a, 0.0, lo, hi)[0]
        units.append((a, lift))
        row = {len(units) - 1: 1.0}
        for w, c, d in hinges:
            units.append((np.asarray(c, dtype=np.float64), float(d)))
            row[len(units) - 1] = float(w)
        values.append((row, float(b) - lift))
        ranges.append(_term_range((a, b, hinges), lo, hi))
    layers = [_layer(units, widths[0], n, "layer 1 (a lift per term and every hinge)")]

    for width in widths[1:]:
        units, next_values, next_ranges = [], [], []
        for i in range(0, len(values), 2):
            pair = values[i:i + 2]
            keep, (k_lo, k_hi) = pair[-1], ranges[i + len(pair) - 1]
            lift = 1.0 - k_lo
            units.append((keep[0], keep[1] + lift))               # relu(v + M)
            row = {len(units) - 1: 1.0}
            if len(pair) == 2:
                (u_row, u_bias), (v_row, v_bias) = pair
                diff = {k: u_row.get(k, 0.0) - v_row.get(k, 0.0) for k in set(u_row) | set(v_row)}
                units.append((diff, u_bias - v_bias))              # relu(u - v)
                row[len(units) - 1] = 1.0
                next_ranges.append((max(ranges[i][0], k_lo), max(ranges[i][1], k_hi)))
            else:
                next_ranges.append((k_lo, k_hi))
            next_values.append((row, -lift))
        layers.append(_layer(units, width, layers[-1].out_features, f"layer {len(layers) + 1} of the maximum"))
        values, ranges = next_values, next_ranges
    (row, bias), = values
    out = torch.nn.Linear(widths[-1], 1)
    with torch.no_grad():
        out.weight.zero_()
        for k, w in row.items():
            out.weight[0, k] = w
        out.bias.fill_(bias)
    modules = []
    for layer in layers:
        modules += [layer, torch.nn.ReLU()]
    return torch.nn.Sequential(*modules, out).float().eval()


def _layer(units: list[tuple], width: int, inputs: int, what: str):
    """A Linear layer of ``width`` whose first units are ``units`` ((row, bias); a row is an array
    over the inputs or a dict input -> weight) and whose others are always off (0 and -1)."""
    import torch
    if len(units) > width:
        raise ValueError(f"{what} needs {len(units)} units, has width {width}")
    layer = torch.nn.Linear(inputs, width)
    with torch.no_grad():
        layer.weight.zero_()
        layer.bias.fill_(-1.0)
        for k, (row, bias) in enumerate(units):
            for j, w in (row.items() if isinstance(row, dict) else enumerate(row)):
                layer.weight[k, j] = float(w)
            layer.bias[k] = bias
    return layer


def relu_min_network(terms: list[tuple], domain_lo, domain_hi, widths: tuple[int, ...] = (8, 8, 8)):
    """``relu_max_network`` for min_j term_j = -max_j(-term_j): an intersection of sets, each
    term holding its condition where it is the least."""
    import torch
    negated = [(-np.asarray(a, dtype=np.float64), -float(b), [(-float(w), c, d) for w, c, d in hinges])
               for a, b, hinges in terms]
    net = relu_max_network(negated, domain_lo, domain_hi, widths)
    with torch.no_grad():
        net[-1].weight.neg_()
        net[-1].bias.neg_()
    return net
