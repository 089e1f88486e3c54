"""``python -m cbfsim.device generate ...``: the headers an ESP-IDF build or a hand-run make needs."""
from __future__ import annotations

import json
from dataclasses import asdict

from compiler.cli_errors import OneLineParser, finite_float, positive_float, positive_int, run

from .card import shipped_card_run
from .config import generate
from .reference import polygon_demo_config, polygon_disk_barrier


def main(argv: list[str] | None = None) -> int:
    """``python -m cbfsim.device generate --model pendulum --out DIR``: the headers an ESP-IDF
    build (firmware/esp32) or a hand-run make needs. A model with a card (a shipped name, or an
    ONNX file with NAME.json beside it) takes its system, gains, order, parameters and box from
    the card (cbfsim.device.card_run); the options override them."""
    parser = OneLineParser(prog="python -m cbfsim.device", description=main.__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate")
    gen.add_argument("--model", required=True,
                     help="vdp | pendulum | bicycle | an ONNX file with its card | 'polygon-demo' (polygon_disk_barrier)")
    gen.add_argument("--system")
    gen.add_argument("--nominal")
    gen.add_argument("--order", type=int, choices=(1, 2))
    gen.add_argument("--alpha", type=positive_float, nargs="+")
    gen.add_argument("--x0", type=finite_float, nargs="+")
    gen.add_argument("--dt", type=positive_float)
    gen.add_argument("--steps", type=positive_int)
    gen.add_argument("--out", required=True)
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
