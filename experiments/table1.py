"""The paper's measurement table (Table "ESP32-S3 measurements") and bar chart, reproduced on
this host and on a Cortex-M4F and a Cortex-M7 under QEMU (and ESP32-S3 rows from captured
logs: --esp32-log), for the dual-number header against reverse-mode
baselines compiled from the same model.

Examples (the paper's three barriers):

* bicycle   4-32-32-1 ReLU,     m = 2, order 1 (``lie``: h, L_f h, L_G h)
* VdP       2-64-64-1 ReLU,     m = 1, order 1
* pendulum  2-32-32-1 Softplus, m = 1, order 2 (``lie2``: also L_f^2 h, L_G L_f h); the
            theta_dot column of W1 is zero (the paper's 1-32-32-1 net on theta alone)

The models are experiments/models/{bicycle,vdp,pendulum}.onnx when they exist, otherwise
seeded random weights (training.architectures.mlp, seeds 1, 2, 3 as in benchmarks/lie.py);
the output says which.

Methods (rows): dual one-sweep (compiler.api.compile_model, default layout), dual
min-memory (``layout="min_memory"``, the paper's one-direction-at-a-time algorithm),
reverse heap (compiler.emit_reverse, new[]/delete[] of the activation cache per call, as an
AD runtime), reverse static (the same caches as static arrays). Pendulum: hyper-dual (both
layouts) and Reverse+FD (backpropagation + central-difference Hessian-vector product of the
gradient, heap and static).

Columns:

* host median / max ns per call and jitter (max - median) / median: a C++ loop over 1,000
  seeded random states in the system's training box (f, G, f'f, f'G from systems/), every
  call timed alone with std::chrono::steady_clock, R passes after a warm-up pass, the passes
  spread over three processes run in turn across methods (R = 30; 6 with --quick). Built
  with the firmware's flags: g++ -std=c++17 -O2 -ffp-contract=off -fno-math-errno.
* Ir/call: valgrind callgrind, instructions inside the timed call (the allocator included),
  for that -O2 build and for g++ -std=c++17 -O3 -march=native.
* M4F · M7 instructions/call: the firmware's benchmark mode (firmware/common/app.hpp:
  1,000 seeded states, SysTick around each call, interrupts masked) on QEMU mps2-an386 (M4F)
  and mps2-an500 (M7) with -icount shift=0,
  where 1 SysTick tick = 40 instructions: (median - overhead) x 40 and max likewise.
  Instruction counts of an emulator, not cycles of a real core: no caches, no wait states,
  no allocator-induced cache misses -- the heap's timing jitter on silicon does not show here.
  The heap baseline links newlib's malloc through firmware/cortex-m/newlib_heap.hpp.
* static bytes: the compile-time scratch memory (dual: kWorkspaceBytes; reverse static: the
  activation cache sum_i n_i floats); heap B/call: bytes requested per call
  (``g_heap_bytes_per_call``; allocator headers come on top: glibc 8-16 B, newlib 8 B per
  block); stack: worst case from -fstack-usage + -fcallgraph-info along the call graph from
  the timed call (host -O2 build / ARM build); "+ malloc" means the allocator's own frames
  (precompiled libc) are not included.
* FLOPs: the paper's formulas (Prop. 2, Remark 5): one-sweep count, (m+1) C_df,
  C_ad + (m+1)(2n-1); hyper-dual: the compiler's count (the paper gives none); Reverse+FD:
  3 C_ad + ... (compiler.emit_reverse.reverse_flops).
* rel err: max over outputs of max |float32 result - float64 reference| / max |reference|
  on the host states (reference: compiler.reference, the float64 interpreter of the same IR,
  which tests/test_compiler_exact.py checks against torch autograd); order 2 shows the
  first-order / second-order outputs.

Outputs: results/table1/table1.md (printed too), table1.png (two panels: host median time
and dynamic memory per example, as the paper's figure), table1.json (all numbers).

    python experiments/table1.py [--quick] [--no-qemu] [--keep DIR] [--out-dir DIR] [--esp32-log EX:METHOD=FILE]
"""
from __future__ import annotations

