"""``python -m cbfsim.device generate ...``: the headers an ESP-IDF build or a hand-run make needs."""
from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from .config import RunConfig, generate
from .reference import polygon_disk_barrier


def main(argv: list[str] | None = None) -> None:
    """``python -m cbfsim.device generate --model m.onnx --system van_der_pol --out DIR``:
    the headers an ESP-IDF build (firmware/esp32) or a hand-run make needs."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate")
    gen.add_argument("--model", required=True, help="ONNX barrier, or 'polygon-demo' (polygon_disk_barrier)")
    gen.add_argument("--system", default="van_der_pol")
    gen.add_argument("--nominal", default="zero")
    gen.add_argument("--order", type=int, default=1)
    gen.add_argument("--alpha", type=float, nargs="+", default=[1.0])
    gen.add_argument("--x0", type=float, nargs="+", default=[0.5, 0.0])
    gen.add_argument("--dt", type=float, default=1e-3)
    gen.add_argument("--steps", type=int, default=10_000)
    gen.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    config = RunConfig(system=args.system, x0=tuple(args.x0), nominal=args.nominal, order=args.order,
                       alpha=tuple(args.alpha), dt=args.dt, steps=args.steps)
    model = polygon_disk_barrier() if args.model == "polygon-demo" else args.model
    generated = generate(model, config, args.out)
    print(json.dumps({"directory": str(generated.directory), "barrier": generated.name, "tag": generated.tag,
                      "config": asdict(config)}, indent=2))


if __name__ == "__main__":
    main()
