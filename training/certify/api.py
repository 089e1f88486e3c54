"""``certify``: the one entry point (the command line and the trainer call it)."""
from __future__ import annotations

import os
import platform
import sys
import time
from typing import Any

import numpy as np

from .branch import SearchResult, search
from .certificate import Certificate, ConditionResult
from .conditions import NAMES
from .coverage import constraint_volume, refine_inside
from .problem import CertifyError, Problem, load_problem

MARGINS = (1e-3, 1e-2, 3e-2, 5e-2, 0.1, 0.2, 0.3, 1.0, 3.0)   # eps = 0 never absorbs the float32 rounding; the row
# is in the units of d/dt psi1 + alpha2 psi1 (order 2: the pendulum needs 1 at alpha2 = 40)
GROWTH = 8                             # box budget of a smaller margin: GROWTH x the last certified one
COVERAGE_SAMPLES = 20_000


def certify(model: str | os.PathLike | None, card: Any, *, dt: float | None = None,
            time_limit: float | None = None, margin: float | None = None, max_boxes: int = 2_000_000,
            min_width: float = 2.0 ** -30, progress: bool = False) -> Certificate:
    """Prove (or refute) the barrier in ``model`` (ONNX path; None: beside the card) for ``card``.

    ``dt``: the control period (None: the card's ``config.dt_control``, else 0 = continuous
    time).  ``margin``: the filter margin eps; None tries ``MARGINS`` from the largest (the
    quickest to prove when the filter is feasible with it) down, and keeps the smallest that
    certifies (a larger margin costs feasibility, a smaller one costs boxes: each smaller try
    gets GROWTH times the boxes of the last success; before the first success each try gets
    half of the remaining time and boxes, the last one all of it: a larger margin, when the
    filter is feasible with it, is the quicker to prove).  Runs out of ``time_limit`` seconds or ``max_boxes`` boxes ->
    not certified with the undecided boxes listed."""
    started = time.monotonic()
    deadline = started + (time_limit if time_limit is not None else float("inf"))
    problem = load_problem(model, card, dt)
    _check_relative_degree(problem)
    if margin is not None:
        if not (np.isfinite(margin) and margin >= 0):
            raise CertifyError(f"--margin must be a finite number >= 0, got {margin}")
        margins = [float(margin)]
    else:
        margins = sorted(MARGINS, reverse=True)
    tried: list[dict[str, Any]] = []
    result: SearchResult | None = None
    best: SearchResult | None = None
    budget = max_boxes
    for i, eps in enumerate(margins):
        bar = _progress_bar(eps) if progress else None
        share = 1.0 if best is not None or i == len(margins) - 1 else 0.5   # before a success: halve the limits
        now = time.monotonic()
        until = min(deadline, now + share * (deadline - now)) if np.isfinite(deadline) else deadline
        began = time.monotonic()
        try:
            attempt = search(problem, eps, until, max_boxes=max(1, int(share * budget)), min_width=min_width,
                             progress=bar)
        finally:
            if bar is not None:
                bar.close()
        tried.append({"margin": eps, "certified": attempt.certified, "ended": attempt.stopped or "done",
                      "counterexamples": {k: len(v) for k, v in attempt.counterexamples.items() if v},
                      "boxes": attempt.evaluated, "time_s": round(time.monotonic() - began, 3)})
        if best is None and (result is None or not _refuted(result) or _refuted(attempt)):
            result = attempt        # report the last attempt, or the last one refuted by a counterexample
        if attempt.certified:
            best = result = attempt
            budget = min(max_boxes, GROWTH * attempt.evaluated)   # a smaller margin may cost more, boundedly
        elif best is not None:
            break          # keep the smallest margin that certified: the next smaller one failed
        elif attempt.counterexamples["containment"]:
            break          # no margin changes containment
        if time.monotonic() > deadline:
            break
    assert result is not None
    return _certificate(problem, result, tried, time.monotonic() - started)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("cbfsim")
    except PackageNotFoundError:
        return "unknown"


def _refuted(r: SearchResult) -> bool:
    return any(r.counterexamples.values())


def _check_relative_degree(problem: Problem) -> None:
    """Order 2 needs L_G h == 0: proven structurally -- every state an input drives directly
    (G_ij not identically 0) is a state the network does not read (its first-layer column is 0)."""
    if problem.order != 2:
        return
    s = problem.system
    for i in range(s.n):
        for j in range(s.m):
            if s.G_expr[i, j] != 0 and problem.read_by_network[i]:
                raise CertifyError(f"order 2 needs L_G h == 0, but the network reads {s.state_names[i]!r}, "
                                   f"which input {s.input_names[j]!r} drives directly (relative degree 1)")


def _progress_bar(eps: float):
    if not sys.stderr.isatty():
        return None
    from tqdm import tqdm
    return tqdm(total=1.0, desc=f"certify (margin {eps:g})", unit="vol", bar_format="{l_bar}{bar}| {postfix}")


