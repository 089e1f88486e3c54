"""Firmware driver: the same barrier header on a host twin, Cortex-M4F/M7 under QEMU and an
ESP32-S3, compared with a float64 Python simulation of the same closed loop.

Stages, each a plain function on plain data (cvxpygen-style):

* ``card_run`` (card.py)  a model card (+ the nominal controller, x0 and overrides) -> RunConfig;
* ``generate`` (config.py)  model + system + run constants -> a directory with the barrier header, the
  plant header (``systems/`` -> ``cpp_source``, with the barrier's own math functions, so no
  libm and no hand-copied dynamics) and ``cbf_config.hpp`` (the run constants);
* ``build`` / ``run`` (toolchain.py)  ``firmware/Makefile`` for host / m4 / m7 / xtensa, then the program
  (QEMU always with a timeout and ``-icount shift=0``, so SysTick counts are repeatable);
* ``parse_log`` (protocol.py)  the firmware's line protocol (see ``firmware/common/app.hpp``) with the
  float bit patterns decoded exactly;
* ``reference_run`` (reference.py)  cbfsim's simulator in float64 (RK4, exact projection filter) with the
  float64 reference interpreter of the compiled IR -- an independent check of the device;
* ``system_checks`` (checks.py)  the per-system verdicts of a device summary;
* ``footprint`` / ``stack_report`` / ``heap_symbols`` / ``symbol_size`` (elf.py)  what the ELF costs.

Build outputs go to a directory the caller names (a temp dir in tests), never into the package.
"""

from .card import CARD_KEYS, SHIPPED_RUNS, CardRun, card_path_of, card_run, shipped_card_run
from .checks import system_checks
from .config import Generated, RunConfig, compiled_source, f32, generate
from .elf import (HEAP_SYMBOLS, StackReport, footprint, heap_symbols, stack_report, symbol_size,
                  undefined_symbols)
from .errors import DeviceConfigError, DeviceError, DeviceLogError
from .protocol import INSTRUCTIONS_PER_SYSTICK, STATUS_NAMES, DeviceLog, bench_summary, parse_log, solve_summary
from .reference import (ReferenceBarrier, ReferenceRun, bit_identical, max_abs_diff, polygon_demo_config,
                        polygon_disk_barrier, reference_run, summary)
from .toolchain import FIRMWARE_DIR, INSTALL, QEMU_MACHINE, build, run, run_command

__all__ = ["CARD_KEYS", "CardRun", "DeviceConfigError", "DeviceError", "DeviceLog", "DeviceLogError", "FIRMWARE_DIR",
           "Generated", "HEAP_SYMBOLS", "INSTALL", "INSTRUCTIONS_PER_SYSTICK", "QEMU_MACHINE",
           "ReferenceBarrier", "ReferenceRun", "RunConfig", "SHIPPED_RUNS", "STATUS_NAMES", "StackReport",
           "bench_summary", "bit_identical", "build", "card_path_of", "card_run", "compiled_source", "f32",
           "footprint", "generate", "heap_symbols", "max_abs_diff", "parse_log", "polygon_demo_config",
           "polygon_disk_barrier", "reference_run", "run", "run_command", "shipped_card_run",
           "solve_summary", "stack_report", "summary", "symbol_size", "system_checks", "undefined_symbols"]
