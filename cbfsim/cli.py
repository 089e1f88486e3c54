"""cbfsim: one command line for the user's own work.

    cbfsim train --help       train a neural barrier for a named system (training.cli)
    cbfsim verify --help      check a trained model on a dense sample of its domain (training.cli)
    cbfsim compile --help     compile an ONNX barrier into a C++ header (the compiler's cbfc)
    cbfsim simulate --help    run the closed loop with a compiled barrier and write the trajectory and figures
    cbfsim certify --help     prove the barrier conditions (and the sampled-data loop) over the whole domain
    cbfsim cache info|clear   show or empty the build cache of compiled barriers
    cbfsim campaign --help    Monte Carlo campaign over a grid of perturbations, on Dask (cbfsim.campaign)

Exit codes: 0 success, 1 error (one line on stderr naming the problem; --debug shows the
traceback), 2 usage; a command may add its own (see its --help).
"""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Sequence

import numpy as np

from compiler.cli_errors import (EXIT_USAGE, OneLineParser, add_common_flags, check_can_create, finite_float,
                                 nonnegative_float, output_directory, positive_float, positive_int, run, run_parsed)

log = logging.getLogger("cbfsim")
EXIT_NOT_CERTIFIED = 3

SIMULATE_HELP = """Simulate the closed loop of a trained barrier: its model card names the system, the input
bounds and the class-K gains; the ONNX file beside it is compiled (cached) and evaluated through
the C++ header. Writes trajectory.npz, phase_portrait.png and time_series.png to --out."""


def _simulate_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="cbfsim simulate", description=SIMULATE_HELP)
    parser.add_argument("card", type=Path, help="the model card (model.json) of a trained barrier")
    parser.add_argument("--x0", type=finite_float, nargs="+", required=True, help="initial state (n numbers)")
    parser.add_argument("--controller", default=None,
                        help="nominal controller of the system (default: its first one)")
    parser.add_argument("--t-final", type=positive_float, default=10.0, help="seconds to simulate (default 10)")
    parser.add_argument("--dt", type=positive_float, default=None,
                        help="control period in seconds (default: the certificate's period, else 0.01); another "
                             "period than the certified one runs outside the proof (--strict refuses it)")
    parser.add_argument("--substeps", type=positive_int, default=1, help="RK4 steps per control period (default 1)")
    parser.add_argument("--filter", choices=("osqp", "projection", "none"), default=None,
                        help="CBF-QP with OSQP, the exact one-constraint projection, or the nominal loop "
                             "(default: osqp; none for a plant without inputs, m = 0)")
    parser.add_argument("--out", type=Path, default=Path("results") / "simulate", help="output directory")
    parser.add_argument("--strict", action="store_true",
                        help="refuse to run when x0 lies outside the constraint set, the certified set or the "
                             "certified domain, the period differs from the certified one, the card's verification "
                             "failed, or the model has no certificate (default: warn and record)")
    add_common_flags(parser)
    return parser


def simulate_main(argv: Sequence[str]) -> int:
    parser = _simulate_parser()
    args = parser.parse_args(argv)
    return run_parsed(parser.prog, args, lambda: _simulate(parser, args))


