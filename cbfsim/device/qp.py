"""The filter QP for k > 1 rows on the device: OSQP's own code generation, set up with the
problem the Python filter solves (``QPRowSolver.problem``: z = (u, s), the rows, the box,
s >= 0), emitted as static, malloc-free C in float with matrix updates (OSQP_EMBEDDED_MODE 2:
the rows' gains change every step) and no printing, timing or interrupts.

Why OSQP and not a hand-written active set: it is the solver the Python filter runs, so the
device solves the same P_rho with the same two phases (firmware/common/qp_filter.hpp); only
the arithmetic (float) and the finishing step differ. One row keeps the exact projection
(firmware/common/filter.hpp): exact, faster and without iterations.

The emitted tree (``osqp/`` in the generated directory) holds OSQP's sources, its headers,
``osqp_configure.h`` and the workspace ``cbfqp_workspace.{c,h}`` (all static data);
``cbf_qp_config.hpp`` holds the constants the C++ side needs. firmware/Makefile compiles
every ``osqp/src/*.c`` and the workspace with OSQP's own warning set (see OSQP_WARN there).
"""
from __future__ import annotations

import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..filters.base import check_penalty, input_bounds
from ..filters.cbf_qp import DECIDE_OFFSET, QPRowSolver

#: Symbol prefix of the emitted workspace (``cbfqp_solver``); firmware/common/qp_filter.hpp uses it.
PREFIX = "cbfqp_"
#: Directory of the emitted OSQP tree inside the generated directory (firmware/Makefile looks for it).
OSQP_DIR = "osqp"

#: OSQP settings of the device's solver. Float has ~7 digits, so the Python filter's 1e-9
#: tolerances cannot be met; 1e-5 (absolute and relative, on unit-gain rows: input units) is
#: reached reliably, and the finishing step in qp_filter.hpp then makes the answer exact to
#: float rounding when it can verify it. max_iter bounds the worst-case cost of one phase;
#: the rho adaptation runs on a fixed interval (never on measured time: bit identity).
#: Polishing is not available in embedded code; warm starts are.
DEVICE_OSQP_SETTINGS: dict[str, Any] = dict(
    rho=0.1, eps_abs=1e-5, eps_rel=1e-5, eps_prim_inf=1e-4, eps_dual_inf=1e-4, max_iter=500, polishing=False,
    warm_starting=True, adaptive_rho=1, adaptive_rho_interval=25, check_termination=5, scaling=10,
    verbose=False,
)

#: The device's default slack price rho for k > 1 rows. In float the relaxed phase of P_rho does
#: not converge at the Python default 1e6 (the multiplier of s >= 0 is rho, ~1e6 against O(1)
#: data: of 600 random 3-row problems, 13 ended unverified at max_iter, answers off by up to
#: 0.1); at 1e3 none did (max |du| 2e-4). The Python filter a device run is compared with is
#: built with the same rho (the same problem).
DEVICE_SLACK_PENALTY = 1e3

#: Violation of a unit-gain row (input units) above which the device reports SLACK_ACTIVE.
DEVICE_SLACK_TOL = 1e-4


@dataclass(frozen=True)
class QPSpec:
    """What fixes the emitted solver: the box, the number of rows, the slack price rho."""

    u_min: tuple[float, ...]
    u_max: tuple[float, ...]
    n_rows: int
    slack_penalty: float = DEVICE_SLACK_PENALTY
    slack_tol: float = DEVICE_SLACK_TOL
    settings: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        input_bounds((self.u_min, self.u_max))          # one-line errors for a bad box
        if int(self.n_rows) < 2:
            raise ValueError(f"the generated QP is for k >= 2 rows (one row uses the exact projection), "
                             f"got {self.n_rows}")
        rho = check_penalty(self.slack_penalty)
        if not np.isfinite(rho) or rho > 1e12:
            raise ValueError(f"slack_penalty must be finite and <= 1e12 on the device, got {self.slack_penalty!r}")
        if not (self.slack_tol > 0 and np.isfinite(self.slack_tol)):
            raise ValueError(f"slack_tol must be a finite number > 0, got {self.slack_tol!r}")
        unknown = set(self.settings) - set(DEVICE_OSQP_SETTINGS)
        if unknown:
            raise ValueError(f"unknown device OSQP settings {sorted(unknown)}; known: {sorted(DEVICE_OSQP_SETTINGS)}")

    @property
    def m(self) -> int:
        return len(self.u_min)

    def osqp_settings(self) -> dict[str, Any]:
        return {**DEVICE_OSQP_SETTINGS, **self.settings}


def _cpp_float(value: float) -> str:
    if np.isinf(value):
        return ("-" if value < 0 else "") + "kInfinity"
    return float.hex(float(np.float32(value))) + "f"


