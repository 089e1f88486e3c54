"""Firmware driver: the same barrier header on a host twin, Cortex-M4F/M7 under QEMU and an
ESP32-S3, compared with a float64 Python simulation of the same closed loop.

Stages, each a plain function on plain data (cvxpygen-style):

* ``generate``  model + system + run constants -> a directory with the barrier header, the
  plant header (``systems/`` -> ``cpp_source``, with the barrier's own math functions, so no
  libm and no hand-copied dynamics) and ``cbf_config.hpp`` (the run constants);
* ``build`` / ``run``  ``firmware/Makefile`` for host / m4 / m7 / xtensa, then the program
  (QEMU always with a timeout and ``-icount shift=0``, so SysTick counts are repeatable);
* ``parse_log``  the firmware's line protocol (see ``firmware/common/app.hpp``) with the
  float bit patterns decoded exactly;
* ``reference_run``  cbfsim's simulator in float64 (RK4, exact projection filter) with the
  float64 reference interpreter of the compiled IR -- an independent check of the device;
* ``footprint`` / ``stack_report`` / ``heap_symbols`` / ``symbol_size``  what the ELF costs.

Build outputs go to a directory the caller names (a temp dir in tests), never into the package.
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from compiler.errors import ToolchainError

FIRMWARE_DIR = Path(__file__).resolve().parent.parent / "firmware"
HEAP_SYMBOLS = ("malloc", "free", "calloc", "realloc", "_malloc_r", "_free_r", "_sbrk", "_Znwj", "_Znaj", "_ZdlPv")
INSTALL = {
    "host": "apt-get install -y g++",
    "m4": "apt-get install -y gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm",
    "m7": "apt-get install -y gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm",
    "xtensa": "apt-get install -y gcc-xtensa-lx106",
}
QEMU_MACHINE = {"m4": "mps2-an386", "m7": "mps2-an500"}
#: Under ``-icount shift=0`` one instruction is 1 ns of virtual time; SysTick runs at MPS2's 25 MHz.
INSTRUCTIONS_PER_SYSTICK = 40
STATUS_NAMES = ("nominal", "active", "infeasible", "invalid")


class DeviceError(RuntimeError):
    """A firmware run failed or printed something the protocol does not allow."""


# ----------------------------------------------------------------------------- configuration

@dataclass(frozen=True)
class RunConfig:
    """Everything besides the model that fixes a firmware run (all stored as float32 on the device).

    alpha: linear class-K gains, (alpha1,) for order 1 or (alpha1, alpha2) for order 2.
    """

    system: str = "van_der_pol"
    x0: tuple[float, ...] = (0.5, 0.0)
    nominal: str = "zero"
    order: int = 1
    alpha: tuple[float, ...] = (1.0,)
    dt: float = 1e-3
    steps: int = 10_000
    substeps: int = 1
    bench_calls: int = 1000
    seed: int = 0x2545F491
    params: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.order not in (1, 2):
            raise ValueError(f"order must be 1 or 2, got {self.order}")
        if len(self.alpha) not in (1, 2) or any(not (float(a) > 0) for a in self.alpha):
            raise ValueError(f"alpha must hold one or two positive gains, got {self.alpha}")
        if not (self.dt > 0 and self.steps >= 1 and self.substeps >= 1 and self.bench_calls >= 1):
            raise ValueError("dt must be > 0 and steps, substeps, bench_calls >= 1")
        if not 0 < self.seed < 2**32:
            raise ValueError(f"seed must be a nonzero 32-bit value (xorshift32), got {self.seed}")

    @property
    def alphas(self) -> tuple[float, float]:
        return float(self.alpha[0]), float(self.alpha[-1])

    def plant(self):
        from systems import get_system
        return get_system(self.system, **self.params)


def f32(value: float) -> float:
    """The float32 the device stores for ``value``, as a Python float."""
    return float(np.float32(value))


def _cpp_float(value: float) -> str:
    """Exact float32 literal (hex float), clean under -Wdouble-promotion."""
    return float.hex(f32(value)) + "f"


def _cpp_floats(values: Any) -> str:
    return "{" + ", ".join(_cpp_float(v) for v in np.ravel(values)) + "}"


# ----------------------------------------------------------------------------- demo barrier

def polygon_disk_barrier(radius: float = 1.4, widths: tuple[int, int] = (64, 64), seed: int = 0):
    """A 2-64-64-1 ReLU network (``training.architectures.mlp``) with hand-set weights:
    h(x) = radius - s * sum_k |w_k . x| over K = widths[0]/2 directions w_k evenly spread
    over [0, pi), which is radius - ||x|| up to a ripple of ~1e-3 (a 64-gon). A stand-in
    with a known safe region until the trained model exists; the hidden 64x64 layer is the
    identity (relu(relu(z)) = relu(z)), so the network costs what a trained one costs."""
    import torch
    from training.architectures import mlp

    h1, h2 = widths
    if h1 % 2 or h2 != h1:
        raise ValueError(f"widths must be (2K, 2K), got {widths}")
    k = h1 // 2
    net = mlp([2, h1, h2, 1], "relu", seed=seed)
    theta = torch.arange(k, dtype=torch.float64) * (np.pi / k)
    w = torch.stack([torch.cos(theta), torch.sin(theta)], dim=1)
    with torch.no_grad():
        net[0].weight.copy_(torch.cat([w, -w]).float())
        net[0].bias.zero_()
        net[2].weight.copy_(torch.eye(h1))
        net[2].bias.zero_()
        net[4].weight.fill_(-np.pi / (2 * k))     # mean of sum_k |cos| is 2K/pi
        net[4].bias.fill_(radius)
    return net


# ----------------------------------------------------------------------------- generation

@dataclass(frozen=True)
class Generated:
    directory: Path
    name: str                 # the barrier's namespace / header stem
    tag: str                  # model hash from the header banner
    workspace_bytes: int
    compiled: Any             # compiler.api.CompiledSource (header text, IR model)
    config: RunConfig


def compile_barrier(model: Any, config: RunConfig, name: str = "barrier"):
    """The CompiledSource for ``model`` (torch module, ONNX path, IR, or already compiled)."""
    from compiler.api import CompiledSource, compile_model
    if isinstance(model, CompiledSource):
        if model.options.order != config.order:
            raise ValueError(f"barrier compiled for order {model.options.order}, run asks order {config.order}")
        return model
    return compile_model(model, inputs=config.plant().m, order=config.order, name=name)


def generate(model: Any, config: RunConfig, out_dir: str | Path, name: str = "barrier") -> Generated:
    """Write the barrier header, ``cbf_system.hpp`` and ``cbf_config.hpp`` into ``out_dir``."""
    compiled = compile_barrier(model, config, name)
    system = config.plant()
    if config.nominal not in system.nominal_names:
        raise ValueError(f"{system.name} has no nominal controller {config.nominal!r}; "
                         f"available: {', '.join(system.nominal_names)}")
    if len(config.x0) != system.n:
        raise ValueError(f"x0 must have {system.n} entries for {system.name}, got {len(config.x0)}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    compiled.write(out)
    name = compiled.name
    plant = system.cpp_source("cbf_config::plant", scalar="float", math_prefix=f"{name}::detail::m_")
    used = re.search(r"// math functions: (.*)", plant).group(1)
    missing = [fn for fn in re.findall(r"\w+", used)
               if fn != "none" and f" m_{fn}(" not in compiled.header]
    if missing:
        raise ValueError(f"{system.name} needs math functions the barrier header lacks: {missing}")
    tag_match = re.search(r"model sha256 ([0-9a-f]+)", compiled.header)
    tag = tag_match.group(1) if tag_match else "unknown"
    workspace = compiled.report.workspace_scalars * compiled.report.scalar_bytes   # = kWorkspaceBytes
    lo, hi = system.domain
    a1, a2 = config.alphas
    if config.order == 1:
        call = "(void)Dff;\n    (void)DfG;\n    return barrier::lie(x, f, G, out);"
    else:
        call = "return barrier::lie2(x, f, G, Dff, DfG, out);"
    text = f"""// cbf_config.hpp: generated by cbfsim/device.py. Do not edit.
