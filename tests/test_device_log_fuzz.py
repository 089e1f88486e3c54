"""The device-log parser under 4,000 seeded mutations of real logs (a static capture and one
the host twin writes): every log either decodes to consistent arrays or is refused with the
parser's own DeviceLogError (a ValueError) and a one-line message, never a KeyError,
IndexError, OverflowError or numpy's words from inside (133 of 4,000 did before)."""
from __future__ import annotations

import random

import numpy as np
import pytest

from cbfsim import device
from cbfsim.device.capture import esp32_rows
from cbfsim.device.errors import DeviceConfigError, DeviceLogError
from cbfsim.device.protocol import bench_summary, parse_log, solve_summary

STATIC = ("rst:0x1 (POWERON),boot:0x8\r\nI (312) cpu_start: Starting scheduler\r\n"
          "H port=esp32s3 n=1 m=1 order=1 steps=2 substeps=1 dt=3a83126f ws=4 model=x\r\n"
          "S 0 3f800000 00000000 00000000 3f000000 0\r\nS 1 3f800000 00000000 bf800000 3e800000 1\r\n"
          "F 2 3f000000\r\nQ calls=2 median=7 max=9 min=5 iter_median=3 iter_max=4 unit=systick (25 MHz)\r\n"
          "B calls=3 median=5 max=9 min=4 overhead=1 check=00000001 unit=cycles\r\nP stack_peak=812\r\nE 0\r\n")
ALPHABET = "0123456789abcdefABCDEF =-\t\nxSFHBQPEnm#.\u00e9\x00"
NUMBERS = ["99999999999999999999999", "-1", "ffffffffff", "1e9", "", "0", "4097", "nan", "0x10"]


def mutate(text: str, rng: random.Random) -> str:
    """One to three random edits: characters, numbers, whole lines, truncation."""
    for _ in range(rng.randint(1, 3)):
        kind = rng.randrange(8)
        lines = text.split("\n")
        if kind == 0 and text:                                   # delete a character
            i = rng.randrange(len(text))
            text = text[:i] + text[i + 1:]
        elif kind == 1:                                          # insert a character
            i = rng.randrange(len(text) + 1)
            text = text[:i] + rng.choice(ALPHABET) + text[i:]
        elif kind == 2 and text:                                 # replace a character
            i = rng.randrange(len(text))
            text = text[:i] + rng.choice(ALPHABET) + text[i + 1:]
        elif kind == 3:                                          # replace a word by a hostile number
            words = text.split(" ")
            words[rng.randrange(len(words))] = rng.choice(NUMBERS)
            text = " ".join(words)
        elif kind == 4:                                          # replace a value after '='
            parts = text.split("=")
            if len(parts) > 1:
                k = rng.randrange(1, len(parts))
                rest = parts[k].split(" ", 1)
                parts[k] = rng.choice(NUMBERS) + (" " + rest[1] if len(rest) > 1 else "")
                text = "=".join(parts)
        elif kind == 5 and len(lines) > 1:                       # drop or duplicate a line
            i = rng.randrange(len(lines))
            lines[i:i + 1] = [] if rng.random() < 0.5 else [lines[i], lines[i]]
            text = "\n".join(lines)
        elif kind == 6 and len(lines) > 1:                       # swap two lines
            i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
            text = "\n".join(lines)
        elif kind == 7 and text:                                 # truncate
            text = text[:rng.randrange(len(text))]
    return text


def decode(text: str) -> None:
    """Parse, check the arrays' shapes agree with the header, and summarise."""
    log = parse_log(text)
    n, m = int(log.header["n"]), int(log.header["m"])
    steps = len(log.status)
    assert log.x.shape[1] == n and log.u.shape == (steps, m) and log.u_nom.shape == (steps, m)
    assert log.h.shape == (steps,) and log.x.shape[0] in (steps, steps + 1)
    if log.bench is not None:
        bench_summary(log)
    if log.solve is not None:
        solve_summary(log)


def decode_or_refuse(text: str) -> str:
    """'ok' or 'refused'; any other exception fails the test with the mutated log."""
    try:
        decode(text)
        return "ok"
    except DeviceLogError as exc:
        message = str(exc)
        assert isinstance(exc, ValueError) and message and "\n" not in message, repr(message)
        return "refused"


