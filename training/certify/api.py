"""``certify``: the one entry point (the command line and the trainer call it)."""
from __future__ import annotations

import copy
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
from .margins import MarginWalls, first_margin, recorded_margin, sampled_walls
from .build import build_problem
from .problem import CertifyError, Problem

DEFAULT_TIME_LIMIT = 600.0        # seconds: `cbfsim certify` without --time-limit (a verdict, never a hang)
RECORDED_SHARE = 0.8              # of the time for the first try when it is informed (recorded, or between the
#                                   sampled walls: likely to certify); later tries take half of what is left
WALLS_SHARE = 0.1                 # of the time for estimating the margin's walls (margins.sampled_walls)
FALSIFY_SHARE = 0.1               # of each attempt's time for the falsifier before the search (at least
FALSIFY_MIN_S = 15.0              # this many seconds, or the attempt's whole time when that is less)
COVERAGE_SAMPLES = 20_000
DEFAULT_MAX_BOXES = 2_000_000     # `cbfsim certify --max-boxes` default (a test keeps the CLI's copy equal)


def certify(model: Any, card: Any = None, *, dt: float | None = None,
            time_limit: float | None = DEFAULT_TIME_LIMIT, margin: float | None = None,
            max_boxes: int = DEFAULT_MAX_BOXES, min_width: float = 2.0 ** -30, progress: bool = False,
            start_margin: float | None = None, condition: str = "filter", workers: int | str = 1,
            scheduler: str | None = None, spill_at: int | None = None, **problem_args: Any) -> Certificate:
    """Prove (or refute) the barrier in ``model`` (ONNX path; None: beside the card) for ``card``.

    ``dt``: the control period (None: the card's ``config.dt_control``, else 0 = continuous
    time).  ``margin``: the filter margin eps; None searches between the two walls: a margin
    too large for the filter to be feasible (a feasibility counterexample) and one too small
    for the held input (a sampled-data counterexample).  Both walls are first estimated from
    sampled boundary states (``margins.py``).  It starts from ``start_margin``, else the margin
    recorded in the card (``config.filter_margin``) or in the certificate beside it when that
    lies high enough between the estimates, else two thirds of the way up
    (``margins.first_margin``); a feasibility failure moves it down, a sampled-data failure up
    (by bisection), and the first margin that certifies is kept.  Each
    attempt first runs the falsifier (``falsify.py``), which refutes a wrong barrier in seconds
    where the bounds alone would split for minutes.  Runs out of ``time_limit`` seconds (None:
    no limit) or ``max_boxes`` boxes -> not certified with the undecided boxes listed.

    ``condition="boundary"``: the continuous-time boundary (Nagumo) condition instead of the
    filter's (``conditions.py``): containment, and sup_u L_f h + L_G h . u >= 0 on {h = 0}, with
    no class-K term and no margin; continuous time only (``dt`` None or 0), order 1.

    No card: ``system=`` (a name, ``module:Class`` or a ControlAffineSystem) with ``order``,
    ``class_k`` ("linear:GAMMA"), ``domain_lo``/``domain_hi`` (default: the plant's) and
    ``params``; ``model`` may then be a torch module (``certify_module``).  With or without a
    card: ``initial_set``/``unsafe_set`` (boxes, ``sets.py``), ``scope`` ("closed" or
    "in-domain") and ``command`` (the command line the replay commands extend; see
    ``build_problem``).

    ``workers``: processes the search's boxes are evaluated on (1: this one; "auto", the
    command line's default: this one, then one per core once the search has spent
    ``shards.AUTO_POOL_AFTER_S`` seconds on boxes here); ``scheduler``: the
    address of an existing Dask cluster to evaluate them on instead (``shards.py``).  Neither
    changes the certificate, only the wall time (``workers`` > 1 or "auto" spawns processes: a script that
    calls this needs the ``if __name__ == "__main__":`` guard).  ``spill_at``: open boxes held in memory before
    the rest is spilled to temporary files (None: about 1 GiB's worth; ``queue.py``)."""
    started = time.monotonic()
    deadline = started + (time_limit if time_limit is not None else float("inf"))
    if not (isinstance(max_boxes, int) and not isinstance(max_boxes, bool) and max_boxes >= 1):
        raise CertifyError(f"--max-boxes must be a whole number >= 1, got {max_boxes!r}")
    if spill_at is not None and not (isinstance(spill_at, int) and not isinstance(spill_at, bool) and spill_at >= 2):
        raise CertifyError(f"--spill-at must be a whole number >= 2, got {spill_at!r}")
    problem = build_problem(model, card, dt=dt, condition=condition, margin=margin, **problem_args)
    if condition in ("boundary", "tube"):
        margin = 0.0
    if margin is not None:
        if not (np.isfinite(margin) and margin >= 0):
            raise CertifyError(f"--margin must be a finite number >= 0, got {margin}")
    from .shards import make_runner
    runner = make_runner(problem, workers, scheduler)
    try:
        return _search_margins(problem, card, margin, start_margin, deadline, started, max_boxes, min_width, progress,
                               runner, spill_at)
    finally:
        runner.close()


