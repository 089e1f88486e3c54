"""Linear forms of the barrier's Lie derivatives over a box: the filter's row, tighter than jets.

Why: the feasibility row L_f h + L_G h . u is bounded elsewhere from interval jets (grad h over
the box times f over the box) or by a centred form whose slope is an interval Hessian.  Both
lose the correlation between neurons: on the Dubins car's edge boxes (width ~0.05) the row
truly stays >= 0.044 above the margin while the centred form's bound sits at -0.17 (median),
so the search has to split those boxes ~16x finer than the row needs.

How (affine arithmetic with one interval remainder per neuron): every quantity q of the
forward pass -- each layer's values, each activation's derivative sigma'(z), and the tangent
along each direction (f and each column of G) -- is carried as a ``Form``:

    q(x)  in  centre + coef . (x - c) + rest        for every x in the box,

with c the box's centre, ``centre`` and ``rest`` intervals, ``coef`` plain floats.
* Dense: the form maps linearly.  The float64 rounding of coef W is bounded by Higham's
  gamma_k |coef| |W| and moved, times the box's radius, into ``rest``.
* An activation's value sigma(z) and derivative sigma'(z) get two parallel lines over z's
  range, a z + [b_lo, b_hi] with a the chord slope, the offsets bounded piece by piece over the
  range (``_relaxed``: mean-value forms on four pieces; one enclosure call serves both); across
  a kink, ``bounds_linear.relax`` for sigma and the plain hull for sigma', which jumps there.
* A product s d of two forms: s0 d0 + (mid s0) D + (mid d0) S, the remainder collecting the
  centres' widths, the remainders and the product of both variations (O(width^2)).
* The periodic embedding's columns and their derivatives are relaxed the same way in the
  state coordinate they read; the plant's f and G enter by the mean-value form
  F(c) + J_F(box) (x - c) from its enclosure.

Each step holds pointwise (q(x) lies in the form at the same x), so the output's forms bound
L_f h and L_G h over the box, and for any fixed input u the row's least value over the box is at
least that of the form L_f + L_G . u.  Sound in floating point: centres and remainders are
intervals with outward rounding; the coefficients need not be exact because every rounding in
them is bounded and added to the remainder.  Real network only: the float32 header's gradient
error is subtracted by the caller (as for the centred form).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .activations import ACTIVATIONS
from .bounds_linear import _sum_up, relax
from .bounds_periodic import enclose_embedding
from .interval import TINY, Interval, gamma, matmul
from .ir import Activation, Affine, Dense, Model, Periodic

_UP = 1.0 + 2.0 ** -40
PIECES = 4      # pieces of a range a function is bounded over (_relaxed)


@dataclass
class Form:
    """q(x) in centre + coef . (x - c) + rest over the box (c, r: its centre and radius)."""
    centre: Interval       # (B, K)
    coef: np.ndarray       # (B, n, K): coef[b, i, k] multiplies x_i - c_i in q_k
    rest: Interval         # (B, K)

    def recentred(self) -> "Form":
        """The same set with the remainder's midpoint moved into the centre: products pay for
        the remainder's magnitude, so it must hold only what varies over the box."""
        with np.errstate(invalid="ignore", over="ignore"):
            m = Interval.point(np.where(np.isfinite(self.rest.mid), self.rest.mid, 0.0))
            return Form(self.centre + m, self.coef, self.rest - m)

    def spread(self, r: np.ndarray) -> np.ndarray:
        """(B, K) upper bound of max |coef . (x - c)| over the box."""
        return _sum_up(np.abs(self.coef) * r[:, :, None] * _UP, axis=1) + TINY

    def range(self, r: np.ndarray) -> Interval:
        s = self.spread(r)
        return self.centre + self.rest + Interval(-s, s, check=False)


def _error(mags: np.ndarray, r: np.ndarray, k: int) -> Interval:
    """+-(gamma_k |coefficient terms| . r): the float rounding of coefficients (B, n, K) built
    from k-term sums, as an interval on the value."""
    e = _sum_up(mags * r[:, :, None] * _UP, axis=1) * (2.0 * gamma(k + 2)) * _UP + TINY * (k + 1)
    return Interval(-e, e, check=False)