def _simulate(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from .barriers import CompiledBarrier
    from .classk import Linear
    from .filters import CBFQP, CBFProjection, HOCBFQP
    from .plots import phase_portrait, time_series
    from .claim import load_claim
    from .preflight import card_findings, certified_margin, load_certificate, report
    from .runtime import compile_barrier
    from .simulate import simulate
    from systems import get_system
    from training.model_card import load_card

    card = load_card(args.card)
    system = get_system(card.system, **card.system_params)
    x0 = np.asarray(args.x0, dtype=np.float64)
    if x0.shape != (system.n,):
        parser.error(f"--x0 needs {system.n} numbers ({', '.join(system.state_names)}), got {x0.size}")
    controller = args.controller or system.nominal_names[0]
    system.nominal(controller)                  # an unknown name fails here, before any work
    barrier = CompiledBarrier(compile_barrier(card.onnx_path(args.card), inputs=system.m, order=card.order))
    gains = card.gains
    certificate = load_certificate(Path(args.card))
    claim = load_claim(Path(args.card), card, system)
    margin = claim.margin if claim.holds else certified_margin(None)   # the certificate holds only with its margin
    faces = claim.faces if claim.holds else ()
    dt = args.dt if args.dt is not None else (claim.dt if claim.holds and claim.dt else 0.01)
    findings = card_findings(card, certificate) + claim.findings + claim.settings_findings(dt, margin) \
        + claim.domain_findings(x0)
    if args.strict:
        report(findings, strict=True, where="")         # refuse before any work (the CLI names itself)
    if args.filter is None:
        args.filter = "osqp" if system.m else "none"
    elif system.m == 0 and args.filter != "none":
        parser.error(f"--filter {args.filter}: {system.name} has no inputs (m = 0), there is nothing to filter; "
                     "use --filter none")
    if faces and args.filter == "projection":
        parser.error("the certificate's face rows need --filter osqp (the projection solves one row)")
    if args.filter == "none":
        filt = None
    elif card.order == 1:
        filt = (CBFQP(system, Linear(gains["gamma"]), margin=margin, faces=faces) if args.filter == "osqp"
                else CBFProjection(system, Linear(gains["gamma"]), margin=margin))
    else:
        filt = HOCBFQP(system, Linear(gains["alpha1"]), Linear(gains["alpha2"]), solver=args.filter, margin=margin,
                       faces=faces)
    with output_directory(args.out):
        traj = simulate(system, barrier, filt, controller, x0, args.t_final, dt, dt / args.substeps,
                        order=card.order, metadata={"card_preflight": [f.to_dict() for f in findings],
                                                    "filter_margin": margin.to_dict()}, strict=args.strict)
        if claim.holds:
            from training.verify import certified_value
            traj.metadata["excursions"] = claim.excursions(
                traj.x, lambda z: certified_value(barrier.lib, system, z, card.order, gains), system.state_names)
        report(findings, strict=False, where="")        # warned once the run stands (errors stay one line)
        traj.save(args.out / "trajectory.npz")
        phase_portrait(args.out / "phase_portrait.png", system, barrier.value, trajectories=traj)
        time_series(args.out / "time_series.png", traj)
    c = system.constraint(traj.x[0])
    log.info(f"{system.name}: {traj.n_steps} steps, min constraint {c.min():.4g}, min h {np.nanmin(traj.h):.4g}, "
             f"slack-active steps {int(np.sum(traj.status == 1))}; wrote {args.out}/")
    for event in traj.metadata.get("excursions", []):
        log.info(f"run {event['run']} {event['kind'].replace('_', ' ')} at control step {event['step']}: "
                 + ", ".join(f"{k} = {v:.6g}" for k, v in event["state"].items()))
    for fault in traj.metadata["faults"]:
        log.info(f"run stopped at control step {fault['step']} (t = {fault['time']:.6g} s): {fault['cause']}")
    return 0


CERTIFY_HELP = """Prove a trained barrier safe, not just sample it: branch and bound over the card's domain
with interval enclosures of the network (the very function the header computes, float32 rounding
included) and of the plant. Proves containment, filter feasibility and the zero-order-hold loop at
the control period; counterexamples are confirmed in float64. Exit status: 0 certified,
3 not certified (counterexamples or undecided boxes listed), 1 error, 2 usage."""


DEFAULT_TIME_LIMIT = 600.0       # = training.certify.api.DEFAULT_TIME_LIMIT (a test keeps the two equal)
DEFAULT_MAX_BOXES = 2_000_000    # = training.certify.api.DEFAULT_MAX_BOXES (a test keeps the two equal)


def _certify_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="cbfsim certify", description=CERTIFY_HELP)
    parser.add_argument("model", type=Path, help="the barrier (ONNX)")
    parser.add_argument("card", type=Path, help="its model card (model.json)")
    parser.add_argument("--dt", type=nonnegative_float, default=None,
                        help="control period in seconds (default: the card's config.dt_control, else 0)")
    parser.add_argument("--time-limit", type=nonnegative_float, default=DEFAULT_TIME_LIMIT,
                        help=f"seconds before giving up with a verdict of not certified (default {DEFAULT_TIME_LIMIT:g}; "
                             "0: at once); a falsifier runs first, so a wrong barrier is refuted in seconds")
    parser.add_argument("--margin", type=nonnegative_float, default=None,
                        help="filter margin eps (default: search between the largest feasible and the smallest "
                             "sampled-safe margin, starting from the card's recorded margin; times the card's "
                             "margin_scale bias + w.x when it has one)")
    parser.add_argument("--max-boxes", type=positive_int, default=DEFAULT_MAX_BOXES,
                        help=f"boxes evaluated before giving up with a verdict of not certified "
                             f"(default {DEFAULT_MAX_BOXES:,})")
    parser.add_argument("--condition", choices=("filter", "boundary"), default="filter",
                        help="filter (default): the filter's row on the whole certified set, with its margin and "
                             "the control period; boundary: the continuous-time boundary (Nagumo) condition of "
                             "the barrier-certificate literature, sup_u L_f h + L_G h.u >= 0 where h = 0, no "
                             "class-K term, no margin (--dt 0 only)")
    parser.add_argument("-o", "--output", type=Path, default=None, help="write the certificate (JSON) here")
    add_common_flags(parser)
    return parser


def certify_main(argv: Sequence[str]) -> int:
    parser = _certify_parser()
    args = parser.parse_args(argv)
    return run_parsed(parser.prog, args, lambda: _certify(args))


def _certify(args: argparse.Namespace) -> int:
    from training.certify import certify

    if args.output is not None:                 # before the search, not after it
        check_can_create(args.output.parent)
    cert = certify(args.model, args.card, dt=args.dt, time_limit=args.time_limit, margin=args.margin,
                   progress=sys.stderr.isatty(), max_boxes=args.max_boxes, condition=args.condition)
    log.info(cert.summary())
    if args.output is not None:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        cert.to_json(args.output)
        log.info(f"  wrote {args.output}")
    return 0 if cert.certified else EXIT_NOT_CERTIFIED


