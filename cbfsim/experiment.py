"""The closed-loop experiment behind ``experiments/*.py``: a shipped (or retrained) barrier,
compiled and loaded, filtering a nominal controller from many random initial states.

One ``ExperimentSpec`` per script says what differs (model, nominal controller, horizon,
showcase states, plotted coordinates); ``run_experiment`` does the rest the same way for
every system: batched filtered runs through the compiled header with the exact projection,
the same initial states under the nominal controller alone, one showcase trajectory with
the OSQP filter, the verifier on the model, figures and ``summary.json``.
"""
from __future__ import annotations

import json
import logging
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from compiler.cli_errors import (OneLineParser, add_common_flags, output_directory, positive_float, positive_int,
                                 nonnegative_int, run_parsed)

from .barriers import CompiledBarrier
from .classk import Linear
from .fate import FAULTED, summary_text, tally
from .filters import CBFQP, CBFProjection, FilterStatus, HOCBFQP
from .preflight import (PreflightWarning, card_findings, certificate_entry, certified_margin, initial_state_findings,
                        load_certificate, report as report_findings)
from .claim import load_claim
from .runtime import compile_barrier
from .simulate import simulate, simulate_batch
from .trajectory import RunStatus, Trajectory

log = logging.getLogger("cbfsim.experiment")


@dataclass(frozen=True)
class ExperimentSpec:
    name: str                           # results/<name>/, experiments/models/<name>.onnx|json
    title: str                          # the system in words, for figure titles ("Van der Pol")
    controller: str                     # the system's nominal controller
    t_final: float                      # seconds per run
    dt_control: float                   # control period (zero-order hold)
    showcase: Sequence[Sequence[float]]  # initial states drawn in the phase portrait (first: OSQP showcase)
    dims: tuple[int, int] = (0, 1)      # state coordinates of the phase portrait
    runs: int = 200                     # random initial states in {h >= 0}
    dt_int: float | None = None         # RK4 step (default: dt_control)
    portrait_fixed: Sequence[float] | None = None   # values of the other states in the portrait grid
    portrait_limits: Sequence[Sequence[float]] | None = None
    verify_samples: int = 200_000
    # maps uniform draws of the training box (B, n) to candidate starts before the certified-set
    # rejection, e.g. turns each car to face the obstacle; None: the uniform draws themselves
    starts: Callable[[np.ndarray], np.ndarray] | None = None
    models_dir: Path = field(default=Path(__file__).resolve().parent.parent / "experiments" / "models")


def _filters(card, system, order: int, margin: float = 0.0, faces: tuple = ()):
    """(batched filter: exact projection, showcase filter: OSQP), from the card's class-K gains,
    each enforcing its constraint row with ``margin`` (the certificate's filter margin eps: the
    certificate holds only for a filter that enforces exactly that margin) and the certificate's
    face rows (then both are OSQP: the projection is for one row)."""
    gains = card.gains
    if order == 1:
        alpha = Linear(gains["gamma"])
        if faces:
            return CBFQP(system, alpha, margin=margin, faces=faces), CBFQP(system, alpha, margin=margin, faces=faces)
        return CBFProjection(system, alpha, margin=margin), CBFQP(system, alpha, margin=margin)
    alpha1, alpha2 = Linear(gains["alpha1"]), Linear(gains["alpha2"])
    return (HOCBFQP(system, alpha1, alpha2, solver="osqp" if faces else "projection", margin=margin, faces=faces),
            HOCBFQP(system, alpha1, alpha2, solver="osqp", margin=margin, faces=faces))


def _initial_states(certified: Callable[[np.ndarray], np.ndarray], lo: np.ndarray, hi: np.ndarray, count: int,
                    seed: int, starts: Callable[[np.ndarray], np.ndarray] | None = None) -> np.ndarray:
    """``count`` uniform states of the training box (mapped by ``starts``, when given) inside the
    certified set {certified >= 0}, the set the filter keeps invariant (rejection sampling)."""
    rng = np.random.default_rng(seed)
    found: list[np.ndarray] = []
    total = 0
    for _ in range(200):
        x = rng.uniform(lo, hi, size=(max(4 * count, 1000), lo.size))
        if starts is not None:
            x = np.asarray(starts(x), dtype=np.float64)
        keep = x[certified(x) >= 0.0]
        found.append(keep)
        total += len(keep)
        if total >= count:
            return np.concatenate(found)[:count]
    raise RuntimeError(f"could not draw {count} states of the certified set from the training box ({total} found)")


