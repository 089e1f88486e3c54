"""The firmware's line protocol (see ``firmware/common/app.hpp``), decoded with the float bit
patterns exact: header, per-step records, final state, benchmark line."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..filters.base import FilterStatus
from .errors import DeviceError

#: Under ``-icount shift=0`` one instruction is 1 ns of virtual time; SysTick runs at MPS2's 25 MHz.
INSTRUCTIONS_PER_SYSTICK = 40
STATUS_NAMES = tuple(s.name.lower() for s in FilterStatus)   # the firmware logs FilterStatus codes


@dataclass
class DeviceLog:
    """One firmware run: header fields, per-step records and the benchmark line.

    x has steps + 1 rows (x_0 .. x_N); u_nom, u, h, status one per step. ``bits`` holds the
    raw uint32 patterns of every step record (x, u_nom, u, h) plus the final state, for
    bit-identity checks between targets.
    """

    header: dict[str, str]
    x: np.ndarray
    u_nom: np.ndarray
    u: np.ndarray
    h: np.ndarray
    status: np.ndarray
    bits: np.ndarray
    bench: dict[str, Any] | None
    exit: str | None
    port_facts: dict[str, str] = field(default_factory=dict)   # 'P' lines, e.g. stack_peak
    solve: dict[str, Any] | None = None   # the 'Q' line (k > 1 rows): per-step QP filter cost

    @property
    def port(self) -> str:
        return self.header.get("port", "?")


def _floats(words: list[str]) -> np.ndarray:
    return np.array([int(w, 16) for w in words], dtype=np.uint32)


def parse_log(text: str) -> DeviceLog:
    """Decode a firmware log (host, QEMU or a captured ESP32 serial log; other lines ignored).
    A capture may hold several runs (the board was reset): the last one is decoded."""
    header: dict[str, str] = {}
    rows: list[np.ndarray] = []
    status: list[int] = []
    final: np.ndarray | None = None
    bench = None
    end = None
    facts: dict[str, str] = {}
    solve: dict[str, Any] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        try:
            if line.startswith("H port="):
                header = dict(kv.split("=", 1) for kv in line[2:].split())
                rows, status, final, bench, end, facts, solve = [], [], None, None, None, {}, {}
            elif line.startswith("Q calls="):
                solve = _costs(line)
            else:
                bench, end, final = _record(line, header, rows, status, facts, bench, end, final)
        except ValueError as exc:
            raise DeviceError(f"log line {number} is garbled ({exc}): {line[:80]!r}") from None
    if not header:
        raise DeviceError("no 'H port=' header line in the log")
    n, m = int(header["n"]), int(header["m"])
    width = n + 2 * m + 1
    if any(r.size != width for r in rows):
        raise DeviceError(f"step records must hold {width} floats")
    if rows and final is None:
        raise DeviceError("the log ends before the final-state line (truncated capture?)")
    bits = np.vstack(rows) if rows else np.zeros((0, width), np.uint32)
    vals = bits.view(np.float32).astype(np.float64)
    x = vals[:, :n]
    if final is not None:
        x = np.vstack([x, final.view(np.float32).astype(np.float64)[None, :]])
        bits = np.concatenate([bits.ravel(), final])
    return DeviceLog(header, x, vals[:, n:n + m], vals[:, n + m:n + 2 * m], vals[:, -1],
                     np.array(status, dtype=np.int8), bits.ravel(), bench, end, facts, solve or None)


def _costs(line: str) -> dict[str, Any]:
    """A 'Q' line: integer fields up to ' unit=', then the unit text."""
    head, _, unit = line[2:].partition(" unit=")
    out: dict[str, Any] = {k: int(v) for k, v in (kv.split("=", 1) for kv in head.split())}
    out["unit"] = unit
    return out


def _record(line: str, header: dict, rows: list, status: list, facts: dict, bench: Any, end: Any,
            final: Any) -> tuple[Any, Any, Any]:
    """One non-header line into the accumulators; returns the updated (bench, end, final)."""
    if line.startswith("S ") and header:
        words = line.split()
        if int(words[1]) != len(rows):
            raise DeviceError(f"step {words[1]} out of order (expected {len(rows)}): lost serial data?")
        rows.append(_floats(words[2:-1]))
        status.append(int(words[-1]))
    elif line.startswith("F ") and header:
        final = _floats(line.split()[2:])
    elif line.startswith("B calls="):
        head, _, unit = line[2:].partition(" unit=")
        fields: dict[str, Any] = dict(kv.split("=", 1) for kv in head.split())
        bench = {k: (int(v) if k in ("calls", "median", "max", "min", "overhead") else v)
                 for k, v in fields.items()}
        bench["unit"] = unit
    elif line.startswith("E "):
        end = line[2:]
    elif line.startswith("P "):
        facts.update(kv.split("=", 1) for kv in line[2:].split() if "=" in kv)
    return bench, end, final


def solve_summary(log: DeviceLog) -> dict[str, Any]:
    """The closed loop's per-step QP filter cost (k > 1 rows); SysTick ticks also as instructions."""
    if log.solve is None:
        raise DeviceError("the log has no 'Q' line (a one-row firmware, or a truncated log)")
    out = dict(log.solve)
    if str(out.get("unit", "")).startswith("systick"):
        for key in ("median", "max", "min"):
            out[f"{key}_instructions"] = out[key] * INSTRUCTIONS_PER_SYSTICK
    return out


def bench_summary(log: DeviceLog) -> dict[str, Any]:
    """Benchmark numbers with their unit; SysTick ticks are also given as instructions."""
    if log.bench is None:
        raise DeviceError("the log has no benchmark line")
    out = dict(log.bench)
    if str(out.get("unit", "")).startswith("systick"):
        for key in ("median", "max", "min", "overhead"):
            out[f"{key}_instructions"] = out[key] * INSTRUCTIONS_PER_SYSTICK
    return out
