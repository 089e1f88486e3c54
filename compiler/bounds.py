"""Sound enclosures of a barrier h, its gradient and Hessian over boxes of states.

``enclose(model, box, order=...)`` runs interval forward-mode differentiation through the
IR (the very weights and activations the header evaluates): values, tangents (one per input
direction) and, for order 2, second-order tangents, all as ``compiler.interval.Interval``
batches, so every enclosure is outward rounded. Activations use the per-kind enclosures of
the activation table (``compiler.activations.ACTIVATIONS[kind].enclosure``); over an interval straddling a kink the derivative
enclosure is the hull of both sides, so the gradient enclosure contains the Clarke gradient.

Tightening: after every Dense layer each pre-activation z is intersected with its centred
(mean-value) form z(c) + grad z(B) . (B - c), c the box centre (Lebourg's theorem; skipped
after a value discontinuity, which only Softplus' threshold has).

``float32=True`` also contains what the float32 header computes: a running error bound
e >= |computed - real| is carried beside every real enclosure, and the result is widened by
it (``Jets.rounding`` holds the final bounds). The bound, with u = 2^-24:
  * the state is rounded to float32: e_x = u |x| + 2^-149;
  * a Dense layer with n inputs (float32 weights and bias, any summation order, no FMA
    needed): e' = |W| e + gamma_{n+2} (|W| (|a| + e) + |b|), gamma_k = k u / (1 - k u)
    (Higham; the +2 covers the rounding of the weights and the bias to float32);
  * an activation: the input error carried through sigma^(k) by the magnitude of
    sigma^(k+1) over the input enclosure (by the width of sigma^(k)'s enclosure where a kink
    may lie between computed and real input), plus the float32 body's own evaluation error
    (``bounds_activations.float32_error``: counted roundings and cppmath's ulp bounds, x2);
  * products of jets: (|x| + e_x)(|y| + e_y) - |x||y| propagated plus gamma_3 of the magnitude.
Magnitudes |a| come from the real enclosures, so the bound tightens with the boxes.

A periodic input embedding (``ir.Periodic``, first layer) is enclosed like an activation after
a gather of the state's coordinates: ``compiler.bounds_periodic`` (enclosures of sin, cos and
their derivatives over the box, and the float32 header's sin/cos error bound); grad and Hessian
stay in the state's coordinates (B, n) and (B, n, n).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .activations import ACTIVATIONS
from .bounds_activations import THIRD_DERIVATIVE_BOUND, float32_error
from .bounds_periodic import embedding_errors, enclose_embedding
from .errors import SmoothnessError, UnsupportedOpError
from .interval import Interval, as_interval, gamma, matmul
from .ir import Activation, Affine, Dense, Model, Periodic, validate

U32 = 2.0 ** -24
TINY32 = 2.0 ** -149
_UP = 1.0 + 2.0 ** -40          # rounds a sum of nonnegative float64 terms up, generously
DISCONTINUOUS = {"softplus"}     # value jumps at a kink (x vs log1p(e^x) at the threshold)

ROUNDING_STATEMENT = (
    "float32 header: |computed - real| <= carried bound; state rounding u|x| + 2^-149, Dense "
    "gamma_{n+2}(|W|(|a|+e)+|b|) + |W|e, activations: input error x sup|sigma^(k+1)| + body error "
    "(cppmath ulp bounds), products gamma_3; u = 2^-24")


PERIODIC_STATEMENT = ("; periodic embedding: argument |w||x|(3u+3u^2+u^3) + (3|w|+1)2^-149, m_sincos 2 ulp, "
                      "phi' and phi'' with 3 and 5 roundings x2, +inf beyond the header's argument limit")


class UnsupportedActivationError(UnsupportedOpError):
    """An activation the enclosure engine has no enclosure for (the message names it)."""


@dataclass
class Rounding:
    """Bounds on |float32 header - real function|, already included in the Jets."""
    h: np.ndarray                  # (B,)
    grad: np.ndarray | None        # (B, n)
    hess: np.ndarray | None        # (B, n, n)
    statement: str = ROUNDING_STATEMENT


@dataclass
class Jets:
    h: Interval                    # (B,)
    grad: Interval | None          # (B, n); None for order 0
    hess: Interval | None          # (B, n, n); None below order 2
    rounding: Rounding | None = None
    jumped: np.ndarray | None = None   # (B,) a value discontinuity (Softplus' threshold) may lie in the box:
    #                                    no mean-value (centred) form holds there


def check_supported(model: Model, order: int) -> None:
    """Refuse, in one line naming it, an activation without an enclosure (or order 2 of a kink)."""
    for layer in model.layers:
        if isinstance(layer, Activation):
            if ACTIVATIONS[layer.kind].enclosure is None:
                raise UnsupportedActivationError(
                    f"activation {layer.kind!r} has no interval enclosure; cannot bound this model")
            if order >= 2 and not ACTIVATIONS[layer.kind].smooth:
                raise SmoothnessError(f"order 2 needs a twice differentiable network, but activation "
                                      f"{layer.kind!r} has a kink")


def _as_box(box, n: int) -> Interval:
    box = as_interval(box)
    if box.ndim == 1:
        box = box.reshape(1, -1)
    if box.ndim != 2 or box.shape[1] != n:
        raise ValueError(f"box must have shape (B, {n}), got {box.shape}")
    return box


class _Errors:
    """The float32 running error bounds beside the real enclosures (all nonnegative arrays)."""

    def __init__(self, box: Interval, order: int):
        batch, n = box.shape
        self.a = (U32 * box.mag + TINY32) * _UP
        self.t = np.zeros((batch, n, n)) if order >= 1 else None
        self.H = np.zeros((batch, n, n, n)) if order >= 2 else None

    def periodic(self, layer: Periodic, box: Interval, src: np.ndarray) -> None:
        """The embedding reads the state (exact seeds: t is the identity, H zero, on entry)."""
        e_v, e_d1, e_d2 = embedding_errors(layer, box, 2 if self.H is not None else 1)
        onehot = (np.arange(box.shape[1])[:, None] == src[None, :]).astype(float)   # (n, E): column j reads src_j
        self.a = e_v
        if self.t is not None:
            self.t = onehot[None, :, :] * e_d1[:, None, :]
        if self.H is not None:
            self.H = onehot[None, :, None, :] * onehot[None, None, :, :] * e_d2[:, None, None, :]

    def dense(self, layer: Dense, a_in: Interval, t_in, H_in) -> None:
        aw = np.abs(layer.weight.T)
        g = gamma(layer.in_dim + 2, U32)
        self.a = (self.a @ aw + g * ((a_in.mag + self.a) @ aw + np.abs(layer.bias))) * _UP
        if self.t is not None:
            self.t = (self.t @ aw + g * ((t_in.mag + self.t) @ aw)) * _UP
        if self.H is not None:
            self.H = (self.H @ aw + g * ((H_in.mag + self.H) @ aw)) * _UP

    def activation(self, layer: Activation, a: Interval, t, H) -> None:
        params = dict(layer.params)
        with np.errstate(over="ignore", invalid="ignore"):
            wide = Interval(a.lo - self.a * _UP, a.hi + self.a * _UP, check=False)
        w_v, w_d1, w_d2 = ACTIVATIONS[layer.kind].enclosure(wide, params, True)
        kinks = ACTIVATIONS[layer.kind].enclosure.kinks(params, True)
        straddle = np.zeros(a.shape, dtype=bool)
        for k_lo, k_hi, _ in kinks:
            straddle |= (wide.lo <= k_hi) & (wide.hi >= k_lo)
        body = float32_error(layer.kind, params, wide.mag, (w_v.mag, w_d1.mag, w_d2.mag))
        if layer.kind in DISCONTINUOUS:
            e_v = np.where(straddle, w_v.width, w_d1.mag * self.a)
        else:
            e_v = w_d1.mag * self.a
        e_d1 = np.where(straddle, w_d1.width, w_d2.mag * self.a)
        e_d2 = np.where(straddle, w_d2.width, THIRD_DERIVATIVE_BOUND[layer.kind](params) * self.a)
        e_v, e_d1, e_d2 = ((e + b) * _UP for e, b in zip((e_v, e_d1, e_d2), body))
        _, d1, d2 = ACTIVATIONS[layer.kind].enclosure(a, params, False)
        m1, m2 = d1.mag[:, None, :], d2.mag[:, None, :]
        e1, e2 = e_d1[:, None, :], e_d2[:, None, :]
        if self.H is not None:
            mt, et = t.mag, self.t
            mti, mtj = mt[:, :, None, :], mt[:, None, :, :]
            eti, etj = et[:, :, None, :], et[:, None, :, :]
            M1 = (m1[:, :, None] + e1[:, :, None]) * (H.mag + self.H)
            M2 = (m2[:, :, None] + e2[:, :, None]) * (mti + eti) * (mtj + etj)
            prop1 = m1[:, :, None] * self.H + e1[:, :, None] * (H.mag + self.H)
            prop2 = e2[:, :, None] * (mti + eti) * (mtj + etj) + m2[:, :, None] * (
                eti * (mtj + etj) + mti * etj)
            self.H = (prop1 + prop2 + gamma(3, U32) * (M1 + M2)) * _UP
        if self.t is not None:
            self.t = (m1 * self.t + e1 * (t.mag + self.t) + U32 * (m1 + e1) * (t.mag + self.t)) * _UP
        self.a = e_v


def _widen(x: Interval, e: np.ndarray) -> Interval:
    with np.errstate(over="ignore", invalid="ignore"):
        return Interval(np.nextafter(x.lo - e, -np.inf), np.nextafter(x.hi + e, np.inf), check=False)


def enclose(model: Model, box, *, order: int, float32: bool = False, trace: list | None = None,
            error_trace: list | None = None) -> Jets:
    """Enclosures of h (B,), grad h (B, n) and, for order 2, the Hessian (B, n, n) over each
    box of the batch ``box`` (Interval (B, n)); ``float32=True`` also covers the float32
    header's own rounding (bound in the module docstring and in ``Jets.rounding``).
    ``trace``: a list that receives (layer, enclosure of the layer's input (B, width)) for
    every layer, in order (the linear relaxations of ``bounds_linear`` start from them);
    ``error_trace`` (``float32=True``): a list that receives the float32 header's error bound
    on that input (B, width) for every layer, in order (``training/certify/patterns.py``)."""
    if order not in (0, 1, 2):
        raise ValueError(f"order must be 0, 1 or 2, got {order}")
    if float32:
        from .passes import canonicalize
        model = canonicalize(model)        # the header's folded weights
    validate(model)
    check_supported(model, order)
    n = model.input_dim
    box = _as_box(box, n)
    batch = box.shape[0]
    centre = np.clip(box.mid, box.lo, box.hi)
    offset = box - centre                  # B - c, contains every x - c
    a, ac = box, Interval.point(centre)
    t = Interval.point(np.broadcast_to(np.eye(n), (batch, n, n))) if order >= 1 else None
    H = Interval.point(np.zeros((batch, n, n, n))) if order >= 2 else None
    jumped = np.zeros(batch, dtype=bool)
    errors = _Errors(box, order) if float32 else None
    for layer in model.layers:
        if trace is not None:
            trace.append((layer, a))
        if error_trace is not None and errors is not None:
            error_trace.append(np.array(errors.a, copy=True))
        if isinstance(layer, Periodic):
            src, value, d1, d2 = enclose_embedding(layer, a)
            ac = enclose_embedding(layer, ac)[1]
            if H is not None:
                tt = t[:, :, None, src] * t[:, None, :, src]
                H = d1[:, None, None, :] * H[:, :, :, src] + d2[:, None, None, :] * tt
            if t is not None:
                t = d1[:, None, :] * t[:, :, src]
                if errors is not None:
                    errors.periodic(layer, box, src)
            elif errors is not None:
                errors.a = embedding_errors(layer, box, 0)[0]
            a = value
        elif isinstance(layer, Dense):
            wt = layer.weight.T
            if errors is not None:
                errors.dense(layer, a, t, H)
            a = matmul(a, wt) + layer.bias
            ac = matmul(ac, wt) + layer.bias
            if order >= 1:
                t = matmul(t, wt)
                a = _tighten(a, ac, t, offset, jumped)
            if order >= 2:
                H = matmul(H, wt)
        elif isinstance(layer, Affine):
            if errors is not None:
                raise UnsupportedOpError("float32 enclosure of an unfolded Affine layer; canonicalize first")
            a = a * layer.scale + layer.shift
            ac = ac * layer.scale + layer.shift
            t = t * layer.scale if t is not None else None
            H = H * layer.scale if H is not None else None
        else:
            params = dict(layer.params)
            enc = ACTIVATIONS[layer.kind].enclosure
            if errors is not None:
                errors.activation(layer, a, t, H)
            value, d1, d2 = enc(a, params, False)
            if layer.kind in DISCONTINUOUS:
                for k_lo, k_hi, _ in enc.kinks(params, False):
                    jumped |= np.any((a.lo <= k_hi) & (a.hi >= k_lo), axis=1)
            if H is not None:
                tt = t[:, :, None, :] * t[:, None, :, :]
                diag = np.arange(n)
                tt.lo[:, diag, diag, :] = np.maximum(tt.lo[:, diag, diag, :], 0.0)   # t_i^2 >= 0
                H = d1[:, None, None, :] * H + d2[:, None, None, :] * tt
            if t is not None:
                t = d1[:, None, :] * t
            a = value
            ac = enc(ac, params, False)[0]
    h = a[:, 0]
    grad = t[:, :, 0] if t is not None else None
    hess = H[:, :, :, 0] if H is not None else None
    rounding = None
    if errors is not None:
        rounding = Rounding(errors.a[:, 0], errors.t[:, :, 0] if t is not None else None,
                            errors.H[:, :, :, 0] if H is not None else None,
                            ROUNDING_STATEMENT + (PERIODIC_STATEMENT if model.embedding is not None else ""))
        h = _widen(h, rounding.h)
        grad = _widen(grad, rounding.grad) if grad is not None else None
        hess = _widen(hess, rounding.hess) if hess is not None else None
    return Jets(h, grad, hess, rounding, jumped)


def _tighten(a: Interval, ac: Interval, t: Interval, offset: Interval, jumped: np.ndarray) -> Interval:
    """a intersected with the mean-value form ac + sum_i t_i (B_i - c_i), where no jump occurred."""
    centred = ac + _directional(t, offset)
    lo, hi = np.maximum(a.lo, centred.lo), np.minimum(a.hi, centred.hi)
    keep = jumped[:, None] | ~(lo <= hi)        # both contain the real values: never empty
    return Interval(np.where(keep, a.lo, lo), np.where(keep, a.hi, hi), check=False)


def _directional(t: Interval, offset: Interval) -> Interval:
    """sum_i t[:, i, :] * offset[:, i] as an Interval (B, width)."""
    return (t * offset[:, :, None]).sum(axis=1)


from .bounds_pieces import Pieces, pieces  # noqa: E402  (re-exported: one entry point for callers)

__all__ = ["enclose", "pieces", "Jets", "Pieces", "Rounding", "UnsupportedActivationError", "check_supported"]
