"""Interval jets of the network (h, grad h, Hessian over boxes): a stop-gap used only while
``compiler.bounds`` (cert-bounds) has not landed; ``terms.lie_terms`` prefers it.

Plain forward-mode interval propagation over the IR with ``compiler.interval`` (sound in
float64).  float32 mode: every enclosure widened by REL32 of its magnitude plus ABS32 --
an estimate of the header's rounding, NOT a proven bound (the certificate says so).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from compiler import interval as iv
from compiler.errors import CbfsimError
from compiler.interval import Interval
from compiler.ir import Dense

REL32 = 2.0 ** -14
ABS32 = 1e-6


class UnsupportedActivationError(CbfsimError, ValueError):
    """An activation without an interval enclosure."""


@dataclass
class Jets:
    h: Interval
    grad: Interval
    hess: Interval | None
    rounding: str


def _dense(x: Interval, w: np.ndarray, b: np.ndarray | None) -> Interval:
    out = iv.matmul(x, w.T)
    return out + b if b is not None else out


def _activation(kind: str, params: dict, v: Interval):
    """(value, first, second derivative) enclosures of the activation over v."""
    if kind == "identity":
        one = Interval.point(np.ones(v.shape))
        return v, one, Interval.point(np.zeros(v.shape))
    if kind == "relu":
        val = Interval(np.maximum(v.lo, 0.0), np.maximum(v.hi, 0.0))
        d1 = Interval(np.where(v.lo > 0, 1.0, 0.0), np.where(v.hi > 0, 1.0, 0.0))
        return val, d1, Interval.point(np.zeros(v.shape))
    if kind == "tanh":
        t = iv.tanh(v)
        d1 = 1.0 - t ** 2
        return t, d1, -2.0 * t * d1
    if kind == "softplus":
        beta = params["beta"]
        if params["threshold"] < 1e3:
            raise UnsupportedActivationError("softplus with a finite threshold has no enclosure in the fallback jets")
        z = v * beta
        s = 1.0 / (1.0 + iv.exp(-z))
        val = iv.log(1.0 + iv.exp(z)) / beta
        return val, s, beta * s * (1.0 - s)
    raise UnsupportedActivationError(f"activation {kind} has no interval enclosure")


def enclose(model, box: Interval, *, order: int, float32: bool = False) -> Jets:
    """h (B,), grad (B, n), Hessian (B, n, n) (order 2) over each box."""
    batch, n = box.shape
    v = box
    T = Interval.point(np.broadcast_to(np.eye(n), (batch, n, n)).copy())          # (B, k, n): dv_k/dx
    H = Interval.point(np.zeros((batch, n, n, n))) if order == 2 else None      # (B, k, n, n)
    for layer in model.layers:
        if isinstance(layer, Dense):
            v = _dense(v, layer.weight, layer.bias)
            T = _dense(T.swapaxes(1, 2), layer.weight, None).swapaxes(1, 2)
            if H is not None:
                Ht = Interval(np.moveaxis(H.lo, 1, 3), np.moveaxis(H.hi, 1, 3), check=False)
                Ht = _dense(Ht, layer.weight, None)
                H = Interval(np.moveaxis(Ht.lo, 3, 1), np.moveaxis(Ht.hi, 3, 1), check=False)
        else:
            val, d1, d2 = _activation(layer.kind, dict(layer.params), v)
            if H is not None:
                outer = T[:, :, :, None] * T[:, :, None, :]
                H = d2[:, :, None, None] * outer + d1[:, :, None, None] * H
            T = d1[:, :, None] * T
            v = val
    h, grad = v[:, 0], T[:, 0, :]
    hess = H[:, 0] if H is not None else None
    if float32:
        h, grad = _widen(h), _widen(grad)
        hess = _widen(hess) if hess is not None else None
    rounding = (f"float32 header rounding ESTIMATED (fallback jets): {REL32:.3g} relative + {ABS32:g} absolute"
                if float32 else "float64 outward rounding")
    return Jets(h, grad, hess, rounding)


def _widen(x: Interval) -> Interval:
    pad = REL32 * np.maximum(np.abs(x.lo), np.abs(x.hi)) + ABS32
    return Interval(x.lo - pad, x.hi + pad, check=False)
