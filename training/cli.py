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

from compiler.cli_errors import (OneLineParser, add_common_flags, check_can_create, assignment, finite_float, positive_float,
                                 positive_int, nonnegative_float, nonnegative_int, run_parsed)

log = logging.getLogger("training")

QUICK = dict(n_uniform=5000, n_boundary=2000, steps_per_round=100, warm_start_steps=200, rounds=5,
             check_samples=20_000, check_boundary=5000, verify_samples=20_000, max_time=60.0)


def _floats(text: str) -> list[float]:
    return [finite_float(v) for v in text.split(",") if v.strip()]


def _ints(text: str) -> list[int]:
    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers separated by commas, got {text!r}") from None


SMOKE_PASSED = 4
# TrainConfig fields with a hand-written flag above the generated ones (field -> flag dest)
_EXPLICIT = {"system": "system", "params": "param", "hidden": "widths", "activation": "activation",
             "order": "order", "gamma": "gamma", "alpha1": "alpha1", "alpha2": "alpha2",
             "input_mask": "input_mask", "domain_lo": "domain_lo", "domain_hi": "domain_hi",
             "u_min": "u_min", "u_max": "u_max", "rounds": "rounds", "max_time": "max_time", "seed": "seed",
             "dt_control": "dt"}


def _field_comments() -> dict[str, str]:
    """TrainConfig's trailing field comments, used as the generated flags' help."""
    from .config import TrainConfig
    found = re.findall(r"^\s+(\w+):[^#\n]*#\s*(.+)$", inspect.getsource(TrainConfig), flags=re.M)
    return {name: text.strip() for name, text in found}