def dense(q: Form, weight: np.ndarray, bias: np.ndarray | None, r: np.ndarray) -> Form:
    """W q + b."""
    wt = np.asarray(weight, dtype=float).T
    with np.errstate(invalid="ignore", over="ignore"):
        coef = q.coef @ wt
        rest = matmul(q.rest, wt) + _error(np.abs(q.coef) @ np.abs(wt), r, wt.shape[0])
        centre = matmul(q.centre, wt)
        if bias is not None:
            centre = centre + np.asarray(bias, dtype=float)
    return Form(centre, coef, rest).recentred()


def scaled(q: Form, a: np.ndarray, lo: np.ndarray | float, hi: np.ndarray | float, r: np.ndarray) -> Form:
    """a q + [lo, hi] for a float a (B, K) (elementwise)."""
    a = np.broadcast_to(np.asarray(a, dtype=float), q.centre.shape)
    A = Interval.point(a)
    with np.errstate(invalid="ignore", over="ignore"):
        coef = a[:, None, :] * q.coef
        offset = Interval(np.broadcast_to(lo, a.shape), np.broadcast_to(hi, a.shape), check=False)
        rest = A * q.rest + offset + _error(np.abs(coef), r, 1)
        centre = A * q.centre
    return Form(centre, coef, rest).recentred()


def product(s: Form, d: Form, r: np.ndarray) -> Form:
    """s d (elementwise): s0 d0 + m_s D + m_d S, with the rest of the expansion in the remainder
    (s = s0 + S.dx + es, d = d0 + D.dx + ed; m = the centres' midpoints)."""
    with np.errstate(invalid="ignore", over="ignore"):
        m_s, m_d = s.centre.mid[:, None, :], d.centre.mid[:, None, :]
        coef = m_s * d.coef + m_d * s.coef
        mags = np.abs(m_s * d.coef) + np.abs(m_d * s.coef)
        sd, ss = d.spread(r), s.spread(r)
        var_s = Interval(-ss, ss, check=False) + s.rest       # s - s0 over the box
        var_d = Interval(-sd, sd, check=False) + d.rest
        rest = ((s.centre - m_s[:, 0]) * Interval(-sd, sd, check=False) + s.centre * d.rest
                + (d.centre - m_d[:, 0]) * Interval(-ss, ss, check=False) + d.centre * s.rest
                + var_s * var_d + _error(mags, r, 2))
        centre = s.centre * d.centre
    return Form(centre, coef, rest).recentred()


