"""cbfsim: one command line for the user's own work.

    cbfsim train --help       train a neural barrier for a named system (training.cli)
    cbfsim verify --help      check a trained model on a dense sample of its domain (training.cli)
    cbfsim compile --help     compile an ONNX barrier into a C++ header (the compiler's cbfc)
    cbfsim simulate --help    run the closed loop from one or more starts and write the trajectories and figures
    cbfsim certify --help     prove the barrier conditions (and the sampled-data loop) over the whole domain
    cbfsim cache info|clear   show or empty the build cache of compiled barriers
    cbfsim campaign --help    Monte Carlo campaign over a grid of perturbations, on Dask (cbfsim.campaign)

Exit codes: 0 success, 1 error (one line on stderr naming the problem; --debug shows the
traceback), 2 usage; a command may add its own (see its --help). Every flag, with its default:
docs/cli.md (generated from these parsers: python -m cbfsim.docs_cli).
"""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Sequence

from compiler.cli_errors import (EXIT_USAGE, NumberList, NumberListAppend, OneLineParser, add_common_flags, assignment,
                                 check_can_create, finite_float, float_list, nonnegative_float, output_directory,
                                 positive_float, positive_int, run_parsed)

from compiler.errors import CbfsimError

log = logging.getLogger("cbfsim")
EXIT_NOT_CERTIFIED = 3


class InputFileError(CbfsimError, ValueError):
    """A file of inputs (--x0-file) that cannot be read as what the flag needs (names file and line)."""

SIMULATE_HELP = """Simulate the closed loop of a trained barrier: its model card names the system, the input
bounds and the class-K gains; the ONNX file beside it is compiled (cached) and evaluated through
the C++ header. One run per start (--x0, repeatable, or --x0-file), all in one batch. Writes
trajectory.npz (every run), phase_portrait.png (every run) and time_series.png (the first run;
time_series_K.png for start K > 0, up to 10) to --out."""
MAX_TIME_SERIES = 10


def _simulate_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="cbfsim simulate", description=SIMULATE_HELP)
    parser.add_argument("card", type=Path, help="the model card (model.json) of a trained barrier: it names the "
                        "plant, the input box and the gains; model.onnx sits beside it")
    parser.add_argument("--x0", action=NumberListAppend, type=float_list, metavar="X1,X2,...",
                        help="a start state, n numbers (--x0 -1.8,0.05,0 or --x0 -1.8 0.05 0); repeat the flag "
                             "for several starts (default: none; give --x0 or --x0-file)")
    parser.add_argument("--x0-file", type=Path, default=None,
                        help="a text file of start states, one per line, numbers separated by commas or spaces, "
                             "'#' comments (default: none)")
    parser.add_argument("--controller", default=None,
                        help="name of the plant's nominal controller u = k(x) the filter corrects (default: the "
                             "plant's first one)")
    parser.add_argument("--t-final", type=positive_float, default=10.0, help="seconds to simulate each run")
    parser.add_argument("--dt", type=positive_float, default=None,
                        help="control period in seconds (the input is held over it); another period than the "
                             "certified one runs outside the proof, and --strict refuses it (default: the "
                             "certificate's period, else 0.01)")
    parser.add_argument("--substeps", type=positive_int, default=1,
                        help="RK4 steps per control period; raise it for stiff or fast plants")
    parser.add_argument("--filter", choices=("osqp", "projection", "tube", "none"), default=None,
                        help="osqp: the CBF-QP solved by OSQP; projection: the exact one-constraint projection "
                             "(what the firmware runs); tube: the tube filter for ReLU barriers, whose rows hold "
                             "over the period on every piece it can reach (certified by cbfsim certify "
                             "--condition tube); none: the nominal loop, unfiltered, for comparison "
                             "(default: tube when the certificate is for it, else osqp; none for a plant without "
                             "inputs, m = 0)")
    parser.add_argument("--out", type=Path, default=Path("results") / "simulate",
                        help="directory for trajectory.npz and the figures (created; existing files replaced)")
    parser.add_argument("--strict", action="store_true",
                        help="refuse to run when x0 lies outside the constraint set, the certified set or the "
                             "certified domain, the period differs from the certified one, the margin is smaller, "
                             "the certificate is for another model, the card's verification failed, or the model "
                             "has no certificate (default: warn and record)")
    add_common_flags(parser)
    return parser


