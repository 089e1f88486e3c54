"""Captured ESP32-S3 benchmark logs beside Table I.

ESP-IDF cannot be installed here, so the ESP32-S3 numbers come from a board: flash the
benchmark image of one (example, method) (firmware/esp32, docs/device.md), capture its serial
output (``idf.py monitor`` or ``experiments/device.py --esp32-port``), and hand the file to
``experiments/table1.py --esp32-log EXAMPLE:METHOD=FILE``. The log is read with the firmware's
own line protocol (protocol.py); its B line counts CPU cycles (CCOUNT, interrupts masked
around each call), converted to microseconds at the CPU clock.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from .errors import DeviceConfigError, DeviceLogError
from .protocol import bench_summary, parse_log

CPU_MHZ = 240.0        # CONFIG_ESP_DEFAULT_CPU_FREQ_MHZ in firmware/esp32/sdkconfig.defaults


def parse_capture_spec(spec: str) -> tuple[str, str, Path]:
    """'EXAMPLE:METHOD=FILE' -> (example, method, path), or a one-line error."""
    head, sep, path = spec.partition("=")
    example, colon, method = head.partition(":")
    if not (sep and colon and example and method and path):
        raise DeviceConfigError(f"--esp32-log wants EXAMPLE:METHOD=FILE (e.g. vdp:dual=vdp_dual.log), got {spec!r}")
    return example, method, Path(path)


def esp32_rows(specs: Iterable[str], cpu_mhz: float = CPU_MHZ) -> list[dict[str, Any]]:
    """One row per captured log: median, max and min in microseconds, jitter, the check word."""
    rows = []
    for spec in specs:
        example, method, path = parse_capture_spec(spec)
        try:
            text = path.read_text(errors="replace")
        except OSError as exc:
            raise DeviceConfigError(f"--esp32-log {path}: {exc.strerror}") from None
        try:
            log = parse_log(text)
            bench = bench_summary(log)
        except DeviceLogError as exc:
            raise DeviceLogError(f"--esp32-log {path}: {exc}") from None
        if bench.get("unit") != "cycles":
            raise DeviceConfigError(f"--esp32-log {path}: the benchmark counts {bench.get('unit')!r}, not cycles "
                                    f"(port {log.port!r}); is it an ESP32 capture?")
        cycles = {k: bench[k] - bench["overhead"] for k in ("median", "max", "min")}
        rows.append({"example": example, "method": method, "port": log.port, "calls": bench["calls"],
                     **{f"{k}_us": v / cpu_mhz for k, v in cycles.items()},
                     "jitter": (cycles["max"] - cycles["median"]) / cycles["median"] if cycles["median"] else None,
                     "check": bench.get("check"), "file": str(path)})
    return rows


def esp32_markdown(rows: list[dict[str, Any]], paper: dict[str, list]) -> str:
    """The captured ESP32-S3 rows beside the paper's (median / max us, jitter)."""
    lines = [f"### ESP32-S3, captured (CCOUNT at {CPU_MHZ:g} MHz, interrupts masked around each call)", "",
             "| example | method | median us | max us | jitter | paper (method: median / max us) |",
             "|---|---|---:|---:|---:|---|"]
    for r in rows:
        published = "; ".join(f"{m}: {a:g} / {b:g}" for m, a, b, *_ in paper.get(r["example"], []))
        jitter = "n/a" if r["jitter"] is None else f"{100 * r['jitter']:.2f}%"
        lines.append(f"| {r['example']} | {r['method']} | {r['median_us']:.2f} | {r['max_us']:.2f} | {jitter} | "
                     f"{published or '-'} |")
    return "\n".join(lines) + "\n"