def _search_margins(problem: Problem, card: Any, margin: float | None, start_margin: float | None, deadline: float,
                    started: float, max_boxes: int, min_width: float, progress: bool, runner: Any,
                    spill_at: int | None) -> Certificate:
    """The margin search (``MarginWalls``), one branch and bound per margin tried."""
    from .falsify import boundary_states
    starts = boundary_states(problem, np.random.default_rng(0))     # the falsifier's boundary states, found once
    now = time.monotonic()
    walls = _margin_walls(problem, card, margin, start_margin, starts, now + WALLS_SHARE * (deadline - now))
    tried: list[dict[str, Any]] = []
    result: SearchResult | None = None
    best: SearchResult | None = None
    budget = max_boxes
    refutations: dict[str, list[dict[str, Any]]] = {}      # condition -> the latest confirmed counterexamples
    walk: dict[str, Any] | None = None                     # the latest region walk's summary
    eps = walls.next()
    while eps is not None:
        share = 1.0 if walls.fixed else (RECORDED_SHARE if walls.tries == 1 and walls.recorded else 0.5)
        now = time.monotonic()
        until = min(deadline, now + share * (deadline - now)) if np.isfinite(deadline) else deadline
        began = time.monotonic()
        span = until - began if np.isfinite(until) else 2 * FALSIFY_MIN_S
        attempt, walked = _falsified(problem, eps, began + max(FALSIFY_SHARE * span, min(FALSIFY_MIN_S, span)), starts)
        walk = walked or walk
        if attempt is None:
            bar = _progress_bar(eps) if progress else None
            try:
                attempt = search(problem, eps, until, max_boxes=max(1, budget), min_width=min_width, progress=bar,
                                 runner=runner, spill_at=spill_at)
            finally:
                if bar is not None:
                    bar.close()
        tried.append({"margin": eps, "certified": attempt.certified, "ended": attempt.stopped or "done",
                      "counterexamples": {k: len(v) for k, v in attempt.counterexamples.items() if v},
                      "boxes": attempt.evaluated, "time_s": round(time.monotonic() - began, 3)})
        if result is None or not _refuted(result) or _refuted(attempt):
            result = attempt        # report the last attempt, or the last one refuted by a counterexample
        for name, found in attempt.counterexamples.items():
            if found:
                refutations[name] = [dict(c, margin=eps) for c in found]
        if attempt.certified:
            best = result = attempt
            break
        if attempt.counterexamples["containment"] or attempt.counterexamples["closure"] \
                or attempt.counterexamples["initial"] \
                or time.monotonic() > deadline:
            break                   # no margin changes containment or a leak through an open face
        walls.record(eps, attempt)
        eps = walls.next()
    assert result is not None
    if best is None:            # each wall's own evidence: feasibility from above, sampled data from below
        for name, found in refutations.items():
            result.counterexamples[name] = found
    cert = _certificate(problem, best or result, tried, time.monotonic() - started, walls, runner)
    cert.region_walk = walk
    return cert


def certify_module(module: Any, system: Any, *, onnx_path: str | os.PathLike | None = None,
                   **kwargs: Any) -> Certificate:
    """``certify`` for a torch ``nn.Module`` (e.g. an ``nn.Sequential`` from any library) and a
    plant, with no card: the module is read by the compiler's own torch frontend into the IR
    (weights rounded to float32, as the header stores them).  ``onnx_path``: export it there
    first (``training.network.export_onnx``) and certify that file, so the counterexamples'
    replay commands can name it.  ``kwargs``: ``certify``'s (``order``, ``class_k``,
    ``condition``, ``domain_lo``, ``initial_set``, ``unsafe_set``, ``scope``, ...)."""
    model: Any = module
    if onnx_path is not None:
        from .problem import load_network
        from training.network import export_onnx
        n = load_network(module)[0].input_dim
        model = export_onnx(copy.deepcopy(module), onnx_path, n)      # export_onnx casts in place
    return certify(model, None, system=system, **kwargs)


