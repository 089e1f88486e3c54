"""The conditions, evaluated on a batch of boxes at once (one margin eps).

Per box B (C = {h >= 0}, order 2: C2 = {h >= 0, psi1 >= 0}; enclosures over B in float32
mode, so they hold both the exact network and the float32 header's numbers):

* containment: where B may hold states outside S (constraint_lo < 0), h_hi < 0 (order 2:
  h_hi < 0 or psi1_hi < 0) proves that none of them is in C;
* feasibility: where B may meet C, the constraint row (a, b) of the filter has
  b + sup_{u in U} a . u >= eps, so the filter (which sees the float32 numbers) is feasible
  without slack;
* sampled data (``sampled.py``): over the one-period tube R of B, every input the filter may
  return keeps d/dt h >= -gamma h (order 2: d/dt psi1 >= -alpha2 psi1).

``Problem.condition == "boundary"`` (continuous time only) replaces feasibility by the
boundary (Nagumo) condition of the barrier-certificate literature: on boxes that may meet
{h = 0} (h_lo <= 0 <= h_hi), sup_{u in U} L_f h + L_G h . u >= 0, with no class-K term and
no margin; sampled data does not apply (+inf).  At a ReLU network's ridge the condition asks
one input for every adjacent piece (the Clarke form, ``ridges.py``; each piece's own best input
is not enough).  The interval bound proves that form: the gradient enclosure holds the pieces'
gradients and their convex hull, and the least over a convex set of gradients of sup_u is
max_u of the least (minimax: the row is bilinear in gradient and input).  The level-piece bound
asks one input of all the pieces that meet {h = 0} in a box (``level_pieces.py``).

``Problem.initial`` (barrier certificates, ``sets.py``) adds the initial-set condition: on
boxes meeting the initial set, the lower bound of h (order 2: of min(h, psi1)) over the box
must be >= 0.  ``Problem.scope == "in-domain"`` leaves no face open to closure (the claim
then holds only while the states stay in D, as the literature's verifiers claim).

Sampled data on small boxes (order 2, or a network that is not twice differentiable): where the
rate and level-drop bounds fail on a box its one-period tube is at least ``TUBE_GROWN`` times
wider than, both are taken again over a grid of pieces of the tube (``_grid_routes``): there the
tube's enclosure, not the box, is what the bounds pay for.

Tighter bounds where they pay: on boxes where h may change sign, h's enclosure is intersected
with its linear relaxation (``compiler.bounds_linear``); on order-1 boxes of a twice
differentiable network where the interval feasibility bound fails, the row is also bounded by
its linear forms (``compiler.bounds_lie``) at each vertex of the input box and its centre and,
where they fail on a network of one hidden layer, by its centred form at one input
(``centred.py``); such a box is split
along the edge with the largest |d row / dx_i| times its width.  The largest lower bound counts.
A ReLU network's boundary condition is also bounded piece by piece on {h = 0}, on boxes with few
unstable neurons (``level_pieces.py``: each piece's exact gradient and the slab of the box where its
affine h is 0, against the plant's mean-value form).

Each condition gives a lower bound (``score``, >= 0 proves it on the box; +inf where the box
does not need it) so the branch and bound can work on the worst box first.  The sampled-data
bound is computed only on boxes that pass the other two (+inf on the rest, which are split).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from compiler.bounds_lie import lie_forms
from compiler.bounds_linear import linear_bounds
from compiler.interval import Interval
from compiler.ir import Activation

from .problem import Problem
from .sampled import admissible_slices, level_drop, min_over_admissible, row_rounding, taylor_level, tube
from .centred import best_vertex, centred_row, vertices_and_centre
from .level_pieces import level_piece_row
from .patterns import supported
from .piece_containment import piece_containment
from .containment import traded_containment
from .faces import best_common_input
from .tube_condition import feasibility as tube_feasibility
from .terms import PlantTerms, Terms, lie_terms, plant_terms, row_rate_slices, sup_over_inputs

_UP = 1.0 + 2.0 ** -40   # rounds a short sum of nonnegative float64 terms up
NAMES = ("containment", "feasibility", "sampled_data", "closure", "initial")
INPUT_SLICES = 8       # the input box cut along one input for the curvature bound (one jet evaluation)


@dataclass
class BoxBounds:
    scores: dict[str, np.ndarray]     # condition -> (B,) lower bound, >= 0 proven, +inf not needed
    meets_set: np.ndarray             # (B,) the box may meet the certified set
    inside_set: np.ndarray            # (B,) the whole box lies in the certified set (h_lo >= 0 ...)
    meets_S: np.ndarray               # (B,) the box may meet the constraint set S
    worst_u: np.ndarray               # (B, m) the input minimising the sampled-data bound
    grad_mag: np.ndarray              # (B, n) per-edge sensitivity for the split choice: |grad h| bound, or
    #                                   |d row / dx_i| where the feasibility row fails (_tighter_row)
    rounding: object = None

    @property
    def proven(self) -> np.ndarray:
        return np.all([s >= 0 for s in self.scores.values()], axis=0)


def constraint_row(t: Terms, problem: Problem) -> tuple[Interval, Interval]:
    """(a, b) of the filter's constraint a . u + b >= eps, as enclosures."""
    g = problem.gains
    if problem.order == 1:
        return t.LG, t.Lf + g["gamma"] * t.h
    return t.LGLf, t.L2 + g["alpha1"] * t.Lf + g["alpha2"] * t.psi1


