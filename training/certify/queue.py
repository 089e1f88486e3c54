"""The branch and bound's open boxes: best first, in one canonical order, spilled to disk when large.

Why canonical: the search must give the same certificate however its boxes are stored (in
memory or partly on disk) and however many workers evaluate them.  Boxes are taken by the key
(score, lo_0, ..., lo_{n-1}): the worst bound first, ties broken by the box's lower corner.
Open boxes are disjoint, so no two share a lower corner and the order is total: it depends on
the set of open boxes only, never on where or in which order they were stored.

Why spill: at 6 dimensions the open set outgrows memory (0.1--1 TB).  When more than
``spill_at`` boxes are held, the worse half is sorted and written to a temporary ``.npy`` run
(one row per box: key, lo, hi).  Taking a batch merges the boxes held with the head of every
run (each run is sorted, so only its first ``count`` rows can be among the ``count`` best):
the batch is exactly the one an all-in-memory queue would give.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass

import numpy as np

DEFAULT_MEMORY_BYTES = 1 << 30      # open boxes held in memory before spilling (1 GiB of lo, hi, score)


def default_spill_at(n: int) -> int:
    """Boxes of dimension ``n`` that fit in DEFAULT_MEMORY_BYTES (lo, hi and score in float64)."""
    return max(1024, DEFAULT_MEMORY_BYTES // ((2 * n + 1) * 8))


def _key(score: np.ndarray) -> np.ndarray:
    """The sort key of a score: NaN last (as +inf), -0.0 as 0.0."""
    return np.where(np.isnan(score), np.inf, score) + 0.0


def canonical_order(key: np.ndarray, lo: np.ndarray) -> np.ndarray:
    """Indices sorting the boxes by (key, lo_0, ..., lo_{n-1})."""
    return np.lexsort(tuple(lo[:, j] for j in range(lo.shape[1] - 1, -1, -1)) + (key,))


@dataclass
class _Run:
    path: str
    rows: np.ndarray        # memory-mapped (k, 1 + 2n), sorted canonically
    cursor: int = 0

    def head(self, count: int) -> np.ndarray:
        return np.array(self.rows[self.cursor:self.cursor + count])

    @property
    def left(self) -> int:
        return len(self.rows) - self.cursor


class OpenQueue:
    """The open boxes (lo, hi, score): ``push`` children, ``pop`` the ``count`` best in canonical
    order; ``close`` removes the spill files (also a context manager)."""

    def __init__(self, n: int, spill_at: int | None = None, directory: str | None = None):
        if spill_at is not None and not (isinstance(spill_at, int) and spill_at >= 2):
            raise ValueError(f"spill_at must be a whole number >= 2, got {spill_at!r}")
        self.n = n
        self.spill_at = spill_at if spill_at is not None else default_spill_at(n)
        self._dir_parent = directory
        self._dir: str | None = None
        self.lo = np.empty((0, n))
        self.hi = np.empty((0, n))
        self.key = np.empty(0)
        self.runs: list[_Run] = []
        self.spilled = 0            # boxes written to disk so far (for tests and the report)
        self._serial = 0
        self._sorted = True         # the boxes held are in canonical order (after a drain's sort)

    def __len__(self) -> int:
        return len(self.key) + sum(r.left for r in self.runs)

    def __enter__(self) -> OpenQueue:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def push(self, lo: np.ndarray, hi: np.ndarray, score: np.ndarray) -> None:
        if len(lo):
            self.lo = np.concatenate([self.lo, lo])
            self.hi = np.concatenate([self.hi, hi])
            self.key = np.concatenate([self.key, _key(np.asarray(score, float))])
            self._sorted = False
        if len(self.key) > self.spill_at:
            self._spill()

    def pop(self, count: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``count`` best open boxes (fewer when fewer are open), removed, in canonical order."""
        mem = self._best_in_memory(count)
        heads = [r.head(count) for r in self.runs]
        n = self.n
        key = np.concatenate([self.key[mem]] + [h[:, 0] for h in heads])
        lo = np.concatenate([self.lo[mem]] + [h[:, 1:1 + n] for h in heads])
        hi = np.concatenate([self.hi[mem]] + [h[:, 1 + n:] for h in heads])
        source = np.concatenate([np.full(len(mem), -1)] + [np.full(len(h), i) for i, h in enumerate(heads)])
        take = canonical_order(key, lo)[:count]
        keep = np.ones(len(self.key), dtype=bool)
        keep[mem[take[source[take] < 0]]] = False
        self.lo, self.hi, self.key = self.lo[keep], self.hi[keep], self.key[keep]
        for i, run in enumerate(self.runs):
            run.cursor += int(np.sum(source[take] == i))      # a run's taken rows are a prefix of its head
        self._drop_finished()
        return lo[take], hi[take]

    def drain(self, count: int):
        """Every open box, ``count`` at a time, in canonical order (one sort of the boxes held,
        not one selection per block): the boxes a stopped search leaves undecided."""
        order = canonical_order(self.key, self.lo)
        self.lo, self.hi, self.key = self.lo[order], self.hi[order], self.key[order]
        self._sorted = True
        while len(self):
            yield self.pop(count)

    def close(self) -> None:
        self.runs = []
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def _best_in_memory(self, count: int) -> np.ndarray:
        """Indices of the ``count`` best boxes held in memory, canonical order."""
        if self._sorted:
            return np.arange(min(count, len(self.key)))
        if len(self.key) > count:
            kth = np.partition(self.key, count - 1)[count - 1]
            idx = np.flatnonzero(self.key <= kth)       # every tie at the cut, resolved by lo below
        else:
            idx = np.arange(len(self.key))
        return idx[canonical_order(self.key[idx], self.lo[idx])][:count]

    def _spill(self) -> None:
        """Keep the better half in memory; write the rest, sorted, as a new run."""
        order = canonical_order(self.key, self.lo)
        keep, out = order[:self.spill_at // 2], order[self.spill_at // 2:]
        if self._dir is None:
            self._dir = tempfile.mkdtemp(prefix="cbfsim-queue-", dir=self._dir_parent)
        path = os.path.join(self._dir, f"run{self._serial:06d}.npy")
        self._serial += 1
        np.save(path, np.column_stack([self.key[out], self.lo[out], self.hi[out]]))
        self.runs.append(_Run(path, np.load(path, mmap_mode="r")))
        self.spilled += len(out)
        self.lo, self.hi, self.key = self.lo[keep], self.hi[keep], self.key[keep]
        self._sorted = True

    def _drop_finished(self) -> None:
        for run in [r for r in self.runs if r.left == 0]:
            self.runs.remove(run)
            del run.rows
            os.remove(run.path)