def _margin_walls(problem: Problem, card: Any, margin: float | None, given: float | None,
                  starts: np.ndarray, until: float) -> MarginWalls:
    """The margin search's walls and first margin (``margins.py``): ``margin`` alone when fixed;
    else ``given``, the recorded margin or one between the walls estimated from ``starts``
    (by ``until``)."""
    if margin is not None:
        return MarginWalls(float(margin), fixed=True, recorded=True)
    low, high = sampled_walls(problem, starts, until)
    recorded = recorded_margin(problem, card)
    start = float(given) if given is not None else first_margin(low, high, recorded, held=problem.dt > 0)
    informed = given is not None or recorded == start or low < start < high
    if low < start < high:
        return MarginWalls(start, recorded=informed, low=low, high=high)
    return MarginWalls(start, recorded=informed)


def _falsified(problem: Problem, eps: float, until: float, starts: np.ndarray
               ) -> tuple[SearchResult | None, dict[str, Any] | None]:
    """(a refuted SearchResult when the falsifier finds a confirmed violation, else None; the
    region walk's summary, where it ran)."""
    from .branch import _record
    from .falsify import falsify
    found = falsify(problem, eps, until, starts=starts)
    if not found:
        return None, found.walk
    res = SearchResult(eps, refuted=1, stopped="counterexample", touched=np.zeros((problem.n, 2), dtype=bool))
    for name, items in found.items.items():
        for x, value, u in items:
            _record(res, name, x, value, problem, u=u)
    return res, found.walk


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("cbfsim")
    except PackageNotFoundError:
        return "unknown"


def _refuted(r: SearchResult) -> bool:
    return any(r.counterexamples.values())


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


def _backup_safe(problem: Problem) -> tuple[float | None, float | None]:
    """(P(certified set | backup-safe), P(backup-safe | S & D)) from the seeded states of
    ``_sampled_coverage`` whose backup rollout (the card's horizon, step and held inputs, as
    ``cbfsim verify`` labels them) keeps the constraint >= 0; float64 reference.  The backup-safe
    states are the trainer's estimate of the viable set.  None without a backup-safe state."""
    from training.samplers import ConstraintTools, backup_safe

    from .counterexamples import set_level
    rng = np.random.default_rng(0)
    x = rng.uniform(problem.lo, problem.hi, size=(COVERAGE_SAMPLES, problem.n))
    x = x[problem.system.constraint(x) >= 0]
    b = problem.backup
    if b is None or not len(x):
        return None, None
    with np.errstate(over="ignore", invalid="ignore"):     # a diverging rollout (Darboux) is not safe, quietly
        safe = backup_safe(ConstraintTools(problem.system), x, problem.u_lo, problem.u_hi, b["horizon"], b["dt"],
                           b["hold"], constant=b["input"])
    if not safe.any():
        return None, 0.0
    return float(np.mean(set_level(problem, x[safe]) >= 0)), float(np.mean(safe))


def domain_coordinates(problem: Problem, r: SearchResult) -> list[dict[str, Any]]:
    """Why the states cannot leave the proven region, coordinate by coordinate: ``irrelevant``
    (neither h, f, G nor the constraint reads it: every value is covered), ``periodic`` (it
    wraps; the boxes meet across the seam), ``enforced`` (the filter keeps its two faces as
    rows), ``barrier`` (no box that may meet the set touches its faces: h < 0 there), or
    ``open`` (the set reaches a face nothing enforces: the claim holds only while inside D)."""
    s = problem.system
    out = []
    for i, name in enumerate(s.state_names):
        entry: dict[str, Any] = {"name": name, "lo": float(problem.lo[i]), "hi": float(problem.hi[i])}
        faces = [f for f in problem.faces if f.coord == i]
        if not problem.splittable[i]:
            entry.update(case="irrelevant", why="neither h, f, G nor the constraint reads it: every value is covered")
            entry["lo"], entry["hi"] = -np.inf, np.inf
        elif i in problem.periodic:
            entry.update(case="periodic", why=f"wraps with period {problem.periodic[i]:g}: the boxes meet across the seam")
        elif faces:
            f = faces[0]
            entry.update(case="enforced", why=f"the filter enforces {problem.lo[i]:g} <= {name} <= {problem.hi[i]:g} "
                                               f"as rows (gamma {f.gamma:g}, margin {f.margin:g})")
        elif r.certified and not r.touched[i].any():
            entry.update(case="barrier", why="h < 0 on both faces: the certified set does not reach them")
        else:
            sides = [b for b, t in zip((f"{name} = {problem.lo[i]:g}", f"{name} = {problem.hi[i]:g}"), r.touched[i]) if t]
            entry.update(case="open", why=("the certified set reaches " + " and ".join(sides)) if r.certified and sides
                         else "not proven (no certificate)")
        out.append(entry)
    return out


