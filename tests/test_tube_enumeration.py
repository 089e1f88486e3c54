"""The level-by-level enumeration of the tube rows' sign combinations
(training/tube_enumeration.py) against the enumeration it replaces: every combination of a
box's first k unstable neurons, each cut from the tube with all its signs, the empty ones
dropped.  The reference is written out here (itertools, one box at a time); the two must
agree row for row, bit for bit."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from test_tube_filter import _boxes, _setup  # noqa: E402

from training.tube_enumeration import Enumeration  # noqa: E402


def _reference(pn, ranges, i, k, cushion, tube):
    """Box i's rows by brute force: all 2^k combinations, cut, the non-empty kept (all, uncut,
    when none is)."""
    free = sorted(((l, j) for l, (lo, hi) in enumerate(ranges) for j in np.flatnonzero((lo[i] < 0) & (hi[i] > 0))),
                  key=lambda lj: pn._rank[lj[0]][lj[1]])
    chosen = free[:k]
    combos = np.array(list(itertools.product((0.0, 1.0), repeat=len(chosen)))).reshape(2 ** len(chosen), len(chosen))
    P = len(combos)
    m_lo = [np.repeat((lo[i] >= 0).astype(float)[None], P, axis=0) for lo, _ in ranges]
    m_hi = [np.repeat((lo[i] >= 0).astype(float)[None], P, axis=0) for lo, _ in ranges]
    for l, j in free:
        m_hi[l][:, j] = 1.0
    for c, (l, j) in enumerate(chosen):
        m_lo[l][:, j] = m_hi[l][:, j] = combos[:, c]
    boxes = (np.repeat(tube[0][i][None], P, axis=0), np.repeat(tube[1][i][None], P, axis=0))
    first_free = (ranges[0][0][i] < 0) & (ranges[0][1][i] > 0)
    g, e, boxes, keep = pn._chain(m_lo, m_hi, boxes, cushion, first_free)
    if not keep.any():
        return g, e, (np.repeat(tube[0][i][None], P, axis=0), np.repeat(tube[1][i][None], P, axis=0))
    return g[keep], e[keep], (boxes[0][keep], boxes[1][keep])


@pytest.mark.parametrize("seed, cushion", [(0, True), (1, False), (2, True)])
def test_the_levels_keep_exactly_the_combinations_the_full_enumeration_keeps(seed, cushion):
    system, _, pn, plant, spec, lo, hi = _setup(seed, 0.05)
    rng = np.random.default_rng(seed)
    X = _boxes(rng, lo, hi, 60, 0.3)
    t = pn.tubes(plant, X, spec, cushion=cushion)
    idx = np.flatnonzero(t.ok)
    ranges = [(a[idx], b[idx]) for a, b in t.ranges]
    tube = (t.R.lo[idx], t.R.hi[idx])
    many = 0
    for k in (0, 3, 7):
        g, e, boxes, owner = pn.combinations(ranges, k, cushion, tube)
        assert np.all(np.diff(owner) >= 0)                        # box after box
        for i in range(len(idx)):
            rg, re_, rb = _reference(pn, ranges, i, k, cushion, tube)
            mine = owner == i
            assert np.array_equal(g[mine], rg) and np.array_equal(e[mine], re_)
            assert np.array_equal(boxes[0][mine], rb[0]) and np.array_equal(boxes[1][mine], rb[1])
            many += k == 7 and len(rg) < 2 ** min(7, int(t.count[idx[i]]))
    assert many >= 5                        # the cuts did drop combinations: the test saw pruning


def test_a_box_left_with_no_combination_ends_uncut(monkeypatch):
    """Never in exact arithmetic; forced here by a chain that empties every box from level 2."""
    system, _, pn, plant, spec, lo, hi = _setup(3, 0.05)
    X = _boxes(np.random.default_rng(3), lo, hi, 40, 0.3)
    t = pn.tubes(plant, X, spec)
    wide = np.flatnonzero(t.ok & (t.count >= 4))[:3]
    assert len(wide)
    ranges = [(a[wide], b[wide]) for a, b in t.ranges]
    tube = (t.R.lo[wide], t.R.hi[wide])
    enum = Enumeration(pn, ranges, 4, False, tube)
    enum.advance()
    chain = pn._chain

    def emptying(*args):
        g, e, boxes, keep = chain(*args)
        return g, e, boxes, np.zeros_like(keep)
    monkeypatch.setattr(pn, "_chain", emptying)
    enum.advance()
    g, e, boxes, owner = enum.rows()
    assert np.array_equal(np.bincount(owner, minlength=len(wide)), [4] * len(wide))   # every level-2 combination
    assert np.array_equal(boxes[0], tube[0][owner]) and np.array_equal(boxes[1], tube[1][owner])
    assert np.all(enum.count == 2)          # and those boxes end at level 2
