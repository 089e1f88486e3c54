"""Which filter margins the certifier tries, and in what order.

The margin eps sits between two walls: above ``high`` the filter is infeasible somewhere in the
set (sup_u a.u + b < eps sigma(x)), below ``low`` a held input the filter may return leaves the
set within one period.  Each branch and bound at one margin costs most of the time limit, so
the first margin matters most: the point robot at 10 ms certified in about 55-60 s anywhere
between 0.16 and 0.2, but the card's recorded 0.02 took 80% of the time and ended undecided, and
the search never got back to that window in 300 s.

``sampled_walls`` estimates both walls from states on the set's boundary before any box is
split, in float64 with no interval arithmetic (``counterexamples.point_terms`` and the
falsifier's held-period rollouts):
* high = min over the states of (b + sup_u a.u) / sigma(x): at any larger margin one of
  them is infeasible, a real violation (the barrier's row alone: face rows only lower it);
* low = the largest margin (bisection on [0, high], coarse rollouts) at which a state has an
  admissible held input whose rollout leaves the set, confirmed in the fine rollout the
  counterexamples are (``counterexamples.RK4_STEPS``): below it the loop is unsafe there.
They are estimates (sampled states; the largest violating margin only to the bisection's step)
and are not listed as counterexamples: the report calls a wall they set "estimated from samples"
(``MarginWalls.describe``).  ``first_margin`` starts high inside them, and ``MarginWalls``
bisects between them.
"""
from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from . import counterexamples as ce
from .branch import SearchResult
from .problem import Problem

START_MARGIN = 0.05               # the first margin tried when neither the card nor a certificate records one
MARGIN_FLOOR, MARGIN_CEILING = 1e-4, 1e3
WALLS_MET = 1.3                   # the search stops when the two walls are this close (ratio)
WALL_BISECTIONS = 8               # steps of the low wall's bisection on [0, high] (high / 256)
RECORDED_WINDOW = 0.25            # a recorded margin goes first only above this share of the walls' window
START_SHARE = 2.0 / 3.0           # else the first margin lies this share of the way from low to high


def sampled_walls(problem: Problem, states: np.ndarray, until: float = float("inf")) -> tuple[float, float]:
    """(low, high): estimates of the margin's two walls from ``states`` (the falsifier's states
    on and just inside the set's boundary); (0, inf) where they say nothing (no state in the
    set; no period for low).  The bisection for low stops at ``until`` (time.monotonic) with
    the largest margin it saw a state leave the set at."""
    x = np.asarray(states, dtype=float)
    x = x[ce.set_level(problem, x) >= 0] if len(x) else x
    if not len(x):
        return 0.0, float("inf")
    best = ce.best_row(problem, ce.point_terms(problem, x))
    sigma = np.broadcast_to(np.asarray(problem.margin.with_eps(1.0).at(x), dtype=float), (len(x),))
    scaled = sigma > 0
    high = float(np.min(best[scaled] / sigma[scaled])) if scaled.any() else float("inf")
    if problem.dt == 0 or not np.isfinite(high) or high <= 0:
        return 0.0, high
    from .falsify import period_low
    low, above = 0.0, high
    leaving = period_low(problem, x, 0.0)[0] < 0          # the states that leave at margin low
    if not leaving.any():
        return 0.0, high
    for _ in range(WALL_BISECTIONS):
        if time.monotonic() > until:
            break
        mid = 0.5 * (low + above)
        at_mid = period_low(problem, x, mid)[0] < 0
        if at_mid.any():
            low, leaving = mid, at_mid
        else:
            above = mid
    return _confirmed(problem, x, low, leaving), high


def _confirmed(problem: Problem, x: np.ndarray, low: float, leaving: np.ndarray) -> float:
    """``low`` halved until a state leaves the set there in the fine rollout the counterexamples
    are confirmed with (``counterexamples.RK4_STEPS``), 0 after WALL_BISECTIONS halvings: the
    coarse bisection's wall is then one a real run crosses.  ``leaving``: the states whose
    coarse rollout leaves the set at ``low``."""
    from .falsify import period_low
    for _ in range(WALL_BISECTIONS):
        if low <= 0:
            break
        if leaving.any() and np.any(period_low(problem, x[leaving], low, steps=ce.RK4_STEPS)[0] < 0):
            return low
        low *= 0.5
        leaving = period_low(problem, x, low)[0] < 0
    return 0.0