def _claim(problem: Problem, coordinates: list[dict[str, Any]], eps: float) -> str:
    return _core_claim(problem, coordinates, eps) + _sets_claim(problem, coordinates)


def _sets_claim(problem: Problem, coordinates: list[dict[str, Any]]) -> str:
    """The barrier-certificate sets and the scope, as sentences appended to the claim."""
    text = ""
    if problem.unsafe:
        text += f" The unsafe set is the open boxes {problem.unsafe} (given, replacing the plant's constraint)."
    if problem.initial:
        from .sets import describe
        text += f" h >= 0 on the initial set {describe(problem.initial)}."
    if problem.scope == "in-domain":
        open_ = [c["name"] for c in coordinates if c["case"] == "open"]
        text += (" Scope in-domain (--claim in-domain): closure through the faces of D was not asked (the "
                 "barrier-certificate literature's claim, which holds while the states stay in D)." if open_ else
                 " Scope in-domain (--claim in-domain): closure was not asked, but the certified set reaches no "
                 "open face of D, so it is closed anyway.")
    return text


def _core_claim(problem: Problem, coordinates: list[dict[str, Any]], eps: float) -> str:
    s = problem.system
    if problem.condition == "boundary":
        return _boundary_claim(problem, coordinates)
    where = "{h >= 0}" if problem.order == 1 else "{h >= 0, psi1 >= 0}"
    faces = [c for c in coordinates if c["case"] == "enforced"]
    if faces:
        where = where[:-1] + ", " + ", ".join(f"{c['lo']:g} <= {c['name']} <= {c['hi']:g}" for c in faces) + "}"
    period = f"held for {problem.dt:g} s (zero-order hold)" if problem.dt > 0 else "applied continuously"
    rows = "its float32 constraint row a.u + b >= " + _margin_text(problem, eps)
    if problem.condition == "tube":
        rows = ("the tube filter's rows: L_f h + L_G h.u >= -gamma h(x_k) on every linear piece of h over the "
                "period's reachable box; it always has such an input there")
    if problem.faces:
        rows += " and its face rows"
    text = (f"For every sampled state x_k in C = {where} and every input u in "
            f"{' x '.join(f'[{a:g}, {b:g}]' for a, b in zip(problem.u_lo, problem.u_hi))} that the filter may return there "
            f"({rows}), {period}, the state stays in C, hence in the constraint set of {s.name}, over the whole period.")
    open_ = [c["name"] for c in coordinates if c["case"] == "open"]
    if open_:
        text += (f" C is not proven closed inside the domain D in {', '.join(open_)}: the claim holds only while the "
                 f"sampled states stay in D.")
    else:
        text += " C is closed: " + "; ".join(f"{c['name']}: {c['case']}" for c in coordinates) + \
                ". By induction the claim holds for all time, with no condition on the domain."
    return text


def _boundary_claim(problem: Problem, coordinates: list[dict[str, Any]]) -> str:
    """The boundary (Nagumo) condition's claim: what the literature's verifiers prove."""
    s = problem.system
    inputs = (" x ".join(f"[{a:g}, {b:g}]" for a, b in zip(problem.u_lo, problem.u_hi))) if problem.m else "{} (no input)"
    text = (f"Continuous time, boundary (Nagumo) condition: at every state of D with h(x) = 0, "
            f"sup over u in {inputs} of L_f h + L_G h.u >= 0 (no class-K term, no margin, no sampled data), "
            f"and h < 0 wherever the constraint of {s.name} fails, so C = {{h >= 0}} lies in the constraint set.")
    if problem.relu_like:
        text += (" The network is piecewise linear: at its ridges one input serves every adjacent piece's "
                 "gradient (the Clarke form of the nonsmooth condition).")
    open_ = [c["name"] for c in coordinates if c["case"] == "open"]
    if open_:
        text += f" C is not proven closed inside D in {', '.join(open_)}: the claim holds only while the states stay in D."
    return text