// system {system.name!r}, nominal {config.nominal!r}, order {config.order}, barrier {name} ({tag})
#ifndef CBF_CONFIG_HPP
#define CBF_CONFIG_HPP
#include <cstdint>
#include "{name}.hpp"
#include "cbf_system.hpp"

namespace cbf_config {{

namespace barrier = ::{name};
inline constexpr int kOrder = {config.order};
inline constexpr float kAlpha1 = {_cpp_float(a1)};
inline constexpr float kAlpha2 = {_cpp_float(a2)};
inline constexpr float kDt = {_cpp_float(config.dt)};
inline constexpr std::uint32_t kSubsteps = {config.substeps}u;
inline constexpr std::uint32_t kSteps = {config.steps}u;
inline constexpr float kX0[{system.n}] = {_cpp_floats(config.x0)};
inline constexpr float kDomainLo[{system.n}] = {_cpp_floats(lo)};
inline constexpr float kDomainHi[{system.n}] = {_cpp_floats(hi)};
inline constexpr std::uint32_t kSeed = {config.seed:#x}u;
inline constexpr int kBenchCalls = {config.bench_calls};
inline constexpr char kModelTag[] = "{tag}";

inline void nominal(const float* x, float* u) noexcept {{ plant::nominal_{config.nominal}(x, u); }}

// The barrier entry the firmware times: lie (order 1) or lie2 (order 2).
inline int barrier_call(const float* x, const float* f, const float* G, const float* Dff, const float* DfG,
                        float* out) noexcept {{
    {call}
}}

}}  // namespace cbf_config

#endif  // CBF_CONFIG_HPP
"""
    (out / "cbf_system.hpp").write_text("#pragma once\n" + plant)
    (out / "cbf_config.hpp").write_text(text)
    return Generated(out, name, tag, workspace, compiled, config)


# ----------------------------------------------------------------------------- build and run

def _tool(target: str, tool: str) -> None:
    import shutil
    if shutil.which(tool) is None:
        raise ToolchainError(f"{tool} not found; install it with: {INSTALL[target]}")
    if shutil.which("make") is None:
        raise ToolchainError("make not found; install it with: apt-get install -y make")


def build(target: str, generated: Generated | None, out_dir: str | Path, modes: int = 3) -> Path:
    """Build ``target`` (host, m4, m7, xtensa or filter-check) with firmware/Makefile."""
    tools = {"host": "g++", "filter-check": "g++", "m4": "arm-none-eabi-g++", "m7": "arm-none-eabi-g++",
             "xtensa": "xtensa-lx106-elf-g++"}
    if target not in tools:
        raise ValueError(f"unknown target {target!r}; choose from {', '.join(tools)}")
    _tool(target if target in INSTALL else "host", tools[target])
    out = Path(out_dir).resolve()
    command = ["make", "--no-print-directory", "-C", str(FIRMWARE_DIR), f"OUT={out}", f"MODES={modes}", target]
    if generated is not None:
        command.insert(-1, f"GEN={generated.directory.resolve()}")
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise ToolchainError(f"building {target} failed", command, result.stdout + result.stderr)
    return out / {"host": "host/fw_host", "filter-check": "host/filter_check", "m4": "m4/fw.elf",
                  "m7": "m7/fw.elf", "xtensa": "xtensa/app.o"}[target]


def run_command(target: str, program: str | Path) -> list[str]:
    """The command that runs a built program (QEMU for the Cortex-M targets)."""
    if target == "host":
        return [str(program)]
    return ["qemu-system-arm", "-M", QEMU_MACHINE[target], "-nographic", "-monitor", "none", "-serial", "stdio",
            "-semihosting-config", "enable=on,target=native", "-icount", "shift=0", "-kernel", str(program)]


def run(target: str, program: str | Path, timeout: float = 120.0) -> str:
    """Run and return stdout; a nonzero exit or a timeout raises DeviceError."""
    if target in QEMU_MACHINE:
        _tool(target, "qemu-system-arm")
    if not Path(program).exists():  # QEMU idles forever on a missing ELF
        raise DeviceError(f"{program} does not exist")
    command = run_command(target, program)
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise DeviceError(f"{' '.join(command)} timed out after {timeout} s") from exc
    if result.returncode != 0:
        raise DeviceError(f"{' '.join(command)} exited with {result.returncode}\n{result.stderr[-2000:]}"
                          f"\n{result.stdout[-500:]}")
    return result.stdout


# ----------------------------------------------------------------------------- log protocol

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
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        try:
            if line.startswith("H port="):
                header = dict(kv.split("=", 1) for kv in line[2:].split())
                rows, status, final, bench, end, facts = [], [], None, None, None, {}
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
                     np.array(status, dtype=np.int8), bits.ravel(), bench, end, facts)


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


def bench_summary(log: DeviceLog) -> dict[str, Any]:
    """Benchmark numbers with their unit; SysTick ticks are also given as instructions."""
    if log.bench is None:
        raise DeviceError("the log has no benchmark line")
    out = dict(log.bench)
    if str(out.get("unit", "")).startswith("systick"):
        for key in ("median", "max", "min", "overhead"):
            out[f"{key}_instructions"] = out[key] * INSTRUCTIONS_PER_SYSTICK
    return out


# ----------------------------------------------------------------------------- float64 reference

class ReferenceBarrier:
    """The compiled network's IR evaluated in float64 by ``compiler.reference``, as a cbfsim
    ``Barrier``: the same network as the device's float32 header, computed independently."""