import argparse
import inspect
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from cbfsim.device import INSTRUCTIONS_PER_SYSTICK as INSTR_PER_TICK  # noqa: E402
from compiler.build import valgrind_compatible  # noqa: E402

STATES = 1000
O2 = ("-std=c++17", "-O2", "-ffp-contract=off", "-fno-math-errno")
O3N = ("-std=c++17", "-O3", "-march=native")    # counted with valgrind_compatible() (AVX-512 hosts)


@dataclass(frozen=True)
class Example:
    key: str
    label: str
    system: str
    widths: tuple[int, ...]
    activation: str
    m: int
    order: int
    seed: int
    nominal: str
    paper_flops: tuple[int, int, int] | None    # C_f, (m+1) C_df, C_ad + (m+1)(2n-1) as published


EXAMPLES = (
    Example("bicycle", "Bicycle", "bicycle", (4, 32, 32, 1), "relu", 2, 1, 1, "drift", (2432, 14397, 4817)),
    Example("vdp", "VdP", "van_der_pol", (2, 64, 64, 1), "relu", 1, 1, 2, "zero", (8704, 34558, 17284)),
    Example("pendulum", "Pendulum", "inverted_pendulum", (2, 32, 32, 1), "softplus", 1, 2, 3, "zero", None),
)

# The paper's ESP32-S3 numbers (its LaTeX macros): median / max us, jitter, memory (B, kind).
PAPER = {
    "bicycle": [("Dual", 120.87, 126.92, 384, "static"), ("Reverse", 140.33, 239.27, 800, "heap")],
    "vdp": [("Dual", 327.88, 334.03, 768, "static"), ("Reverse", 280.15, 372.08, 1568, "heap")],
    "pendulum": [("Hyper-dual", 514.56, 534.93, 512, "static"), ("Reverse+FD", 983.45, 1002.19, 800, "heap")],
}


@dataclass
class Method:
    key: str               # dual, dual_min, rev_heap, rev_static
    label: str
    kind: str              # "dual" or "reverse"
    header: str | None     # None: not available (reason in `missing`)
    static_bytes: int = 0
    flops: int = 0
    flops_note: str = ""
    heap: bool = False
    missing: str = ""
    results: dict = field(default_factory=dict)


# ----------------------------------------------------------------------------- models and headers

def has_min_memory() -> bool:
    from compiler.api import compile_model
    return "layout" in inspect.signature(compile_model).parameters


def _paper_model_file(ex: Example) -> Path | None:
    """The trained model with the paper's architecture: the shipped one, or the one kept in
    models/refuted/ when the shipped model changed activation to be certified (VdP: softplus)."""
    from compiler.api import load_model
    models = ROOT / "experiments" / "models"
    for path in (models / f"{ex.key}.onnx", models / "refuted" / f"{ex.key}_{ex.activation}.onnx"):
        if path.exists() and {a.kind for a in load_model(path).hidden_activations()} == {ex.activation}:
            return path
    return None


def load_example_model(ex: Example):
    """(IR model, source description): the trained model of the paper's architecture if there
    is one (``_paper_model_file``), else seeded random weights."""
    from compiler.api import load_model
    from compiler.ir import Dense, Model
    from compiler.passes import canonicalize
    path = _paper_model_file(ex)
    if path is not None:
        model = canonicalize(load_model(path, name="barrier"))
        source = str(path.relative_to(ROOT))
        if ex.key == "pendulum" and model.input_dim == 1:
            # the paper's 1-32-32-1 net on theta: the equivalent 2-input net has a zero theta_dot column
            first = model.layers[0]
            assert isinstance(first, Dense)
            w = np.concatenate([first.weight, np.zeros((first.out_dim, 1))], axis=1)
            model = Model((replace(first, weight=w), *model.layers[1:]), 2, model.name, model.source)
            source += " (theta-only net, zero theta_dot column added)"
        return model, source
    import torch
    from training.architectures import mlp
    net = mlp(ex.widths, ex.activation, seed=ex.seed)
    if ex.key == "pendulum":
        with torch.no_grad():
            net[0].weight[:, 1] = 0.0
    model = canonicalize(load_model(net.eval(), name="barrier"))
    return model, f"seeded random weights (training.architectures.mlp, seed {ex.seed}; no trained {ex.activation} model)"