def _add_config_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per TrainConfig field that has no hand-written flag, typed from the field."""
    from .config import TrainConfig
    comments = _field_comments()
    group = parser.add_argument_group("every other TrainConfig field")
    for f in dataclasses.fields(TrainConfig):
        if f.name in _EXPLICIT:
            continue
        flag, kind = "--" + f.name.replace("_", "-"), str(f.type)
        help_text = comments.get(f.name, f.name.replace("_", " "))
        if kind == "bool":
            group.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=help_text)
        elif kind.startswith("list[int]"):
            group.add_argument(flag, type=_ints, metavar="I,J,...", help=help_text)
        elif kind.startswith("list[float]"):
            group.add_argument(flag, type=_floats, metavar="X1,X2,...", help=help_text)
        elif kind in ("int", "float"):
            group.add_argument(flag, type=int if kind == "int" else finite_float, help=help_text)
        else:
            raise TypeError(f"TrainConfig.{f.name}: no flag for type {kind}")


def build_parser(prog: str = "python -m training.cli") -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=prog,
        description="Train and verify neural control barrier functions for the plants in systems/.")
    sub = parser.add_subparsers(dest="command", required=True)

    t = sub.add_parser("train", help="train a barrier, verify the compiled model, write model.onnx/json",
                       description="Counterexample-guided training of a neural CBF.  Starts from --preset or "
                                   "--config (JSON TrainConfig) or defaults; any flag given overrides it.  "
                                   "Writes OUT/model.onnx, OUT/state_dict.pt and OUT/model.json atomically.")
    t.add_argument("--preset", help="start from a shipped config: vdp, bicycle, pendulum or dubins")
    t.add_argument("--config", type=Path, help="start from a JSON file holding a TrainConfig")
    t.add_argument("--system", help="plant name from systems (van_der_pol, bicycle, inverted_pendulum, acc, "
                                    "unicycle, double_integrator)")
    t.add_argument("--param", type=assignment, action="append", default=[], metavar="NAME=VALUE",
                   help="override a system parameter (repeatable), e.g. --param mu=1.5")
    t.add_argument("--widths", type=_ints, metavar="W1,W2,...", help="hidden layer widths, e.g. 64,64")
    t.add_argument("--activation", help="relu, softplus, tanh, ... (order 2 needs a smooth one)")
    t.add_argument("--order", type=int, choices=(1, 2), help="1: CBF; 2: HOCBF (needs L_G h == 0: use --input-mask)")
    t.add_argument("--gamma", type=float, help="order 1 class-K gain: alpha(h) = gamma h")
    t.add_argument("--alpha1", type=float, help="order 2: psi1 = L_f h + alpha1 h")
    t.add_argument("--alpha2", type=float, help="order 2: d/dt psi1 >= -alpha2 psi1")
    t.add_argument("--input-mask", type=_ints, metavar="I,J,...", help="state indices the network sees")
    t.add_argument("--domain-lo", type=_floats, metavar="X1,X2,...", help="training box lower corner")
    t.add_argument("--domain-hi", type=_floats, metavar="X1,X2,...", help="training box upper corner")
    t.add_argument("--u-min", type=_floats, help="input lower bounds (default: the system's)")
    t.add_argument("--u-max", type=_floats, help="input upper bounds (default: the system's)")
    t.add_argument("--rounds", type=positive_int, help="maximum counterexample rounds")
    t.add_argument("--max-time", type=positive_float, help="wall-clock budget for the rounds [s]")
    t.add_argument("--seed", type=nonnegative_int, help="seed for torch and numpy")
    t.add_argument("--dt", "--dt-control", dest="dt", type=nonnegative_float,
                   help="control period [s] the certifier proves the zero-order-hold loop for (with --certify; "
                        "0: continuous time)")
    t.add_argument("--quick", action="store_true",
                   help="SMOKE RUN: small budgets (minutes -> seconds) to check the setup; exits 4, not 0, "
                        "when it passes, and never ships")
    t.add_argument("--out", type=Path, required=True, help="output directory")
    t.add_argument("--force", action="store_true", help="replace an existing output directory")
    t.add_argument("--no-verify", action="store_true", help="skip the compiled verifier (no C++ compiler needed)")
    t.add_argument("--no-progress", action="store_true", help="no progress bar")
    t.add_argument("--ship", metavar="NAME", help="if it passes, also copy the result to MODELS_DIR/NAME.onnx and "
                                                   "MODELS_DIR/NAME.json")
    t.add_argument("--models-dir", type=Path, default=Path("experiments/models"), help="where --ship copies to")
    _add_config_flags(t)
    add_common_flags(t)

    v = sub.add_parser("verify", help="verify a compiled barrier against its model card",
                       description="Compile model.onnx and check, on seeded uniform samples (or a grid) of the "
                                   "card's domain: containment (h >= 0 implies constraint >= 0), the CBF/HOCBF "
                                   "condition under the input box, and coverage.  Pointwise, not a proof.")
    v.add_argument("model", type=Path, help="model.onnx (or a directory holding it)")
    v.add_argument("card", type=Path, help="model.json")
    v.add_argument("--samples", type=positive_int, default=200_000, help="uniform samples (default 200000)")
    v.add_argument("--grid", type=positive_int, help="use a full grid with this many points per axis instead")
    v.add_argument("--seed", type=nonnegative_int, default=None, help="sampling seed (default: the verifier's)")
    v.add_argument("--json", action="store_true", help="print the full report as JSON")
    add_common_flags(v)

    add_common_flags(sub.add_parser("presets", help="list the shipped training presets"))
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
    from .presets import ship
    from .trainer import train_barrier
    cfg = _config_from_args(args)
    check_can_create(args.out)
    result = train_barrier(cfg, args.out, overwrite=args.force, verify=not args.no_verify,
                           progress=False if args.no_progress else None)
    check = result.final_check
    smoke = " [SMOKE RUN: --quick budgets; do not trust or ship]" if args.quick else ""
    log.info(f"{cfg.system}: trained in {result.train_time:.1f} s, {result.rounds} rounds -> {args.out}{smoke}")
    log.info(f"  trainer check ({check['n_checked']} states, float64): condition failures "
          f"{check['condition_failures']}, containment failures {check['containment_failures']}")
    _print_verification(result.verification)
    if result.certificate is not None:
        c = result.certificate
        log.info(f"  certifier (dt {c.dt:g} s): {'CERTIFIED' if c.certified else 'NOT certified'}, margin {c.margin:g}, "
                 f"certified coverage {c.certified_coverage:.3f}, {c.boxes['evaluated']} boxes, {c.wall_time_s:.1f} s "
                 f"-> {args.out / 'model.cert.json'}")
    log.info(f"  training curves: {args.out / 'training_curves.png'}")
    if not result.passed:
        from .diagnose import diagnose, diagnose_certificate
        lines = diagnose(check, result.verification, result.card["state_names"])
        if result.certificate is not None and not result.certificate.certified:
            lines += diagnose_certificate(result.certificate, result.card["state_names"])
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
    if v.get("coverage_backup_safe") is not None:
        log.info(f"  backup-safe states: {v['backup_safe_fraction']:.3f} of the constraint set, "
              f"{v['coverage_backup_safe']:.3f} of them certified")


def _verify(args: argparse.Namespace) -> int:
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