def first_margin(low: float, high: float, recorded: float | None, held: bool = True) -> float:
    """The first margin to try: the recorded one (card or earlier certificate) when it lies in
    the upper three quarters of the estimated walls' window, else START_SHARE of the way from
    low to high; the recorded one, else START_MARGIN, when the walls cross or say nothing.
    Continuous time (``held`` False) has no sampled side: the smaller the margin the easier, so
    the recorded one when it is below high, else the smaller of START_MARGIN and high / 4.

    Why high in the window for a held input: the bounds pay more on the sampled side (a
    curvature enclosure, second order) than on feasibility (a gradient enclosure), so the margins
    that certify fastest sit high in it.  Point robot at 10 ms (estimated window 0.012-0.255;
    2 workers): 0.16 certified in 60 s, 0.18 in 50 s, 0.2 in 55 s, 0.24 refuted infeasible.
    The shipped barriers' recorded margins (bicycle, Dubins, pendulum, Van der Pol) lie
    0.45-0.7 of the way up."""
    if not low < high or not np.isfinite(high):
        return recorded if recorded is not None else START_MARGIN
    if not held:
        return recorded if recorded is not None and recorded < high else min(START_MARGIN, 0.25 * high)
    if recorded is not None and low + RECORDED_WINDOW * (high - low) <= recorded < high:
        return recorded
    return low + START_SHARE * (high - low)


def recorded_margin(problem: Problem, card: Any) -> float | None:
    """The card's ``config.filter_margin``, else the margin of a certificate beside the card
    for the same model and period; None when neither records one."""
    if card is None:
        return None
    from training.model_card import load_card
    recorded = load_card(card).config.get("filter_margin")
    if isinstance(recorded, (int, float)) and not isinstance(recorded, bool) and recorded > 0:
        return float(recorded)
    if isinstance(card, (str, os.PathLike)):
        import json
        from pathlib import Path
        path = Path(card).with_suffix(".cert.json")
        try:
            old = json.loads(path.read_text())
        except (OSError, ValueError):
            old = None
        if isinstance(old, dict) and old.get("model_hash") == problem.model_hash and old.get("dt") == problem.dt \
                and isinstance(old.get("margin"), (int, float)) and old["margin"] > 0:
            return float(old["margin"])
    return None


class MarginWalls:
    """The margin search between its two walls: ``high``, the smallest margin the filter is
    refuted infeasible with (larger ones are infeasible too), and ``low``, the largest one a
    held input is refuted with (smaller ones leave the set too).  A try that ends undecided
    moves the wall its failing boxes point at (feasibility: down; sampled data: up), but only a
    counterexample refutes a margin: the report keeps the two apart (``describe``).  ``low``
    and ``high`` may start at the sampled estimates (``sampled_walls``): they bound where the
    search goes, and a search that ends at one says so ("estimated from samples")."""

    def __init__(self, start: float, fixed: bool = False, recorded: bool = False,
                 low: float = 0.0, high: float = float("inf")):
        self.start, self.fixed, self.recorded = start, fixed, recorded
        self.low, self.high = low, high                            # where the search goes on between
        self.estimated = (low, high)                               # the sampled estimates it started from
        self.refuted_low, self.refuted_high = 0.0, float("inf")    # what counterexamples refuted
        self.undecided: list[float] = []
        self.tries = 0
        self.crossed = ""

    def record(self, eps: float, attempt: SearchResult) -> None:
        ce_ = attempt.counterexamples
        down = bool(ce_["feasibility"]) or (not ce_["sampled_data"] and attempt.failing["feasibility"]
                                            > attempt.failing["sampled_data"])
        if down:
            self.high = min(self.high, eps)
        else:
            self.low = max(self.low, eps)
        if ce_["feasibility"]:
            self.refuted_high = min(self.refuted_high, eps)
        if ce_["sampled_data"]:
            self.refuted_low = max(self.refuted_low, eps)
        if not ce_["feasibility"] and not ce_["sampled_data"] and not attempt.certified:
            self.undecided.append(eps)
        if ce_["feasibility"] and ce_["sampled_data"]:
            self.crossed = f"at margin {eps:g} both the filter's feasibility and the held input fail"

    def next(self) -> float | None:
        if self.tries == 0:
            self.tries = 1
            return self.start
        if self.fixed or self.crossed or self.low >= self.high:
            return None
        if self.high < np.inf and self.low > 0:
            if self.high / self.low <= WALLS_MET:
                self.crossed = (f"the walls met: {self._wall(self.high, self.refuted_high, 'infeasible')} at "
                                f"{self.high:g}, {self._wall(self.low, self.refuted_low, 'sampled-unsafe')} at "
                                f"{self.low:g}")
                return None
            eps = float(np.sqrt(self.low * self.high))
        elif self.high < np.inf:
            eps = self.high / 4
        else:
            eps = self.low * 4
        if not MARGIN_FLOOR <= eps <= MARGIN_CEILING:
            return None
        self.tries += 1
        return eps

    def _wall(self, at: float, refuted: float, what: str) -> str:
        if at == refuted:
            return what
        return "estimated from samples" if at in self.estimated else "undecided"

    def describe(self) -> str:
        """The refuted margins and the undecided ones: a margin the search ran out of time or
        boxes at is never called infeasible or sampled-unsafe."""
        parts = []
        if self.refuted_high < np.inf:
            parts.append(f"infeasible from {self.refuted_high:g}")
        if self.refuted_low > 0:
            parts.append(f"sampled-unsafe up to {self.refuted_low:g}")
        if self.undecided:
            parts.append("undecided at " + ", ".join(f"{e:g}" for e in sorted(self.undecided)))
        return "; ".join(parts)
