"""k > 1 filter rows on the device, end to end: the bicycle with its shipped lane barrier
and a speed limit, on the host twin, the Cortex-M4F and the Cortex-M7 (QEMU), against the
Python CBFQP on the same P_rho (the machinery behind experiments/device_multirow.py).

Why a speed limit: h2 = v_max - v has relative degree 1 in the acceleration (L_G h2 = (-1, 0)),
so with the lane barrier it makes two order-1 rows that bind at the same time when the nominal
controller both speeds up (v_ref > v_max) and drifts out of the lane. It is compiled as a
one-layer network by the same compiler as the lane barrier, so the firmware gets a second,
namespaced barrier header and nothing is hand-written.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from compiler.errors import ToolchainError

from .card import shipped_card_run
from .config import Generated, RunConfig, generate
from .errors import DeviceConfigError
from .elf import bytes_by_object, defined_functions, footprint, heap_symbols, stack_report, symbol_sizes
from .protocol import DeviceLog, parse_log, solve_summary
from .qp import PREFIX
from .reference import bit_identical, max_abs_diff, reference_run
from .toolchain import QEMU_MACHINE, build, run

#: The per-solve agreement the tests hold the device's float QP to, against the Python CBFQP
#: (double, exact refinement) on the same P_rho, in input units (|u_dev - u_py|_inf).
#: Measured: ~1e-7 where the finishing step verifies, up to ~2e-4 where OSQP's iterate is returned.
DEVICE_U_TOL = 1e-3
#: A logged state violates a barrier when its h is below -this (float rounding of h itself).
VIOLATION_TOL = 1e-5
#: The closed loop's bar for max |x_device - x_python| (as for one row, checks.MAX_ABS_DX).
MAX_ABS_DX = 1e-3
#: Instrumentation arrays of the Q line (in .bss, not part of the filter's footprint).
INSTRUMENTATION = ("cbf_app::g_solve_ticks", "cbf_app::g_solve_iterations", "cbf_app::g_ticks")


def speed_limit_barrier(v_max: float, n: int = 4, index: int = 3):
    """h = v_max - x[index] as a torch nn.Sequential(nn.Linear(n, 1)) with fixed weights."""
    import torch

    if not (np.isfinite(v_max) and 0 <= index < n):
        raise DeviceConfigError(f"need a finite v_max and 0 <= index < n, got v_max={v_max!r}, index={index}, n={n}")
    net = torch.nn.Sequential(torch.nn.Linear(n, 1))
    with torch.no_grad():
        net[0].weight.zero_()
        net[0].weight[0, index] = -1.0
        net[0].bias.fill_(float(v_max))
    return net


@dataclass(frozen=True)
class MultiRowCase:
    """A k > 1 row run: the first barrier (model), its RunConfig and the further (model, name) rows."""

    model: Any
    config: RunConfig
    extra: tuple[tuple[Any, str], ...]
    names: tuple[str, ...]


MULTIROW_DT, MULTIROW_STEPS = 0.01, 500      # 5 s at 100 Hz (the lane barrier's certified hold is 2 ms;
#                                            the speed-limit row is not certified, so this run shows the QP)


def bicycle_case(v_max: float = 12.0, v_ref: float = 14.0, steps: int | None = None) -> MultiRowCase:
    """The shipped bicycle run (card, nominal 'drift', x0, 10 ms hold) with v_ref raised above
    the speed limit v_max: the lane barrier and h2 = v_max - v both bind."""
    run = shipped_card_run("bicycle")
    if not v_max > run.config.x0[3]:
        raise DeviceConfigError(f"v_max must exceed the initial speed {run.config.x0[3]} (x0 inside the safe set), got {v_max}")
    params = {**run.config.params, "v_ref": float(v_ref)}
    # (without the certificate's v faces: this run shows barrier rows; faces and k > 1 barriers do not mix yet)
    config = dataclasses.replace(run.config, params=params, dt=MULTIROW_DT, steps=int(steps or MULTIROW_STEPS), faces=())
    return MultiRowCase(run.model, config, ((speed_limit_barrier(v_max), "speed"),), ("barrier", "speed"))


def barrier_values(generated: Generated, x: np.ndarray) -> dict[str, np.ndarray]:
    """Each row's h at the states x (float64 reference interpreter of its compiled IR)."""
    from compiler import reference

    return {c.name: np.asarray(reference.value(c.model, np.asarray(x, dtype=np.float64)), dtype=np.float64)
            for c in generated.compiled_rows}


def constraint_report(generated: Generated, x: np.ndarray) -> dict[str, Any]:
    """Per barrier, and for the plant's own constraint (``system.constraint``, e.g. the lane):
    the smallest value along the states x and how many fall below -VIOLATION_TOL (a NaN value
    counts as one: it never compares as safe)."""
    values = barrier_values(generated, x)
    values["plant_constraint"] = np.asarray(generated.config.plant().constraint(np.asarray(x, dtype=np.float64)),
                                            dtype=np.float64)
    return {name: {"min": float(v.min()), "violations": int((~(v >= -VIOLATION_TOL)).sum())} for name, v in values.items()}