COMMANDS = ("train", "verify", "compile", "simulate", "certify", "cache", "campaign")


def _card_beside(model: Path):
    """(path, card) of the model card next to an ONNX file (STEM.json or model.json naming
    this file, as training writes it), else None."""
    from compiler.errors import CbfsimError
    from training.model_card import load_card
    for candidate in (model.with_suffix(".json"), model.parent / "model.json"):
        try:
            card = load_card(candidate) if candidate.is_file() else None
        except (CbfsimError, OSError, ValueError):
            continue
        if card is not None and card.network.get("onnx") == model.name:
            return candidate, card
    return None


def compile_main(argv: Sequence[str]) -> int:
    """cbfc, knowing the plant when a model card is given (--card) or sits beside the ONNX file:
    --inputs then defaults to the plant's m, and a larger --inputs is refused (a barrier compiled
    for inputs the plant does not have is silently wrong)."""
    parser = OneLineParser(prog="cbfsim compile", add_help=False)
    parser.add_argument("--card", type=Path)
    parser.add_argument("--inputs", "-m", type=positive_int)
    known, rest = parser.parse_known_args(argv)
    return run(parser.prog, lambda: _compile_with_card(parser, known, rest), debug="--debug" in rest)


def _compile_with_card(parser: argparse.ArgumentParser, known: argparse.Namespace, rest: list[str]) -> int:
    from training.model_card import load_card
    if known.card is not None:
        found = known.card, load_card(known.card)
    else:
        model = next((Path(a) for a in rest if a.lower().endswith(".onnx")), None)
        found = _card_beside(model) if model is not None else None
    if found is not None:
        path, card = found
        m = len(card.input_names)
        if known.inputs is not None and known.inputs > m:
            parser.error(f"--inputs {known.inputs} is more than the {m} input(s) "
                         f"({', '.join(card.input_names)}) of system {card.system!r} in {path}")
        known.inputs = m if known.inputs is None else known.inputs
    from compiler.cli import main as cbfc
    return cbfc(rest + ([] if known.inputs is None else ["--inputs", str(known.inputs)]), prog=parser.prog)


CAMPAIGN_HELP = """Run (or resume) a Monte Carlo campaign: the spec's grid of perturbations (plant
parameters, disturbances, noise, delay), each setting's runs sharded and executed on Dask (a
LocalCluster of --workers processes, or --scheduler ADDRESS), merged into OUT/summary.json
(violations with Clopper-Pearson 95% intervals, min h and slack quantiles, the worst runs with
their seeds) and OUT/violation.png. Run it again to resume: finished shards are kept."""


def _campaign_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="cbfsim campaign", description=CAMPAIGN_HELP)
    parser.add_argument("spec", type=Path, help="the campaign spec (JSON; see cbfsim/campaign/spec.py)")
    parser.add_argument("--out", type=Path, default=None, help="output directory (default results/campaign-SPEC)")
    parser.add_argument("--scheduler", default=None, help="address of an existing Dask scheduler (tcp://...)")
    parser.add_argument("--workers", type=positive_int, default=None, help="LocalCluster worker processes (default: cores)")
    parser.add_argument("--in-process", action="store_true", help="run the shards here, without Dask")
    add_common_flags(parser)
    return parser


def campaign_main(argv: Sequence[str]) -> int:
    parser = _campaign_parser()
    args = parser.parse_args(argv)

    def go() -> int:
        from .campaign import run
        out = args.out or Path("results") / f"campaign-{args.spec.stem}"
        summary = run(args.spec, out, scheduler=args.scheduler, workers=args.workers, in_process=args.in_process)
        for row in summary["settings"]:
            lo, hi = row["ci95"]
            log.info(f"  setting {row['setting']:3d}: {row['violations']:6d} / {row['runs']:<7d} leave the set "
                     f"[{lo:.2e}, {hi:.2e}]  {row.get('plant_params') or ''} {row['disturbance']} "
                     f"noise {row['noise']} delay {row['delay']}")
        log.info(f"summary.json and violation.png in {out}/")
        return 0
    return run_parsed(parser.prog, args, go)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    if not argv or argv[0] not in COMMANDS:
        problem = f"unknown command {argv[0]!r}" if argv else "a command is required"
        print(f"cbfsim: error: {problem}; choose from {', '.join(COMMANDS)} (see cbfsim --help)", file=sys.stderr)
        return EXIT_USAGE
    command, rest = argv[0], argv[1:]
    if command == "compile":
        return compile_main(rest)
    if command == "cache":
        from .runtime.cache_command import cache_main
        return cache_main(rest)
    if command == "simulate":
        return simulate_main(rest)
    if command == "certify":
        return certify_main(rest)
    if command == "campaign":
        return campaign_main(rest)
    from training.cli import main as training_main
    return training_main([command, *rest], prog="cbfsim")


if __name__ == "__main__":
    sys.exit(main())
