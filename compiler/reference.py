"""Float64 numpy interpreter of the IR: the semantics every backend is tested against.

``value`` evaluates h; ``first_order`` propagates dual numbers (one real path, K tangent
directions at once); ``second_order`` propagates the hyper-dual numbers of the paper's
Theorem 4 with the shared eps1 = f seed: x + f eps1 + w_k eps2 + u_k eps12 for K second
directions (w_k, u_k) = (f, f'(x) f) and (G_j, f'(x) G_j). All functions are batched
over a leading dimension B.

A periodic embedding (``ir.Periodic``) acts like an activation after a gather: embedded column
j reads state coordinate src_j through phi_j = identity, sin(w .) or cos(w .), so its value is
phi_j(x_i), its tangents phi_j'(x_i) t_i and its eps12 parts phi_j''(x_i) t1_i t2_i + phi_j'(x_i) u_i
(sin: w cos, -w^2 sin; cos: -w sin, -w^2 cos).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .activations import evaluate
from .ir import Activation, Affine, Dense, Model, Periodic


def _as_batch(x: np.ndarray, n: int, what: str) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim == 1:
        x = x[None, :]
    if x.ndim != 2 or x.shape[1] != n:
        raise ValueError(f"{what} must have shape (B, {n}) or ({n},), got {x.shape}")
    return x


def embed(layer: Periodic, a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(source coordinate per column (E,), phi, phi', phi'' at a[:, source] (B, E) each)."""
    cols = layer.columns()
    src = np.array([i for i, _ in cols], dtype=np.intp)
    freq = layer.frequencies()
    xs = a[:, src]
    w = np.array([freq.get(i, 0.0) for i, _ in cols])
    s, c = np.sin(w * xs), np.cos(w * xs)
    kind = np.array([k for _, k in cols])
    is_sin, is_cos = kind == "sin", kind == "cos"
    v = np.where(is_sin, s, np.where(is_cos, c, xs))
    d1 = np.where(is_sin, w * c, np.where(is_cos, -w * s, 1.0))
    d2 = np.where(is_sin, -w * w * s, np.where(is_cos, -w * w * c, 0.0))
    return src, v, d1, d2


def value(model: Model, x: np.ndarray) -> np.ndarray:
    """h(x) for a batch of states, shape (B,)."""
    a = _as_batch(x, model.input_dim, "x")
    for layer in model.layers:
        if isinstance(layer, Periodic):
            a = embed(layer, a)[1]
        elif isinstance(layer, Dense):
            a = a @ layer.weight.T + layer.bias
        elif isinstance(layer, Affine):
            a = a * layer.scale + layer.shift
        else:
            a = evaluate(layer.kind, dict(layer.params), a)[0]
    return a[:, 0]


@dataclass
class FirstOrder:
    h: np.ndarray          # (B,)
    directional: np.ndarray  # (B, K): dh(x) v_k


def first_order(model: Model, x: np.ndarray, directions: np.ndarray) -> FirstOrder:
    """h and the K directional derivatives dh(x)[v_k]; directions has shape (B, n, K)."""
    a = _as_batch(x, model.input_dim, "x")
    t = np.asarray(directions, dtype=np.float64).reshape(a.shape[0], model.input_dim, -1)
    for layer in model.layers:
        if isinstance(layer, Periodic):
            src, a, d1, _ = embed(layer, a)
            t = t[:, src, :] * d1[:, :, None]
        elif isinstance(layer, Dense):
            a = a @ layer.weight.T + layer.bias
            t = np.matmul(layer.weight, t)
        elif isinstance(layer, Affine):
            a = a * layer.scale + layer.shift
            t = t * layer.scale[None, :, None]
        else:
            a, d1, _ = evaluate(layer.kind, dict(layer.params), a)
            t = t * d1[:, :, None]
    return FirstOrder(a[:, 0], t[:, 0, :])


@dataclass
class SecondOrder:
    h: np.ndarray        # (B,)
    first: np.ndarray    # (B,): dh[v1]
    tangents: np.ndarray  # (B, K): dh[w_k]
    second: np.ndarray   # (B, K): d2h[v1, w_k] + dh[u_k]


def second_order(model: Model, x: np.ndarray, v1: np.ndarray, w: np.ndarray, u: np.ndarray) -> SecondOrder:
    """Hyper-dual sweep of x + v1 eps1 + w_k eps2 + u_k eps12 for K pairs (w_k, u_k).

    v1: (B, n); w, u: (B, n, K).
    """
    a = _as_batch(x, model.input_dim, "x")
    batch, n = a.shape
    t1 = np.asarray(v1, dtype=np.float64).reshape(batch, n)
    t2 = np.asarray(w, dtype=np.float64).reshape(batch, n, -1)
    t12 = np.asarray(u, dtype=np.float64).reshape(batch, n, -1)
    for layer in model.layers:
        if isinstance(layer, Periodic):
            src, a, d1, d2 = embed(layer, a)
            t1, t2, t12 = t1[:, src], t2[:, src, :], t12[:, src, :]
            t12 = d2[:, :, None] * t1[:, :, None] * t2 + d1[:, :, None] * t12
            t2 = t2 * d1[:, :, None]
            t1 = t1 * d1
        elif isinstance(layer, Dense):
            a = a @ layer.weight.T + layer.bias
            t1 = t1 @ layer.weight.T
            t2 = np.matmul(layer.weight, t2)
            t12 = np.matmul(layer.weight, t12)
        elif isinstance(layer, Affine):
            a = a * layer.scale + layer.shift
            t1 = t1 * layer.scale
            t2 = t2 * layer.scale[None, :, None]
            t12 = t12 * layer.scale[None, :, None]
        else:
            a, d1, d2 = evaluate(layer.kind, dict(layer.params), a)
            t12 = d2[:, :, None] * t1[:, :, None] * t2 + d1[:, :, None] * t12
            t2 = t2 * d1[:, :, None]
            t1 = t1 * d1
    return SecondOrder(a[:, 0], t1[:, 0], t2[:, 0, :], t12[:, 0, :])


def lie(model: Model, x, f, G):
    """h, L_f h, L_G h (B,m) from the state, drift f(x) (B,n) and input matrix G(x) (B,n,m)."""
    a = _as_batch(x, model.input_dim, "x")
    f = _as_batch(f, model.input_dim, "f")
    G = np.asarray(G, dtype=np.float64).reshape(a.shape[0], model.input_dim, -1)
    res = first_order(model, a, np.concatenate([f[:, :, None], G], axis=2))
    return res.h, res.directional[:, 0], res.directional[:, 1:]


def lie2(model: Model, x, f, G, Dff, DfG):
    """h, L_f h, L_G h, L_f^2 h, L_G L_f h from x, f, G, f'(x)f and f'(x)G."""
    a = _as_batch(x, model.input_dim, "x")
    batch, n = a.shape
    f = _as_batch(f, n, "f")
    G = np.asarray(G, dtype=np.float64).reshape(batch, n, -1)
    Dff = _as_batch(Dff, n, "Dff")
    DfG = np.asarray(DfG, dtype=np.float64).reshape(batch, n, -1)
    w = np.concatenate([f[:, :, None], G], axis=2)
    u = np.concatenate([Dff[:, :, None], DfG], axis=2)
    res = second_order(model, a, f, w, u)
    return res.h, res.first, res.tangents[:, 1:], res.second[:, 0], res.second[:, 1:]
