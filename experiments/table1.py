"""The paper's Table I (dual-number header vs reverse-mode baselines), reproduced on this host and
on a Cortex-M4F and a Cortex-M7 under QEMU, with ESP32-S3 rows from captured logs. The columns,
methods and caveats are described in ``cbfsim/device/table1`` (the measuring machinery).
Outputs: results/table1/table1.md (printed too), table1.png, table1.json.

    python experiments/table1.py [--quick] [--no-qemu] [--keep DIR] [--out-dir DIR] [--esp32-log EX:METHOD=FILE]
"""
import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cbfsim.device.table1 import run_table1  # noqa: E402
from compiler.cli_errors import run  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer timing passes (6 instead of 30)")
    parser.add_argument("--no-qemu", action="store_true", help="skip the Cortex-M4F / M7 (QEMU) columns")
    parser.add_argument("--out-dir", default=str(ROOT / "results" / "table1"), help="default: results/table1")
    parser.add_argument("--keep", metavar="DIR", help="build in DIR and keep it (default: a temporary directory)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the host states (default 0)")
    parser.add_argument("--esp32-log", action="append", default=[], metavar="EXAMPLE:METHOD=FILE",
                        help="add a captured ESP32-S3 benchmark log (repeatable; see cbfsim/device/capture.py)")
    args = parser.parse_args(argv)

    def table() -> int:
        print(run_table1(args.out_dir, quick=args.quick, no_qemu=args.no_qemu, keep=args.keep, seed=args.seed,
                         esp32_logs=args.esp32_log), end="")
        return 0
    return run("table1.py", table)        # a bad capture (read first) is one line, exit 1


if __name__ == "__main__":
    sys.exit(main())