    def __init__(self, model: Any, m: int, order: int):
        self.model, self.n, self.m, self.order = model, int(model.input_dim), int(m), int(order)

    def value(self, x: np.ndarray) -> np.ndarray:
        from compiler import reference as ref
        return ref.value(self.model, x)

    def lie(self, x: np.ndarray, F: np.ndarray, G: np.ndarray):
        from cbfsim.barriers import LieTerms
        from compiler import reference as ref
        return LieTerms(*ref.lie(self.model, x, F, G))

    def lie2(self, x: np.ndarray, F: np.ndarray, G: np.ndarray, Dff: np.ndarray, DfG: np.ndarray):
        from cbfsim.barriers import LieTerms2
        from compiler import reference as ref
        return LieTerms2(*ref.lie2(self.model, x, F, G, Dff, DfG))


@dataclass
class ReferenceRun:
    x: np.ndarray       # (N+1, n)
    u_nom: np.ndarray   # (N, m)
    u: np.ndarray
    h: np.ndarray       # (N,)
    status: np.ndarray  # (N,) the firmware's codes: 0 nominal, 1 active, 2 infeasible
    trajectory: Any     # the cbfsim.trajectory.Trajectory (batch of one)


def reference_run(generated_or_model: Any, config: RunConfig) -> ReferenceRun:
    """The firmware's closed loop with cbfsim's simulator in float64: RK4 with zero-order
    hold, the exact projection filter (least-violation input when infeasible, as on the
    device) and the network through the float64 reference interpreter. Constants are the
    float32 values the device uses, so both simulate the same problem."""
    from cbfsim.classk import Linear
    from cbfsim.filters import CBFProjection, HOCBFQP
    from cbfsim.simulate import simulate

