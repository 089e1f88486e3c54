"""Build every example's methods, measure them (host, callgrind, QEMU) and write Table I."""
from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Sequence

import numpy as np

from compiler.build import valgrind_compatible

from ..capture import esp32_markdown, esp32_rows
from .arm import arm_measure, qemu_available
from .examples import EXAMPLES, O2, O3N, PAPER, STATES, Example, load_example_model, make_methods
from .host import callgrind, host_build, host_stack, make_states, prepare_host, reference, rel_err, run, time_all
from .report import build_table, figure, to_json

def submit_example(ex: Example, work: Path, args, pool) -> dict:
    """Headers, states and reference; host builds and the QEMU runs go to the pool."""
    model, source = load_example_model(ex)
    methods = make_methods(ex, model)
    parts = make_states(ex, args.seed + EXAMPLES.index(ex))
    inputs = work / ex.key / "inputs.bin"
    inputs.parent.mkdir(parents=True, exist_ok=True)
    np.concatenate([p.reshape(STATES, -1) for p in parts], 1).astype(np.float32).tofile(inputs)
    live = [mt for mt in methods if mt.header is not None]
    builds = {}
    for mt in live:
        d = prepare_host(ex, mt, work, inputs)
        for tag, flags in (("O2", O2), ("O3n", O3N)):
            builds[(mt.key, tag)] = pool.submit(host_build, ex, mt, d, tag, valgrind_compatible(flags))
    arm = {}
    if not args.no_qemu and qemu_available():
        for mt in live:
            arm[mt.key] = pool.submit(arm_measure, ex, mt, model, work)
    return {"example": ex, "model": model, "source": source, "methods": methods, "builds": builds, "arm": arm,
            "inputs": inputs, "ref": reference(ex, model, parts)}


def finish_example(p: dict, pool) -> None:
    """Outputs, errors, heap counters and host stack of every method; callgrind to the pool."""
    ex, inputs, ref = p["example"], p["inputs"], p["ref"]
    p["exes"] = exes = {key: fut.result() for key, fut in p["builds"].items()}
    p["irs"] = {key: pool.submit(callgrind, exe, inputs) for key, exe in exes.items()}
    for mt in p["methods"]:
        if mt.header is None:
            continue
        r = mt.results
        exe = exes[(mt.key, "O2")]
        dump = r["dir"] / "out.bin"
        text = run([exe, inputs, STATES, "dump", dump]).stdout
        got = np.fromfile(dump, np.float32).astype(np.float64).reshape(STATES, r["k"])
        k1 = 2 + ex.m
        r["err1"] = rel_err(got, ref, slice(0, k1))
        r["err2"] = rel_err(got, ref, slice(k1, None)) if ex.order == 2 else None
        if ex.order == 2:
            r["err_lf2"] = rel_err(got, ref, slice(k1, k1 + 1))
        hb = re.search(r"heap_bytes_per_call (\d+) allocs (\d+)", text)
        r["heap_bytes"], r["heap_allocs"] = (int(hb.group(1)), int(hb.group(2))) if hb else (0, 0)
        r["stack_host"], r["stack_host_alloc"] = host_stack(exe.parent, "cbf_bench_call")


def run_table1(out_dir: str | Path, *, quick: bool = False, no_qemu: bool = False, keep: str | Path | None = None,
               seed: int = 0, esp32_logs: Sequence[str] = ()) -> str:
    """Measure every example and method, write OUT_DIR/table1.{md,json,png}, return the Markdown.
    ``esp32_logs``: captured ESP32-S3 runs, 'EXAMPLE:METHOD=FILE' (capture.py), read first so a
    bad one is refused before the measurements."""
    args = SimpleNamespace(quick=quick, no_qemu=no_qemu, keep=keep, seed=seed, out_dir=out_dir)
    esp32 = esp32_rows(esp32_logs)
    start = time.perf_counter()
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="cbfsim-table1-"))
    work.mkdir(parents=True, exist_ok=True)
    qemu = not args.no_qemu and qemu_available()
    why = "--no-qemu" if args.no_qemu else "arm-none-eabi-gcc / qemu-system-arm / make not installed"
    try:
        with ThreadPoolExecutor(os.cpu_count() or 2) as pool:
            print("building drivers and firmware ...", file=sys.stderr)
            preps = [submit_example(ex, work, args, pool) for ex in EXAMPLES]
            for p in preps:
                finish_example(p, pool)
            for p in preps:
                p["irs_done"] = {k: f.result() for k, f in p["irs"].items()}
                p["arm_done"], p["arm_why"] = {}, why
                for k, f in p["arm"].items():
                    try:
                        p["arm_done"][k] = f.result()
                    except Exception as exc:   # noqa: BLE001 -- report the cell as n/a with the reason
                        print(f"{p['example'].key}/{k} on QEMU: {exc}", file=sys.stderr)
                        p["arm_done"][k] = str(exc).splitlines()[0][:60]
        print("timing on the host ...", file=sys.stderr)
        time_all(preps, 6 if args.quick else 30)
        text = build_table(preps, args, time.perf_counter() - start, qemu)
        if esp32:
            text += "\n" + esp32_markdown(esp32, PAPER)
        out_dir = Path(args.out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "table1.md").write_text(text)
        (out_dir / "table1.json").write_text(json.dumps({**to_json(preps), "esp32_captured": esp32}, indent=1,
                                                        default=str))
        figure(preps, out_dir / "table1.png")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"wrote {out_dir / 'table1.md'}, {out_dir / 'table1.png'} ({time.perf_counter() - start:.0f} s)",
          file=sys.stderr)
    return text