def _constraint_stats(system, traj: Trajectory) -> tuple[float, int]:
    """Minimum of the constraint function over every run and recorded step (-inf when a run
    faulted: its state diverged, so no NaN ever reaches a comparison), and the runs that
    violated: left the set or faulted (cbfsim/fate.py; ``_fate_counts`` has each fate). (+inf
    when nothing was recorded.)"""
    fates = traj.fates
    lows = [f.min_constraint for f in fates if f.min_constraint is not None]
    low = -np.inf if any(f.fate == FAULTED for f in fates) else (min(lows) if lows else np.inf)
    return float(low), tally(f.fate for f in fates)["violations"]


def _fate_counts(*trajectories: Trajectory) -> dict[str, int]:
    """The count of each fate over the runs of ``trajectories``."""
    return tally(f.fate for traj in trajectories for f in traj.fates)["fates"]


def nominal_field(system: Any, controller: str) -> Callable[[np.ndarray], np.ndarray]:
    """x -> f(x) + G(x) u_nom(x), the input clipped to its box: the flow the filter corrects."""
    nominal = system.nominal(controller)

    def field(x: np.ndarray) -> np.ndarray:
        u = np.clip(nominal(x), system.u_min, system.u_max)
        return system.f(x) + np.einsum("bnm,bm->bn", system.G(x), u)
    return field


def shipped_model(spec: ExperimentSpec, models_dir: Path | None = None):
    """(card, system, onnx path) of the shipped model."""
    from systems import get_system
    from training.model_card import load_card
    directory = Path(models_dir or spec.models_dir)
    card_path = directory / f"{spec.name}.json"
    if not card_path.is_file():
        raise FileNotFoundError(f"{card_path}: no model card; train one with --retrain")
    card = load_card(card_path)
    system = get_system(card.system, **card.system_params)
    return card, system, card.onnx_path(card_path), card_path


def retrain(spec: ExperimentSpec, out_dir: Path, progress: bool = True) -> Path:
    """Train the preset barrier anew into out_dir; returns the directory holding <name>.onnx/.json."""
    from training.presets import preset, ship
    from training.trainer import train_barrier
    run_dir = out_dir / "training"
    train_barrier(preset(spec.name), run_dir, progress=progress, overwrite=True)
    ship(run_dir, out_dir / "model", spec.name)
    return out_dir / "model"


