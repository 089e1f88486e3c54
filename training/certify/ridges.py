"""The boundary condition at a ReLU network's ridges, checked at states (``--condition boundary``).

Where linear pieces of h meet on {h = 0} (a ridge: some pre-activations are 0), the nonsmooth
Nagumo condition asks for one input u in U with g_j . F_u(x) >= 0 for the gradient g_j of every
piece that meets there (the Clarke form: then it holds for every element of Clarke's generalized
gradient, their convex hull).  The gradient the reference takes at x itself (ReLU'(0) = 0) is
one element of that hull, and each piece's own best input may differ: the roof
h = x2 + x1/2 - |x1 - a| under x1' = u, x2' = -1/2 passes both checks and is not controlled
invariant (``tests/test_ridges.py``).

Only Dense/ReLU networks (``patterns.supported``) are checked here; the other piecewise-linear
ones (leaky ReLU, hardtanh) keep the interval bound, which proves the Clarke form too
(``conditions.py``), and the single-gradient check.

* ``to_ridge`` moves states of {h = 0} onto the nearest ridge: Newton steps on (h, z_k) = 0 for the
  pre-activation z_k whose zero set is nearest in the level plane.
* ``ridge_rate`` is max over U of min_j g_j . F_u(x) over the gradients of the pieces met at probe
  states within ``PROBE`` of x (times D's span), and x's own: each is a gradient a state of that
  piece really has, so a negative value is a confirmed violation, to the same tolerance as the
  smooth check (``counterexamples.ON_ZERO``).  One LP per state near a ridge.
"""
from __future__ import annotations

import itertools

import numpy as np

from .centred import vertices_and_centre
from .patterns import PieceMaps, supported
from .problem import Problem

PROBE = 1e-9            # probe distance, as a fraction of D's span: far beyond a ridge point's own error
NEAR = 1e-6             # a pre-activation within this (times |grad z_k| and D's span) of 0 marks a ridge
PROBED_NEURONS = 4      # the nearest this many zero sets are crossed by the probes (2^4 sign patterns)
RIDGE_STEPS = 30


def preactivations(net: PieceMaps, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(z (K, H), grad z (K, H, n), h (K,), grad h (K, n)) at states x (K, n), float64, each
    neuron's gradient on the piece of x (ReLU'(0) = 0)."""
    a, J = x, np.broadcast_to(np.eye(net.n), (len(x), net.n, net.n))
    zs, Zs = [], []
    for layer in net.dense[:-1]:
        z = a @ layer.weight.T + layer.bias
        Z = np.matmul(layer.weight, J)
        zs.append(z)
        Zs.append(Z)
        on = z > 0
        a, J = np.where(on, z, 0.0), Z * on[:, :, None]
    last = net.dense[-1]
    h = (a @ last.weight.T + last.bias)[:, 0]
    if not zs:                                   # an affine network: no neuron, no ridge
        zs, Zs = [np.zeros((len(x), 0))], [np.zeros((len(x), 0, net.n))]
    return np.concatenate(zs, axis=1), np.concatenate(Zs, axis=1), h, np.matmul(last.weight[0], J)


def to_ridge(problem: Problem, x: np.ndarray, owner: np.ndarray, per_state: int = 2
             ) -> tuple[np.ndarray, np.ndarray]:
    """States x (K, n) of {h = 0} moved onto {h = 0} and {z_k = 0} for each of the ``per_state``
    neurons k whose zero set is nearest in the level plane (min-norm Newton steps on the pair,
    clipped to D): (the states that end there, |h| and |z_k| within ``ON_ZERO``; their owners)."""
    from .counterexamples import ON_ZERO
    x = np.asarray(x, dtype=float)
    if not len(x) or not supported(problem.model):
        return x[:0], np.asarray(owner)[:0]
    net = PieceMaps(problem.model)
    z, Z, h, g = preactivations(net, x)
    step2 = _pair_step(z, Z, h, g)[1]                                             # (K, H) squared step length
    nearest = np.argsort(step2, axis=1)[:, :per_state]
    rows = np.repeat(np.arange(len(x)), nearest.shape[1])
    k, y = nearest.ravel(), x[rows].copy()
    moving = np.arange(len(y))                  # Newton settles in a few steps: only the unsettled go on
    for _ in range(RIDGE_STEPS):
        z, Z, h, g = preactivations(net, y[moving])
        at = np.arange(len(moving))
        zk, Zk = z[at, k[moving]], Z[at, k[moving]]
        step, _ = _pair_step(zk[:, None], Zk[:, None], h, g)
        y[moving] = np.clip(y[moving] - step[:, 0], problem.lo, problem.hi)
        moving = moving[~((np.abs(h) <= 1e-3 * ON_ZERO) & (np.abs(zk) <= 1e-3 * ON_ZERO))]
        if not len(moving):
            break
    z, _, h, _ = preactivations(net, y)
    scale = np.max(np.abs(y), axis=1) + 1.0
    keep = (np.abs(h) <= ON_ZERO) & (np.abs(z[np.arange(len(y)), k]) <= ON_ZERO * scale)
    return y[keep], np.asarray(owner)[rows[keep]]


def _pair_step(z: np.ndarray, Z: np.ndarray, h: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The least step d (K, H, n) with h + g . d = 0 and z_k + Z_k . d = 0, per neuron k, and its
    squared length (inf where Z_k is parallel to g)."""
    gg = np.einsum("kn,kn->k", g, g)[:, None]
    gz = np.einsum("kn,khn->kh", g, Z)
    zz = np.einsum("khn,khn->kh", Z, Z)
    det = gg * zz - gz * gz
    ok = det > 1e-12 * gg * zz
    safe = np.where(ok, det, 1.0)
    lam_h = (zz * h[:, None] - gz * z) / safe                  # [g; Z_k]^T lam solves the pair
    lam_z = (gg * z - gz * h[:, None]) / safe
    step = lam_h[:, :, None] * g[:, None, :] + lam_z[:, :, None] * Z
    length2 = np.where(ok, lam_h * h[:, None] + lam_z * z, np.inf)
    return np.where(ok[:, :, None], step, 0.0), length2


