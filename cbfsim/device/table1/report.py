"""Table I as Markdown, its figure and its JSON."""
from __future__ import annotations

import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np

from .examples import O2, O3N, PAPER, STATES
from .host import run

def fmt_int(v) -> str:
    return "n/a" if v is None else f"{v:,.0f}"


def build_table(preps: list, args, elapsed: float, qemu: bool) -> str:
    head = ["Example", "Method", "Host med (ns)", "Host max (ns) [p99]", "Jitter max [p99]", "Ir/call -O2",
            "Ir/call -O3 native", "M4F · M7 instr/call med (max)", "M4F · M7 jitter", "Static B", "Heap B/call",
            "Stack B host / M4F", "FLOPs", "Max rel err"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * 2 + "---:|" * (len(head) - 2)]
    for p in preps:
        ex = p["example"]
        rep_dual = p["methods"][0]
        widths = p["model"].widths()
        first = True
        for mt in p["methods"]:
            name = f"**{ex.label}** {'-'.join(map(str, widths))}, m={ex.m}" if first else ""
            first = False
            if mt.header is None:
                lines.append(f"| {name} | {mt.label} | " + " | ".join(["n/a"] * (len(head) - 3))
                             + f" | {mt.missing} |")
                continue
            r = mt.results
            ir2, ir3 = p["irs_done"].get((mt.key, "O2")), p["irs_done"].get((mt.key, "O3n"))
            a = p["arm_done"].get(mt.key)
            if a is None:
                arm_cell, arm_jit = ("n/a (" + p["arm_why"] + ")", "n/a")
            elif isinstance(a, str):
                arm_cell, arm_jit = f"n/a ({a})", "n/a"
            else:
                m7 = a["m7"]
                arm_cell = f"{a['median']:,} ({a['max']:,}) · {m7['median']:,} ({m7['max']:,})"
                arm_jit = (f"{(a['max'] - a['median']) / a['median']:.1%} · "
                           f"{(m7['max'] - m7['median']) / m7['median']:.1%}")
            heap = r["heap_bytes"]
            if mt.heap:
                heap_cell = f"{heap:,} ({r['heap_allocs']} new[])"
            else:
                clean = a is not None and not isinstance(a, str) and not a["heap_symbols"]
                heap_cell = "0" + (" (no malloc in ELF)" if clean else "")
            sh = fmt_int(r["stack_host"]) + (" + malloc" if r["stack_host_alloc"] else "")
            sa = "n/a" if not isinstance(a, dict) else fmt_int(a["stack"]) + (" + malloc" if a["stack_alloc"] else "")
            err = f"{r['err1']:.1e}" if r["err2"] is None else f"{r['err1']:.1e} / {r['err2']:.1e}"
            fl = f"{mt.flops:,} ({mt.flops_note})"
            lines.append(f"| {name} | {mt.label} | {r['t_med']:,.0f} | {r['t_max']:,.0f} [{r['t_p99']:,.0f}] | "
                         f"{r['t_jitter']:.0%} [{r['t_jitter99']:.0%}] | {fmt_int(ir2)} | {fmt_int(ir3)} | {arm_cell} | {arm_jit} | "
                         f"{mt.static_bytes:,} | {heap_cell} | {sh} / {sa} | {fl} | {err} |")
        del rep_dual
    out = ["# Table 1: dual-number header vs reverse-mode baselines (host + Cortex-M4F/QEMU)", "",
           "**These are host and emulator measurements, not ESP32-S3 measurements.** Host times are wall "
           "clock on a shared x86-64 machine; Cortex-M4F numbers are instruction counts from QEMU "
           "(-icount shift=0), not cycles of a real core. The paper's ESP32-S3 numbers are printed "
           "beside them for reference only.", ""]
    out += lines
    out.append("")
    # FLOP check against the paper and per-example notes
    notes = []
    for p in preps:
        ex, model = p["example"], p["model"]
        from compiler.cost import cost_report
        rep = cost_report(model, ex.m, 1)
        checks = ""
        if ex.paper_flops:
            ours = (rep.c_f, rep.paper_dual_total, rep.reverse_total)
            checks = "; paper formulas " + ", ".join(
                f"{nm} = {v:,} " + ("✓" if v == w else f"✗ (paper {w:,})")
                for nm, v, w in zip(("C_f", "(m+1) C_df", "C_ad + (m+1)(2n-1)"), ours, ex.paper_flops))
        else:
            checks = (f"; C_f = {rep.c_f:,}, first-order (m+1) C_df = {rep.paper_dual_total:,}, "
                      f"C_ad + (m+1)(2n-1) = {rep.reverse_total:,}")
        extra = ""
        if ex.order == 2:
            fd = next(mt for mt in p["methods"] if mt.key == "rev_static").results
            hd = p["methods"][0].results
            from compiler.emit_reverse import fd_default_step
            extra = (f"; L_f^2 h max rel err: Reverse+FD {fd['err_lf2']:.1e} (central differences, relative step "
                     f"cbrt(eps) = {fd_default_step('float'):.3g}) vs hyper-dual {hd['err_lf2']:.1e} (exact up to "
                     "float32 round-off)")
        notes.append(f"* {ex.label}: model = {p['source']}{checks}{extra}.")
    out += ["Notes:", *notes]
    cpu = platform.machine()
    if os.path.exists("/proc/cpuinfo"):
        cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), cpu)
    gxx = run([os.environ.get("CXX", "g++"), "--version"]).stdout.splitlines()[0]
    calls = preps[0]["methods"][0].results.get("t_calls", 0)
    empty = statistics.median([mt.results["t_empty"] for p in preps for mt in p["methods"] if "t_empty" in mt.results])
    out += [
        f"* Host: {cpu}, {os.cpu_count()} CPUs (shared, noisy: medians are robust, maxima include OS preemption); "
        f"{gxx}. Time columns: -O2 build (`{' '.join(O2)}`, the firmware's flags), {calls:,} timed calls per "
        f"method ({STATES:,} seeded states x passes, 3 processes interleaved across methods), each call timed "
        f"alone with std::chrono::steady_clock; the timer's own cost (empty call) is ~{empty:.0f} ns and is "
        "included. Jitter = (max - median) / median as in the paper; [p99]: the same with the 99th percentile "
        "(host maxima of milliseconds are preemptions by the OS, not the code).",
        "* Ir/call: callgrind instructions inside the timed call (allocator included) over the same states; "
        f"-O3 native = `{' '.join(O3N)}` (GCC's default FP contraction).",
        ("* M4F: firmware/common/app.hpp benchmark mode (its own 1,000 xorshift states in the training box) on "
         "QEMU mps2-an386, -icount shift=0; (ticks - counter overhead) x 40 instructions, so +-40 granularity. "
         "The reverse heap build links newlib malloc via firmware/cortex-m/newlib_heap.hpp. An emulator has no "
         "caches or allocator-dependent memory timing, so heap jitter on silicon is not reproduced here."
         if qemu else "* M4F: not measured (" + preps[0]["arm_why"] + ")."),
        "* Static B: compile-time scratch (dual: kWorkspaceBytes; reverse static: activation cache sum_i n_i "
        "floats). Heap B/call: bytes requested per call (allocator headers extra; Reverse+FD allocates once per "
        "gradient, 3 gradients per call). Stack: worst case from -fstack-usage along -fcallgraph-info from the "
        "timed call (host -O2 driver / M4F firmware incl. its 16 B timing wrapper); '+ malloc': libc frames not "
        "counted.",
        "* Max rel err: per output max |float32 result - float64 reference| / max |reference|, max over "
        "outputs (order 2: first-order / second-order outputs); reference = compiler.reference (float64).",
        f"* {'quick' if args.quick else 'full'} run, seed {args.seed}, {time.strftime('%Y-%m-%d')}, "
        f"{elapsed:.0f} s.",
    ]
    out += ["", "## The paper's ESP32-S3 numbers (for reference; Xtensa LX7 @ 240 MHz, cycle counter)", "",
            "| Example | Method | Med. (us) | Max. (us) | Jitter | Memory (B) | ours: host med (ns) | "
            "ours: M4F instr med |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for p in preps:
        ex = p["example"]
        ours = {"Dual": "dual", "Hyper-dual": "dual", "Reverse": "rev_heap", "Reverse+FD": "rev_heap"}
        for label, med, mx, mem, kind in PAPER[ex.key]:
            mt = next(x for x in p["methods"] if x.key == ours[label])
            a = p["arm_done"].get(mt.key)
            arm = f"{a['median']:,}" if isinstance(a, dict) else "n/a"
            lines_ = (f"| {ex.label} | {label} | {med:.2f} | {mx:.2f} | {(mx - med) / med:.1%} | {mem} {kind} | "
                      f"{mt.results.get('t_med', float('nan')):,.0f} ({mt.label}) | {arm} |")
            out.append(lines_)
    return "\n".join(out) + "\n"


def figure(preps: list, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    keys = [("dual", "Dual / hyper-dual, one sweep", "#1f77b4", ""), ("dual_min", "Dual, min-memory", "#9ecae1", ""),
            ("rev_heap", "Reverse (+FD), heap", "#d62728", "//"), ("rev_static", "Reverse (+FD), static", "#ff9896", "\\\\")]
    labels = [p["example"].label for p in preps]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.2))
    width = 0.2
    x = np.arange(len(preps))
    for i, (key, lab, color, hatch) in enumerate(keys):
        meds, heaps, statics = [], [], []
        for p in preps:
            mt = next((m for m in p["methods"] if m.key == key), None)
            ok = mt is not None and mt.header is not None and "t_med" in mt.results
            meds.append(mt.results["t_med"] / 1000 if ok else np.nan)
            heaps.append(mt.results["heap_bytes"] if ok else np.nan)
            statics.append(mt.static_bytes if ok else np.nan)
        pos = x + (i - 1.5) * width
        bars = ax1.bar(pos, meds, width, label=lab, color=color, hatch=hatch, edgecolor="black")
        ax1.bar_label(bars, fmt="%.2f", fontsize=7)
        bars = ax2.bar(pos, heaps, width, label=lab, color=color, hatch=hatch, edgecolor="black")
        ax2.bar_label(bars, fmt="%d", fontsize=7)
    paper_heap = [next(v[3] for v in PAPER[p["example"].key] if v[4] == "heap") for p in preps]
    ax2.scatter(x + 0.5 * width, paper_heap, marker="x", color="black", zorder=5,
                label="paper ESP32-S3 reverse heap (incl. allocator bookkeeping)")
    ax2.legend(fontsize=8, loc="upper left")
    ax1.set_xticks(x, labels)
    ax1.set_ylabel("median time per call (µs, host -O2)")
    ax1.set_title("Execution time (this host, not ESP32)")
    ax2.set_xticks(x, labels)
    ax2.set_ylabel("dynamic memory per call (bytes)")
    ax2.set_title("Heap allocated per call")
    ax2.set_ylim(0, max(1.0, ax2.get_ylim()[1]) * 1.4)
    ax1.legend(fontsize=8, loc="upper left")
    fig.suptitle("Dual-number header vs reverse-mode baselines (pendulum: hyper-dual vs Reverse+FD)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=150)
    plt.close(fig)


def to_json(preps: list) -> dict:
    out = {}
    for p in preps:
        ex = p["example"]
        rows = {}
        for mt in p["methods"]:
            r = {k: v for k, v in mt.results.items() if k not in ("dir",)}
            r.update(label=mt.label, static_bytes=mt.static_bytes, flops=mt.flops, available=mt.header is not None,
                     missing=mt.missing, ir_O2=p["irs_done"].get((mt.key, "O2")),
                     ir_O3n=p["irs_done"].get((mt.key, "O3n")), m4=p["arm_done"].get(mt.key))
            rows[mt.key] = r
        out[ex.key] = {"source": p["source"], "widths": p["model"].widths(), "m": ex.m, "order": ex.order,
                       "methods": rows, "paper_esp32": PAPER[ex.key]}
    return out