def _in_set_row(t: Terms, problem: Problem, b: Interval) -> Interval:
    """b of the constraint row over the box's states in the set, where feasibility is asked:
    order 1, h >= 0 there, so gamma h >= -gamma e_h for the header's float32 h (rounding
    bound e_h), however far below 0 the box's enclosure of h reaches.  Without this, a box
    on the boundary carries -gamma times the variation of h across it and must be split
    until that is below the margin.  (Order 2: the plain row b.)"""
    if problem.order != 1 or t.rounding is None:
        return b
    return t.Lf + problem.gains["gamma"] * _in_set_h(t)


def _in_set_h(t: Terms) -> Interval:
    """h over the box's states in the set, as the header computes it: >= -e_h (its rounding bound)."""
    floor = -np.asarray(t.rounding.h, dtype=float)
    return Interval(np.maximum(t.h.lo, floor), np.maximum(t.h.hi, floor))


def _set_bounds(t: Terms, order: int) -> tuple[np.ndarray, np.ndarray]:
    """(may meet the certified set, lies wholly in it)."""
    if order == 1:
        return t.h.hi >= 0, t.h.lo >= 0
    return (t.h.hi >= 0) & (t.psi1.hi >= 0), (t.h.lo >= 0) & (t.psi1.lo >= 0)


def evaluate(problem: Problem, box: Interval, eps: float) -> BoxBounds:
    """Lower bounds of the three conditions on every box of ``box`` (B, n) for the filter margin
    eps * sigma(x) (``Problem.margin``): feasibility needs its largest value over the box, the
    sampled-data routes may count only on its smallest."""
    order = problem.order
    eps_lo, eps_hi = problem.margin.with_eps(eps).bounds(box.lo, box.hi)
    # the tube condition's split weights read J_f too
    plant = plant_terms(problem.plant, box, 2 if problem.condition == "tube" else order)
    t32 = lie_terms(problem.model, plant, box, order, problem.gains, float32=True)
    t32.h = _tighter_h(problem, box, t32)
    meets, inside = _set_bounds(t32, order)
    c = plant.constraint
    inf = np.full(len(c.lo), np.inf)

    top = t32.h.hi if order == 1 else np.minimum(t32.h.hi, t32.psi1.hi)   # < 0: box outside C
    cont = np.where(top < 0, -top, np.minimum(-top, -np.finfo(float).tiny))
    cont = np.where(c.lo >= 0, inf, cont)
    failing = np.flatnonzero(np.isfinite(cont) & (cont < 0))     # the constraint's edge cuts the box
    if len(failing):
        rounding_h = None if t32.rounding is None else np.asarray(t32.rounding.h)[failing]
        cont[failing] = np.maximum(cont[failing], traded_containment(problem, box[failing], rounding_h))
        cont = _piece_containment(problem, box, cont)

    a32, b32 = constraint_row(t32, problem)
    if problem.condition == "boundary":
        return _boundary_bounds(problem, box, plant, t32, cont, meets, inside)
    if problem.condition == "tube":
        return _tube_bounds(problem, box, plant, t32, cont, meets, inside)
    if problem.faces:      # one input for the barrier's row and every enforced face's row at once
        rows = [(_in_set_row(t32, problem, b32), a32, eps_hi)]
        rows += [(*face.row_enclosure(plant.f, plant.G, box), np.full(len(c.lo), face.margin)) for face in problem.faces]
        joint, common_u = best_common_input(rows, problem.u_lo, problem.u_hi)
        feas = np.where(meets, joint, inf)
    else:
        phi = _in_set_row(t32, problem, b32) + sup_over_inputs(a32, problem.u_lo, problem.u_hi)
        feas = np.where(meets, phi.lo - eps_hi, inf)
    split_by = _split_weights(t32)
    if order == 1:
        choice = (common_u, rows[1:]) if problem.faces else None
        feas = _tighter_row(problem, box, t32, a32, feas, _in_set_h(t32), problem.gains["gamma"], eps_hi, split_by,
                            choice)

    # the sampled data bound (two thirds of the time) only where the others hold: a box failing
    # them is split anyway, and its children are evaluated in full
    samp, worst_u = _sampled(problem, box, plant, t32, a32, b32, meets & (feas >= 0) & (cont >= 0), eps_lo)
    clos = _closure(problem, box, plant, meets)
    return BoxBounds({"containment": cont, "feasibility": feas, "sampled_data": samp, "closure": clos,
                      "initial": _initial(problem, box, t32)},
                     meets, inside, c.hi >= 0, worst_u, split_by, t32.rounding)


def _tighter_h(problem: Problem, box: Interval, t32: Terms) -> Interval:
    """h's enclosure, intersected with its linear relaxation (``compiler.bounds_linear``, with the
    float32 header's rounding) on the boxes where h may change sign: only there does a tighter
    h decide something (containment, whether the box meets the set or lies in it)."""
    h = t32.h
    idx = np.flatnonzero((h.lo < 0) & (h.hi >= 0))
    if not len(idx) or t32.rounding is None:
        return h
    lin = linear_bounds(problem.model, box[idx], np.asarray(t32.rounding.h)[idx])
    lo, hi = h.lo.copy(), h.hi.copy()
    lo[idx], hi[idx] = np.maximum(lo[idx], lin.lo), np.minimum(hi[idx], lin.hi)
    return Interval(lo, hi, check=False)


