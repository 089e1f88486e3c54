"""Domain faces the filter enforces as rows, so that a claim needs no "while in D" clause.

A certificate is proven over a box D. A coordinate the barrier does not bound (the pendulum's
angular rate: h reads theta only) can be driven out of D by the nominal controller, and outside
D nothing was proven. For such a coordinate the filter enforces the two faces of D as extra
first-order rows (a relative-degree-1 coordinate: some input drives it directly):

    c(x) = hi_i - x_i >= 0:   -f_i(x) - G_i(x).u + gamma c(x) >= margin
    c(x) = x_i - lo_i >= 0:    f_i(x) + G_i(x).u + gamma c(x) >= margin

The certifier proves them jointly with the barrier's row: one input satisfies every row
within the input box (feasibility), and each face row keeps its c >= 0 over the held period
for every input it admits (sampled data, the rate route over the one-period tube). The face
rows are computed from the plant in float64 (the Python filter's own numbers).

The card says which coordinates: ``config["faces"] = {"theta_dot": {"gamma": 10, "margin": 1}}``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np
import sympy as sp

from compiler.errors import CbfsimError
from compiler.interval import Interval


class FaceError(CbfsimError, ValueError):
    """A face the filter cannot enforce, or a malformed ``faces`` entry (one line naming it)."""


@dataclass(frozen=True)
class Face:
    """One enforced face: coordinate ``coord``, ``side`` +1 (x_i <= bound) or -1 (x_i >= bound)."""
    coord: int
    side: int
    bound: float
    gamma: float
    margin: float
    name: str

    @property
    def label(self) -> str:
        return f"{self.name} {'<=' if self.side > 0 else '>='} {self.bound:g}"

    def level(self, x: np.ndarray) -> np.ndarray:
        """c(x) >= 0 inside the face (numpy, (B, n) -> (B,))."""
        return self.side * (self.bound - np.asarray(x)[..., self.coord])

    def row(self, f: np.ndarray, G: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(b (B,), a (B, m)) of the row a.u + b >= margin at states x, float64."""
        return -self.side * f[:, self.coord] + self.gamma * self.level(x), -self.side * G[:, self.coord, :]

    def row_enclosure(self, f: Interval, G: Interval, box: Interval) -> tuple[Interval, Interval]:
        """(b, a) enclosures over each box of ``box`` (B, n) from the plant's f, G enclosures."""
        xi = box[:, self.coord]
        c = (Interval.point(np.full(xi.shape, self.bound)) - xi) * float(self.side)
        return f[:, self.coord] * float(-self.side) + c * self.gamma, G[:, self.coord, :] * float(-self.side)


def faces_from_config(system: Any, config: Mapping[str, Any], lo: np.ndarray, hi: np.ndarray) -> tuple[Face, ...]:
    """The faces a card's ``config["faces"]`` asks for, checked: the coordinate exists, some input
    drives it directly (G row not identically 0) and it is not periodic."""
    spec = config.get("faces") or {}
    if not isinstance(spec, Mapping):
        raise FaceError(f"config 'faces' must map a state name to {{'gamma': ..., 'margin': ...}}, got {spec!r}")
    names = list(system.state_names)
    periodic = getattr(system, "periodic", None) or {}
    out: list[Face] = []
    for name, entry in spec.items():
        if name not in names:
            raise FaceError(f"faces: {name!r} is not a state of {system.name} (states: {', '.join(names)})")
        i = names.index(name)
        if i in periodic:
            raise FaceError(f"faces: {name!r} is periodic: it wraps, it has no faces to enforce")
        if not isinstance(entry, Mapping):
            raise FaceError(f"faces[{name!r}] must be {{'gamma': ..., 'margin': ...}}, got {entry!r}")
        gamma, margin = _positive(entry, "gamma", name), _positive(entry, "margin", name)
        if all(sp.sympify(g) == 0 for g in system.G_expr[i, :]):
            raise FaceError(f"faces: no input drives {name!r} directly (its row of G is 0), so the input box "
                            f"cannot enforce its faces; bound it with the barrier instead")
        out += [Face(i, +1, float(hi[i]), gamma, margin, name), Face(i, -1, float(lo[i]), gamma, margin, name)]
    return tuple(out)


def _positive(entry: Mapping[str, Any], key: str, name: str) -> float:
    value = entry.get(key)
    v = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else float("nan")
    if not (np.isfinite(v) and v > 0):
        raise FaceError(f"faces[{name!r}][{key!r}] must be a finite number > 0, got {value!r}")
    return v


def joint_feasibility(rows: list[tuple[Interval, Interval, np.ndarray]], u_lo: np.ndarray, u_hi: np.ndarray
                      ) -> np.ndarray:
    """The bound of ``best_common_input`` alone."""
    return best_common_input(rows, u_lo, u_hi)[0]


def best_common_input(rows: list[tuple[Interval, Interval, np.ndarray]], u_lo: np.ndarray, u_hi: np.ndarray,
                      candidates: list[np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Lower bound of  max over u in U of min over rows of (a.u + b - margin)  per box, where each
    row is (b (B,), a (B, m), margin (B,)) as enclosures: >= 0 proves one input satisfies every
    row at every state of the box. Any fixed u gives a lower bound; the candidates are every
    combination of {u_lo, 0, u_hi} per input (each row alone is best at one of them) and, for
    one input, every crossing of two rows' lower bounds (the optimum of a 1-D max-min).
    ``candidates``: these inputs (each (B, m)) only.  Returns (bound (B,), the input that attains it (B, m))."""
    batch = len(rows[0][0].lo)
    m = len(u_lo)
    per_input = [np.unique(np.clip([u_lo[j], 0.0, u_hi[j]], u_lo[j], u_hi[j])) for j in range(m)]
    grid = np.array(np.meshgrid(*per_input, indexing="ij")).reshape(m, -1).T          # (K, m)
    cands = [np.broadcast_to(u, (batch, m)) for u in grid]
    if m == 1:
        cands += _crossings(rows, float(u_lo[0]), float(u_hi[0]))
    if candidates is not None:
        cands = candidates
    best = np.full(batch, -np.inf)
    best_u = np.zeros((batch, m))
    for u in cands:
        worst = np.full(batch, np.inf)
        for b, a, margin in rows:
            low = np.minimum(a.lo * u, a.hi * u).sum(-1)
            value = np.nextafter(b.lo + low - 4 * np.finfo(float).eps * (np.abs(b.lo) + np.abs(low)) - margin, -np.inf)
            worst = np.minimum(worst, value)
        worst = np.where(np.isnan(worst), -np.inf, worst)
        better = worst > best
        best = np.where(better, worst, best)
        best_u = np.where(better[:, None], u, best_u)
    return best, best_u


def _crossings(rows, lo: float, hi: float) -> list[np.ndarray]:
    """m = 1: where two rows' lower bounds b.lo + min(a.lo u, a.hi u) - margin cross, per side of 0."""
    out = []
    for side in (1.0, -1.0):
        lines = [(np.where(side > 0, a.lo[:, 0], a.hi[:, 0]), b.lo - margin) for b, a, margin in rows]
        for i in range(len(lines)):
            for j in range(i + 1, len(lines)):
                (s1, c1), (s2, c2) = lines[i], lines[j]
                with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                    u = (c2 - c1) / (s1 - s2)
                u = np.where(np.isfinite(u), u, 0.0)
                u = np.clip(u, max(lo, 0.0) if side > 0 else lo, hi if side > 0 else min(hi, 0.0))
                out.append(u[:, None])
    return out
