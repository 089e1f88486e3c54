"""A run's fate, as data: the one table of how a closed-loop run can end, and the counting every
statistic uses.

Every engine (the numpy simulator, the compiled closed loop, campaign shards) classifies each run:

    completed  every control step ran and the constraint was >= 0 at every recorded instant
    left_set   the constraint went below 0 (or was NaN) at some instant; ``step`` is the first
    faulted    the state became non-finite or diverged (some |x_i| > DIVERGENCE_BOUND, which
               also covers what float32 cannot hold), at control instant ``step``; the run
               stopped there and ``state`` is the state it reached

A faulted run counts as a violation in every statistic unless the caller asks for
``faults="separate"``; then it is counted apart, and never as safe. A NaN never compares as safe:
the test is ``not (c >= 0)``, never ``c < 0``.

``RunFate`` is the per-run record (``Trajectory.metadata["fates"]`` holds one dict per run,
``Trajectory.fates`` reads them back). It is a plain frozen dataclass so that more per-run
facts (e.g. "left the certified set", "left the domain D") can be added as fields beside
``fate``; ``to_dict``/``from_dict`` carry every field.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np

from compiler.errors import CbfsimError

COMPLETED, LEFT_SET, FAULTED = "completed", "left_set", "faulted"
FATES: tuple[str, ...] = (COMPLETED, LEFT_SET, FAULTED)      # the one table; order = report order
FAULT_POLICIES: tuple[str, ...] = ("violation", "separate")   # how a statistic counts faulted runs
DIVERGENCE_BOUND = 1e30          # |x_i| above this is a diverged state (float32 max is 3.4e38)


class FateError(CbfsimError, ValueError):
    """A fate or fault policy outside the table (one line naming it)."""


def check_fate(fate: str) -> str:
    if fate not in FATES:
        raise FateError(f"unknown run fate {fate!r}; the fates are {', '.join(FATES)}")
    return fate


def check_policy(policy: str) -> str:
    if policy not in FAULT_POLICIES:
        raise FateError(f"faults must be one of {', '.join(FAULT_POLICIES)}, got {policy!r}")
    return policy


@dataclass(frozen=True)
class RunFate:
    """How one run ended. ``step``/``time``: the first instant below the constraint (left_set)
    or of the fault (faulted), None for completed; ``state``: the state there; ``cause``: the
    fault in words; ``min_constraint``: the smallest constraint value over the instants before
    the fault (None when there is none, or no constraint function)."""

    fate: str
    step: int | None = None
    time: float | None = None
    state: tuple[float, ...] | None = None
    cause: str | None = None
    min_constraint: float | None = None

    def __post_init__(self) -> None:
        check_fate(self.fate)

    @property
    def violation(self) -> bool:
        """Whether this run is unsafe when faults count as violations (the default)."""
        return self.fate != COMPLETED

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        if out["state"] is not None:
            out["state"] = list(out["state"])
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RunFate":
        known = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in known}
        if kwargs.get("state") is not None:
            kwargs["state"] = tuple(float(v) for v in kwargs["state"])
        return cls(**kwargs)


def diverged(X: np.ndarray) -> np.ndarray:
    """(B,) bool: rows of X (B, n) that are not finite or have some |x_i| > DIVERGENCE_BOUND
    (NaN compares false, so it is caught by the same test)."""
    with np.errstate(invalid="ignore"):
        return ~(np.abs(X) <= DIVERGENCE_BOUND).all(axis=1)


def fault_cause(state: np.ndarray, what: str = "state") -> str:
    x = np.asarray(state, dtype=np.float64)
    kind = "non-finite" if not np.isfinite(x).all() else f"diverged (|x| > {DIVERGENCE_BOUND:g})"
    return f"{kind} {what} x = {np.array2string(x, precision=6)}"


def classify(constraint: np.ndarray | None, t: np.ndarray, x: np.ndarray, fault_step: np.ndarray,
             causes: dict[int, str] | None = None) -> list[RunFate]:
    """The fate of each of B runs from the constraint values at the recorded instants
    ``constraint`` (B, T+1) (None: no constraint function, so no run can be judged left_set),
    the times ``t`` (T+1,), the states ``x`` (B, T+1, n) and ``fault_step`` (B,): the instant of
    each run's fault, > T for none. Only the instants before a fault are judged."""
    B = x.shape[0]
    T1 = x.shape[1]
    fates = []
    for b in range(B):
        s = int(fault_step[b])
        before = slice(0, min(s, T1))
        low = None
        first = None
        if constraint is not None and s > 0:
            c = np.asarray(constraint[b, before], dtype=np.float64)
            unsafe = ~(c >= 0.0)                          # NaN is unsafe
            finite = c[np.isfinite(c)]
            low = float(finite.min()) if finite.size else None
            if unsafe.any():
                first = int(np.argmax(unsafe))
        if s < T1:
            state = tuple(float(v) for v in x[b, s])
            fates.append(RunFate(FAULTED, s, float(t[s]), state,
                                 (causes or {}).get(b) or fault_cause(x[b, s]), low))
        elif first is not None:
            fates.append(RunFate(LEFT_SET, first, float(t[first]), tuple(float(v) for v in x[b, first]),
                                 None, low))
        else:
            fates.append(RunFate(COMPLETED, None, None, None, None, low))
    return fates


