"""``--condition tube``: the sampled loop under the tube filter (``training/tube_rows.py``).

The tube filter's rows hold over the whole period on every piece it can reach, so a state of
the set stays in it for the period whenever the filter has an input satisfying them.  What is
left to prove is that it always has one: on every box B of states that may meet the set,

    max over u in U of min over the rows of a_p + b_p . u  >=  2 DELTA,

with the rows computed over B's own tube with ``cushion`` (they lie below the filter's rows
at every state of B, ``tube_rows`` says why).  The filter enforces DELTA, so its QP is
feasible with room, and its solution's float64 error (~1e-10) cannot break a row.  The
maximin is found at the input box's vertices and centre, else by an LP, and always
re-evaluated at the input found (``tube_rows.maximin``): a proof needs only that input.

A refutation is a state of the set where no input satisfies the filter's own rows there,
proven by weak duality (``tube_rows.no_input_bound``): the filter has nothing to return.
"""
from __future__ import annotations

import numpy as np

from compiler.interval import Interval
from training.tube_enumeration import Enumeration
from training.tube_rows import (DELTA, PieceNet, TubeRowsError, maximin, no_input_bound, single_row_maximin,
                                tube_spec)

from .problem import CertifyError, Problem

TOO_WIDE = -1.0          # the score of a box whose tube did not close: split it
SPARE = 2                # a box with more unstable neurons than the filter enumerates + SPARE is split instead
ENUMERATED = (2, 5, 8)   # levels where a box's rows are tried before its last (any k up to the filter's
                         # gives rows below its rows); the interval row (level 0) is tried first, batched


def prepare(problem: Problem) -> None:
    """The tube filter's spec and network on the problem (once); refusals are one line."""
    if problem.order != 1:
        raise CertifyError(f"--condition tube is an order 1 condition; the problem has order {problem.order}")
    if problem.faces:
        raise CertifyError("--condition tube takes no face rows (the card's config enforces faces)")
    try:
        problem.tube_net = PieceNet(problem.model)
        problem.tube = tube_spec(problem.plant, problem.lo, problem.hi, problem.u_lo, problem.u_hi, problem.dt,
                                 problem.gains.get("gamma", 0.0))
    except TubeRowsError as e:
        raise CertifyError(str(e)) from None


def feasibility(problem: Problem, box: Interval, meets: np.ndarray) -> np.ndarray:
    """(B,) the verified maximin minus 2 DELTA on boxes that may meet the set (+inf elsewhere,
    TOO_WIDE where the tube did not close): >= 0 proves the filter has an input there.  The
    interval row first (one row, below all the filter's), then more and more neurons
    enumerated where it fails, one level at a time with the empty combinations dropped as they
    appear (``tube_enumeration``): B's first k unstable neurons among any state's unstable ones
    are among that state's first k, so for every k up to the filter's MAX_UNSTABLE each of the
    filter's rows lies above one of B's (``tube_rows``)."""
    score = np.full(box.shape[0], np.inf)
    idx = np.flatnonzero(meets)
    if not len(idx):
        return score
    net, spec = problem.tube_net, problem.tube
    tubes = net.tubes(problem.plant, box[idx], spec, cushion=True, in_set=True)
    rows, ok = net.interval_rows(problem.plant, tubes, spec)
    score[idx] = np.where(ok, single_row_maximin(rows, problem.u_lo, problem.u_hi) - 2 * DELTA, TOO_WIDE)
    todo = np.flatnonzero(ok & (score[idx] < 0))          # positions in idx
    if not len(todo):
        return score
    part = tubes.take(todo)
    enum = Enumeration(net, part.ranges, spec.max_unstable, True, (part.R.lo, part.R.hi))
    open_ = np.ones(len(todo), dtype=bool)
    while (open_ & (enum.count > enum.level)).any():
        enum.advance(np.flatnonzero(open_))
        g, e, boxes, owner = enum.rows()
        # a box is tried where a stage falls and once fully enumerated
        ask = open_ & ((enum.count == enum.level) | (enum.level in ENUMERATED))
        pick = ask[owner]
        if not pick.any():
            continue
        asked = np.flatnonzero(ask)
        local = np.searchsorted(asked, owner[pick])
        rows = net.rows_of(problem.plant, g[pick], e[pick], (boxes[0][pick], boxes[1][pick]), local,
                           part.take(asked), spec)
        for b, r in zip(asked, rows):
            j = idx[todo[b]]
            score[j] = max(score[j], maximin(r, problem.u_lo, problem.u_hi)[0] - 2 * DELTA)
        open_[asked] = ((score[idx[todo[asked]]] < 0) & (enum.count[asked] > enum.level)
                        & (part.count[asked] <= spec.max_unstable + SPARE))
    return score


def point_violations(problem: Problem, x: np.ndarray, in_set: np.ndarray) -> np.ndarray:
    """(K,) at states of the set where the filter's own rows admit no input, an upper bound
    (< 0) of their maximin; nan elsewhere."""
    out = np.full(len(x), np.nan)
    idx = np.flatnonzero(in_set)
    if not len(idx):
        return out
    rows, _ = problem.tube_net.rows(problem.plant, Interval(x[idx], x[idx].copy()), problem.tube)
    for k, r in zip(idx, rows):
        if r is None or maximin(r, problem.u_lo, problem.u_hi, want=0.0)[0] >= 0:
            continue
        bound = no_input_bound(r, problem.u_lo, problem.u_hi)
        if bound < 0:
            out[k] = bound
    return out