def _split_weights(t32: Terms) -> np.ndarray:
    """(B, n) per-edge sensitivity of the failing bound, for the split: |grad h| bound (the
    variation of h: containment), replaced by the feasibility row's where that fails."""
    return np.maximum(np.abs(t32.grad.lo), np.abs(t32.grad.hi))


def _tighter_row(problem: Problem, box: Interval, t32: Terms, a32: Interval, feas: np.ndarray,
                 level: Interval | None, gain: float, eps_hi: np.ndarray | float, split_by: np.ndarray,
                 choice: tuple[np.ndarray, list] | None = None, on_level: bool = False) -> np.ndarray:
    """The feasibility score, raised by the row's linear forms (``_linear_row``) and, where they
    fail on a network of one hidden layer, its centred form (``centred.py``), on the order-1 boxes of a smooth network where
    the interval bound fails (finite and < 0: the only ones where it can pay; piecewise-linear
    networks keep the interval bound); there ``split_by`` becomes the smear weight
    |d row / dx_i| of the tighter of the two, so such a box is halved along the edge that moves
    the failing bound the most.  ``level``: gamma's operand (h over the box's states in the set,
    ``_in_set_row``; None: no class-K term).  ``choice``: with face rows, (the common input
    ``best_common_input`` found (B, m), the face rows): the barrier's row is taken at that
    input, and every face row must hold there too.  ``on_level``: the row is asked only on
    {h = 0} (the boundary condition), not on the set's states."""
    if problem.order != 1 or not problem.smooth:
        return feas
    idx = np.flatnonzero(np.isfinite(feas) & (feas < 0))
    if not len(idx):
        return feas
    eps = np.broadcast_to(np.asarray(eps_hi, dtype=float), feas.shape)[idx]
    common_u = None if choice is None else choice[0][idx]
    # the linear forms first; the centred form (interval Hessian) too where they fail, on networks
    # of one hidden layer only: there its Hessian wraps a single layer and it proved twice the
    # boxes the forms did (a 3-32-1 obstacle-avoidance barrier, depths 9-15), while on the Dubins
    # car's two layers it proved none the forms did not and cost a fifth of the search
    better, slope = _linear_row(problem, box[idx], t32.rounding.grad[idx], None if level is None else level[idx],
                                gain, eps, common_u, np.asarray(t32.rounding.h)[idx], on_level)
    # the forms give the row's slope at the box's centre only, which may vanish along an edge the
    # box is wide in; h's variation keeps every edge that moves the set's boundary in the split
    # (without a class-K term, an autonomous plant's box was halved along one edge to 2^-30)
    slope = slope + (gain if level is not None else 1.0) * t32.grad.mag[idx]
    u_star = best_vertex(a32.mid[idx], problem.u_lo, problem.u_hi) if common_u is None else common_u
    rest = np.flatnonzero(better < 0) if _hidden_layers(problem.model) == 1 else np.zeros(0, dtype=int)
    if len(rest):
        row = centred_row(problem.model, problem.plant, box[idx[rest]], u_star[rest], t32.rounding.grad[idx[rest]])
        centred = Interval.point(row.lower) if level is None else Interval.point(row.lower) + gain * level[idx[rest]]
        with np.errstate(invalid="ignore"):
            centred = np.nextafter(centred.lo - eps[rest], -np.inf)
        centred = np.where(np.isnan(centred), -np.inf, centred)
        wins = centred > better[rest]
        better[rest] = np.maximum(better[rest], centred)
        centred_slope = row.slope if level is None else row.slope + gain * row.grad
        slope[rest[wins]] = centred_slope[wins]
    if choice is not None:
        better = np.minimum(better, best_common_input([(b[idx], a[idx], m[idx]) for b, a, m in choice[1]],
                                                      problem.u_lo, problem.u_hi, candidates=[u_star])[0])
    out = feas.copy()
    out[idx] = np.maximum(feas[idx], better)
    still = out[idx] < 0
    split_by[idx[still]] = slope[still]
    return out


def _hidden_layers(model) -> int:
    """Activation layers of the network (its hidden layers)."""
    return sum(isinstance(layer, Activation) for layer in model.layers)