def _margin_text(problem: Problem, eps: float) -> str:
    scale = problem.margin.scale
    if scale is None:
        return f"{eps:g}"
    names = problem.system.state_names
    terms = ([f"{scale[0]:g}"] if scale[0] else []) + [f"{w:g} {names[i]}" for i, w in enumerate(scale[1:]) if w]
    return f"{eps:g} ({' + '.join(terms)})"


def _certificate(problem: Problem, r: SearchResult, tried: list[dict[str, Any]], wall: float,
                 walls: MarginWalls | None = None, runner: Any = None) -> Certificate:
    """The verdict of ``r`` (found in ``wall`` seconds) with its report: the claim, the coverage
    volumes and the backup-safe share, timed apart (``report_time_s``): they describe the
    proven set, they prove nothing."""
    report_started = time.monotonic()
    from .replay import replay_command
    names = [k for k in NAMES if k != "initial" or problem.initial]
    for k in names:
        for entry in r.counterexamples[k]:
            entry["replay"] = replay_command(problem, dict(entry, margin=entry.get("margin", r.eps)))
    conditions = {k: ConditionResult(proven=r.certified, counterexamples=r.counterexamples[k]) for k in names}
    if not r.certified:
        for k in names:
            conditions[k].proven = not r.counterexamples[k] and r.failing[k] == 0 and r.stopped in ("", "budget", "time") \
                and r.undecided == 0
    coordinates = domain_coordinates(problem, r)
    backup_share, backup_fraction = _backup_safe(problem)
    closed = r.certified and all(c["case"] != "open" for c in coordinates)
    coverage = 0.0           # no certificate, no proven safe set
    if r.certified:
        inside = r.volume_safe
        if r.straddling and r.certified:      # refine only a certificate's coverage (it is the one quoted)
            inside += refine_inside(problem, np.concatenate([a for a, _ in r.straddling]),
                                    np.concatenate([b for _, b in r.straddling]), runner=runner)
        coverage = min(1.0, inside / max(constraint_volume(problem), 1e-300))
    reason = ""
    if not r.certified:
        blocking = [k for k in names if r.counterexamples[k]] or [k for k in names if r.failing[k]]
        reason = (f"blocked by {', '.join(blocking) or 'the search limits'}"
                  + (f"; search ended early: {r.stopped}" if r.stopped else ""))
        if walls is not None and walls.describe():
            reason += f"; margins: {walls.describe()}" + (f" ({walls.crossed})" if walls.crossed else "")
    claim = _claim(problem, coordinates, r.eps)
    sampled_coverage = _sampled_coverage(problem)
    return Certificate(
        certified=r.certified, claim=claim, system=problem.system.name,
        order=problem.order, dt=problem.dt, margin=r.eps, conditions=conditions,
        boxes={"proven": r.proven, "refuted": r.refuted, "undecided": r.undecided, "evaluated": r.evaluated},
        certified_coverage=coverage, sampled_coverage=sampled_coverage, closed_in_domain=closed,
        undecided=r.undecided_boxes, rounding=f"{r.rounding} (largest bound met: h {r.rounding_max['h']:.3g}, grad h {r.rounding_max['grad']:.3g})", wall_time_s=round(wall, 3),
        versions={"cbfsim": _version(), "numpy": np.__version__,
                  "python": platform.python_version()},
        model_hash=problem.model_hash, margins_tried=tried, reason=reason, condition=problem.condition,
        backup_safe_coverage=backup_share, margin_scale=problem.margin.scale,
        backup_safe_fraction=backup_fraction,
        sound_backup_share=(coverage / backup_fraction) if backup_fraction else None,
        coordinates=coordinates, faces={f.name: {"gamma": f.gamma, "margin": f.margin} for f in problem.faces},
        scope=problem.scope, problem=dict(problem.spec), command=problem.command,
        report_time_s=round(time.monotonic() - report_started, 3))