    compiled = (generated_or_model.compiled if isinstance(generated_or_model, Generated)
                else compile_barrier(generated_or_model, config))
    system = config.plant()
    bounds = (system.u_min.astype(np.float32), system.u_max.astype(np.float32))
    a1, a2 = (f32(a) for a in config.alphas)
    if config.order == 1:
        filt = CBFProjection(bounds, Linear(a1), slack_penalty=np.inf)
    else:
        filt = HOCBFQP(bounds, Linear(a1), Linear(a2), solver="projection", slack_penalty=np.inf)
    dt = f32(config.dt)
    traj = simulate(system, ReferenceBarrier(compiled.model, system.m, config.order), filt, config.nominal,
                    np.array([f32(v) for v in config.x0]), t_final=config.steps * dt, dt_control=dt,
                    dt_int=dt / config.substeps).single()
    # the firmware's status: nominal kept (row holds at the clipped nominal), active, infeasible
    h, lf = traj.h[0, :-1], traj.Lf[0]
    if config.order == 1:
        a, b = lf + a1 * h, traj.Lg[0]
    else:
        a, b = traj.Lf2[0] + a1 * lf + a2 * (lf + a1 * h), traj.LgLf[0]
    g0 = a + np.einsum("km,km->k", b, np.clip(traj.u_nom[0], *bounds))
    status = np.where(g0 >= 0, 0, np.where(traj.status[0] == 0, 1, 2)).astype(np.int8)
    return ReferenceRun(traj.x[0], traj.u_nom[0], traj.u[0], h, status, traj)


# ----------------------------------------------------------------------------- ELF reports

def _lines(command: list[str]) -> list[str]:
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise ToolchainError("inspecting the ELF failed", command, result.stderr)
    return result.stdout.splitlines()


def footprint(elf: str | Path, size_tool: str = "arm-none-eabi-size") -> dict[str, Any]:
    """``size -A`` per allocated section, and flash (code + constants + .data image) / RAM
    (.data + .bss + reserved stack) totals in bytes."""
    sections: dict[str, dict[str, int]] = {}
    for line in _lines([size_tool, "-A", "-d", str(elf)]):
        parts = line.split()
        if len(parts) == 3 and parts[0].startswith(".") and parts[2].isdigit():
            size, addr = int(parts[1]), int(parts[2])
            if addr != 0 or parts[0] == ".isr_vector":
                sections[parts[0]] = {"size": size, "addr": addr}
    ram = {k: v["size"] for k, v in sections.items() if v["addr"] >= 0x20000000}
    flash = {k: v["size"] for k, v in sections.items() if v["addr"] < 0x20000000}
    return {"sections": {k: v["size"] for k, v in sections.items()},
            "flash_bytes": sum(flash.values()) + ram.get(".data", 0),
            "ram_bytes": sum(ram.values()),
            "ram_without_stack_bytes": sum(v for k, v in ram.items() if k != ".stack")}


def heap_symbols(elf: str | Path, nm_tool: str = "arm-none-eabi-nm") -> list[str]:
    """Which of HEAP_SYMBOLS the ELF defines or references (must be empty)."""
    names = {line.split()[-1] for line in _lines([nm_tool, str(elf)]) if line.strip()}
    return sorted(names & set(HEAP_SYMBOLS))


def symbol_size(elf: str | Path, demangled_name: str, objdump_tool: str = "arm-none-eabi-objdump") -> tuple[int, str]:
    """(size in bytes, section) of a data symbol, e.g. ``barrier::g_workspace`` -> (768, '.bss')."""
    for line in _lines([objdump_tool, "-t", "-C", str(elf)]):
        left, tab, right = line.partition("\t")
        parts = right.split(maxsplit=1)
        if tab and len(parts) == 2 and parts[1] == demangled_name:
            return int(parts[0], 16), left.split()[-1]
    raise DeviceError(f"symbol {demangled_name} not in {elf}")


def _function_name(title: str, label: str) -> str:
    """GCC labels a partial clone (``f.part.0``) "0(args)": name it from the title's symbol."""
    if not re.match(r"\d+\(", label):
        return label
    symbol = title.rsplit(":", 1)[-1]
    base, _, clone = symbol.partition(".")
    filt = shutil.which("c++filt")
    if filt:
        base = subprocess.run([filt, base], capture_output=True, text=True).stdout.strip() or base
    return f"{base} [{clone}]" if clone else base


def _parse_ci(text: str) -> tuple[dict[str, tuple[str, int]], dict[str, set[str]]]:
    """GCC -fcallgraph-info=su (VCG): node title -> (name, static bytes) and call edges."""
    nodes: dict[str, tuple[str, int]] = {}
    edges: dict[str, set[str]] = {}
    for title, label in re.findall(r'node:\s*\{\s*title:\s*"([^"]+)"\s*label:\s*"([^"]*)"', text):
        stack = re.search(r"(\d+) bytes \((static|dynamic|dynamic,bounded)\)", label)
        if stack:  # nodes without a number are library functions compiled elsewhere
            nodes[title] = (_function_name(title, label.split("\\n")[0]), int(stack.group(1)))
    for src, dst in re.findall(r'edge:\s*\{\s*sourcename:\s*"([^"]+)"\s*targetname:\s*"([^"]+)"', text):
        edges.setdefault(src, set()).add(dst)
    return nodes, edges


@dataclass
class StackReport:
    worst_bytes: int
    path: list[str]
    per_function: dict[str, int]
    unknown: list[str]   # callees without stack data (library code), counted as 0


def stack_report(build_dir: str | Path, entry: str = "reset_c") -> StackReport:
    """Worst-case stack from ``-fstack-usage`` numbers along the ``-fcallgraph-info`` call
    graph, starting at ``entry`` (the call graph of this firmware is acyclic: no recursion).
    Exception handlers run on the same stack but do not nest with the app, so they are
    reported separately by the caller if needed."""
    nodes: dict[str, tuple[str, int]] = {}
    edges: dict[str, set[str]] = {}
    for ci in Path(build_dir).glob("*.ci"):
        n, e = _parse_ci(ci.read_text())
        nodes.update(n)
        for k, v in e.items():
            edges.setdefault(k, set()).update(v)
    titles = {name: title for title, (name, _) in nodes.items()}
    start = titles.get(entry, entry)
    memo: dict[str, tuple[int, list[str]]] = {}
    unknown: set[str] = set()

