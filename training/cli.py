"""Command line: ``python -m training.cli {train,verify,presets} ...`` (see --help of each).

Every TrainConfig field is a ``train`` flag (``--w-condition``, ``--label-lost`` ...).

Exit status: 0 when the barrier passes (trainer check and compiled verifier clean), 1 when
failures remain (the outputs are still written, with the failures in model.json, and a
diagnosis is printed) or on an error (one line naming it: a bad configuration, system, card
or file), 2 on usage errors (a bad flag or value), 4 when a ``--quick`` smoke run passed
(its budgets are too small to trust or ship the result).
"""
from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import logging
import re
import sys
from pathlib import Path
from typing import Sequence

from compiler.cli_errors import (NumberList, OneLineParser, add_common_flags, check_can_create, assignment, finite_float,
                                 float_list, int_list, positive_float, positive_int, nonnegative_float, nonnegative_int,
                                 run_parsed)

log = logging.getLogger("training")

QUICK = dict(n_uniform=5000, n_boundary=2000, steps_per_round=100, warm_start_steps=200, rounds=5,
             check_samples=20_000, check_boundary=5000, verify_samples=20_000, max_time=60.0,
             distil_steps=300, distil_rounds=2, distil_time_limit=5.0)


SMOKE_PASSED = 4
# TrainConfig fields with a hand-written flag above the generated ones (field -> flag dest)
_EXPLICIT = {"system": "system", "params": "param", "hidden": "widths", "activation": "activation",
             "order": "order", "gamma": "gamma", "alpha1": "alpha1", "alpha2": "alpha2",
             "input_mask": "input_mask", "domain_lo": "domain_lo", "domain_hi": "domain_hi",
             "u_min": "u_min", "u_max": "u_max", "rounds": "rounds", "max_time": "max_time", "seed": "seed",
             "dt_control": "dt"}


def _field_comments() -> dict[str, str]:
    """TrainConfig's trailing field comments: the help of a field training/flag_help.py lacks."""
    from .config import TrainConfig
    found = re.findall(r"^\s+(\w+):[^#\n]*#\s*(.+)$", inspect.getsource(TrainConfig), flags=re.M)
    return {name: text.strip() for name, text in found}


def field_default(name: str) -> str:
    """TrainConfig's default of field ``name`` as --help shows it (a run without --preset or
    --config starts from these)."""
    from .config import TrainConfig
    f = next(f for f in dataclasses.fields(TrainConfig) if f.name == name)
    value = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default  # type: ignore[misc]
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, list):
        return ",".join(str(v) for v in value) if value else "none"
    return "none" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def _default(name: str, meaning: str | None = None) -> str:
    """" (default: X)" for a TrainConfig field, ``meaning`` replacing X where None means "the system's"."""
    return f" (default: {meaning or field_default(name)})"


def _add_config_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per TrainConfig field that has no hand-written flag, typed from the field; the
    help from training/flag_help.py, else the field's comment."""
    from .config import TrainConfig
    from .flag_help import FIELD_HELP
    comments = _field_comments()
    group = parser.add_argument_group("every other TrainConfig field (docs/training.md explains them)")
    for f in dataclasses.fields(TrainConfig):
        if f.name in _EXPLICIT:
            continue
        flag, kind = "--" + f.name.replace("_", "-"), str(f.type)
        text = FIELD_HELP.get(f.name) or comments.get(f.name, f.name.replace("_", " "))
        help_text = text if "default" in text.lower() else text + _default(f.name)
        if kind == "bool":
            group.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=help_text)
        elif kind.startswith("list[int]"):
            group.add_argument(flag, action=NumberList, type=int_list, metavar="I,J,...", help=help_text)
        elif kind.startswith("list[float]"):
            group.add_argument(flag, action=NumberList, type=float_list, metavar="X1,X2,...", help=help_text)
        elif kind.startswith("str"):
            group.add_argument(flag, metavar="NAME" if f.name.endswith("activation") else "MODULE:FUNCTION",
                               help=help_text)
        elif kind.startswith("dict"):                   # faces: NAME:GAMMA:MARGIN per enforced state
            group.add_argument(flag, action=FaceSpecs, type=face_spec, nargs="+", metavar="NAME:GAMMA:MARGIN",
                               help=help_text)
        elif kind in ("int", "float", "float | None"):
            number = "INT" if kind == "int" else "FLOAT"
            group.add_argument(flag, type=int if kind == "int" else finite_float, metavar=number, help=help_text)
        else:
            raise TypeError(f"TrainConfig.{f.name}: no flag for type {kind}")