def emit_qp(spec: QPSpec, out_dir: str | Path, use_float: bool = True) -> Path:
    """Emit the solver into ``out_dir/osqp`` and ``out_dir/cbf_qp_config.hpp``; returns the osqp dir.
    ``use_float=False`` emits a double build (for tests that separate solver error from float rounding)."""
    import osqp

    row = QPRowSolver(spec.u_min, spec.u_max, spec.n_rows, spec.slack_penalty)
    P, q, A, lo, hi = row.problem("hard")
    out = Path(out_dir)
    target = out / OSQP_DIR
    with tempfile.TemporaryDirectory(prefix="cbfsim-osqp-") as tmp:
        solver = osqp.OSQP()
        solver.setup(P, q, A, lo, hi, **spec.osqp_settings())
        solver.codegen(tmp, prefix=PREFIX, parameters="matrices", use_float=use_float, force_rewrite=True,
                       printing_enable=False, profiling_enable=False, interrupt_enable=False,
                       include_codegen_src=True, compile=False)
        check_emitted(Path(tmp), use_float)
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        shutil.copytree(Path(tmp) / "src", target / "src")
        shutil.copytree(Path(tmp) / "inc", target / "inc")
        for name in ("osqp_configure.h", f"{PREFIX}workspace.h", f"{PREFIX}workspace.c"):
            shutil.copy(Path(tmp) / name, target / name)
    (out / "cbf_qp_config.hpp").write_text(config_header(spec, row, use_float))
    return target


def check_emitted(folder: Path, use_float: bool) -> None:
    """The emitted configuration must be what the firmware needs (RuntimeError otherwise): embedded
    mode 2, the requested precision, no printing/profiling/interrupts, and a workspace of static
    data only (no heap call anywhere outside the code OSQP compiles out in embedded mode)."""
    conf = (folder / "osqp_configure.h").read_text()
    defined = set(re.findall(r"#define\s+(\w+)", conf))
    wanted = {"OSQP_EMBEDDED_MODE", "OSQP_ALGEBRA_BUILTIN"} | ({"OSQP_USE_FLOAT"} if use_float else set())
    banned = {"OSQP_ENABLE_PRINTING", "OSQP_ENABLE_PROFILING", "OSQP_ENABLE_INTERRUPT", "OSQP_ENABLE_DERIVATIVES"}
    if not re.search(r"#define\s+OSQP_EMBEDDED_MODE\s+2\b", conf) or wanted - defined or banned & defined:
        raise RuntimeError(f"OSQP emitted an unexpected configuration: {sorted(defined)}")
    workspace = (folder / f"{PREFIX}workspace.c").read_text()
    if re.search(r"\b(c_)?(malloc|calloc|realloc|free)\s*\(", workspace):
        raise RuntimeError("the emitted OSQP workspace calls the heap")


def config_header(spec: QPSpec, row: QPRowSolver, use_float: bool) -> str:
    """cbf_qp_config.hpp: the sizes, the A slots of the gains and the filter constants."""
    k, m = spec.n_rows, spec.m
    slots = ", ".join(str(int(s)) for s in row.b_slots)          # column-major over u_j: slot of b_ij at j*k+i
    lo = ", ".join(_cpp_float(v) for v in spec.u_min)
    hi = ", ".join(_cpp_float(v) for v in spec.u_max)
    return f"""// cbf_qp_config.hpp: generated by cbfsim/device/qp.py. Do not edit.
// The multi-row filter QP (firmware/common/qp_filter.hpp) on the OSQP solver emitted into osqp/.
#ifndef CBF_QP_CONFIG_HPP
#define CBF_QP_CONFIG_HPP

namespace cbf_qp_config {{

inline constexpr int kRows = {k};
inline constexpr int kInputs = {m};
inline constexpr bool kFloatSolver = {'true' if use_float else 'false'};
inline constexpr float kInfinity = 1e30f;             // OSQP_INFTY: |v| >= it is infinite
inline constexpr float kSlackPenalty = {_cpp_float(spec.slack_penalty)};   // rho
inline constexpr float kSlackTol = {_cpp_float(spec.slack_tol)};   // unit-gain row violation -> SLACK_ACTIVE
inline constexpr float kAdmmRho = {_cpp_float(spec.osqp_settings().get("rho", 0.1))};   // OSQP's initial ADMM rho
inline constexpr float kDecideOffset = {_cpp_float(DECIDE_OFFSET)};  // cbf_qp.DECIDE_OFFSET
inline constexpr float kUMin[{m}] = {{{lo}}};   // the box the workspace was set up with
inline constexpr float kUMax[{m}] = {{{hi}}};
// Position of b_ij in A's data (i row, j input), in the order i + k*j (column-major over u_j).
inline constexpr int kGainSlot[{k * m}] = {{{slots}}};
inline constexpr int kNnzA = {int(row.problem()[2].nnz)};

}}  // namespace cbf_qp_config

#endif  // CBF_QP_CONFIG_HPP
"""
