"""The firmware's line protocol (see ``firmware/common/app.hpp``), decoded with the float bit
patterns exact: header, per-step records, final state, benchmark line."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..filters.base import FilterStatus
from .errors import DeviceLogError

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


MAX_DIMENSION = 4096        # n and m a log may declare (the firmware's line buffer holds far fewer)
HEX_WORD = re.compile(r"[0-9a-fA-F]{1,8}")
DECIMAL = re.compile(r"[0-9]{1,19}")
BENCH_FIELDS = ("calls", "median", "max", "min", "overhead")      # integer fields of the B line
SOLVE_FIELDS = ("calls", "median", "max", "min")                  # ... and of the Q line


def _floats(words: list[str]) -> np.ndarray:
    """32-bit hex words (float bit patterns) as uint32."""
    for word in words:
        if not HEX_WORD.fullmatch(word):
            raise DeviceLogError(f"{word[:20]!r} is not a 32-bit hex word")
    return np.array([int(w, 16) for w in words], dtype=np.uint32)


def _count(text: str, what: str) -> int:
    """A decimal count that fits 64 bits (the firmware prints uint32)."""
    if not DECIMAL.fullmatch(text):
        raise DeviceLogError(f"{what} {text[:20]!r} is not a decimal count")
    return int(text)


def _fields(text: str, what: str) -> dict[str, str]:
    """'k=v k=v ...' into a dict; a word without '=' is garbled."""
    out: dict[str, str] = {}
    for word in text.split():
        key, eq, value = word.partition("=")
        if not (eq and key):
            raise DeviceLogError(f"{what} word {word[:20]!r} is not key=value")
        out[key] = value
    return out


def parse_log(text: str) -> DeviceLog:
    """Decode a firmware log (host, QEMU or a captured ESP32 serial log; other lines ignored).
    A capture may hold several runs (the board was reset): the last one is decoded. Anything
    the protocol does not allow is a ``DeviceLogError`` (a ValueError) naming the line: a
    fuzzed log never escapes as KeyError, OverflowError or numpy's own messages."""
    header: dict[str, str] = {}
    dims = (0, 0)
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
                header = _fields(line[2:], "header")
                dims = _dimensions(header)
                rows, status, final, bench, end, facts, solve = [], [], None, None, None, {}, {}
            elif line.startswith("Q calls="):
                solve = _costs(line, SOLVE_FIELDS, "Q line")
            else:
                bench, end, final = _record(line, dims, rows, status, facts, bench, end, final)
        except DeviceLogError as exc:
            raise DeviceLogError(f"log line {number} is garbled ({exc}): {line[:80]!r}") from None
    if not header:
        raise DeviceLogError("no 'H port=' header line in the log")
    n, m = dims
    width = n + 2 * m + 1
    if rows and final is None:
        raise DeviceLogError("the log ends before the final-state line (truncated capture?)")
    bits = np.vstack(rows) if rows else np.zeros((0, width), np.uint32)
    vals = bits.view(np.float32).astype(np.float64)
    x = vals[:, :n]
    if final is not None:
        x = np.vstack([x, final.view(np.float32).astype(np.float64)[None, :]])
        bits = np.concatenate([bits.ravel(), final])
    return DeviceLog(header, x, vals[:, n:n + m], vals[:, n + m:n + 2 * m], vals[:, -1],
                     np.array(status, dtype=np.int8), bits.ravel(), bench, end, facts, solve or None)


def _dimensions(header: dict[str, str]) -> tuple[int, int]:
    """(n, m) from the header, both present, decimal and within MAX_DIMENSION."""
    for key in ("n", "m"):
        if key not in header:
            raise DeviceLogError(f"the header has no {key}=")
    n, m = _count(header["n"], "n"), _count(header["m"], "m")
    if not (1 <= n <= MAX_DIMENSION and 1 <= m <= MAX_DIMENSION):
        raise DeviceLogError(f"the header's n={n}, m={m} are outside 1..{MAX_DIMENSION}")
    return n, m


def _costs(line: str, required: tuple[str, ...], what: str) -> dict[str, Any]:
    """A 'B' or 'Q' line: key=value fields up to ' unit=', then the unit text; the counts
    ``required`` must be there, as decimals."""
    head, _, unit = line[2:].partition(" unit=")
    fields: dict[str, Any] = _fields(head, what)
    for key in required:
        if key not in fields:
            raise DeviceLogError(f"the {what} has no {key}=")
    out = {k: (_count(v, k) if k in required or k.startswith("iter_") else v) for k, v in fields.items()}
    out["unit"] = unit
    return out


def _record(line: str, dims: tuple[int, int], rows: list, status: list, facts: dict, bench: Any, end: Any,
            final: Any) -> tuple[Any, Any, Any]:
    """One non-header line into the accumulators; returns the updated (bench, end, final).
    S and F lines count only after a header (``dims`` set), as before."""
    n, m = dims
    if line.startswith("S ") and n:
        words = line.split()
        width = n + 2 * m + 1
        if len(words) != width + 3:
            raise DeviceLogError(f"a step record holds {width} floats and a status, got {len(words) - 2} words")
        if _count(words[1], "step") != len(rows):
            raise DeviceLogError(f"step {words[1]} out of order (expected {len(rows)}): lost serial data?")
        code = _count(words[-1], "status")
        if code >= len(STATUS_NAMES):
            raise DeviceLogError(f"status {code} is not a filter status (0..{len(STATUS_NAMES) - 1})")
        rows.append(_floats(words[2:-1]))
        status.append(code)
    elif line.startswith("F ") and n:
        words = line.split()
        if len(words) != n + 2:
            raise DeviceLogError(f"the final state holds {n} floats, got {len(words) - 2} words")
        if _count(words[1], "step count") != len(rows):
            raise DeviceLogError(f"the final-state line says {words[1]} steps, the log has {len(rows)} step records")
        final = _floats(words[2:])
    elif line.startswith("B calls="):
        bench = _costs(line, BENCH_FIELDS, "B line")
    elif line.startswith("E "):
        end = line[2:]
    elif line.startswith("P "):
        facts.update(kv.split("=", 1) for kv in line[2:].split() if "=" in kv)
    return bench, end, final


def solve_summary(log: DeviceLog) -> dict[str, Any]:
    """The closed loop's per-step QP filter cost (k > 1 rows); SysTick ticks also as instructions."""
    if log.solve is None:
        raise DeviceLogError("the log has no 'Q' line (a one-row firmware, or a truncated log)")
    out = dict(log.solve)
    if str(out.get("unit", "")).startswith("systick"):
        for key in ("median", "max", "min"):
            out[f"{key}_instructions"] = out[key] * INSTRUCTIONS_PER_SYSTICK
    return out


def bench_summary(log: DeviceLog) -> dict[str, Any]:
    """Benchmark numbers with their unit; SysTick ticks are also given as instructions."""
    if log.bench is None:
        raise DeviceLogError("the log has no benchmark line")
    out = dict(log.bench)
    if str(out.get("unit", "")).startswith("systick"):
        for key in ("median", "max", "min", "overhead"):
            out[f"{key}_instructions"] = out[key] * INSTRUCTIONS_PER_SYSTICK
    return out