def _linear_row(problem: Problem, box: Interval, grad_rounding: np.ndarray, level: Interval | None, gain: float,
                eps: np.ndarray, common_u: np.ndarray | None, h_error: np.ndarray, on_level: bool = False
                ) -> tuple[np.ndarray, np.ndarray]:
    """(score (B,), smear weight (B, n)) from the row's linear forms (``compiler.bounds_lie``):
    the best, over candidate inputs (every vertex of U and its centre; with face rows, only
    the common input they were checked at), of the lower bound of L_f h + L_G h . u over the
    box, less the float32 gradient's rounding sum_i e_i |f_i + G_i u|, plus gamma's operand
    ``level`` (the header's h on the box's states in the set; None: no class-K term), minus
    eps; the weight is |d row / dx_i| of the winning form.

    The forms also trade the row against h (``LieForms.lower_with_level``), on the states where
    the row is asked: ``on_level`` (the boundary condition), where the header's h is 0, so the
    real h lies within ``h_error`` (B,) of 0; else the set's states, where the real h lies in
    ``level`` widened by h_error, and the header's gain h differs from the real one by at most
    gain h_error."""
    batch = box.shape[0]
    plant_box = plant_terms(problem.plant, box, 1, with_input_jacobian=True)
    centre = Interval.point(np.clip(box.mid, box.lo, box.hi))
    forms = lie_forms(problem.model, box, plant_terms(problem.plant, centre, 1, with_input_jacobian=True), plant_box)
    e = np.asarray(h_error, dtype=float)
    if on_level:                             # the boundary condition: no class-K term (gain 0)
        band, header = (-e, e), np.zeros(batch)
    elif level is not None:
        band = (np.nextafter(level.lo - e, -np.inf), np.nextafter(level.hi + e, np.inf))
        header = np.nextafter(gain * e * _UP, np.inf)
    else:
        band = None
    plain = np.zeros(batch) if level is None else (gain * level).lo
    best = np.full(batch, -np.inf)
    slope = np.zeros(box.shape)
    for u in (_candidate_inputs(problem, batch) if common_u is None else [common_u]):
        F = plant_box.f + (plant_box.G * Interval.point(u)[:, None, :]).sum(-1)
        row = forms.row(u)
        with np.errstate(invalid="ignore", over="ignore"):
            err = np.sum(grad_rounding * F.mag, axis=-1) * _UP
            low = np.nextafter(np.nextafter(forms.lower_of(row) + plain, -np.inf) - err, -np.inf)
        row_slope = forms.slope(u)
        if band is not None:
            traded, traded_slope = forms.lower_with_level(u, gain, *band, row=row)
            with np.errstate(invalid="ignore", over="ignore"):
                traded = np.nextafter(np.nextafter(traded - header, -np.inf) - err, -np.inf)
            row_slope = np.where((traded > low)[:, None], traded_slope, row_slope)
            low = np.fmax(low, traded)
        low = np.where(np.isnan(low), -np.inf, low)
        slope = np.where((low > best)[:, None], row_slope, slope)
        best = np.maximum(best, low)
    with np.errstate(invalid="ignore"):
        score = np.nextafter(best - eps, -np.inf)
    return np.where(np.isnan(score), -np.inf, score), slope


def _candidate_inputs(problem: Problem, batch: int) -> list[np.ndarray]:
    """Every vertex of the input box and its centre, each (B, m); an autonomous plant (m = 0),
    the one empty input (its vertex and its centre are the same)."""
    points = vertices_and_centre(problem.u_lo, problem.u_hi)
    return [np.tile(u, (batch, 1)) for u in (points if problem.m else points[:1])]


def _boundary_bounds(problem: Problem, box: Interval, plant: PlantTerms, t32: Terms, cont: np.ndarray,
                     meets: np.ndarray, inside: np.ndarray) -> BoxBounds:
    """Containment, closure and the boundary (Nagumo) condition on boxes meeting {h = 0}:
    sup_u L_f h + L_G h . u >= 0 there (margin 0); sampled data is not asked (+inf)."""
    inf = np.full(box.shape[0], np.inf)
    on_zero = (t32.h.lo <= 0) & (t32.h.hi >= 0)
    rate = t32.Lf + sup_over_inputs(t32.LG, problem.u_lo, problem.u_hi)
    feas = np.where(on_zero, rate.lo, inf)
    split_by = _split_weights(t32)
    feas = _tighter_row(problem, box, t32, t32.LG, feas, None, 0.0, 0.0, split_by, on_level=True)
    if problem.relu_like:
        feas = _level_piece_row(problem, box, feas)
    worst_u = np.tile(0.5 * (problem.u_lo + problem.u_hi), (box.shape[0], 1))
    clos = _closure(problem, box, plant, meets)
    c = plant.constraint
    return BoxBounds({"containment": cont, "feasibility": feas, "sampled_data": inf, "closure": clos,
                      "initial": _initial(problem, box, t32)},
                     meets, inside, c.hi >= 0, worst_u, split_by, t32.rounding)


def _tube_bounds(problem: Problem, box: Interval, plant: PlantTerms, t32: Terms, cont: np.ndarray,
                 meets: np.ndarray, inside: np.ndarray) -> BoxBounds:
    """Containment, closure and the tube filter's feasibility (``tube_condition.py``); its
    rows hold over the period by construction, so sampled data is not asked separately (+inf)."""
    inf = np.full(box.shape[0], np.inf)
    feas = tube_feasibility(problem, box, meets)
    worst_u = np.tile(0.5 * (problem.u_lo + problem.u_hi), (box.shape[0], 1))
    # the rows move with g . f + gamma h: split where g's pull through f's Jacobian is largest too
    grad = _split_weights(t32)
    jac = plant.Jf
    split_by = grad * (1.0 + problem.gains["gamma"]) + np.einsum("bk,bki->bi", grad, np.maximum(np.abs(jac.lo), np.abs(jac.hi)))
    return BoxBounds({"containment": cont, "feasibility": feas, "sampled_data": inf,
                      "closure": _closure(problem, box, plant, meets), "initial": _initial(problem, box, t32)},
                     meets, inside, plant.constraint.hi >= 0, worst_u, split_by, t32.rounding)


