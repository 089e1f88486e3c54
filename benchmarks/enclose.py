"""Throughput of the sound enclosure engine (compiler.bounds) on the shipped barriers.

Boxes per second for ``enclose`` (float64 and float32 modes) and ``pieces`` on batches of
random boxes inside each model's training domain, median of a few repeats. Wall clock:
depends on the machine and its load.

    python benchmarks/enclose.py [--batch 4096] [--repeats 5]
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

from compiler.api import load_model
from compiler.bounds import enclose, pieces
from compiler.interval import Interval

MODELS = Path(__file__).resolve().parent.parent / "experiments" / "models"
CASES = [("vdp", 1, True), ("pendulum", 2, False), ("bicycle", 1, True)]


def random_boxes(model, card: dict, batch: int, rng) -> Interval:
    n = model.input_dim
    lo = np.asarray(card.get("domain_lo") or card.get("config", {}).get("domain_lo") or [-3.0] * n, dtype=float)
    hi = np.asarray(card.get("domain_hi") or card.get("config", {}).get("domain_hi") or [3.0] * n, dtype=float)
    width = (hi - lo) * 10.0 ** rng.uniform(-3, -1, (batch, n))
    corner = lo + rng.uniform(0, 1, (batch, n)) * (hi - lo - width)
    return Interval(corner, corner + width)


def rate(fn, batch: int, repeats: int) -> float:
    fn()                                   # warm up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return batch / statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print("| model | order | enclose f64 boxes/s | enclose f32 boxes/s | pieces boxes/s |")
    print("|---|---|---|---|---|")
    for name, order, piecewise in CASES:
        model = load_model(MODELS / f"{name}.onnx")
        card = json.loads((MODELS / f"{name}.json").read_text())
        box = random_boxes(model, card, args.batch, rng)
        f64 = rate(lambda: enclose(model, box, order=order), args.batch, args.repeats)
        f32 = rate(lambda: enclose(model, box, order=order, float32=True), args.batch, args.repeats)
        pw = f"{rate(lambda: pieces(model, box), args.batch, args.repeats):,.0f}" if piecewise else "-"
        print(f"| {name} | {order} | {f64:,.0f} | {f32:,.0f} | {pw} |")


if __name__ == "__main__":
    main()
