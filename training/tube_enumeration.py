"""The tube rows' sign combinations, one neuron more per level, the empty ones dropped as they
appear (``training/tube_rows.py``, step 2).

Why: a box with 10 unstable neurons has 1,024 combinations, and the cuts leave a few dozen of
them (the 3 x 8 spacecraft student at 10 ms: a median of 26).  Enumerating all of them and
cutting each was 85% of the certifier's time.  Here a combination of the first j neurons is
only extended when its own cut box is not empty.  Every box is cut from the tube with all the
signs its combination fixes (``PieceNet._chain``), as before, so the combinations left at a
level, and their boxes, are those the full enumeration keeps: the cut is monotone in the signs
fixed (fixing more signs only adds and tightens half-spaces), so a combination whose prefix
cut is empty has an empty cut itself, and the certifier's rows over a box still lie below the
filter's (tube_rows' argument, with the filter's signs a superset of the box's).

A box none of whose combinations survives a level (never, in exact arithmetic: each state of
the tube lies on some piece) ends there with every combination of that level, uncut.
"""
from __future__ import annotations

import itertools

import numpy as np


class Enumeration:
    """The sign combinations of each box's first unstable neurons (in the network's fixed
    order), level by level: at level j, one row per surviving combination of the first j of
    them, for the boxes with at least j (``count``, capped at ``limit``).  ``tubes`` (lo, hi)
    (B, n): the boxes the combinations cut (None: nothing is cut, nothing dropped)."""

    def __init__(self, net, ranges: list[tuple[np.ndarray, np.ndarray]], limit: int, cushion: bool = False,
                 tubes: tuple[np.ndarray, np.ndarray] | None = None, chunk: int = 4096):
        self.net, self.cushion, self.tubes, self.chunk = net, cushion, tubes, chunk
        lo = np.concatenate([lo for lo, _ in ranges], axis=1)
        hi = np.concatenate([hi for _, hi in ranges], axis=1)
        self.unstable = (lo < 0) & (hi > 0)
        self.on = (lo >= 0).astype(float)
        k = int(min(limit, self.unstable.shape[1]))
        key = np.where(self.unstable, np.concatenate(net._rank)[None], np.iinfo(np.int64).max)
        self.chosen = np.argsort(key, axis=1, kind="stable")[:, :k]      # stable neurons sort last
        self.count = np.minimum(self.unstable.sum(axis=1), k)             # the level each box ends at
        self.cuts = np.cumsum(net.widths)[:-1]
        self.level = 0
        every = np.arange(len(lo))
        self._keep(every, self.on, np.where(self.unstable, 1.0, self.on), every)

    def advance(self, boxes: np.ndarray | None = None) -> None:
        """One level more for ``boxes`` (indices; default: all) that have one: each of their
        combinations split on the next neuron, the empty halves dropped.  Other boxes' rows go."""
        j = self.level = self.level + 1
        grow = self.count[self.owner] >= j
        if boxes is not None:
            grow &= np.isin(self.owner, boxes)
        parents = np.flatnonzero(grow)
        owner = np.repeat(self.owner[parents], 2)
        bit = np.tile([0.0, 1.0], len(parents))
        m_lo, m_hi = np.repeat(self.m_lo[parents], 2, axis=0), np.repeat(self.m_hi[parents], 2, axis=0)
        col = self.chosen[owner, j - 1]
        m_lo[np.arange(len(owner)), col] = bit
        m_hi[np.arange(len(owner)), col] = bit
        self._keep(owner, m_lo, m_hi, np.unique(self.owner[parents]))

    def rows(self) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray] | None, np.ndarray]:
        """(g, e, boxes, owner): this level's rows, box after box (``PieceNet.gradients``)."""
        return self.g, self.e, self.boxes, self.owner

    def _keep(self, owner: np.ndarray, m_lo: np.ndarray, m_hi: np.ndarray, expected: np.ndarray) -> None:
        """Chain the combinations (in chunks), keep those whose box is not empty; the
        ``expected`` boxes left with none end here, uncut (module docstring)."""
        parts = []
        for start in range(0, len(owner), self.chunk):
            part = slice(start, start + self.chunk)
            o = owner[part]
            boxes = None if self.tubes is None else (self.tubes[0][o], self.tubes[1][o])
            g, e, boxes, keep = self.net._chain(np.split(m_lo[part], self.cuts, axis=1),
                                                np.split(m_hi[part], self.cuts, axis=1), boxes, self.cushion,
                                                self.unstable[o, :self.net.widths[0]])
            if boxes is None:
                keep[:] = True
                boxes = (np.zeros((len(o), 0)), np.zeros((len(o), 0)))
            parts.append((g[keep], e[keep], boxes[0][keep], boxes[1][keep], o[keep], m_lo[part][keep],
                           m_hi[part][keep]))
        if parts:
            g, e, blo, bhi, owner, m_lo, m_hi = (np.concatenate([p[i] for p in parts]) for i in range(7))
        else:
            g = e = np.zeros((0, self.net.n))
            blo = bhi = np.zeros((0, 0 if self.tubes is None else self.net.n))
            owner = np.zeros(0, dtype=int)
            m_lo = m_hi = np.zeros((0, self.unstable.shape[1]))
        lost = np.setdiff1d(expected, owner)
        if len(lost):
            g, e, blo, bhi, owner, m_lo, m_hi = self._uncut(lost, (g, e, blo, bhi, owner, m_lo, m_hi))
        self.g, self.e, self.owner, self.m_lo, self.m_hi = g, e, owner, m_lo, m_hi
        self.boxes = None if self.tubes is None else (blo, bhi)

    def _uncut(self, lost: np.ndarray, kept: tuple) -> tuple:
        """``kept`` with every combination of this level for the ``lost`` boxes, uncut; those
        boxes end here."""
        j = self.level
        combos = np.array(list(itertools.product((0.0, 1.0), repeat=j)), dtype=float).reshape(2 ** j, j)
        owner = np.repeat(lost, 2 ** j)
        m_lo = self.on[owner].copy()
        m_hi = np.where(self.unstable[owner], 1.0, self.on[owner])
        rows = np.arange(len(owner))
        for t in range(j):
            bit = np.tile(combos[:, t], len(lost))
            m_lo[rows, self.chosen[owner, t]] = bit
            m_hi[rows, self.chosen[owner, t]] = bit
        g, e, _, _ = self.net._chain(np.split(m_lo, self.cuts, axis=1), np.split(m_hi, self.cuts, axis=1), None,
                                     self.cushion, self.unstable[owner, :self.net.widths[0]])
        self.count[lost] = j
        blo = self.tubes[0][owner] if self.tubes is not None else np.zeros((len(owner), 0))
        bhi = self.tubes[1][owner] if self.tubes is not None else np.zeros((len(owner), 0))
        merged = [np.concatenate([a, b]) for a, b in zip(kept, (g, e, blo, bhi, owner, m_lo, m_hi))]
        order = np.argsort(merged[4], kind="stable")          # box after box
        return tuple(m[order] for m in merged)
