"""What a device run must show, per system, from the per-target entries of a device summary:
the targets bit-identical, close to Python, no heap, the declared workspace, flat timing."""
from __future__ import annotations

from typing import Any, Mapping

from .protocol import INSTRUCTIONS_PER_SYSTICK

MAX_ABS_DX = 1e-3           # float32 device vs float64 Python, over the whole run
MAX_JITTER_FRACTION = 0.01  # (max - min) / median instructions of a barrier call


def jitter(bench: Mapping[str, Any], relu: bool) -> dict[str, Any]:
    """Spread of the benchmark's barrier-call counts under QEMU (SysTick ticks of 40
    instructions): (max - min) / median must be <= 1%; a ReLU network's call, data-
    independent up to a few instructions, must also stay within one tick of the median
    (the counter's resolution: a fixed cost reads as k or k + 1 ticks)."""
    median, low, high = int(bench["median"]), int(bench["min"]), int(bench["max"])
    fraction = (high - low) / median if median else float("inf")
    from_median = max(high - median, median - low)
    ok = fraction <= MAX_JITTER_FRACTION and (from_median <= 1 or not relu)
    return {"spread_ticks": high - low, "spread_instructions": (high - low) * INSTRUCTIONS_PER_SYSTICK,
            "max_ticks_from_median": from_median, "fraction_of_median": fraction,
            "rule": "<= 1% of the median" + (" and <= 1 tick from it (ReLU)" if relu else ""), "ok": ok}


def system_checks(targets: Mapping[str, Mapping[str, Any]], relu: bool) -> dict[str, Any]:
    """The per-system verdicts over the Cortex-M and host entries of ``targets``."""
    arm = {name: entry for name, entry in targets.items() if "workspace" in entry}
    heap = sorted({symbol for entry in arm.values() for symbol in entry["heap_symbols"]})
    checks: dict[str, Any] = {
        "targets": sorted(targets),
        "bit_identical": all(entry["bit_identical_to_host"] for entry in targets.values()),
        "max_abs_dx_vs_python": max(entry["max_abs_dx"] for entry in targets.values()),
        "heap_symbols": heap,
        "workspace_equals_symbol": all(entry["workspace"]["header_bytes"] == entry["workspace"]["symbol_bytes"]
                                       for entry in arm.values()),
        "jitter": {name: jitter(entry["benchmark"], relu) for name, entry in arm.items()},
    }
    checks["ok"] = bool(checks["bit_identical"] and checks["max_abs_dx_vs_python"] <= MAX_ABS_DX and not heap
                        and checks["workspace_equals_symbol"] and all(j["ok"] for j in checks["jitter"].values()))
    return checks