    def worst(node: str, depth: int = 0) -> tuple[int, list[str]]:
        if node in memo:
            return memo[node]
        if depth > 200:
            raise DeviceError("call graph deeper than 200: recursion?")
        own = nodes.get(node, (node, 0))
        if node not in nodes:
            unknown.add(node)
        best = (0, [])
        for callee in edges.get(node, ()):
            cand = worst(callee, depth + 1)
            best = max(best, cand, key=lambda c: c[0])
        memo[node] = (own[1] + best[0], [own[0]] + best[1])
        return memo[node]

    total, path = worst(start)
    per_fn = {name: size for name, size in nodes.values() if size}
    return StackReport(total, path, per_fn, sorted(unknown))


# ----------------------------------------------------------------------------- comparison

def max_abs_diff(a: np.ndarray, b: np.ndarray) -> float:
    """max |a - b| over matching rows (the shorter run decides the length)."""
    k = min(len(a), len(b))
    return float(np.max(np.abs(np.asarray(a[:k]) - np.asarray(b[:k])))) if k else float("nan")


def bit_identical(a: DeviceLog, b: DeviceLog) -> bool:
    return a.bits.shape == b.bits.shape and bool(np.array_equal(a.bits, b.bits))


def summary(log: DeviceLog, ref: ReferenceRun) -> dict[str, Any]:
    """Per-target comparison numbers (JSON-friendly)."""
    return {"port": log.port, "steps": int(len(log.u)), "max_abs_dx": max_abs_diff(log.x, ref.x),
            "max_abs_du": max_abs_diff(log.u, ref.u), "min_h_device": float(np.min(log.h)) if len(log.h) else None,
            "status_counts": {STATUS_NAMES[s]: int(np.sum(log.status == s)) for s in range(4)}}


# ----------------------------------------------------------------------------- command line

def main(argv: list[str] | None = None) -> None:
    """``python -m cbfsim.device generate --model m.onnx --system van_der_pol --out DIR``:
    the headers an ESP-IDF build (firmware/esp32) or a hand-run make needs."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate")
    gen.add_argument("--model", required=True, help="ONNX barrier, or 'polygon-demo' (polygon_disk_barrier)")
    gen.add_argument("--system", default="van_der_pol")
    gen.add_argument("--nominal", default="zero")
    gen.add_argument("--order", type=int, default=1)
    gen.add_argument("--alpha", type=float, nargs="+", default=[1.0])
    gen.add_argument("--x0", type=float, nargs="+", default=[0.5, 0.0])
    gen.add_argument("--dt", type=float, default=1e-3)
    gen.add_argument("--steps", type=int, default=10_000)
    gen.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    config = RunConfig(system=args.system, x0=tuple(args.x0), nominal=args.nominal, order=args.order,
                       alpha=tuple(args.alpha), dt=args.dt, steps=args.steps)
    model = polygon_disk_barrier() if args.model == "polygon-demo" else args.model
    generated = generate(model, config, args.out)
    print(json.dumps({"directory": str(generated.directory), "barrier": generated.name, "tag": generated.tag,
                      "config": asdict(config)}, indent=2))


if __name__ == "__main__":
    main()