def face_spec(text: str) -> tuple[str, dict[str, float]]:
    """``theta_dot:10:1`` -> ("theta_dot", {"gamma": 10.0, "margin": 1.0}) (checked against the
    plant with the rest of the config)."""
    parts = text.split(":")
    if len(parts) != 3 or not parts[0]:
        raise argparse.ArgumentTypeError(f"expected NAME:GAMMA:MARGIN, e.g. theta_dot:10:1, got {text!r}")
    return parts[0], {"gamma": finite_float(parts[1]), "margin": finite_float(parts[2])}


class FaceSpecs(argparse.Action):
    """``--faces theta_dot:10:1 v:1:0.3`` -> {"theta_dot": {...}, "v": {...}}."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values, option_string=None):
        setattr(namespace, self.dest, dict(values))


TRAIN_HELP = """Counterexample-guided training of a neural CBF (docs/training.md).  Starts from --preset, or
--config (a JSON TrainConfig), or the defaults shown; a flag given overrides it.  Writes OUT/model.onnx,
OUT/state_dict.pt, OUT/model.json and OUT/training_curves.png atomically.  A list takes commas or
spaces: --domain-lo -2,-2,-3.14 or --domain-lo -2 -2 -3.14."""


def build_parser(prog: str = "python -m training.cli") -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=prog,
        description="Train and verify neural control barrier functions for the plants in systems/.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="{train,verify,presets}")

    t = sub.add_parser("train", help="train a barrier, verify the compiled model, write model.onnx/json",
                       description=TRAIN_HELP)
    t.add_argument("--preset", help="start from a shipped config: vdp, bicycle, pendulum, dubins, or a literature "
                        "benchmark's (darboux, darboux_256, obstacle_avoidance, obstacle_avoidance_64, spacecraft, "
                        "hi_ord8, point_robot; ReLU ones distilled from them or from barriers written down: "
                        "darboux_relu, darboux_relu_256, obstacle_avoidance_relu, obstacle_avoidance_relu_64, "
                        "spacecraft_relu, spacecraft_8_relu, hi_ord8_relu) "
                        "(default: none)")
    t.add_argument("--config", type=Path, help="start from a JSON file holding a TrainConfig (default: none)")
    t.add_argument("--system", help="the plant: a built-in name (van_der_pol, bicycle, inverted_pendulum, acc, "
                                    "unicycle, double_integrator, darboux, obstacle_avoidance, spacecraft, hi_ord8, dubins, point_robot) or "
                                    "an import path module:Class of your own "
                                    "(default: the preset's or config's)")
    t.add_argument("--param", type=assignment, action="append", default=[], metavar="NAME=VALUE",
                   help="override one plant parameter, e.g. --param mu=1.5; repeat for more (default: the "
                        "plant's Params)")
    t.add_argument("--widths", action=NumberList, type=int_list, metavar="W1,W2,...",
                   help="hidden layer widths; wider or deeper fits a more complex safe set, and trains and "
                        "certifies slower" + _default("hidden"))
    t.add_argument("--activation", help="hidden activation: relu, softplus, tanh, silu, ...; choose a smooth one "
                                        "(softplus, tanh) for order 2 and for certification at a control period"
                   + _default("activation"))
    t.add_argument("--order", type=int, choices=(1, 2),
                   help="1: a CBF, the input acts on dh/dt; 2: a HOCBF for a barrier the input reaches only "
                        "through d2h/dt2 (needs L_G h == 0: use --input-mask)" + _default("order"))
    t.add_argument("--gamma", type=float, help="order 1 class-K gain, alpha(h) = gamma h; raise it to let h "
                                               "fall faster towards 0, so the input is asked for less"
                   + _default("gamma"))
    t.add_argument("--alpha1", type=float, help="order 2: psi1 = L_f h + alpha1 h; raise it to let h approach "
                                                "0 faster (a larger set {psi1 >= 0}, whose edge asks alpha1 "
                                                "|dh/dt| of braking)" + _default("alpha1"))
    t.add_argument("--alpha2", type=float, help="order 2: d/dt psi1 >= -alpha2 psi1; raise it to let psi1 "
                                                "approach 0 faster" + _default("alpha2"))
    t.add_argument("--input-mask", action=NumberList, type=int_list, metavar="I,J,...",
                   help="state indices the network reads (0-based); leave out the input-driven states for "
                        "order 2" + _default("input_mask", "every state"))
    t.add_argument("--domain-lo", action=NumberList, type=float_list, metavar="X1,X2,...",
                   help="lower corner of the training and verification box, one number per state"
                   + _default("domain_lo", "the plant's domain"))
    t.add_argument("--domain-hi", action=NumberList, type=float_list, metavar="X1,X2,...",
                   help="upper corner of the training and verification box"
                   + _default("domain_hi", "the plant's domain"))
    t.add_argument("--u-min", action=NumberList, type=float_list, metavar="U1,U2,...",
                   help="input lower bounds the conditions must hold under; narrower asks more of the barrier"
                   + _default("u_min", "the plant's"))
    t.add_argument("--u-max", action=NumberList, type=float_list, metavar="U1,U2,...",
                   help="input upper bounds the conditions must hold under" + _default("u_max", "the plant's"))
    t.add_argument("--rounds", type=nonnegative_int,
                   help="at most this many counterexample rounds; raise it when failures are still falling "
                        "at the end (0, with --label-set: the set's fit is the network)" + _default("rounds"))
    t.add_argument("--max-time", type=positive_float,
                   help="wall-clock budget of the rounds in seconds; raise it with --rounds" + _default("max_time"))
    t.add_argument("--seed", type=nonnegative_int, help="seed of torch and numpy; change it to see whether a "
                                                        "result is luck" + _default("seed"))
    t.add_argument("--dt", "--dt-control", dest="dt", type=nonnegative_float,
                   help="control period in seconds the certifier proves the zero-order-hold loop for (with "
                        "--certify; 0: continuous time); set it to the period the filter will run at"
                   + _default("dt_control"))
    t.add_argument("--quick", action="store_true",
                   help="SMOKE RUN: small budgets (minutes -> seconds) to check the setup; exits 4, not 0, "
                        "when it passes, and never ships")
    t.add_argument("--out", type=Path, required=True, help="output directory for the model files")
    t.add_argument("--force", action="store_true", help="replace an existing output directory")
    t.add_argument("--no-verify", action="store_true",
                   help="skip the compiled float32 verifier (when no C++ compiler is at hand)")
    t.add_argument("--no-progress", action="store_true", help="hide the progress bar of the rounds, for logs and CI (default: "
                                                              "shown when stderr is a terminal)")
    t.add_argument("--ship", metavar="NAME", help="if it passes, also copy the result to MODELS_DIR/NAME.onnx "
                                                   "and MODELS_DIR/NAME.json (default: do not copy)")
    t.add_argument("--models-dir", type=Path, default=Path("experiments/models"), help="where --ship copies to")
    _add_config_flags(t)
    add_common_flags(t)

    v = sub.add_parser("verify", help="verify a compiled barrier against its model card",
                       description="Compile model.onnx and check, on seeded uniform samples (or a grid) of the "
                                   "card's domain: containment (h >= 0 implies constraint >= 0), the CBF/HOCBF "
                                   "condition under the input box, and coverage.  Pointwise, not a proof "
                                   "(cbfsim certify is the proof).")
    v.add_argument("model", type=Path, help="model.onnx (or a directory holding it)")
    v.add_argument("card", type=Path, help="its model card (model.json): the plant, input box, gains and the "
                                           "domain to sample")
    v.add_argument("--samples", type=positive_int, default=200_000,
                   help="uniform sample states; raise it to find rarer failures")
    v.add_argument("--grid", type=positive_int, help="check a full grid with this many points per axis instead "
                                                     "of --samples (default: no grid)")
    v.add_argument("--seed", type=nonnegative_int, default=None,
                   help="sampling seed; change it for a fresh sample (default: the verifier's own, not training's)")
    v.add_argument("--json", action="store_true", help="print the full report as JSON instead of a summary")
    add_common_flags(v)

    add_common_flags(sub.add_parser("presets", help="list the shipped training presets",
                                    description="List the shipped training presets (--preset NAME)."))
    return parser


def _config_from_args(args: argparse.Namespace):
    from .config import ConfigError, TrainConfig
    from .presets import preset
    if args.preset and args.config:
        raise ConfigError("give --preset or --config, not both")
    if args.preset:
        cfg = preset(args.preset)
    elif args.config:
        try:
            cfg = TrainConfig.from_dict(json.loads(args.config.read_text()))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{args.config}: not a JSON TrainConfig ({exc})") from None
    elif args.system:
        cfg = TrainConfig(system=args.system)
    else:
        raise ConfigError("give --system, --preset or --config")
    changes = {}
    for f in dataclasses.fields(TrainConfig):
        if f.name == "params":
            continue
        value = getattr(args, _EXPLICIT.get(f.name, f.name))
        if value is not None:
            changes[f.name] = value
    if args.param:
        changes["params"] = {**cfg.params, **dict(args.param)}
    if args.quick:
        changes = {**QUICK, **changes}
    return cfg.replace(**changes)


def _train(args: argparse.Namespace) -> int:
    cfg = _config_from_args(args)
    check_can_create(args.out)
    cfg.resolve(cfg.build_system())             # a bad system, parameter or field: named before torch loads
    from .presets import ship
    from .trainer import train_barrier
    result = train_barrier(cfg, args.out, overwrite=args.force, verify=not args.no_verify,
                           progress=False if args.no_progress else None)
    check = result.final_check
    smoke = " [SMOKE RUN: --quick budgets; do not trust or ship]" if args.quick else ""
    log.info(f"{cfg.system}: trained in {result.train_time:.1f} s, {result.rounds} rounds -> {args.out}{smoke}")
    log.info(f"  trainer check ({check['n_checked']} states, float64): condition failures "
          f"{check['condition_failures']}, containment failures {check['containment_failures']}")
    distilled = result.card["training"].get("distillation")
    if distilled:
        from .distilled import teacher_name
        rounds = distilled["rounds"]
        last = next((r for r in rounds if r.get("returned")), rounds[-1] if rounds else None)
        which = "" if last is None else (
            "the last" if last is rounds[-1] else f"the student of round {last['round']} (the latest certified)")
        state = "no rounds" if last is None else (
            f"{len(rounds)} counterexample rounds, {which} " + (
                "clean" if distilled["last_round_clean"] else
                f"with {last['sampled_failures']} sampled failure(s), certifier {last['certifier']}"))
        log.info(f"  distilled from {teacher_name(distilled)} ({args.out / 'teacher'}): {state}")
    _print_verification(result.verification)
    if result.certificate is not None:
        c = result.certificate
        log.info(f"  certifier (dt {c.dt:g} s): {'CERTIFIED' if c.certified else 'NOT certified'}, margin {c.margin:g}, "
                 f"certified coverage {c.certified_coverage:.3f}, {c.boxes['evaluated']} boxes, {c.wall_time_s:.1f} s "
                 f"-> {args.out / 'model.cert.json'}")
    log.info(f"  training curves: {args.out / 'training_curves.png'}")
    if not result.passed:
        from .diagnose import diagnose, diagnose_certificate
        config = result.card.get("config")         # the run's own settings: no advice to set what is set
        lines = diagnose(check, result.verification, result.card["state_names"], config)
        if result.certificate is not None and not result.certificate.certified:
            lines += diagnose_certificate(result.certificate, result.card["state_names"], config)
        if distilled and not distilled["last_round_clean"]:
            lines.append(f"the distillation's last round still found failures: try --distil-rounds "
                         f"{2 * config['distil_rounds']} (now {config['distil_rounds']}), or a wider student")
        for line in lines:
            log.info(f"  {line}")
    if args.ship and args.quick:
        log.info(f"  not shipped as {args.ship!r}: a --quick smoke run is never shipped")
    elif args.ship and result.passed:
        onnx_path, card_path = ship(args.out, args.models_dir, args.ship)
        log.info(f"  shipped {onnx_path} and {card_path}")
    elif args.ship:
        log.info(f"  not shipped as {args.ship!r}: failures remain (see {args.out / 'model.json'})")
    if not result.passed:
        return 1
    return SMOKE_PASSED if args.quick else 0


def _print_verification(v: dict | None) -> None:
    if v is None:
        log.info("  verifier: skipped")
        return
    log.info(f"  verifier ({v['n_states']} {v['method']} states, compiled float32): condition failures "
          f"{v['condition_failures']}, containment failures {v['containment_failures']}, "
          f"coverage {v['coverage']:.3f} (safe set {v['coverage_safe_set']:.3f}) -> "
          f"{'PASS' if v['passed'] else 'FAIL'}")
    if v.get("coverage_backup_safe") is not None:    # sampled: "inside {h >= 0}", not a proof
        log.info(f"  states the backup policy keeps safe: {v['backup_safe_fraction']:.3f} of the constraint set; "
                 f"{v['coverage_backup_safe']:.3f} of them inside the learned safe set (sampled, not certified)")


def _verify(args: argparse.Namespace) -> int:
    # a bad card, then a file that is no model, fail before the plant's and the sampler's imports
    from .model_card import load_card
    load_card(args.card)
    if Path(args.model).is_file():
        from compiler.onnx_graph import load_model
        load_model(args.model)
    from .verify import DEFAULT_SEED, verify
    report = verify(args.model, args.card, samples=args.samples, grid=args.grid,
                    seed=DEFAULT_SEED if args.seed is None else args.seed)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        _print_verification(report.to_dict())
        for kind in ("condition_examples", "containment_examples"):
            for ex in getattr(report, kind):
                log.info(f"    {kind[:-9]} failure at x={ex['x']}: {ex}")
    return 0 if report.passed else 1


def _presets() -> int:
    from .presets import PRESETS
    for name, cfg in PRESETS.items():
        print(f"{name}: system={cfg.system} order={cfg.order} hidden={cfg.hidden} activation={cfg.activation} "
              f"input_mask={cfg.input_mask}")
    return 0


def main(argv: Sequence[str] | None = None, prog: str = "python -m training.cli") -> int:
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    commands = {"train": _train, "verify": _verify, "presets": lambda _: _presets()}
    return run_parsed(f"{prog} {args.command}", args, lambda: commands[args.command](args))


if __name__ == "__main__":
    sys.exit(main())