def _piece_containment(problem: Problem, box: Interval, cont: np.ndarray) -> np.ndarray:
    """The containment score of a ReLU network, raised piece by piece (``piece_containment.py``)
    on the boxes where the other bounds fail."""
    idx = np.flatnonzero(np.isfinite(cont) & (cont < 0))
    if not len(idx) or not supported(problem.model):
        return cont
    out = cont.copy()
    out[idx] = np.maximum(cont[idx], piece_containment(problem, box[idx]))
    return out


def _level_piece_row(problem: Problem, box: Interval, feas: np.ndarray) -> np.ndarray:
    """The boundary score of a ReLU network, raised piece by piece on {h = 0} (``level_pieces.py``)
    on the boxes where the interval bound fails."""
    idx = np.flatnonzero(np.isfinite(feas) & (feas < 0))
    if not len(idx) or not supported(problem.model):
        return feas
    sub = box[idx]
    plant_box = plant_terms(problem.plant, sub, 1, with_input_jacobian=True)
    centre = plant_terms(problem.plant, Interval.point(np.clip(sub.mid, sub.lo, sub.hi)), 1)
    out = feas.copy()
    out[idx] = np.maximum(feas[idx], level_piece_row(problem.model, sub, centre, plant_box, problem.u_lo, problem.u_hi))
    return out