def read_starts(path: Path) -> list[list[float]]:
    """The start states of an --x0-file: one per line, numbers separated by commas or spaces."""
    starts = []
    for number, line in enumerate(Path(path).read_text().splitlines(), 1):
        text = line.split("#", 1)[0].replace(",", " ").split()
        if not text:
            continue
        try:
            starts.append([finite_float(word) for word in text])
        except argparse.ArgumentTypeError as exc:
            raise InputFileError(f"{path}, line {number}: {exc}") from None
    if not starts:
        raise InputFileError(f"{path}: no start states (one per line, numbers separated by commas or spaces)")
    return starts


def simulate_main(argv: Sequence[str]) -> int:
    parser = _simulate_parser()
    args = parser.parse_args(argv)
    if args.x0 is None and args.x0_file is None:
        parser.error("give a start state: --x0 X1,X2,... (repeatable) or --x0-file FILE")
    return run_parsed(parser.prog, args, lambda: _simulate(parser, args))


def _simulate(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    # Each module is imported where it is first needed (matplotlib, osqp and the compiler cost
    # seconds of CPU), so a bad card, start or controller is reported without loading them.
    from training.model_card import load_card

    starts = list(args.x0 or []) + (read_starts(args.x0_file) if args.x0_file is not None else [])
    card = load_card(args.card)
    if card.onnx_path(args.card).is_file():     # a file that is no model fails before the plant is built
        from compiler.onnx_graph import load_model
        load_model(card.onnx_path(args.card))
    from systems import get_system
    system = get_system(card.system, **card.system_params)
    for k, start in enumerate(starts):
        if len(start) != system.n:
            where = f"start {k + 1} (of --x0 / --x0-file)" if len(starts) > 1 else "--x0"
            parser.error(f"{where} needs {system.n} numbers ({', '.join(system.state_names)}), got {len(start)}")
    import numpy as np
    X0 = np.asarray(starts, dtype=np.float64)
    controller = args.controller or system.nominal_names[0]
    system.nominal(controller)                  # an unknown name fails here, before any work
    from .barriers import CompiledBarrier
    from .claim import load_claim
    from .preflight import card_findings, certified_margin, load_certificate, report
    from .runtime import compile_barrier
    barrier = CompiledBarrier(compile_barrier(card.onnx_path(args.card), inputs=system.m, order=card.order))
    gains = card.gains
    certificate = load_certificate(Path(args.card))
    claim = load_claim(Path(args.card), card, system)
    margin = claim.margin if claim.holds else certified_margin(None)   # the certificate holds only with its margin
    faces = claim.faces if claim.holds else ()
    dt = args.dt if args.dt is not None else (claim.dt if claim.holds and claim.dt else 0.01)
    if args.filter is None:
        args.filter = ("tube" if claim.holds and claim.condition == "tube" else "osqp") if system.m else "none"
    findings = card_findings(card, certificate) + claim.findings + claim.settings_findings(dt, margin) \
        + claim.domain_findings(X0) + claim.filter_findings(args.filter)
    if args.strict:
        report(findings, strict=True, where="")         # refuse before any work (the CLI names itself)
    if system.m == 0 and args.filter != "none":
        parser.error(f"--filter {args.filter}: {system.name} has no inputs (m = 0), there is nothing to filter; "
                     "use --filter none")
    if faces and args.filter == "projection":
        parser.error("the certificate's face rows need --filter osqp (the projection solves one row)")
    from .classk import Linear
    from .filters import CBFQP, CBFProjection, HOCBFQP
    if args.filter == "none":
        filt = None
    elif args.filter == "tube":
        if card.order != 1:
            parser.error("--filter tube is an order 1 filter; the card's barrier has order 2")
        from .filters import TubeFilter
        try:
            filt = TubeFilter(card.onnx_path(args.card), system, dt, gains["gamma"],
                              domain=(card.domain_lo, card.domain_hi))
        except ValueError as e:
            parser.error(f"--filter tube: {e}")
    elif card.order == 1:
        filt = (CBFQP(system, Linear(gains["gamma"]), margin=margin, faces=faces) if args.filter == "osqp"
                else CBFProjection(system, Linear(gains["gamma"]), margin=margin))
    else:
        filt = HOCBFQP(system, Linear(gains["alpha1"]), Linear(gains["alpha2"]), solver=args.filter, margin=margin,
                       faces=faces)
    from .simulate import simulate_batch
    with output_directory(args.out):
        traj = simulate_batch(system, barrier, filt, controller, X0, args.t_final, dt, dt / args.substeps,
                              order=card.order, metadata={"card_preflight": [f.to_dict() for f in findings],
                                                          "filter_margin": margin.to_dict()}, strict=args.strict)
        if claim.holds:
            from training.verify import certified_value
            traj.metadata["excursions"] = claim.excursions(
                traj.x, lambda z: certified_value(barrier.lib, system, z, card.order, gains), system.state_names)
        report(findings, strict=False, where="")        # warned once the run stands (errors stay one line)
        traj.save(args.out / "trajectory.npz")
        from .plots import phase_portrait, time_series
        runs = "" if len(X0) == 1 else f", {len(X0)} runs"
        phase_portrait(args.out / "phase_portrait.png", system, barrier.value, trajectories=traj, fixed=X0[0],
                       max_runs=len(X0), title=f"{system.name}: {args.filter} filter{runs}")
        for k in range(min(len(X0), MAX_TIME_SERIES)):
            start = ", ".join(f"{name} = {v:g}" for name, v in zip(system.state_names, X0[k]))
            time_series(args.out / ("time_series.png" if k == 0 else f"time_series_{k}.png"), traj, run=k,
                        title=f"{system.name}: the run from {start}")
    c = system.constraint(traj.x.reshape(-1, system.n))
    log.info(f"{system.name}: {len(X0)} run(s) x {traj.n_steps} steps, min constraint {np.nanmin(c):.4g}, "
             f"min h {np.nanmin(traj.h):.4g}, slack-active steps {int(np.sum(traj.status == 1))}; wrote {args.out}/")
    for event in traj.metadata.get("excursions", []):
        log.info(f"run {event['run']} {event['kind'].replace('_', ' ')} at control step {event['step']}: "
                 + ", ".join(f"{k} = {v:.6g}" for k, v in event["state"].items()))
    for fault in traj.metadata["faults"]:
        which = f"run {fault['run']} " if len(X0) > 1 else "run "
        log.info(f"{which}stopped at control step {fault['step']} (t = {fault['time']:.6g} s): {fault['cause']}")
    return 0


CERTIFY_HELP = """Prove a trained barrier safe, not just sample it: branch and bound over the card's domain
with interval enclosures of the network (the very function the header computes, float32 rounding
included) and of the plant. Proves containment, filter feasibility and the zero-order-hold loop at
the control period; counterexamples are confirmed in float64, each written with a one-line replay
command. Any barrier: with no card, --system names the plant and its definition gives the rest
(cbfsim certify h.onnx --system darboux --condition boundary --initial-set plant --claim in-domain).
Exit status: 0 certified,
3 not certified (counterexamples or undecided boxes listed), 1 error, 2 usage."""


DEFAULT_TIME_LIMIT = 600.0       # = training.certify.api.DEFAULT_TIME_LIMIT (a test keeps the two equal)
DEFAULT_MAX_BOXES = 2_000_000    # = training.certify.api.DEFAULT_MAX_BOXES (a test keeps the two equal)
AUTO_POOL_AFTER_S = 2.0          # = training.certify.shards.AUTO_POOL_AFTER_S (a test keeps the two equal)


def workers_count(text: str) -> int | str:
    """``--workers``: a whole number >= 1, or 'auto'."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        return positive_int(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1 or 'auto', got {text!r}") from None


def _certify_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="cbfsim certify", description=CERTIFY_HELP)
    parser.add_argument("model", type=Path, help="the barrier network, an ONNX file (model.onnx; trained by "
                                                 "cbfsim or anywhere else)")
    parser.add_argument("card", type=Path, nargs="?", default=None,
                        help="its model card (model.json): the plant, input box, gains and the domain to prove "
                             "over (default: none; then give the plant with --system)")
    nocard = parser.add_argument_group("a barrier with no card (the plant's definition gives the input box, the "
                                       "constraint and the domain)")
    nocard.add_argument("--system", default=None,
                        help="the plant: a built-in name (darboux, obstacle_avoidance, ...) or an import path "
                             "module:Class of your own (default: none; the card's)")
    nocard.add_argument("--param", type=assignment, action="append", default=[], metavar="NAME=VALUE",
                        help="override one plant parameter, e.g. --param mu=1.5; repeat for more (default: the "
                             "plant's Params)")
    nocard.add_argument("--order", type=int, choices=(1, 2), default=None,
                        help="1: a CBF, 2: a HOCBF (default: 1)")
    nocard.add_argument("--class-k", default=None, metavar="linear:GAMMA",
                        help="the filter's class-K function, linear:GAMMA (order 2: linear:ALPHA1,ALPHA2); needed "
                             "by --condition filter, refused by --condition boundary (default: none)")
    nocard.add_argument("--domain-lo", action=NumberList, type=float_list, metavar="X1,X2,...", default=None,
                        help="lower corner of the domain D to prove over (default: the plant's domain)")
    nocard.add_argument("--domain-hi", action=NumberList, type=float_list, metavar="X1,X2,...", default=None,
                        help="upper corner of D (default: the plant's domain)")
    sets = parser.add_argument_group("barrier-certificate sets and the claim's scope (with or without a card)")
    sets.add_argument("--initial-set", action="append", default=None, metavar="LO1,...:HI1,...",
                      help="a box where h >= 0 is asked, e.g. --initial-set=0,1:1,2 (write = before a negative "
                           "number); 'plant': the plant's own initial_set; repeat for a union (default: none)")
    sets.add_argument("--unsafe-set", action="append", default=None, metavar="LO1,...:HI1,...",
                      help="a box where h < 0 is asked (its interior), replacing the plant's constraint; repeat "
                           "for a union (default: none: unsafe where the plant's constraint fails)")
    sets.add_argument("--claim", choices=("closed", "in-domain"), default="closed",
                      help="closed: the certified set may not leave D through a face nothing keeps the states "
                           "off (closure is proven), so the claim needs no domain; in-domain: closure is not "
                           "asked and the certificate says the claim holds while the states stay in D, the "
                           "literature's claim")
    replay = parser.add_argument_group("replaying a counterexample (the certificate writes the command)")
    replay.add_argument("--replay", action=NumberList, type=float_list, metavar="X1,X2,...", default=None,
                        help="evaluate every condition at this state in float64 and print which is violated, "
                             "instead of certifying; exit 3 when one is, 0 when none is (default: certify)")
    replay.add_argument("--replay-u", action=NumberList, type=float_list, metavar="U1,U2,...", default=None,
                        help="with --replay: the held input of a sampled-data counterexample (default: none)")
    parser.add_argument("--dt", type=nonnegative_float, default=None,
                        help="control period in seconds the zero-order-hold loop is proved for; use the period "
                             "the filter runs at (0: continuous time only; default: the card's config.dt_control, "
                             "else 0)")
    parser.add_argument("--time-limit", type=nonnegative_float, default=DEFAULT_TIME_LIMIT,
                        help="seconds before giving up with the undecided boxes listed (not certified; 0: at "
                             "once); raise it when boxes stay undecided; a falsifier runs first, so a wrong "
                             "barrier is refuted in seconds")
    parser.add_argument("--margin", type=nonnegative_float, default=None,
                        help="filter margin eps to prove the loop with; a larger one asks more of the filter "
                             "(default: search between the largest feasible and the smallest sampled-safe margin, "
                             "starting two thirds up the window estimated from sampled boundary states, or at the "
                             "card's recorded margin when it lies in the window's upper three quarters; times the "
                             "card's margin_scale bias + w.x "
                             "when it has one)")
    parser.add_argument("--max-boxes", type=positive_int, default=DEFAULT_MAX_BOXES,
                        help="boxes evaluated before giving up with a verdict of not certified; raise it when "
                             "boxes stay undecided")
    parser.add_argument("--workers", type=workers_count, default="auto",
                        help="processes on this machine to evaluate the boxes on, or 'auto'; the certificate is the "
                             "same for any count, only the wall time changes (default: auto: this process, then one "
                             f"process per core once the search has spent {AUTO_POOL_AFTER_S:g} s on boxes)")
    parser.add_argument("--scheduler", default=None,
                        help="address of an existing Dask scheduler, tcp://HOST:PORT, to evaluate the boxes on its "
                             "workers instead; the certificate is the same; not with --workers (default: none, the "
                             "boxes are evaluated on this machine)")
    parser.add_argument("--spill-at", type=positive_int, default=None,
                        help="open boxes held in memory before the rest of the queue is spilled to temporary files "
                             "(default: about 1 GiB's worth)")
    parser.add_argument("--condition", choices=("filter", "boundary", "tube"), default="filter",
                        help="filter: the filter's row on the whole certified set, with its margin and the control "
                             "period; boundary: the continuous-time boundary (Nagumo) condition of the "
                             "barrier-certificate literature, sup_u L_f h + L_G h.u >= 0 where h = 0, no class-K "
                             "term, no margin (--dt 0 only); tube: the sampled loop under the tube filter (ReLU "
                             "networks), whose rows hold over the period on every piece it can reach: proves the "
                             "filter always has an input (--dt > 0)")
    parser.add_argument("-o", "--output", type=Path, default=None,
                        help="write the certificate (JSON) here; put it beside the card as STEM.cert.json so "
                             "simulate and the experiments use its margin (default: print the summary only)")
    add_common_flags(parser)
    return parser


def certify_main(argv: Sequence[str]) -> int:
    parser = _certify_parser()
    args = parser.parse_args(argv)
    if args.card is None and args.system is None:
        parser.error("give the model card (model.json), or the plant with --system NAME|module:Class (no card)")
    return run_parsed(parser.prog, args, lambda: _certify(args))


def _certify(args: argparse.Namespace) -> int:
    if args.output is not None:                 # before the search (and its imports), not after it
        check_can_create(args.output.parent)
    if args.card is not None:                   # a bad card fails in a blink, before the certifier's imports
        from training.model_card import load_card
        load_card(args.card)
    from training.certify import certify

    problem_args = dict(system=args.system, order=args.order, class_k=args.class_k, domain_lo=args.domain_lo,
                        domain_hi=args.domain_hi, params=dict(args.param) or None, initial_set=args.initial_set,
                        unsafe_set=args.unsafe_set, scope=args.claim)
    if args.replay is not None:
        return _replay(args, problem_args)
    if args.replay_u is not None:
        raise CertifyUsageError("--replay-u goes with --replay (the state it is held at)")
    cert = certify(args.model, args.card, dt=args.dt, time_limit=args.time_limit, margin=args.margin,
                   progress=sys.stderr.isatty(), max_boxes=args.max_boxes, condition=args.condition,
                   workers=args.workers, scheduler=args.scheduler, spill_at=args.spill_at,
                   **problem_args)
    log.info(cert.summary())
    if args.output is not None:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        cert.to_json(args.output)
        log.info(f"  wrote {args.output}")
    return 0 if cert.certified else EXIT_NOT_CERTIFIED


class CertifyUsageError(CbfsimError, ValueError):
    """A certify flag that goes only with another one."""


def _replay(args: argparse.Namespace, problem_args: dict) -> int:
    """Re-evaluate one state (and held input) in float64 and print each condition's verdict."""
    from training.certify.build import build_problem
    from training.certify.replay import replay
    problem = build_problem(args.model, args.card, dt=args.dt, condition=args.condition, margin=args.margin,
                            **problem_args)
    lines, violated = replay(problem, args.replay, args.replay_u, args.margin or 0.0)
    for line in lines:
        print(line)
    return EXIT_NOT_CERTIFIED if violated else 0


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


COMPILE_HELP = """cbfc, knowing the plant: with a model card (--card, or STEM.json / model.json beside the ONNX
file naming it) --inputs defaults to the plant's m, and a larger --inputs is refused (a barrier
compiled for inputs the plant does not have is silently wrong). Writes DIR/NAME.hpp and
DIR/NAME_abi.cpp and prints the cost report."""


def _compile_parser() -> argparse.ArgumentParser:
    from compiler.cli import build_parser
    parser = build_parser("cbfsim compile", inputs_help="number of control inputs m, the columns of G(x); a "
                          "larger one than the plant's is refused (default: the plant's m, from the model card)")
    parser.description = COMPILE_HELP
    parser.add_argument("--card", type=Path,
                        help="the model card (model.json) that names the plant (default: STEM.json or "
                             "model.json beside MODEL.onnx, when it names that file)")
    return parser


def compile_main(argv: Sequence[str]) -> int:
    parser = _compile_parser()
    args = parser.parse_args(argv)
    return run_parsed(parser.prog, args, lambda: _compile_with_card(parser, args))


def _compile_with_card(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from compiler.cli import compile_parsed
    from training.model_card import load_card
    if args.card is not None:
        found = args.card, load_card(args.card)
    else:
        found = _card_beside(Path(args.model)) if args.model.lower().endswith(".onnx") else None
    if found is not None:
        path, card = found
        m = len(card.input_names)
        if args.inputs is not None and args.inputs > m:
            parser.error(f"--inputs {args.inputs} is more than the {m} input(s) "
                         f"({', '.join(card.input_names)}) of system {card.system!r} in {path}")
        args.inputs = m if args.inputs is None else args.inputs
    if args.inputs is None:
        parser.error("--inputs is required when no model card is given (--card) or found beside the model")
    return compile_parsed(parser, args)


CAMPAIGN_HELP = """Run (or resume) a Monte Carlo campaign: the spec's grid of perturbations (plant
parameters, disturbances, noise, delay), each setting's runs sharded and executed on Dask (a
LocalCluster of --workers processes, or --scheduler ADDRESS), merged into OUT/summary.json
(each run's fate: completed, left_set or faulted; violations -- left the set or faulted -- with
Clopper-Pearson 95% intervals, min h and slack quantiles, the worst runs with their seeds) and
OUT/violation.png. Run it again to resume: finished shards are kept, damaged ones run again.
One campaign at a time owns OUT (a lock); the spec is checked whole before anything runs."""


def _campaign_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="cbfsim campaign", description=CAMPAIGN_HELP)
    parser.add_argument("spec", type=Path, help="the campaign spec (JSON; see cbfsim/campaign/spec.py and "
                                                "examples/campaign_vdp.json)")
    parser.add_argument("--out", type=Path, default=None,
                        help="output directory; run again with the same one to resume (default: "
                             "results/campaign-SPEC)")
    parser.add_argument("--scheduler", default=None,
                        help="address of an existing Dask scheduler, tcp://HOST:PORT, to run on a cluster "
                             "(default: a LocalCluster on this machine)")
    parser.add_argument("--workers", type=positive_int, default=None,
                        help="LocalCluster worker processes; lower it to leave cores free (default: the cores)")
    parser.add_argument("--in-process", action="store_true",
                        help="run the shards here, one after another, without Dask (debugging, small specs)")
    add_common_flags(parser)
    return parser


def campaign_main(argv: Sequence[str]) -> int:
    parser = _campaign_parser()
    args = parser.parse_args(argv)

    def go() -> int:
        from .campaign import run
        out = args.out or Path("results") / f"campaign-{args.spec.stem}"
        summary = run(args.spec, out, scheduler=args.scheduler, workers=args.workers, in_process=args.in_process)
        from .fate import summary_text
        for row in summary["settings"]:
            label = f"{row.get('plant_params') or ''} {row['disturbance']} noise {row['noise']} delay {row['delay']}"
            if not row["runs"]:
                log.info(f"  setting {row['setting']:3d}: no shard yet  {label}")
                continue
            ci = "[{:.2e}, {:.2e}]".format(*row["ci95"]) if row["ci95"] else "[no judged runs]"
            apart = " (faulted runs reported apart)" if row["fault_policy"] == "separate" else ""
            log.info(f"  setting {row['setting']:3d}: {row['violations']:6d} / {row['judged_runs']:<7d} violations "
                     f"{ci}{apart}; {summary_text(row['fates'])}  {label}")
        log.info(f"all settings: {summary_text(summary['fates'])}; merged {summary['shards_merged']} of "
                 f"{summary['shards_total']} shards")
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