def footprint_report(program: Path) -> dict[str, Any]:
    """Flash (code + constants + the .data image), RAM (.data + .bss without the benchmark's and
    the Q line's instrumentation arrays; the stack reservation is reported apart), the OSQP
    workspace (every cbfqp_* object: data, settings, factorisation), OSQP's code and constants
    (from the link map), and the worst-case stack along the call graph with OSQP's calls
    through its linear-solver pointers charged conservatively."""
    fp = footprint(program)
    sec = fp["sections"]
    symbols = symbol_sizes(program)
    instrumentation = sum(symbols.get(name, (0, ""))[0] for name in INSTRUMENTATION)
    workspace = {name: size for name, (size, kind) in symbols.items()
                 if name.startswith(PREFIX) and kind in "DdBb"}
    per_object = bytes_by_object(program.parent / "fw.map")
    osqp_code = sum(size for obj, size in per_object.items() if obj.startswith("osqp_"))
    build_dir = program.parent
    qdldl = build_dir / "osqp_qdldl_interface.ci"
    stack = stack_report(build_dir, indirect_targets=defined_functions(qdldl) if qdldl.exists() else ())
    return {
        "flash_bytes": sum(sec.get(k, 0) for k in (".isr_vector", ".text", ".rodata", ".init_array", ".data")),
        "text_bytes": sec.get(".text", 0), "rodata_bytes": sec.get(".rodata", 0),
        "ram_bytes": sec.get(".data", 0) + sec.get(".bss", 0) - instrumentation,
        "data_bytes": sec.get(".data", 0), "bss_bytes": sec.get(".bss", 0) - instrumentation,
        "instrumentation_bytes": instrumentation, "stack_reserved_bytes": sec.get(".stack", 0),
        "osqp_workspace_bytes": sum(workspace.values()), "osqp_flash_bytes": osqp_code,
        "stack_static_worst_bytes": stack.worst_bytes, "stack_worst_path": stack.path,
        "stack_uninstrumented": stack.unknown, "heap_symbols": heap_symbols(program),
    }


def run_case(case: MultiRowCase, work: Path, targets: Sequence[str] = ("host", "m4", "m7"),
             timeout: float = 900.0) -> dict[str, Any]:
    """Generate, build and run ``case`` on every target that has a toolchain (host is required),
    run the Python reference, and return the comparison, constraint, cost and footprint facts."""
    generated = generate(case.model, case.config, work / "generated", name=case.names[0], extra=case.extra)
    logs: dict[str, DeviceLog] = {}
    programs: dict[str, Path] = {}
    skipped: dict[str, str] = {}
    for target in ("host", *[t for t in targets if t != "host"]):
        try:
            programs[target] = build(target, generated, work / "build")
            logs[target] = parse_log(run(target, programs[target], timeout=timeout))
        except ToolchainError as exc:
            if target == "host":
                raise
            skipped[target] = str(exc).splitlines()[0]
    ref = reference_run(generated, case.config)
    py_u, py_status = ref.u, ref.status
    out: dict[str, Any] = {
        "rows": generated.rows, "names": list(case.names), "slack_penalty": generated.qp.slack_penalty,
        "slack_tol": generated.qp.slack_tol, "steps": case.config.steps, "skipped": skipped,
        "python": {"status_counts": np.bincount(py_status, minlength=4).tolist(),
                   "constraints": constraint_report(generated, ref.x)},
        "targets": {},
    }
    for name, log in logs.items():
        entry: dict[str, Any] = {
            "bit_identical_to_host": bit_identical(log, logs["host"]),
            "max_abs_dx": max_abs_diff(log.x, ref.x), "max_abs_du": max_abs_diff(log.u, py_u),
            "status_counts": np.bincount(log.status, minlength=4).tolist(),
            "status_equal_python": bool(np.array_equal(log.status, py_status[:len(log.status)])),
            "constraints": constraint_report(generated, log.x), "solve": solve_summary(log),
        }
        if name in QEMU_MACHINE:
            entry["footprint"] = footprint_report(programs[name])
            entry["stack_measured_peak_bytes"] = int(log.port_facts.get("stack_peak", 0))
        out["targets"][name] = entry
    entries = out["targets"].values()
    out["checks"] = {
        "bit_identical": all(e["bit_identical_to_host"] for e in entries),
        "max_abs_dx": max(e["max_abs_dx"] for e in entries),
        "max_abs_dx_bar": MAX_ABS_DX,
        "violations": sum(c["violations"] for e in entries for c in e["constraints"].values()),
        "heap_symbols": sorted({s for e in entries for s in e.get("footprint", {}).get("heap_symbols", [])}),
    }
    c = out["checks"]
    c["ok"] = bool(c["bit_identical"] and c["max_abs_dx"] <= MAX_ABS_DX and c["violations"] == 0 and not c["heap_symbols"])
    return out
