"""``python -m cbfsim.device generate ...``: the headers an ESP-IDF build or a hand-run make needs."""
from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from compiler.cli_errors import NumberList, OneLineParser, float_list, positive_float, positive_int, run

from .card import shipped_card_run
from .config import generate
from .reference import polygon_demo_config, polygon_disk_barrier


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``python -m cbfsim.device`` (its help is the docs' too: docs/cli.md)."""
    parser = OneLineParser(prog="python -m cbfsim.device", description=main.__doc__)
    sub = parser.add_subparsers(dest="command", required=True, metavar="{generate}")
    gen = sub.add_parser("generate", help="write the headers a firmware build needs",
                         description="Write the barrier header, cbf_system.hpp (the plant) and cbf_config.hpp "
                                     "(the run's constants) for make -C firmware or an ESP-IDF build.")
    gen.add_argument("--model", required=True,
                     help="vdp | pendulum | bicycle | an ONNX file with its card | 'polygon-demo' (polygon_disk_barrier)")
    gen.add_argument("--system", help="the plant, a built-in name or module:Class (default: the card's)")
    gen.add_argument("--nominal", help="the plant's nominal controller the device filters (default: the shipped "
                                       "run's, else the plant's first)")
    gen.add_argument("--order", type=int, choices=(1, 2),
                     help="1: CBF filter; 2: HOCBF filter, for a barrier of relative degree 2 (default: the card's)")
    gen.add_argument("--alpha", action=NumberList, type=positive_float_list, metavar="A1[,A2]",
                     help="linear class-K gains: gamma (order 1) or alpha1,alpha2 (order 2); raise them to let "
                          "h approach 0 faster (default: the card's)")
    gen.add_argument("--x0", action=NumberList, type=float_list, metavar="X1,X2,...",
                     help="the device run's start state, n numbers (default: the shipped run's, else the "
                          "RunConfig default)")
    gen.add_argument("--dt", type=positive_float, help="control period in seconds (default: the card's certified "
                                                       "period config.dt_control, else the shipped run's)")
    gen.add_argument("--steps", type=positive_int, help="control steps of the device run (default: the shipped "
                                                        "run's, else 10000)")
    gen.add_argument("--out", required=True, help="directory for the generated headers")
    return parser


def positive_float_list(text: str) -> list[float]:
    """Numbers > 0 separated by commas (class-K gains)."""
    values = float_list(text)
    for value in values:
        positive_float(str(value))
    return values


def main(argv: list[str] | None = None) -> int:
    """``python -m cbfsim.device generate --model pendulum --out DIR``: the headers an ESP-IDF
    build (firmware/esp32) or a hand-run make needs. A model with a card (a shipped name, or an
    ONNX file with NAME.json beside it) takes its system, gains, order, parameters and box from
    the card (cbfsim.device.card_run); the options override them."""
    parser = build_parser()
    args = parser.parse_args(argv)
    return run(parser.prog, lambda: _generate(args))


def _generate(args) -> int:
    options = {k: getattr(args, k) for k in ("dt", "steps") if getattr(args, k) is not None}
    if args.model == "polygon-demo":
        config = polygon_demo_config(system=args.system, x0=args.x0, nominal=args.nominal, order=args.order,
                                     alpha=args.alpha, **options)
        model = polygon_disk_barrier()
    else:
        card = shipped_card_run(args.model, nominal=args.nominal, x0=tuple(args.x0) if args.x0 else None,
                                system=args.system, order=args.order,
                                alpha=tuple(args.alpha) if args.alpha else None, **options)
        model, config = card.model, card.config
    generated = generate(model, config, args.out)
    print(json.dumps({"directory": str(generated.directory), "barrier": generated.name, "tag": generated.tag,
                      "config": asdict(config)}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