def run_experiment(spec: ExperimentSpec, out_dir: Path, runs: int | None = None, t_final: float | None = None,
                   models_dir: Path | None = None, verify_samples: int | None = None, seed: int = 0,
                   strict: bool = False) -> dict[str, Any]:
    """Run the experiment, write figures and summary.json to out_dir, return the summary.
    ``strict``: refuse to run (UnsafeRunError) when the preflight finds a problem."""
    from training.verify import certified_value, verify
    started = time.perf_counter()
    out_dir.mkdir(parents=True, exist_ok=True)
    card, system, onnx_path, card_path = shipped_model(spec, models_dir)
    order = card.order
    lib = compile_barrier(onnx_path, inputs=system.m, order=order, name=spec.name)
    barrier = CompiledBarrier(lib)
    certificate = load_certificate(card_path)
    claim = load_claim(card_path, card, system, onnx_path)
    margin = claim.margin if claim.holds else certified_margin(None)
    dt_control = claim.dt if claim.holds and claim.dt else spec.dt_control   # the period the proof is for
    batch_filter, showcase_filter = _filters(card, system, order, margin, claim.faces if claim.holds else ())
    lo, hi = np.asarray(card.domain_lo), np.asarray(card.domain_hi)
    runs = spec.runs if runs is None else runs
    t_final = spec.t_final if t_final is None else t_final

    # {h >= 0}, or {h >= 0, psi1 >= 0} for order 2
    certified = lambda x: certified_value(lib, system, x, order, card.gains)  # noqa: E731
    X0 = _initial_states(certified, lo, hi, runs, seed, spec.starts)
    showcase_x0 = np.asarray(spec.showcase, dtype=np.float64)
    findings = card_findings(card, certificate) + claim.findings + initial_state_findings(
        system.constraint(showcase_x0), certified(showcase_x0)) + claim.domain_findings(showcase_x0)
    preflight = report_findings(findings, strict, where=f"experiment {spec.name}")
    common = dict(t_final=t_final, dt_control=dt_control, dt_int=spec.dt_int)
    filtered = simulate_batch(system, barrier, batch_filter, spec.controller, X0, **common)
    nominal = simulate_batch(system, barrier, None, spec.controller, X0, order=order, **common)
    showcase = simulate(system, barrier, showcase_filter, spec.controller, showcase_x0[0], **common)
    showcase_more = simulate_batch(system, barrier, batch_filter, spec.controller, showcase_x0, **common)
    showcase_nominal = simulate_batch(system, barrier, None, spec.controller, showcase_x0, order=order, **common)
    report = verify(lib, card_path, samples=spec.verify_samples if verify_samples is None else verify_samples)

    excursions = claim.excursions(filtered.x, certified, system.state_names) if claim.holds else []
    min_f, viol_f = _constraint_stats(system, filtered)
    min_n, viol_n = _constraint_stats(system, nominal)
    min_s, viol_s = _constraint_stats(system, showcase)
    summary: dict[str, Any] = {
        "experiment": spec.name, "system": system.name, "order": order,
        "controller": spec.controller, "model": str(onnx_path.name),
        "runs": int(runs), "steps": int(filtered.n_steps), "dt_control": dt_control, "t_final": t_final,
        # runs of the filtered batch that left the certified set or the certified domain: first step and state
        # (None: no certificate holds, so there is no certified set or domain to leave)
        "runs_left_certified_set": len({e["run"] for e in excursions if e["kind"] == "left_certified_set"})
        if claim.holds else None,
        "runs_left_domain": len({e["run"] for e in excursions if e["kind"] == "left_domain"}) if claim.holds else None,
        "excursions": excursions[:50],
        "face_rows": [face.label for face in claim.faces] if claim.holds else [],
        "min_constraint_filtered": min(min_f, min_s), "min_constraint_nominal": min_n,
        "violations_filtered": viol_f + viol_s, "violations_nominal": viol_n,
        "qp_infeasible_steps": int(np.sum(filtered.status == FilterStatus.SLACK_ACTIVE)
                                   + np.sum(showcase.status == FilterStatus.SLACK_ACTIVE)),
        "solver_errors": int(np.sum(filtered.status == FilterStatus.SOLVER_ERROR)
                             + np.sum(showcase.status == FilterStatus.SOLVER_ERROR)),
        "min_h_filtered": float(np.nanmin(filtered.h)),
        "stopped_runs": int(np.sum(filtered.run_status != RunStatus.COMPLETED)),
        "showcase": {"x0": showcase_x0[0].tolist(), "filter": "OSQP", "min_constraint": min_s,
                     "max_abs_diff_vs_projection": float(np.max(np.abs(showcase.x[0] - showcase_more.x[0])))},
        "verify": {"condition_failures": report.condition_failures,
                   "containment_failures": report.containment_failures,
                   # the certified set's share of the constraint set ({h >= 0, psi1 >= 0} for order 2)
                   "coverage": report.coverage_safe_set, "coverage_h_nonnegative": report.coverage,
                   "states": report.n_states, "method": report.method},
        "certificate": certificate_entry(certificate),
        "filter_margin": margin.eps,     # eps of the rows a + b.u >= eps (the certificate's, when certified)
        "filter_margin_scale": margin.scale,   # [bias, w]: the rows get eps (bias + w.x); None: constant
        "preflight": preflight,
        "header_workspace_bytes": lib.workspace_bytes,
        "timing_s": {k: v for k, v in filtered.metadata["timing"].items() if k.endswith("_s")},
    }

    from .plots import phase_portrait, time_series    # matplotlib: only once there is something to draw
    fig_dir = out_dir
    value = lambda x: barrier.value(x)  # noqa: E731
    faces = claim.faces if claim.holds else ()
    in_claim = (lambda x: np.minimum(certified(x), np.min([f.level(x) for f in faces], axis=0))) if faces \
        else certified                              # the certified set: the faces the filter enforces cut it too
    boundary = in_claim if order == 2 or faces else None   # smaller than {h >= 0}: drawn too
    flow = nominal_field(system, spec.controller)
    portrait = dict(dims=spec.dims, fixed=spec.portrait_fixed, limits=spec.portrait_limits, certified=boundary,
                    vector_field=flow)
    phase_portrait(fig_dir / "phase_portrait.png", system, value, trajectories=showcase_more,
                   nominal=showcase_nominal, title=f"{spec.title}: filtered vs nominal", **portrait)
    phase_portrait(fig_dir / "phase_portrait_random.png", system, value, trajectories=filtered[:40], nominal=None,
                   title=f"{spec.title}\n{min(runs, 40)} filtered runs from random "
                         f"{'certified states' if claim.holds else 'starts in {h >= 0}'}",
                   **portrait)
    x0_text = ", ".join(f"{name} = {v:g}" for name, v in zip(system.state_names, showcase_x0[0]))
    time_series(fig_dir / "showcase_time_series.png", showcase,
                title=f"{spec.title}\none run from {x0_text} (OSQP filter)")
    showcase.save(fig_dir / "showcase.npz")
    # each run's fate (completed, left_set, faulted: cbfsim/fate.py); a faulted run is a violation
    summary["fates_filtered"], summary["fates_nominal"] = _fate_counts(filtered, showcase), _fate_counts(nominal)
    summary["wall_time_s"] = time.perf_counter() - started
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return summary


