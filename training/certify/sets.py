"""The barrier certificate's sets (the literature's form): an initial set where h >= 0 is
asked and an unsafe set where h < 0 is asked.

Both are boxes written ``"lo1,lo2,...:hi1,hi2,..."`` (a flag may repeat; the union counts).
Unsafe boxes replace the plant's constraint: the constraint becomes

    c(x) = min over boxes of max_i max(lo_i - x_i, x_i - hi_i)

(> 0 outside every box, < 0 in a box's interior), a sympy expression the plant's enclosure
bounds like any other, so containment (h < 0 where c < 0) asks h < 0 on the open boxes --
and, h being continuous, h <= 0 on their closure.  Without unsafe boxes the unsafe set is
where the plant's own constraint fails.  The initial set is asked on every box of the
search that meets it: the lower bound of h over the box (a superset of its part in the set)
must be >= 0, and a state of the set with h < 0 in float64 refutes.
"""
from __future__ import annotations

import copy
from typing import Any, Sequence

import numpy as np
import sympy as sp

from .problem import CertifyError

Box = tuple[np.ndarray, np.ndarray]


def parse_box(text: str, n: int, flag: str) -> Box:
    """``"lo1,...,lon:hi1,...,hin"`` -> (lo, hi), refused in one line naming ``flag``."""
    parts = str(text).split(":")
    if len(parts) != 2:
        raise CertifyError(f"{flag} {text!r}: expected LO1,...,LO{n}:HI1,...,HI{n} (one colon)")
    try:
        lo, hi = (np.array([float(v) for v in p.replace(" ", "").split(",")]) for p in parts)
    except ValueError:
        raise CertifyError(f"{flag} {text!r}: expected numbers, LO1,...,LO{n}:HI1,...,HI{n}") from None
    return check_box((lo, hi), n, flag)


def check_box(box: Any, n: int, flag: str) -> Box:
    """A (lo, hi) pair of n finite numbers each with lo <= hi."""
    try:
        lo, hi = (np.asarray(v, dtype=float).reshape(-1) for v in box)
    except (TypeError, ValueError):
        raise CertifyError(f"{flag}: expected (lo, hi) with {n} numbers each, got {box!r}") from None
    if lo.size != n or hi.size != n:
        raise CertifyError(f"{flag}: the plant has {n} states, the box has {lo.size} and {hi.size} bounds")
    if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))):
        raise CertifyError(f"{flag}: bounds must be finite numbers")
    if np.any(lo > hi):
        i = int(np.flatnonzero(lo > hi)[0])
        raise CertifyError(f"{flag}: lower bound {lo[i]:g} exceeds upper bound {hi[i]:g} in state {i + 1}")
    return lo, hi


def boxes(items: Sequence[Any] | None, n: int, flag: str, plant_set: Any = None) -> tuple[Box, ...]:
    """The boxes of a repeatable flag: strings (``parse_box``), (lo, hi) pairs, or ``"plant"``
    (the plant's own ``initial_set`` attribute, ((lo_1, hi_1), ..., (lo_n, hi_n)) per state)."""
    out = []
    for item in items or ():
        if isinstance(item, str) and item.strip() == "plant":
            if plant_set is None:
                raise CertifyError(f"{flag} plant: the plant defines no such set (give boxes LO1,...:HI1,...)")
            per_state = np.asarray(plant_set, dtype=float)
            out.append(check_box((per_state[:, 0], per_state[:, 1]), n, flag))
        elif isinstance(item, str):
            out.append(parse_box(item, n, flag))
        else:
            out.append(check_box(item, n, flag))
    return tuple(out)


def describe(items: Sequence[Box]) -> str:
    """The union of boxes as text: [lo, hi] x ... U ..."""
    return " U ".join(" x ".join(f"[{a:g}, {b:g}]" for a, b in zip(lo, hi)) for lo, hi in items)


def with_unsafe_boxes(system: Any, unsafe: Sequence[Box]) -> Any:
    """A copy of ``system`` whose constraint is >= 0 exactly outside the open unsafe boxes."""
    from systems.base import _Field
    x = system.x_sym
    parts = []
    for lo, hi in unsafe:
        terms = [t for i in range(system.n) for t in (sp.Float(lo[i]) - x[i], x[i] - sp.Float(hi[i]))]
        parts.append(_nested(sp.Max, terms))
    expr = _nested(sp.Min, parts)
    out = copy.copy(system)
    out.constraint_expr = expr
    out._h = _Field([expr], x, ())
    return out


def _nested(op: Any, terms: list) -> Any:
    """op(a, op(b, ...)): the interval namespace's min and max take two arguments."""
    out = terms[-1]
    for t in reversed(terms[:-1]):
        out = op(t, out, evaluate=False)
    return out


def meets(items: Sequence[Box], lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """(B,) the boxes [lo, hi] (B, n) that meet the union of ``items``."""
    hit = np.zeros(len(lo), dtype=bool)
    for a, b in items:
        hit |= np.all((lo <= b) & (hi >= a), axis=1)
    return hit


def inside(items: Sequence[Box], x: np.ndarray) -> np.ndarray:
    """(K,) the states x (K, n) in the union of ``items`` (closed boxes)."""
    hit = np.zeros(len(x), dtype=bool)
    for a, b in items:
        hit |= np.all((x >= a) & (x <= b), axis=1)
    return hit


def clip_into(items: Sequence[Box], x: np.ndarray) -> np.ndarray:
    """Each state moved to the nearest point of the first box of ``items`` it is closest to
    (candidates for the initial-set condition: box centres and corners clipped into the set)."""
    best, dist = np.array(x, dtype=float), np.full(len(x), np.inf)
    for a, b in items:
        y = np.clip(x, a, b)
        d = np.sum((y - x) ** 2, axis=1)
        best = np.where((d < dist)[:, None], y, best)
        dist = np.minimum(d, dist)
    return best


def apply_sets(problem: Any, initial_set: Sequence[Any] | None, unsafe_set: Sequence[Any] | None,
               scope: str) -> Any:
    """``problem`` with its initial set, its unsafe set (replacing the plant's constraint) and
    its scope ("closed": closure asked; "in-domain": the claim holds while in D)."""
    from .problem import _plant_uses, plant_enclosure
    n = problem.n
    problem.scope = scope
    problem.initial = boxes(initial_set, n, "--initial-set", getattr(problem.system, "initial_set", None))
    unsafe = boxes(unsafe_set, n, "--unsafe-set")
    if unsafe:
        problem.system = with_unsafe_boxes(problem.system, unsafe)
        problem.plant = plant_enclosure(problem.system)
        problem.splittable = problem.read_by_network | _plant_uses(problem.system)
        problem.unsafe = describe(unsafe)
        problem.backup = None               # the card's backup-safe statistics are about the plant's constraint
    problem.spec = dict(problem.spec, initial_set=[[lo.tolist(), hi.tolist()] for lo, hi in problem.initial],
                        unsafe_set=[[lo.tolist(), hi.tolist()] for lo, hi in unsafe], claim=scope)
    return problem