def constraint_values(system: Any, x: np.ndarray, chunk: int = 1 << 20) -> np.ndarray | None:
    """system.constraint at every recorded state of x (B, T+1, n), evaluated in chunks of rows
    (NaN rows, after a fault, give NaN); None when the system has no constraint function."""
    constraint = getattr(system, "constraint", None)
    if constraint is None:
        return None
    B, T1, n = x.shape
    flat = x.reshape(-1, n)
    out = np.full(B * T1, np.nan)
    ok = np.isfinite(flat).all(axis=1)
    idx = np.flatnonzero(ok)
    with np.errstate(all="ignore"):
        for lo in range(0, idx.size, chunk):
            sel = idx[lo:lo + chunk]
            out[sel] = np.asarray(constraint(flat[sel]), dtype=np.float64).reshape(-1)
    return out.reshape(B, T1)


def count(fates: Iterable[str]) -> dict[str, int]:
    """{fate: number of runs} with every fate of the table present (0 where none)."""
    out = dict.fromkeys(FATES, 0)
    for fate in fates:
        out[check_fate(fate)] += 1
    return out


def violations(counts: dict[str, int], policy: str = "violation") -> int:
    """The runs a statistic counts as unsafe: left_set, plus faulted unless ``policy`` is
    "separate" (then the faulted runs are reported apart, and are in no case safe)."""
    check_policy(policy)
    return counts[LEFT_SET] + (counts[FAULTED] if policy == "violation" else 0)


def judged(counts: dict[str, int], policy: str = "violation") -> int:
    """The runs a violation probability is over: all of them, or without the faulted runs when
    they are reported apart."""
    check_policy(policy)
    return sum(counts.values()) - (counts[FAULTED] if policy == "separate" else 0)


def tally(fates: Iterable[str], policy: str = "violation") -> dict[str, Any]:
    """The one statistic every consumer reports (campaign rows, the robustness study,
    experiment summaries): the count of each fate, the violations under ``policy``, the runs
    they are judged over, and the violation probability (None when no run is judged)."""
    counts = count(fates)
    k, n = violations(counts, policy), judged(counts, policy)
    return {"fates": counts, "fault_policy": policy, "violations": k, "judged_runs": n,
            "probability": k / n if n else None}


def summary_text(counts: dict[str, int]) -> str:
    """The three counts in one phrase, for printed summaries."""
    return ", ".join(f"{counts[f]} {f}" for f in FATES)


def fates_of(records: Sequence[dict[str, Any]] | None) -> list[RunFate]:
    return [RunFate.from_dict(r) for r in records or []]