def _sampled(problem: Problem, box: Interval, plant: PlantTerms, t32: Terms, a32: Interval, b32: Interval,
             meets: np.ndarray, eps_lo: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Lower bound of min over admissible u and the tube of a . u + b (+inf where not needed);
    ``eps_lo`` (B,): the least margin the filter enforces on each box."""
    batch = box.shape[0]
    score = np.full(batch, np.inf)
    worst_u = np.tile(0.5 * (problem.u_lo + problem.u_hi), (batch, 1))
    idx = np.flatnonzero(meets)
    if len(idx) == 0:
        return score, worst_u
    eps = eps_lo[idx]
    sub = box[idx]
    reach = tube(problem.plant, sub, problem.u_lo, problem.u_hi, problem.dt)
    R = Interval(np.where(reach.ok[:, None], reach.R.lo, sub.lo), np.where(reach.ok[:, None], reach.R.hi, sub.hi))
    t64 = lie_terms(problem.model, plant_terms(problem.plant, R, problem.order), R, problem.order,
                    problem.gains, float32=False)
    if problem.order == 1 and problem.smooth:
        value, u, stays = _sampled_taylor(problem, sub, R, a32[idx], b32[idx], t32, plant, idx, eps)
    else:
        value, u, stays = _sampled_tube(problem, t64, a32[idx], b32.hi[idx], eps)
    error = _level_rounding(problem, t32, idx, plant.f[idx])
    value = np.maximum(value, _level_route(problem, t32, idx, t64, eps, error))
    if not (problem.order == 1 and problem.smooth):
        grown = np.any(R.hi - R.lo > TUBE_GROWN * (sub.hi - sub.lo), axis=1)
        weak = np.flatnonzero(reach.ok & ~stays & grown & np.isfinite(value) & (value < 0))
        if len(weak):
            value[weak] = _grid_routes(problem, t32, idx[weak], R[weak], a32[idx][weak], b32.hi[idx][weak],
                                       eps[weak], value[weak], None if error is None else error[weak])
    value = np.where(stays, np.inf, value)
    for face in problem.faces:
        value = np.minimum(value, _face_sampled(problem, face, plant, sub, R, idx))
    score[idx] = np.where(reach.ok, value, -np.inf)
    worst_u[idx] = u
    return score, worst_u


def _initial(problem: Problem, box: Interval, t32: Terms) -> np.ndarray:
    """Lower bound of h (order 2: min(h, psi1)) on the boxes meeting the initial set (+inf
    elsewhere, and without an initial set): >= 0 proves h >= 0 on the set's part of the box."""
    score = np.full(box.shape[0], np.inf)
    if not problem.initial:
        return score
    from .sets import meets
    low = t32.h.lo if problem.order == 1 else np.minimum(t32.h.lo, t32.psi1.lo)
    return np.where(meets(problem.initial, box.lo, box.hi), low, score)


def open_faces(problem: Problem) -> list[tuple[int, int]]:
    """(coordinate, side) of every face of D that nothing keeps the states off: not irrelevant
    (something reads the coordinate), not periodic, not enforced by a face row.  None under
    ``scope == "in-domain"``: closure is not asked there (the claim holds while in D)."""
    if problem.scope == "in-domain":
        return []
    enforced = {f.coord for f in problem.faces}
    return [(i, side) for i in range(problem.n) for side in (-1, 1)
            if problem.splittable[i] and i not in problem.periodic and i not in enforced]


def _closure(problem: Problem, box: Interval, plant: PlantTerms, meets: np.ndarray) -> np.ndarray:
    """Lower bound of -(outward speed through an open face) over the boxes that may meet the
    set and touch that face, under any input in U (+inf elsewhere): >= 0 proves no state of the
    set crosses that face (the flow on it points inward or along it), so C stays inside D."""
    score = np.full(box.shape[0], np.inf)
    for i, side in open_faces(problem):
        touching = box.lo[:, i] <= problem.lo[i] if side < 0 else box.hi[:, i] >= problem.hi[i]
        need = meets & touching
        if not need.any():
            continue
        outward = plant.f[:, i] * float(side) + sup_over_inputs(plant.G[:, i, :] * float(side), problem.u_lo, problem.u_hi)
        score = np.where(need, np.minimum(score, -outward.hi), score)
    return score


FACE_ROUNDING = 1e-9      # the face row's float64 evaluation in the filter: admit inputs this far below it


def _face_sampled(problem: Problem, face, plant: PlantTerms, box: Interval, R: Interval, idx: np.ndarray) -> np.ndarray:
    """Lower bound of min over the inputs the face's row admits at x_k and the tube R of the
    row (+inf where the tube cannot reach the face within the period): >= 0 keeps
    d/dt c >= -gamma c, so c >= 0, over the whole period (module sampled, the rate route)."""
    c_min = face.bound - R.hi[:, face.coord] if face.side > 0 else R.lo[:, face.coord] - face.bound
    b_box, a_box = face.row_enclosure(plant.f[idx], plant.G[idx], box)
    tube_plant = plant_terms(problem.plant, R, 1)
    b_R, a_R = face.row_enclosure(tube_plant.f, tube_plant.G, R)
    worst = min_over_admissible(a_box, b_box.hi, face.margin - FACE_ROUNDING, a_R, b_R.lo, problem.u_lo, problem.u_hi)
    return np.where(c_min > 0, np.inf, worst.value)


def _level_route(problem: Problem, t32: Terms, idx: np.ndarray, t64: Terms, eps: np.ndarray,
                 level_error: np.ndarray | None) -> np.ndarray:
    """The level-drop bound (``sampled.level_drop``) for the boxes ``idx`` and their tubes' terms
    (``level_error``: ``_level_rounding`` of those boxes)."""
    g = problem.gains
    if problem.order == 1:
        parts32 = (t32.h[idx], t32.Lf[idx], t32.LG[idx])
        q64, a64, gain = t64.Lf, t64.LG, g["gamma"]
    else:
        parts32 = (t32.psi1[idx], (t32.L2 + g["alpha1"] * t32.Lf)[idx], t32.LGLf[idx])
        q64, a64, gain = t64.L2 + g["alpha1"] * t64.Lf, t64.LGLf, g["alpha2"]
    return level_drop(*parts32, q64, a64, gain, eps, problem.dt, problem.u_lo, problem.u_hi,
                      level_error=level_error)


def _level_rounding(problem: Problem, t32: Terms, idx: np.ndarray, f: Interval) -> np.ndarray | None:
    """A bound on |l~ - l| at each state of the boxes ``idx``: the filter's float32 level against
    the real one (order 1: h, the header's bound e_h; order 2: psi1 = L_f h + alpha1 h, with
    L_f h the header's directional derivative seeded with float32 f, so sum_i e_grad,i |f_i|
    + 2^-23 sum_i |grad h_i| |f_i| (the seeds' rounding) + alpha1 e_h, and 2^-22 of the
    magnitudes for the sum's own rounding).  None without the header's rounding bounds."""
    r = t32.rounding
    if r is None:
        return None
    e_h = np.asarray(r.h, dtype=float)[idx]
    if problem.order == 1:
        return e_h
    if r.grad is None:
        return None
    mag = lambda iv: np.maximum(np.abs(iv.lo), np.abs(iv.hi))      # noqa: E731
    fmag = mag(f)
    alpha1 = problem.gains["alpha1"]
    e_lf = (np.asarray(r.grad, dtype=float)[idx] * fmag).sum(-1) + 2.0 ** -23 * (mag(t32.grad[idx]) * fmag).sum(-1)
    return e_lf + alpha1 * e_h + 2.0 ** -22 * (mag(t32.Lf[idx]) + alpha1 * mag(t32.h[idx]))


def tube_grid(R: Interval, cuts: np.ndarray) -> Interval:
    """Each tube (B, n) cut into a grid of ``cuts`` (B, n) pieces per edge (each row's product
    the same K), (B * K, n) box-major.  The pieces cover the tube exactly: neighbours share the
    same computed cut, the first starts at lo and the last ends at hi."""
    batch, n = R.shape
    k = int(np.prod(cuts[0]))
    stride = np.cumprod(np.concatenate([np.ones((batch, 1), int), cuts[:, :-1]], axis=1), axis=1)
    digit = (np.arange(k)[None, :, None] // stride[:, None, :]) % cuts[:, None, :]          # (B, K, n)
    lo3, width = R.lo[:, None, :], (R.hi - R.lo)[:, None, :]
    c3 = cuts[:, None, :]
    lo = np.where(digit == 0, lo3, lo3 + width * (digit / c3))
    hi = np.where(digit == c3 - 1, R.hi[:, None, :], lo3 + width * ((digit + 1) / c3))
    return Interval(lo.reshape(-1, n), hi.reshape(-1, n), check=False)


TUBE_GROWN = 2.0       # a tube gets a grid only where the period widens the box this much along an edge: on a
#                        wider box, halving the box tightens both enclosures at once and costs less
TUBE_PIECES_MAX = 64   # the most pieces a tube whose rate bounds fail is cut into (a grid, powers of two per edge)


def _grid_routes(problem: Problem, t32: Terms, idx: np.ndarray, R: Interval, a32: Interval, b32_hi: np.ndarray,
                 eps: np.ndarray, whole: np.ndarray, error: np.ndarray | None) -> np.ndarray:
    """The rate and level-drop bounds again with the tube's terms taken over a grid of pieces of
    it (``whole``: the bound over the whole tube; ``error``: the boxes' ``_level_rounding``).  Both bounds fall as the tube's enclosure of
    the row widens, and a network's interval enclosure widens with the box far more than the
    row varies along one period (the pendulum's edge: drift 6.7 over the tube, 0.8 over a
    16 x 4 grid), so the least over the pieces is much tighter.  Both bounds are monotone in
    the enclosure, so the least over the pieces bounds their union, the tube.

    The grid is measured, not guessed: the tube is halved along each edge in turn, and the
    excess each halving removed (about half that edge's share, since an enclosure's excess
    falls about as 1/cuts) says where cuts pay and how many the bound needs.  A tube gets a grid
    only where cutting could bring the bound to 0 within ``TUBE_PIECES_MAX`` pieces; elsewhere
    the state box is split, as before."""
    batch, n = R.shape

    def bound(pieces: Interval, rows: np.ndarray, k: int) -> np.ndarray:
        t64 = lie_terms(problem.model, plant_terms(problem.plant, pieces, problem.order), pieces, problem.order,
                        problem.gains, float32=False)
        rep = np.repeat(rows, k)
        rate, _, _ = _sampled_tube(problem, t64, a32[rep], b32_hi[rep], eps[rep])
        level = _level_route(problem, t32, idx[rep], t64, eps[rep], None if error is None else error[rep])
        return np.maximum(rate.reshape(-1, k).min(axis=1), level.reshape(-1, k).min(axis=1))

    rows = np.arange(batch)
    best = whole.copy()
    share = np.zeros((batch, n))
    for d in np.flatnonzero(problem.splittable):
        cuts = np.ones((batch, n), dtype=int)
        cuts[:, d] = 2
        halves = bound(tube_grid(R, cuts), rows, 2)
        best = np.maximum(best, halves)
        with np.errstate(invalid="ignore"):
            share[:, d] = 2.0 * np.nan_to_num(halves - whole, nan=0.0, posinf=0.0, neginf=0.0).clip(min=0.0)
    cuts = _grid_cuts(whole, share, TUBE_PIECES_MAX)
    pieces = np.prod(cuts, axis=1)
    for k in np.unique(pieces[pieces > 2]):
        group = np.flatnonzero(pieces == k)
        best[group] = np.maximum(best[group], bound(tube_grid(R[group], cuts[group]), group, int(k)))
    return best


def _grid_cuts(whole: np.ndarray, share: np.ndarray, most: int) -> np.ndarray:
    """Cuts per edge (B, n), powers of two: doubled along the edge with the largest share of the
    excess left (``share``: each edge's share at one cut) while the bound predicted with twice
    the excess left is < 0, at most ``most`` pieces; 1 everywhere for a box that no grid could
    bring to 0 (its bound with no excess is < 0)."""
    cuts = np.ones(share.shape, dtype=int)
    rows = np.arange(len(share))
    ceiling = whole + share.sum(axis=1)                   # the bound with no excess left
    for _ in range(int(round(np.log2(most)))):
        left = (share / cuts).sum(axis=1)
        go = np.isfinite(ceiling) & (ceiling > 0) & (ceiling - 2.0 * left < 0)
        if not go.any():
            break
        d = np.argmax(share / cuts, axis=1)
        cuts[rows[go], d[go]] *= 2
    return cuts


def _sampled_tube(problem: Problem, t64: Terms, a32: Interval, b32_hi: np.ndarray, eps: np.ndarray):
    """Lower bound of a(x) . u + b(x) over the tube and the admissible inputs (module sampled)."""
    stays = (t64.h.lo > 0) if problem.order == 1 else (t64.h.lo > 0) & (t64.psi1.lo > 0)
    a, b = constraint_row(t64, problem)
    worst = min_over_admissible(a32, b32_hi, eps, a, b.lo, problem.u_lo, problem.u_hi)
    return worst.value, worst.u, stays


def _sampled_taylor(problem: Problem, sub: Interval, R: Interval, a32: Interval, b32: Interval, t32: Terms,
                    plant_box: PlantTerms, idx: np.ndarray, eps: np.ndarray):
    """Smooth order 1, two routes with the second time derivative over the tube (Hessian from
    order-2 jets); the better bound of the two counts:
    * rate: phi_u(x(t)) >= min over the sampled box and admissible u of phi_u
      + T min(0, d/dt phi_u over the tube) (mean value theorem in time);
    * level (``sampled.taylor_level``): h(x(t)) >= h(x_k) + t d/dt h(x_k) + t^2/2 min d2/dt2 h,
      with d/dt h(x_k) the filter's own float32 number less the header's rounding bound.
    The float32 enclosure over the box holds the exact values too, so it bounds phi_u there.
    The curvature counts only over the inputs the filter may return (``admissible_slices``):
    near the set's edge the row rules out the inputs that would bend h down the most.  The
    level route is taken per input slice, with that slice's own curvature and its own d/dt h at
    x_k: the inputs that bend h down hardest are often the ones that raise it fastest, and
    pairing the least rate with the least curvature of different inputs loses that."""
    plant = plant_terms(problem.plant, R, 1, with_input_jacobian=True)
    gamma = problem.gains["gamma"]
    tau = row_rounding(t32.h[idx], t32.Lf[idx], a32, gamma, eps, problem.u_lo, problem.u_hi)
    slices = admissible_slices(a32, b32.hi, eps, tau, problem.u_lo, problem.u_hi, INPUT_SLICES)
    h, rates = row_rate_slices(problem.model, plant, R, [(lo, hi) for lo, hi, _ in slices])
    u = Interval(np.asarray(problem.u_lo, float), np.asarray(problem.u_hi, float))
    F = (plant_box.f + (plant_box.G * u).sum(-1))[idx]                  # f + G u over the box, any u
    rate_lo = np.full(len(idx), np.inf)
    for (_, _, possible), (second, first) in zip(slices, rates):
        rate_lo = np.where(possible, np.minimum(rate_lo, (second + gamma * first).lo), rate_lo)
    rate_lo = np.where(np.isfinite(rate_lo), rate_lo, -np.inf)   # no admissible input: the filter is infeasible
    start = min_over_admissible(a32, b32.hi, eps, a32, b32.lo, problem.u_lo, problem.u_hi)
    drop = np.nextafter(problem.dt * np.minimum(rate_lo, 0.0), -np.inf)
    by_rate = np.nextafter(start.value + drop, -np.inf)
    def per_slice(rows: np.ndarray, second_lo: list[np.ndarray]) -> np.ndarray:
        """The level route on the boxes ``rows``, the least over the input slices the filter may
        use of that slice's bound (its own d/dt h at x_k and its curvature ``second_lo``); -inf
        where no slice is admissible (the filter is infeasible there)."""
        at = idx[rows]
        h32, lf32, lg32 = t32.h[at], t32.Lf[at], t32.LG[at]
        out = np.full(len(rows), np.inf)
        for (s_lo, s_hi, possible), second in zip(slices, second_lo):
            held = lf32 + (lg32 * Interval(s_lo, s_hi)).sum(-1)
            level = taylor_level(h32, lf32, lg32, t32.grad[at], t32.rounding, at, F[rows], second, gamma, eps[rows],
                                 problem.dt, problem.u_lo, problem.u_hi, rate_at_start=held.lo)
            out = np.where(possible[rows], np.minimum(out, level), out)
        return np.where(np.isfinite(out), out, -np.inf)

    by_level = per_slice(np.arange(len(idx)), [second.lo for second, _ in rates])
    # where that fails, each slice's curvature again over the tube of its own inputs only; that
    # tube is narrower only by the inputs' share of the tube's growth over the box, so only boxes
    # whose tube is TUBE_GROWN times wider along some edge are worth its eight jet evaluations
    # (on the Dubins car at 2 ms it took a third of the deep boxes' time; the search was no larger without it)
    grown = np.any(R.hi - R.lo > TUBE_GROWN * (sub.hi - sub.lo), axis=1)
    again = np.flatnonzero((np.maximum(by_rate, by_level) < 0) & np.isfinite(by_level) & grown)
    if len(again):
        own = [slice_tube_curvature(problem, sub[again], R[again], lo, hi, possible[again])
               for lo, hi, possible in slices]
        by_level[again] = np.maximum(by_level[again], per_slice(again, own))
    return np.maximum(by_rate, by_level), start.u, h.lo > 0


def slice_tube_curvature(problem: Problem, box: Interval, R: Interval, u_lo: np.ndarray, u_hi: np.ndarray,
                         possible: np.ndarray) -> np.ndarray:
    """Lower bound of d2/dt2 h over the one-period tube of ``box`` under the inputs [u_lo, u_hi]
    alone (within the full tube R), for the held inputs in that slice; +inf where the slice is
    not ``possible``.  Narrower than the tube of the whole input box wherever an input drives a
    state directly (the Dubins heading: T |u| of the tube's width)."""
    second_lo = np.full(box.shape[0], np.inf)
    rows = np.flatnonzero(possible)
    if not len(rows):
        return second_lo
    reach = tube(problem.plant, box[rows], u_lo, u_hi, problem.dt)
    ok = reach.ok[:, None]
    own = Interval(np.where(ok, np.maximum(reach.R.lo, R.lo[rows]), R.lo[rows]),
                   np.where(ok, np.minimum(reach.R.hi, R.hi[rows]), R.hi[rows]), check=False)
    plant = plant_terms(problem.plant, own, 1, with_input_jacobian=True)
    _, [(second, _)] = row_rate_slices(problem.model, plant, own, [(u_lo, u_hi)])
    second_lo[rows] = second.lo
    return second_lo