def ridge_rate(problem: Problem, x: np.ndarray, own: np.ndarray) -> np.ndarray:
    """(K,) max over U of min_j g_j . F_u(x) over the pieces met within PROBE of each state
    (module docstring), exactly where that is below -ON_ZERO (a violation, from above: the LP's
    dual), else a lower bound that is not (an input that serves every piece).  ``own`` (K,):
    sup_u of the row with the reference's gradient at x, kept where no other piece is met."""
    from .counterexamples import ON_ZERO, value_and_gradient
    x = np.asarray(x, dtype=float)
    out = np.array(own, dtype=float)
    if not len(x) or not supported(problem.model):
        return out
    net = PieceMaps(problem.model)
    z, Z, _, g_x = preactivations(net, x)
    span = float(np.max(problem.hi - problem.lo))
    norms = np.maximum(np.linalg.norm(Z, axis=2), 1e-300)
    near = np.abs(z) <= NEAR * span * norms
    ridged = np.flatnonzero(near.any(axis=1))
    if not len(ridged):
        return out
    probes, owner = [], []
    for i in ridged:
        ks = np.flatnonzero(near[i])
        ks = ks[np.argsort(np.abs(z[i, ks]) / norms[i, ks])][:PROBED_NEURONS]
        signs = np.array(list(itertools.product((-1.0, 1.0), repeat=len(ks))))
        dirs = np.concatenate([signs @ (Z[i, ks] / norms[i, ks][:, None]), np.eye(problem.n), -np.eye(problem.n)])
        dirs = dirs / np.maximum(np.linalg.norm(dirs, axis=1), 1e-300)[:, None]
        probes.append(np.clip(x[i] + PROBE * span * dirs, problem.lo, problem.hi))
        owner.append(np.full(len(dirs), i))
    _, grads = value_and_gradient(problem, np.concatenate(probes))
    grads, owner = np.concatenate([grads, g_x[ridged]]), np.concatenate(owner + [ridged])   # x's own gradient too
    f, G = problem.system.f(x), problem.system.G(x).reshape(len(x), problem.n, problem.m)
    drift, gains = np.einsum("pn,pn->p", grads, f[owner]), np.einsum("pn,pnm->pm", grads, G[owner])
    served = np.full(len(x), -np.inf)                               # the best tried input's least row
    for u in vertices_and_centre(problem.u_lo, problem.u_hi):
        least = np.full(len(x), np.inf)
        np.minimum.at(least, owner, drift + gains @ u)
        served = np.maximum(served, least)
    out[ridged] = np.minimum(out[ridged], served[ridged])   # >= -ON_ZERO: some input serves every piece met
    for i in ridged[served[ridged] < -ON_ZERO]:               # else the LP's value, from above
        rows = owner == i
        out[i] = min(own[i], common_input_value(drift[rows], gains[rows], problem.u_lo, problem.u_hi))
    return out


def common_input_value(drift: np.ndarray, gains: np.ndarray, u_lo: np.ndarray, u_hi: np.ndarray) -> float:
    """max over u in [u_lo, u_hi] of min_j drift_j + gains_j . u, from above: the LP's dual weights w
    (a point of the simplex) give min_w w . drift + sup_u (w^T gains) . u >= it, so a negative
    value is a proof that no input serves every row (+inf when the LP fails: no claim)."""
    if gains.shape[1] == 0:
        return float(np.min(drift))
    from scipy.optimize import linprog
    m = gains.shape[1]
    res = linprog(np.r_[np.zeros(m), -1.0], A_ub=np.c_[-gains, np.ones(len(drift))], b_ub=drift,
                  bounds=list(zip(u_lo, u_hi)) + [(None, None)], method="highs")
    if res.status != 0:
        return np.inf
    w = np.maximum(-res.ineqlin.marginals, 0.0)
    if not w.sum() > 0:
        return np.inf
    w = w / w.sum()
    c = w @ gains
    return float(w @ drift + np.maximum(c * u_lo, c * u_hi).sum())