def make_methods(ex: Example, model) -> list[Method]:
    from compiler.activations import ACTIVATIONS
    from compiler.api import compile_model
    from compiler.emit_reverse import emit_reverse_header, reverse_flops
    widths = model.widths()
    c_sigma = [ACTIVATIONS[a.kind].c_sigma for a in model.hidden_activations()]
    cache_bytes = 4 * sum(widths[1:-1])
    dual_name = "Dual" if ex.order == 1 else "Hyper-dual"
    methods = []
    src = compile_model(model, inputs=ex.m, order=ex.order, name="barrier")
    rep = src.report
    note = f"one sweep; paper (m+1) C_df = {rep.paper_dual_total:,}" if ex.order == 1 else "one sweep (compiler count)"
    methods.append(Method("dual", f"{dual_name} one-sweep", "dual", src.header, rep.workspace_bytes,
                          rep.one_sweep_total, note))
    if has_min_memory():
        src2 = compile_model(model, inputs=ex.m, order=ex.order, name="barrier", layout="min_memory")
        rep2 = src2.report
        note2 = "(m+1) C_df" if ex.order == 1 else "one direction at a time (compiler count)"
        methods.append(Method("dual_min", f"{dual_name} min-memory", "dual", src2.header, rep2.workspace_bytes,
                              rep2.one_sweep_total, note2))
    else:
        methods.append(Method("dual_min", f"{dual_name} min-memory", "dual", None,
                              missing="compile_model(layout='min_memory') not available yet"))
    rev = "Reverse" if ex.order == 1 else "Reverse+FD"
    fl = reverse_flops(widths, c_sigma, ex.m, ex.order)
    fnote = "C_ad + (m+1)(2n-1)" if ex.order == 1 else "3 C_ad + FD assembly"
    for style in ("heap", "static"):
        text = emit_reverse_header(model, ex.m, style=style, name="barrier", order=ex.order)
        methods.append(Method(f"rev_{style}", f"{rev} {style}", "reverse", text,
                              0 if style == "heap" else cache_bytes, fl, fnote, heap=style == "heap"))
    return methods


# ----------------------------------------------------------------------------- host measurements