def _sampled_coverage(problem: Problem) -> float:
    """P(certified set | S & D) from seeded uniform states, float64 reference."""
    from .counterexamples import point_terms
    rng = np.random.default_rng(0)
    x = rng.uniform(problem.lo, problem.hi, size=(COVERAGE_SAMPLES, problem.n))
    t = point_terms(problem, x)
    inside = t["constraint"] >= 0
    return float(np.mean(t["level"][inside] >= 0)) if inside.any() else 0.0


def _backup_safe_coverage(problem: Problem) -> float | None:
    """P(certified set | backup-safe) from the seeded states of ``_sampled_coverage`` whose backup
    rollout (the card's horizon, step and held inputs, as ``cbfsim verify`` labels them) keeps the
    constraint >= 0; float64 reference.  None without a backup-safe state."""
    from training.samplers import ConstraintTools, backup_safe

    from .counterexamples import point_terms
    rng = np.random.default_rng(0)
    x = rng.uniform(problem.lo, problem.hi, size=(COVERAGE_SAMPLES, problem.n))
    x = x[problem.system.constraint(x) >= 0]
    b = problem.backup
    if b is None or not len(x):
        return None
    x = x[backup_safe(ConstraintTools(problem.system), x, problem.u_lo, problem.u_hi, b["horizon"], b["dt"], b["hold"])]
    return float(np.mean(point_terms(problem, x)["level"] >= 0)) if len(x) else None


def _claim(problem: Problem, closed: bool, eps: float) -> str:
    s = problem.system
    where = "{h >= 0}" if problem.order == 1 else "{h >= 0, psi1 >= 0}"
    period = f"held for {problem.dt:g} s (zero-order hold)" if problem.dt > 0 else "applied continuously"
    text = (f"For every sampled state x_k in C = {where} inside the domain D and every input u in "
            f"{' x '.join(f'[{a:g}, {b:g}]' for a, b in zip(problem.u_lo, problem.u_hi))} that the filter may return there "
            f"(its float32 constraint row a.u + b >= {_margin_text(problem, eps)}), {period}, the state stays in C, hence in the "
            f"constraint set of {s.name}, over the whole period; by induction it stays safe while the sampled "
            f"states stay in D.")
    if closed:
        text += " C is closed inside D (h < 0 on every face of D it could reach), so the claim is unconditional."
    else:
        text += " C is not proven closed inside D: the claim holds while the states stay in D."
    return text


def _margin_text(problem: Problem, eps: float) -> str:
    scale = problem.margin.scale
    if scale is None:
        return f"{eps:g}"
    names = problem.system.state_names
    terms = ([f"{scale[0]:g}"] if scale[0] else []) + [f"{w:g} {names[i]}" for i, w in enumerate(scale[1:]) if w]
    return f"{eps:g} ({' + '.join(terms)})"


def _certificate(problem: Problem, r: SearchResult, tried: list[float], wall: float) -> Certificate:
    conditions = {k: ConditionResult(proven=r.certified, counterexamples=r.counterexamples[k]) for k in NAMES}
    if not r.certified:
        for k in NAMES:
            conditions[k].proven = not r.counterexamples[k] and r.failing[k] == 0 and r.stopped in ("", "budget", "time") \
                and r.undecided == 0
    closed = not r.open_faces and bool(np.all(problem.read_by_network | ~problem.splittable))
    coverage = 0.0           # no certificate, no proven safe set
    if r.certified:
        inside = r.volume_safe
        if r.straddling and r.certified:      # refine only a certificate's coverage (it is the one quoted)
            inside += refine_inside(problem, np.concatenate([a for a, _ in r.straddling]),
                                    np.concatenate([b for _, b in r.straddling]))
        coverage = min(1.0, inside / max(constraint_volume(problem), 1e-300))
    reason = ""
    if not r.certified:
        blocking = [k for k in NAMES if r.counterexamples[k]] or [k for k in NAMES if r.failing[k]]
        reason = (f"blocked by {', '.join(blocking) or 'the search limits'}"
                  + (f"; search ended early: {r.stopped}" if r.stopped else ""))
    return Certificate(
        certified=r.certified, claim=_claim(problem, closed, r.eps), system=problem.system.name,
        order=problem.order, dt=problem.dt, margin=r.eps, conditions=conditions,
        boxes={"proven": r.proven, "refuted": r.refuted, "undecided": r.undecided, "evaluated": r.evaluated},
        certified_coverage=coverage, sampled_coverage=_sampled_coverage(problem), closed_in_domain=closed,
        undecided=r.undecided_boxes, rounding=f"{r.rounding} (largest bound met: h {r.rounding_max['h']:.3g}, grad h {r.rounding_max['grad']:.3g})", wall_time_s=round(wall, 3),
        versions={"cbfsim": _version(), "numpy": np.__version__,
                  "python": platform.python_version()},
        model_hash=problem.model_hash, margins_tried=tried, reason=reason,
        backup_safe_coverage=_backup_safe_coverage(problem), margin_scale=problem.margin.scale)