def _piece_ends(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """(k + 1, ...) the ends of ``PIECES`` equal pieces of [lo, hi]: exactly lo and hi at the
    ends, nondecreasing, so the pieces cover the range."""
    t = np.arange(PIECES + 1, dtype=float).reshape(-1, *([1] * np.ndim(lo))) / PIECES
    with np.errstate(all="ignore"):
        ends = np.clip(lo + t * (hi - lo), lo, hi)
    ends[0], ends[-1] = lo, hi
    return ends


def _relaxed(f_at: Interval, f_pieces: Interval, df_pieces: Interval, ends: np.ndarray,
             z: Interval) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(a, b_lo, b_hi): a z + [b_lo, b_hi] holds f over [ends[0], ends[-1]], from f at the
    pieces' ends (k + 1, ...), f and f' over each piece (k, ...).  a: the chord slope (any finite
    float is sound).  On each piece, g = f - a z is bounded from both of its ends by the
    mean-value form, so the bound follows g's true curve and each piece adds only its own f'
    spread times its own width (one mean-value form over the whole range pays the whole spread
    times the radius); intersected with the plain hull f - a z."""
    l, u = ends[0], ends[-1]
    with np.errstate(all="ignore"):
        a = (f_at[-1].mid - f_at[0].mid) / (u - l)
        a = np.where(np.isfinite(a) & (u - l > 1e-12 * (1 + np.abs(0.5 * l + 0.5 * u))), a, df_pieces.mid.mean(axis=0))
        a = np.where(np.isfinite(a), a, 0.0)
        A = Interval.point(a)
        g = f_at - A * Interval.point(ends)
        slope = df_pieces - A
        step = Interval(np.zeros_like(ends[1:]), (ends[1:] - ends[:-1]) * _UP, check=False)
        from_left, from_right = g[:-1] + slope * step, g[1:] - slope * step
        hull = Interval(f_pieces.lo.min(axis=0), f_pieces.hi.max(axis=0), check=False) - A * z
        lo = np.maximum(np.maximum(from_left.lo, from_right.lo).min(axis=0), hull.lo)
        hi = np.minimum(np.minimum(from_left.hi, from_right.hi).max(axis=0), hull.hi)
    return a, np.where(np.isnan(lo), -np.inf, lo), np.where(np.isnan(hi), np.inf, hi)


def relax_activation(kind: str, params: dict, z: Interval) -> tuple[tuple, tuple]:
    """((a, b_lo, b_hi) for sigma, the same for sigma') over each z: a z + b_lo <= . <= a z + b_hi.
    Piecewise (``_relaxed``) where sigma is smooth on z, from one enclosure call at the pieces'
    ends and one over the pieces; across a kink, ``bounds_linear.relax`` for sigma (convexity at
    the kink, +-inf across Softplus' jump) and the plain hull of sigma' (slope 0), which jumps."""
    enc = ACTIVATIONS[kind].enclosure
    straddle = np.zeros(z.shape, dtype=bool)
    for k_lo, k_hi, _ in enc.kinks(params, False):
        straddle |= (z.lo <= k_hi) & (z.hi >= k_lo)
    ends = _piece_ends(z.lo, z.hi)
    with np.errstate(all="ignore"):
        at = enc(Interval.point(ends), params)
        over = enc(Interval(ends[:-1], ends[1:]), params)
    value = _relaxed(at[0], over[0], over[1], ends, z)
    a, lo, hi = _relaxed(at[1], over[1], over[2], ends, z)
    if straddle.any():
        kinked = relax(kind, params, z)
        value = tuple(np.where(straddle, k, v) for k, v in zip(kinked, value))
        hull = Interval(over[1].lo.min(axis=0), over[1].hi.max(axis=0), check=False)
        a, lo, hi = np.where(straddle, 0.0, a), np.where(straddle, hull.lo, lo), np.where(straddle, hull.hi, hi)
    return value, (a, lo, hi)


def _periodic_relax(layer: Periodic, x: Interval) -> tuple[np.ndarray, tuple, tuple]:
    """(src (E,), (a, b_lo, b_hi) for each embedded column phi, the same for phi' (B, E)):
    a x_src + [b_lo, b_hi] holds it over the box, piece by piece (``_relaxed``)."""
    batch, n = x.shape
    ends = _piece_ends(x.lo, x.hi)                                     # (k + 1, B, n)
    k = ends.shape[0] - 1
    src, *at = enclose_embedding(layer, Interval.point(ends.reshape(-1, n)))
    over = enclose_embedding(layer, Interval(ends[:-1].reshape(-1, n), ends[1:].reshape(-1, n)))[1:]
    at = [v.reshape(k + 1, batch, -1) for v in at]
    over = [v.reshape(k, batch, -1) for v in over]
    ends, xs = ends[:, :, src], x[:, src]
    return src, _relaxed(at[0], over[0], over[1], ends, xs), _relaxed(at[1], over[1], over[2], ends, xs)


def _state_form(src: np.ndarray, a: np.ndarray, lo: np.ndarray, hi: np.ndarray, c: np.ndarray, n: int) -> Form:
    """a x_src + [lo, hi] per column, as a form in x - c."""
    batch, cols = a.shape
    coef = np.zeros((batch, n, cols))
    coef[:, src, np.arange(cols)] = a
    centre = Interval.point(a) * Interval.point(c[:, src]) + Interval(lo, hi, check=False)
    return Form(centre, coef, Interval.point(np.zeros((batch, cols))))


def _plant_forms(plant_at_centre: Any, plant_box: Any, r: np.ndarray) -> list[Form]:
    """Forms of f and of each column of G (each (B, n)): F(c) + mid J (x - c) + (J - mid J)(x - c)."""
    dx = Interval(-r, r, check=False)
    jac = [plant_box.Jf] + [plant_box.JG[:, j] for j in range(plant_box.G.shape[-1])]
    at_c = [plant_at_centre.f] + [plant_at_centre.G[..., j] for j in range(plant_box.G.shape[-1])]
    forms = []
    with np.errstate(invalid="ignore", over="ignore"):
        for value, J in zip(at_c, jac):                        # J[b, k, i] = dF_k / dx_i
            coef = np.where(np.isfinite(J.mid), J.mid, 0.0)
            rest = ((J - coef) * dx[:, None, :]).sum(-1)
            forms.append(Form(value, np.swapaxes(coef, 1, 2), rest).recentred())
    return forms


@dataclass
class LieForms:
    """Forms of L_f h (B, 1) and of each L_{g_j} h over the boxes they were built for."""
    lie: list[Form]        # [L_f h, L_g1 h, ...], each centre (B, 1)
    r: np.ndarray          # (B, n) the box's radius
    h: Form                # h itself (B, 1)

    def row(self, u: np.ndarray) -> Form:
        """The form of L_f h + L_G h . u for the fixed input u (B, m)."""
        u = np.asarray(u, dtype=float)
        total = self.lie[0]
        for j, form in enumerate(self.lie[1:]):
            total = _add(total, scaled(form, u[:, j:j + 1], 0.0, 0.0, self.r), self.r)
        return total

    def lower(self, u: np.ndarray) -> np.ndarray:
        """(B,) lower bound of L_f h + L_G h . u over the box, for the fixed input u (B, m);
        -inf where not finite."""
        return self.lower_of(self.row(u))

    def lower_of(self, row: Form) -> np.ndarray:
        """``lower`` for a row form the caller already has (``row(u)``)."""
        return _low(row, self.r)

    def lower_with_level(self, u: np.ndarray, gain: float, h_lo: np.ndarray, h_hi: np.ndarray,
                         row: Form | None = None) -> tuple[np.ndarray, np.ndarray]:
        """((B,) lower bound of L_f h + L_G h . u + gain h over the box's states whose real h lies in
        [h_lo, h_hi] (B,), (B, n) that bound's |d / dx_i|).

        Why: the filter's row is asked only on states of the set (h >= 0), the boundary
        condition's only on {h = 0}, and over a box cut by the level the row's form may fall
        steeply across it.  For every multiplier lam, row + gain h = (row + lam h) +
        (gain - lam) h >= low(row + lam h) + (gain - lam) (h_lo if lam <= gain else h_hi): a
        Lagrangian relaxation.  It is concave and piecewise linear in lam, so its best lam is
        0, gain, or one where a coefficient of row + lam h vanishes (-c_i / d_i): those n + 2
        are tried, each evaluated with the forms' own sound arithmetic (lam need not be exact;
        gain - lam is an interval).  lam = 0 is the plain bound low(row) + gain h_lo.  ``row``:
        ``self.row(u)`` when the caller already has it."""
        row = self.row(u) if row is None else row
        c, d = row.coef[:, :, 0], self.h.coef[:, :, 0]
        with np.errstate(divide="ignore", invalid="ignore"):
            kinks = np.where(d != 0, -c / np.where(d != 0, d, 1.0), 0.0)
        ends = np.zeros((len(c), 1)), np.full((len(c), 1), float(gain))
        lams = np.concatenate([*ends, np.where(np.isfinite(kinks), kinks, 0.0)], axis=1)
        count = lams.shape[1]                 # every multiplier at once: one column of a (B, count) form each
        total = _add(_columns(row, count), scaled(_columns(self.h, count), lams, 0.0, 0.0, self.r), self.r)
        band = Interval(np.asarray(h_lo, dtype=float), np.asarray(h_hi, dtype=float), check=False)
        rest = (Interval.point(np.full(lams.shape, float(gain))) - Interval.point(lams)) * \
            Interval(np.repeat(band.lo[:, None], count, 1), np.repeat(band.hi[:, None], count, 1), check=False)
        with np.errstate(invalid="ignore", over="ignore"):
            low = np.nextafter(total.range(self.r).lo + rest.lo, -np.inf)
        low = np.where(np.isnan(low), -np.inf, low)
        pick = np.argmax(low, axis=1)
        rows = np.arange(len(c))
        best, coef = low[rows, pick], total.coef[rows, :, pick]
        return best, np.abs(coef)

    def ranges(self) -> list[Interval]:
        """Enclosures (B,) of L_f h and of each L_{g_j} h over the box."""
        return [form.range(self.r)[:, 0] for form in self.lie]

    def slope(self, u: np.ndarray) -> np.ndarray:
        """(B, n) |d row / dx_i| of the row's form at u (the split's smear weight, not a bound)."""
        coef = self.lie[0].coef[:, :, 0] + sum(u[:, j:j + 1] * f.coef[:, :, 0] for j, f in enumerate(self.lie[1:]))
        return np.abs(coef)


def _columns(form: Form, count: int) -> Form:
    """A (B, 1) form repeated into ``count`` identical columns (B, count)."""
    def wide(iv: Interval) -> Interval:
        return Interval(np.repeat(iv.lo, count, 1), np.repeat(iv.hi, count, 1), check=False)
    return Form(wide(form.centre), np.repeat(form.coef, count, 2), wide(form.rest))


def _low(form: Form, r: np.ndarray) -> np.ndarray:
    """(B,) the least value of a (B, 1) form over the box; -inf where not finite."""
    with np.errstate(invalid="ignore", over="ignore"):
        low = form.range(r).lo[:, 0]
    return np.where(np.isnan(low), -np.inf, low)


def _add(p: Form, q: Form, r: np.ndarray) -> Form:
    coef = p.coef + q.coef
    return Form(p.centre + q.centre, coef, p.rest + q.rest + _error(np.abs(p.coef) + np.abs(q.coef), r, 1))


def lie_forms(model: Model, box: Interval, plant_at_centre: Any, plant_box: Any) -> LieForms:
    """Forms of L_f h and L_G h over each box of ``box`` (B, n) for the real network.
    ``plant_at_centre``/``plant_box``: the plant's terms (``training.certify.terms.plant_terms``
    with its input Jacobian) at the box's centre and over the box."""
    batch, n = box.shape
    c = np.clip(box.mid, box.lo, box.hi)
    r = np.maximum(box.hi - c, c - box.lo) * _UP
    F = _plant_forms(plant_at_centre, plant_box, r)
    layers = list(model.layers)
    if layers and isinstance(layers[0], Periodic):
        src, relaxed, relaxed_slope = _periodic_relax(layers[0], box)
        value = _state_form(src, *relaxed, c, n)
        slope = _state_form(src, *relaxed_slope, c, n)
        tangents = [product(slope, Form(f.centre[:, src], f.coef[:, :, src], f.rest[:, src]), r) for f in F]
        layers = layers[1:]
    else:
        value = Form(Interval.point(c), np.broadcast_to(np.eye(n), (batch, n, n)).copy(),
                     Interval.point(np.zeros((batch, n))))
        tangents = F
    for layer in layers:
        if isinstance(layer, Dense):
            value = dense(value, layer.weight, layer.bias, r)
            tangents = [dense(t, layer.weight, None, r) for t in tangents]
        elif isinstance(layer, Affine):
            scale = np.broadcast_to(np.asarray(layer.scale, dtype=float), value.centre.shape)
            shift = np.broadcast_to(np.asarray(layer.shift, dtype=float), value.centre.shape)
            value = scaled(value, scale, shift, shift, r)
            tangents = [scaled(t, scale, 0.0, 0.0, r) for t in tangents]
        elif isinstance(layer, Activation):
            relaxed_value, relaxed_slope = relax_activation(layer.kind, dict(layer.params), value.range(r))
            deriv = scaled(value, *relaxed_slope, r)
            tangents = [product(deriv, t, r) for t in tangents]
            value = scaled(value, *relaxed_value, r)
        else:
            raise TypeError(f"lie_forms: unsupported layer {type(layer).__name__}")
    return LieForms(tangents, r, value)