def fuzz(text: str, count: int, seed: int) -> dict[str, int]:
    rng = random.Random(seed)
    outcomes = {"ok": 0, "refused": 0}
    assert decode_or_refuse(text) == "ok"
    for _ in range(count):
        mutated = mutate(text, rng)
        try:
            outcomes[decode_or_refuse(mutated)] += 1
        except Exception as exc:                       # noqa: BLE001 -- the report names the log
            raise AssertionError(f"{type(exc).__name__}: {exc} on the log {mutated!r}") from exc
    return outcomes


def test_4000_mutations_of_a_capture_decode_or_are_refused_with_the_parsers_own_error():
    outcomes = fuzz(STATIC, 4000, seed=22)
    assert outcomes["ok"] > 100 and outcomes["refused"] > 1000          # the mutations do reach the parser


@pytest.fixture(scope="module")
def twin_log(tmp_path_factory, cxx) -> str:
    work = tmp_path_factory.mktemp("twin")
    config = device.RunConfig(system="van_der_pol", x0=(0.5, 0.0), nominal="zero", alpha=(1.0,), steps=6,
                              bench_calls=20)
    generated = device.generate(device.polygon_disk_barrier(), config, work / "gen")
    return device.run("host", device.build("host", generated, work / "build"))


@pytest.mark.toolchain
def test_4000_mutations_of_a_host_twin_log_decode_or_are_refused_with_the_parsers_own_error(twin_log):
    outcomes = fuzz(twin_log, 4000, seed=2026)
    assert outcomes["ok"] > 100 and outcomes["refused"] > 1000


@pytest.mark.toolchain
def test_mutated_esp32_captures_are_refused_in_one_line_naming_the_file(twin_log, tmp_path):
    board = twin_log.replace("H port=host", "H port=esp32s3").replace("unit=ns", "unit=cycles")
    rng = random.Random(7)
    path = tmp_path / "capture.log"
    refused = 0
    for _ in range(300):
        path.write_text(mutate(board, rng))
        try:
            esp32_rows([f"vdp:dual={path}"])
        except (DeviceLogError, DeviceConfigError) as exc:
            refused += 1
            assert "\n" not in str(exc) and (str(path) in str(exc) or isinstance(exc, DeviceConfigError))
    assert refused > 50


@pytest.mark.parametrize("edit,message", [
    (lambda t: t.replace("n=1 ", ""), "the header has no n="),
    (lambda t: t.replace("n=1 ", "n=5000 "), "outside 1..4096"),
    (lambda t: t.replace("n=1 ", "n=99999999999999999999999 "), "n '9+' is not a decimal count"),
    (lambda t: t.replace("3f000000\r\nQ", "1ffffffff\r\nQ"), "not a 32-bit hex word"),
    (lambda t: t.replace(" 1\r\nF", " 300\r\nF"), "status 300 is not a filter status"),
    (lambda t: t.replace("S 1 ", "S 1\r\n"), "a step record holds 4 floats and a status"),
    (lambda t: t.replace("S 1 ", "S\r\n"), "the final-state line says 2 steps, the log has 1 step records"),
    (lambda t: t.replace("overhead=1 ", ""), "the B line has no overhead="),
    (lambda t: t.replace("median=5", "median=-5"), "median '-5' is not a decimal count"),
    (lambda t: t.replace("F 2 3f000000", "F 2 3f000000 3f000000"), "the final state holds 1 floats")])
def test_each_kind_of_damage_is_named(edit, message):
    with pytest.raises(DeviceLogError, match=message):
        decode(edit(STATIC))


def test_table1_refuses_a_garbled_capture_in_one_line_before_measuring(tmp_path):
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    log = tmp_path / "garbled.log"
    log.write_text(STATIC.replace("3e800000", "3e8#0000"))
    run = subprocess.run([sys.executable, str(root / "experiments" / "table1.py"), "--no-qemu", "--out-dir",
                          str(tmp_path / "out"), "--esp32-log", f"vdp:dual={log}"], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 1 and "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines() == [run.stderr.strip()] and f"--esp32-log {log}: log line" in run.stderr