DRIVER = r"""// table1 driver (generated by experiments/table1.py)
#include "barrier.hpp"
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

constexpr int n = barrier::kStateDim, m = barrier::kInputDim;
constexpr int S = @STRIDE@, K = @K@;

// The measured call; callgrind collects only inside it. noipa: no clone, no inlining.
extern "C" __attribute__((noinline, noipa)) int cbf_bench_call(const float* in, float* out) {
    (void)m;
    return @CALL@;
}
extern "C" __attribute__((noinline, noipa)) int cbf_empty_call(const float* in, float* out) {
    out[0] = in[0];
    return 0;
}

int main(int argc, char** argv) {
    if (argc < 4) return 2;
    const int N = std::atoi(argv[2]);
    std::vector<float> in(static_cast<std::size_t>(N) * S), out(static_cast<std::size_t>(N) * K);
    std::FILE* fp = std::fopen(argv[1], "rb");
    if (!fp || std::fread(in.data(), sizeof(float), in.size(), fp) != in.size()) return 2;
    std::fclose(fp);
    int status = 0;
    if (std::strcmp(argv[3], "time") == 0) {       // time R OUT: per-call ns of R passes, after a warm-up pass
        const int R = std::atoi(argv[4]);
        std::vector<std::uint32_t> ns(static_cast<std::size_t>(N) * R), empty(N);
        for (int i = 0; i < N; ++i) status |= cbf_bench_call(&in[i * S], &out[i * K]);
        for (int i = 0; i < N; ++i) {
            const auto t0 = std::chrono::steady_clock::now();
            cbf_empty_call(&in[i * S], &out[i * K]);
            const auto t1 = std::chrono::steady_clock::now();
            empty[i] = static_cast<std::uint32_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
        }
        for (int r = 0; r < R; ++r)
            for (int i = 0; i < N; ++i) {
                const auto t0 = std::chrono::steady_clock::now();
                status |= cbf_bench_call(&in[i * S], &out[i * K]);
                const auto t1 = std::chrono::steady_clock::now();
                ns[static_cast<std::size_t>(r) * N + i] =
                    static_cast<std::uint32_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
            }
        std::FILE* fo = std::fopen(argv[5], "wb");
        if (!fo || std::fwrite(ns.data(), 4, ns.size(), fo) != ns.size()) return 2;
        std::fclose(fo);
        std::vector<std::uint32_t> e(empty);
        std::nth_element(e.begin(), e.begin() + N / 2, e.end());
        std::printf("empty_median_ns %u\n", e[N / 2]);
        return status;
    }
    for (int i = 0; i < N; ++i) status |= cbf_bench_call(&in[i * S], &out[i * K]);
    if (std::strcmp(argv[3], "dump") == 0) {
        std::FILE* fo = std::fopen(argv[4], "wb");
        if (!fo || std::fwrite(out.data(), sizeof(float), out.size(), fo) != out.size()) return 2;
        std::fclose(fo);
#if CBF_HEAP
        std::printf("heap_bytes_per_call %zu allocs %zu\n", barrier::g_heap_bytes_per_call,
                    barrier::g_heap_allocs_per_call);
#endif
    }
    return status;
}
"""


def run(cmd, **kw) -> subprocess.CompletedProcess:
    result = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed ({result.returncode}):\n"
                           f"{result.stdout[-1000:]}{result.stderr[-3000:]}")
    return result


def make_states(ex: Example, seed: int):
    """[x, f, G] (+ [Dff, DfG]) at STATES uniform states of the system's training box, float32-exact."""
    from systems import get_system
    system = get_system(ex.system)
    lo, hi = system.domain
    rng = np.random.default_rng(seed)
    x = rng.uniform(lo, hi, (STATES, system.n)).astype(np.float32).astype(np.float64)
    f, G = system.f(x), system.G(x).reshape(STATES, system.n, system.m)
    parts = [x, f, G]
    if ex.order == 2:
        Dff = system.df(x, f)
        DfG = np.stack([system.df(x, G[:, :, j]) for j in range(system.m)], axis=2)
        parts += [Dff, DfG]
    return [p.astype(np.float32).astype(np.float64) for p in parts]


def reference(ex: Example, model, parts) -> np.ndarray:
    from compiler import reference as ref
    res = ref.lie(model, *parts[:3]) if ex.order == 1 else ref.lie2(model, *parts)
    return np.column_stack([np.reshape(r, (STATES, -1)) for r in res])


def rel_err(got: np.ndarray, ref: np.ndarray, cols) -> float:
    g, r = got[:, cols], ref[:, cols]
    scale = np.maximum(np.abs(r).max(0), 1e-30)
    return float(np.max(np.abs(g - r).max(0) / scale))


def host_build(ex: Example, meth: Method, d: Path, tag: str, flags: tuple) -> Path:
    """Compile the driver for one method (object then link, so -fstack-usage files land in d/tag)."""
    out = d / tag
    out.mkdir(parents=True, exist_ok=True)
    cxx = os.environ.get("CXX", "g++")
    extra = ("-fstack-usage", "-fcallgraph-info=su") if tag == "O2" else ()
    run([cxx, *flags, *extra, f"-DCBF_HEAP={int(meth.heap)}", "-I", d, "-c", d / "driver.cpp", "-o", out / "driver.o"])
    run([cxx, *flags, out / "driver.o", "-o", out / "driver"])
    return out / "driver"


