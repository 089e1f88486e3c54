"""The region walk along {h = 0} (``training/certify/regions.py``) on ReLU barriers of linear
plants: how many pieces of {h = 0} there are, what each costs, and how soon a violation is met.

For each RUN_DIR it walks from the falsifier's boundary states (seed 0, as ``cbfsim certify``
does) until the time limit or until every reachable piece is solved, and prints: the pieces
solved, the patterns whose region missed {h = 0}, whether the walk ran out of neighbours, the
pieces with a negative row and the least row, the seconds to the first negative piece and to
the first one confirmed in float64, and the milliseconds per piece (the wall time over all
pieces, so it includes the facet LPs).

    python benchmarks/region_walk.py RUN_DIR [RUN_DIR ...] [--system spacecraft] [--time 120]

RUN_DIR: a `cbfsim train` output directory of a ReLU barrier (model.onnx), e.g. the
`spacecraft_relu` preset's.  Not a proof: only confirmed violations count (the module docstring).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def walk_row(run: Path, system: str, seconds: float) -> dict:
    from training.certify import counterexamples as ce
    from training.certify import regions
    from training.certify.build import build_problem
    from training.certify.falsify import boundary_and_level_states
    problem = build_problem(run / "model.onnx", None, system=system, condition="boundary", scope="in-domain")
    seeds = boundary_and_level_states(problem)
    began = time.monotonic()
    first = regions.walk(problem, seeds, began + seconds, stop_at_negative=1)
    t_first = time.monotonic() - began if first.negative else float("nan")
    confirmed = float("nan")
    if first.negative:
        pts = regions.candidates(first.negative[0])
        if np.any(~np.isnan(ce.check_points(problem, pts, 0.0)["feasibility"])):
            confirmed = time.monotonic() - began
    began = time.monotonic()
    full = regions.walk(problem, seeds, began + seconds, stop_at_negative=10 ** 9)
    least = min(full.values.values()) if full.values else float("nan")
    return {"run": run.name, "pieces": full.pieces, "empty": full.empty, "exhausted": full.exhausted,
            "negative": len(full.negative), "least": least, "first_negative_s": t_first,
            "first_confirmed_s": confirmed, "ms_per_piece": 1000 * full.seconds / max(full.pieces, 1),
            "seconds": full.seconds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--system", default="spacecraft")
    ap.add_argument("--time", type=float, default=120.0, help="seconds per walk (two walks per run)")
    args = ap.parse_args()
    print("| run | pieces solved | empty | all reached | negative pieces | least row | first negative | "
          "first confirmed | ms per piece |")
    print("|---|---|---|---|---|---|---|---|---|")
    for run in args.runs:
        r = walk_row(run, args.system, args.time)
        print(f"| {r['run']} | {r['pieces']:,} in {r['seconds']:.0f} s | {r['empty']} | "
              f"{'yes' if r['exhausted'] else 'no'} | {r['negative']:,} | {r['least']:.4g} | "
              f"{r['first_negative_s']:.1f} s | {r['first_confirmed_s']:.1f} s | {r['ms_per_piece']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
