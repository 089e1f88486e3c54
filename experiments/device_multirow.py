"""Two constraints on the device: the kinematic bicycle with its shipped lane barrier
(experiments/models/bicycle.onnx) and a speed limit h2 = v_max - v compiled as a second
barrier header, filtered by the OSQP solver generated for k = 2 rows (cbfsim/device/qp.py,
firmware/common/qp_filter.hpp), on the host twin, the Cortex-M4F and the Cortex-M7 (QEMU),
against the Python CBFQP with both rows on the same P_rho. Prints and writes (results/
device_multirow/summary.json): bit identity of the targets, max |dx| vs Python with the
stated bar, constraint violations, QP cost per step and the footprint.

    python experiments/device_multirow.py
    python experiments/device_multirow.py --v-max 11 --v-ref 15 --targets host m4
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from cbfsim.device import multirow
from compiler.cli_errors import OneLineParser, add_common_flags, finite_float, positive_int, run_parsed

ROOT = Path(__file__).resolve().parent.parent


def report(result: dict) -> None:
    """The summary's facts, one line per target."""
    print(f"k = {result['rows']} rows {result['names']}, rho {result['slack_penalty']:g}, "
          f"slack tol {result['slack_tol']:g}, {result['steps']} steps; Python statuses {result['python']['status_counts']}")
    for name, e in result["targets"].items():
        q = e["solve"]
        cost = (f"{q['median_instructions']} / {q['max_instructions']} instructions" if "median_instructions" in q
                else f"{q['median']} / {q['max']} {q['unit']}")
        print(f"{name:5s} bit-identical to host {e['bit_identical_to_host']}  max|dx| vs Python {e['max_abs_dx']:.2e}  "
              f"max|du| {e['max_abs_du']:.2e}  statuses {e['status_counts']}  violations "
              f"{sum(c['violations'] for c in e['constraints'].values())}  QP per step median/max {cost}, "
              f"OSQP iterations {q['iter_median']} / {q['iter_max']}")
        if "footprint" in e:
            f = e["footprint"]
            print(f"      flash {f['flash_bytes']} B (text {f['text_bytes']}, rodata {f['rodata_bytes']}), RAM "
                  f"{f['ram_bytes']} B (data {f['data_bytes']}, bss {f['bss_bytes']}; OSQP workspace "
                  f"{f['osqp_workspace_bytes']} B), stack worst {f['stack_static_worst_bytes']} B static / "
                  f"{e['stack_measured_peak_bytes']} B measured, heap symbols {f['heap_symbols']}")
    for target, why in result["skipped"].items():
        print(f"skipped {target}: {why}")
    c = result["checks"]
    print(f"checks: bit-identical {c['bit_identical']}, max|dx| {c['max_abs_dx']:.2e} <= {c['max_abs_dx_bar']:g}, "
          f"violations {c['violations']}, heap {c['heap_symbols']}: ok={c['ok']}")


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--v-max", type=finite_float, default=12.0, help="speed limit [m/s] (default 12)")
    parser.add_argument("--v-ref", type=finite_float, default=14.0, help="the nominal's target speed (default 14)")
    parser.add_argument("--steps", type=positive_int, help="control steps (default: the bicycle run's, 5 s)")
    parser.add_argument("--targets", nargs="*", default=["host", "m4", "m7"], choices=["host", "m4", "m7"])
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "device_multirow")
    parser.add_argument("--keep-build", type=Path, help="build here instead of a temporary directory")
    add_common_flags(parser)
    args = parser.parse_args(argv)

    def command() -> int:
        case = multirow.bicycle_case(args.v_max, args.v_ref, args.steps)
        with tempfile.TemporaryDirectory(prefix="cbfsim-multirow-") as tmp:
            result = multirow.run_case(case, args.keep_build or Path(tmp), args.targets)
        report(result)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "summary.json").write_text(json.dumps(result, indent=2, default=str))
        print(f"wrote {args.out / 'summary.json'}")
        return 0 if result["checks"]["ok"] else 1

    return run_parsed(parser.prog, args, command)


if __name__ == "__main__":
    sys.exit(main())