def prepare_host(ex: Example, meth: Method, work: Path, inputs: Path) -> Path:
    d = work / ex.key / meth.key
    d.mkdir(parents=True, exist_ok=True)
    (d / "barrier.hpp").write_text(meth.header)
    n, m = ex.widths[0], ex.m
    stride = 2 * n + n * m if ex.order == 1 else 3 * n + 2 * n * m
    k = 2 + m if ex.order == 1 else 3 + 2 * m
    call = ("barrier::lie(in, in + n, in + 2 * n, out)" if ex.order == 1 else
            "barrier::lie2(in, in + n, in + 2 * n, in + 2 * n + n * m, in + 3 * n + n * m, out)")
    (d / "driver.cpp").write_text(DRIVER.replace("@CALL@", call).replace("@STRIDE@", str(stride))
                                  .replace("@K@", str(k)))
    meth.results["dir"] = d
    meth.results["k"] = k
    return d


def callgrind(exe: Path, inputs: Path) -> float | None:
    if shutil.which("valgrind") is None:
        return None
    out = exe.parent / "callgrind.out"
    try:
        run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--toggle-collect=cbf_bench_call",
             exe, inputs, STATES, "count"])
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return None
    totals = [ln for ln in out.read_text().splitlines() if ln.startswith(("totals:", "summary:"))]
    return int(totals[0].split()[1]) / STATES


def host_stack(build_dir: Path, needle: str) -> tuple[int | None, bool]:
    """(worst-case stack bytes from the call whose name contains needle, allocator frames missing?)."""
    from cbfsim import device
    try:
        base = device.stack_report(build_dir)     # any entry: we only need the function names
        names = [k for k in base.per_function if needle in k]
        if not names:
            return None, False
        rep = device.stack_report(build_dir, entry=names[0])
    except Exception as exc:       # noqa: BLE001 -- a missing report is a table cell, not a failure
        print(f"stack report for {build_dir}: {exc}", file=sys.stderr)
        return None, False
    alloc = any(re.search(r"malloc|free|_Zn[wa]|_Zd[la]|operator (new|delete)", u) for u in rep.unknown)
    return rep.worst_bytes, alloc


# ----------------------------------------------------------------------------- Cortex-M4F and M7 (QEMU)

def qemu_available() -> bool:
    return all(shutil.which(t) for t in ("arm-none-eabi-g++", "arm-none-eabi-gcc", "qemu-system-arm", "make"))


def arm_measure(ex: Example, meth: Method, model, work: Path) -> dict:
    """Build the firmware's benchmark mode (MODES=2) around this method's header and run it on
    QEMU mps2-an386 (M4F) and mps2-an500 (M7); instruction counts, the M4F ELF's heap symbols and
    worst-case stack."""
    from cbfsim import device
    from compiler.api import CompiledSource, compile_model
    from systems import get_system
    gen = work / ex.key / meth.key / "fw_gen"
    build_dir = work / ex.key / meth.key / "fw_build"
    header = meth.header
    system = get_system(ex.system)
    plant = system.cpp_source("cbf_config::plant", scalar="float", math_prefix="barrier::detail::m_")
    used = re.search(r"// math functions: (.*)", plant).group(1)
    missing = [fn for fn in re.findall(r"\w+", used) if fn != "none" and f" m_{fn}(" not in header]
    if missing:
        # Only the closed loop's nominal controller needs these (bicycle: atan); the benchmark build
        # (MODES=2) compiles that loop but never runs it, so a trapping stub keeps the build honest.
        stubs = "\n".join(f"inline float m_{fn}(float) noexcept {{ __builtin_trap(); }}" for fn in missing)
        header += ("\n// table1 benchmark build only (MODES=2): the plant's nominal controller needs "
                   f"{', '.join(missing)}, never called here\nnamespace barrier {{ namespace detail {{\n"
                   f"{stubs}\n}} }}\n")
    gen.mkdir(parents=True, exist_ok=True)
    if meth.heap:
        shutil.copy(ROOT / "firmware" / "cortex-m" / "newlib_heap.hpp", gen / "newlib_heap.hpp")
        header += '\n#if defined(__arm__)\n#include "newlib_heap.hpp"   // operator new[] -> newlib malloc\n#endif\n'
    dual = compile_model(model, inputs=ex.m, order=ex.order, name="barrier")   # report/options for generate()
    compiled = CompiledSource("barrier", header, "", dual.report, dual.model, dual.options)
    x0 = tuple(float(v) for v in (np.asarray(system.domain[0]) + np.asarray(system.domain[1])) / 2)
    config = device.RunConfig(system=ex.system, x0=x0, nominal=ex.nominal, order=ex.order,
                              alpha=(1.0,) if ex.order == 1 else (1.0, 1.0), steps=1, bench_calls=STATES)
    generated = device.generate(compiled, config, gen)
    res: dict = {}
    for target in ("m7", "m4"):                        # the M4F's numbers at the top level, the M7's under "m7"
        elf = device.build(target, generated, build_dir, modes=2)
        bench = device.bench_summary(device.parse_log(device.run(target, elf, timeout=120)))
        over = bench["overhead"]
        counts = {k: (bench[k] - over) * INSTR_PER_TICK for k in ("median", "max", "min")}
        if target == "m4":
            res.update(counts, heap_symbols=device.heap_symbols(elf))
        else:
            res["m7"] = counts
    res["stack"], res["stack_alloc"] = host_stack(build_dir / "m4", "timed_barrier")
    return res


