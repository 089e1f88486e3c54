"""Robustness of the shipped filters: Van der Pol and the bicycle under rising plant-parameter
mismatch and bounded disturbances, the nominal filter (its certificate's margin) against the
robust one (plus the disturbance margin), with violation probabilities and Clopper-Pearson 95%
intervals. Writes results/robustness/{violation.png, summary.json}.

    python experiments/robustness.py           # 200 runs per setting
    python experiments/robustness.py --fast    # 20 runs, short horizons (a smoke check)
"""
import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bicycle import SPEC as BICYCLE  # noqa: E402
from vdp import SPEC as VDP  # noqa: E402

from cbfsim.fate import summary_text  # noqa: E402
from cbfsim.robustness import Study, plot_study, run_study  # noqa: E402

STUDIES = [
    Study(VDP, lambda s: {"mu": 1.0 * (1 + s)}, (0.0, 0.25, 0.5, 1.0), actuated=(1,),
          disturbance_levels=(0.0, 0.1, 0.2, 0.4)),
    Study(BICYCLE, lambda s: {"l_w": 2.5 * (1 - s)}, (0.0, 0.2, 0.4, 0.6), actuated=(2, 3),
          disturbance_levels=(0.0, 0.25, 0.5, 1.0)),
]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--fast", action="store_true", help="20 runs per setting, 1 s horizons")
    parser.add_argument("--runs", type=int, default=None)
    parser.add_argument("--out", type=Path, default=Path("results") / "robustness")
    args = parser.parse_args(argv)
    runs = args.runs or (20 if args.fast else 200)
    rows = []
    for study in STUDIES:
        t_final = 1.0 if args.fast else study.spec.t_final
        rows += run_study(study, runs, t_final)
    args.out.mkdir(parents=True, exist_ok=True)
    plot_study(rows, args.out / "violation.png")
    (args.out / "summary.json").write_text(json.dumps({"runs_per_setting": runs, "rows": rows}, indent=2) + "\n")
    print(f"{'model':8s} {'kind':12s} {'level':>6s} {'filter':8s} {'margin':>7s} {'violations':>11s}  95% interval"
          f"  fates")
    for r in rows:
        print(f"{r['model']:8s} {r['kind']:12s} {r['level']:6.3g} {r['filter']:8s} {r['margin']:7.3g} "
              f"{r['violations']:5d}/{r['runs']:<5d}  [{r['ci95'][0]:.3f}, {r['ci95'][1]:.3f}]  "
              f"{summary_text(r['fates'])}")
    print(f"figure and summary.json in {args.out}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
