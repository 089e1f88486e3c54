"""One branch-and-bound search at a fixed margin and period, for comparing bounds: the boxes it
evaluates, proves and leaves open, its CPU time, and how often each condition's bound failed on
an evaluated box (which bound the search is splitting for).  No margin search, no falsifier run
first, no coverage estimate: only the search `cbfsim certify` repeats per margin.

    python benchmarks/search_at_margin.py experiments/models/vdp 0.05            # the card's period
    python benchmarks/search_at_margin.py experiments/models/vdp 0 --dt 0 --condition boundary
    python benchmarks/search_at_margin.py experiments/models/bicycle 0.15 --max-boxes 40000
    python benchmarks/search_at_margin.py results/suite/hi_ord8 0 --condition boundary --claim in-domain \
        --initial-set plant                                    # the literature's claim, as certify_suite
"""
from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stem", help="MODEL without .onnx/.json (or a training directory holding model.onnx)")
    parser.add_argument("margin", type=float)
    parser.add_argument("--dt", type=float, default=None, help="control period (default: the card's)")
    parser.add_argument("--condition", choices=("filter", "boundary"), default="filter")
    parser.add_argument("--max-boxes", type=int, default=2_000_000)
    parser.add_argument("--time-limit", type=float, default=1800.0)
    parser.add_argument("--claim", choices=("closed", "in-domain"), default="closed",
                        help="as cbfsim certify --claim (in-domain: no closure condition)")
    parser.add_argument("--initial-set", action="append", default=None,
                        help="as cbfsim certify --initial-set (LO,...:HI,... or plant; repeatable)")
    args = parser.parse_args(argv)
    from training.certify import branch
    from training.certify.build import build_problem
    stem = Path(args.stem)
    onnx, card = (stem / "model.onnx", stem / "model.json") if stem.is_dir() else (stem.with_suffix(".onnx"),
                                                                                 stem.with_suffix(".json"))
    problem = build_problem(onnx, card, dt=args.dt, condition=args.condition, scope=args.claim,
                            initial_set=args.initial_set)
    fails: collections.Counter = collections.Counter()
    evaluate = branch.evaluate

    def counted(problem, box, eps):
        bounds = evaluate(problem, box, eps)
        for name, score in bounds.scores.items():
            fails[name] += int((score < 0).sum())
        return bounds

    branch.evaluate = counted
    cpu = time.process_time()
    res = branch.search(problem, args.margin, time.monotonic() + args.time_limit, max_boxes=args.max_boxes)
    cpu = time.process_time() - cpu
    print(f"{stem.name}: certified {res.certified}, {res.evaluated} evaluated, {res.proven} proven, {res.refuted} "
          f"refuted, {res.undecided} undecided ({res.stopped or 'done'}), in-set volume proven {res.volume_safe:.4f}, "
          f"CPU {cpu:.1f} s; failing bounds per condition {dict(fails)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