# ----------------------------------------------------------------------------- driver

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


def time_all(preps: list, repeats: int) -> None:
    """Per-call host timing, serially (nothing else of ours running), in rounds across methods."""
    rounds = 3
    per = max(1, repeats // rounds)
    samples: dict[tuple[str, str], list[np.ndarray]] = {}
    empties: dict[tuple[str, str], list[int]] = {}
    for _ in range(rounds):
        for p in preps:
            for mt in p["methods"]:
                if mt.header is None:
                    continue
                exe = p["exes"][(mt.key, "O2")]
                out = exe.parent / "times.bin"
                text = run([exe, p["inputs"], STATES, "time", per, out]).stdout
                samples.setdefault((p["example"].key, mt.key), []).append(np.fromfile(out, np.uint32))
                empties.setdefault((p["example"].key, mt.key), []).append(int(text.split()[1]))
    for p in preps:
        for mt in p["methods"]:
            key = (p["example"].key, mt.key)
            if key not in samples:
                continue
            ns = np.concatenate(samples[key]).astype(np.float64)
            med = float(np.median(ns))
            mt.results.update(t_med=med, t_max=float(ns.max()), t_p99=float(np.percentile(ns, 99)),
                              t_min=float(ns.min()), t_jitter=(float(ns.max()) - med) / med,
                              t_jitter99=(float(np.percentile(ns, 99)) - med) / med,
                              t_calls=int(ns.size), t_empty=statistics.median(empties[key]))


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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="Columns and methods are described in the module docstring.")
    parser.add_argument("--quick", action="store_true", help="fewer timing passes (6 instead of 30)")
    parser.add_argument("--no-qemu", action="store_true", help="skip the Cortex-M4F (QEMU) column")
    parser.add_argument("--out-dir", default=str(ROOT / "results" / "table1"), help="default: results/table1")
    parser.add_argument("--keep", metavar="DIR", help="build in DIR and keep it (default: a temporary directory)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the host states (default 0)")
    parser.add_argument("--esp32-log", action="append", default=[], metavar="EXAMPLE:METHOD=FILE",
                        help="add a captured ESP32-S3 benchmark log (repeatable; see cbfsim/device/capture.py)")
    args = parser.parse_args(argv)
    from cbfsim.device.capture import esp32_markdown, esp32_rows
    esp32 = esp32_rows(args.esp32_log)          # read (and refuse) the captures before hours of work
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
    print(text, end="")
    print(f"wrote {out_dir / 'table1.md'}, {out_dir / 'table1.png'} ({time.perf_counter() - start:.0f} s)",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