def _certificate_text(entry: dict[str, Any] | None) -> str:
    if entry is None:
        return "none (sampled verification only)"
    verdict = "certified" if entry.get("certified") else "NOT certified"
    coverage = entry.get("certified_coverage")
    return verdict + (f", {coverage:.1%} of the constraint set" if coverage is not None else "")


def print_summary(summary: dict[str, Any]) -> None:
    rows = [
        ("runs x steps", f"{summary['runs']} x {summary['steps']}"),
        ("min constraint, filtered", f"{summary['min_constraint_filtered']:.4g}"),
        ("min constraint, nominal", f"{summary['min_constraint_nominal']:.4g}"),
        ("runs leaving the set, filtered", summary["violations_filtered"]),
        ("runs leaving the set, nominal", summary["violations_nominal"]),
        ("runs leaving the certified set / domain",
         "n/a (no certificate holds)" if summary.get("runs_left_certified_set") is None
         else f"{summary['runs_left_certified_set']} / {summary['runs_left_domain']}"),
        ("QP infeasible steps (slack active)", summary["qp_infeasible_steps"]),
        ("verifier: condition failures", summary["verify"]["condition_failures"]),
        ("verifier: containment failures", summary["verify"]["containment_failures"]),
        ("verifier: coverage of the constraint set", f"{summary['verify']['coverage']:.1%}"),
        ("fates, filtered (violations: left_set + faulted)", summary_text(summary["fates_filtered"])),
        ("fates, nominal", summary_text(summary["fates_nominal"])),
        ("certificate", _certificate_text(summary.get("certificate"))),
        ("wall time", f"{summary['wall_time_s']:.1f} s"),
    ]
    width = max(len(k) for k, _ in rows)
    print(f"\n{summary['experiment']} ({summary['system']}, order {summary['order']})")
    for key, value in rows:
        print(f"  {key:<{width}}  {value}")
    for finding in summary.get("preflight", []):
        print(f"  warning: {finding['message']}")


def main(spec: ExperimentSpec, argv: Sequence[str] | None = None) -> int:
    """The command line shared by the experiment scripts. Exit codes: 0 safe and verified,
    1 a violation or verifier failure, or an error (one line naming it), 2 usage."""
    parser = OneLineParser(description=f"Closed-loop experiment '{spec.name}' with its compiled neural barrier.")
    parser.add_argument("--out", type=Path, default=None,
                        help=f"output directory (default results/{spec.name}/, with --fast results/{spec.name}-fast/)")
    parser.add_argument("--runs", type=positive_int, default=None, help=f"random initial states (default {spec.runs})")
    parser.add_argument("--t-final", type=positive_float, default=None,
                        help=f"seconds per run (default {spec.t_final})")
    parser.add_argument("--fast", action="store_true", help="a quick check: 20 runs, a short horizon, fewer samples")
    parser.add_argument("--retrain", action="store_true", help="train the barrier anew instead of the shipped one")
    parser.add_argument("--seed", type=nonnegative_int, default=0, help="seed of the random initial states")
    parser.add_argument("--strict", action="store_true",
                        help="refuse to run when the model is not verified or certified, or a showcase state lies "
                             "outside the certified set (default: warn and record it in summary.json)")
    add_common_flags(parser)
    args = parser.parse_args(argv)
    if args.out is None:
        args.out = Path("results") / (f"{spec.name}-fast" if args.fast else spec.name)
    return run_parsed(parser.prog, args, lambda: _run_command(spec, args))


def _run_command(spec: ExperimentSpec, args: Any) -> int:
    with output_directory(args.out):
        models_dir = retrain(spec, args.out) if args.retrain else None
        runs, t_final, samples = args.runs, args.t_final, None
        if args.fast:
            runs, t_final, samples = runs or 20, t_final or min(spec.t_final, 2.0), 20_000
        with warnings.catch_warnings():     # print_summary lists the preflight findings once
            warnings.simplefilter("ignore", PreflightWarning)
            summary = run_experiment(spec, args.out, runs=runs, t_final=t_final, models_dir=models_dir,
                                     verify_samples=samples, seed=args.seed, strict=args.strict)
    print_summary(summary)
    log.info(f"  figures and summary.json in {args.out}/")
    ok = summary["violations_filtered"] == 0 and summary["verify"]["condition_failures"] == 0 \
        and summary["verify"]["containment_failures"] == 0
    return 0 if ok else 1
