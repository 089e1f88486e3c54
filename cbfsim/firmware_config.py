"""What fixes a firmware run besides the model, and the generated headers that carry it:
the barrier header, ``cbf_system.hpp`` (the plant from ``systems/``) and ``cbf_config.hpp``.

Why here and not in cbfsim/device: the compiled engine (cbfsim/engine.py) builds the same
headers for the host, and the device tooling (cbfsim/device) builds them for the boards; both
import this module, which imports neither, so a host simulation needs nothing from the device
package. The k > 1 rows' QP (cbfsim/device/qp.py) is added by ``cbfsim.device.generate``."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from training.margin import Margin

from compiler.errors import CbfsimError

from .filters.base import check_margin
from .filters.fallback import Fallback


class DeviceConfigError(CbfsimError, ValueError):
    """A device run that cannot be configured as asked: a model card that does not match its
    plant, a missing nominal controller or x0, an unknown run option (the message names it)."""


@dataclass(frozen=True)
class RunConfig:
    """Everything besides the model that fixes a firmware run (all stored as float32 on the device).

    alpha: linear class-K gains, (alpha1,) for order 1 or (alpha1, alpha2) for order 2.
    margin: the filter enforces a + b.u >= margin; fallback: its fault policy (cbfsim/filters).
    domain: (lo, hi), the box the benchmark draws its states from (a model card's training box;
    None: the plant's domain). ``cbfsim.device.card_run`` builds one from a model card.
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
    margin: float | Margin = 0.0
    fallback: Fallback = Fallback()
    domain: tuple[tuple[float, ...], tuple[float, ...]] | None = None
    faces: tuple = ()         # training.certify.faces.Face rows the filter enforces (cbfsim/face_rows.py)

    def __post_init__(self) -> None:
        check_margin(self.margin)
        if self.faces:
            from .face_rows import check_faces
            check_faces(self.faces, len(self.x0))
        check_float32("alpha", self.alpha)
        check_float32("dt", self.dt)
        if self.params:
            for key, value in self.params.items():
                check_float32(f"params[{key!r}]", value)
        if self.domain is not None and len(self.domain) == 2:
            check_float32("domain lo", self.domain[0])
            check_float32("domain hi", self.domain[1])
        if self.order not in (1, 2):
            raise ValueError(f"order must be 1 or 2, got {self.order}")
        if len(self.alpha) not in (1, 2) or any(not (float(a) > 0) for a in self.alpha):
            raise ValueError(f"alpha must hold one or two positive gains, got {self.alpha}")
        if not (self.dt > 0 and self.steps >= 1 and self.substeps >= 1 and self.bench_calls >= 1):
            raise ValueError("dt must be > 0 and steps, substeps, bench_calls >= 1")
        if self.domain is not None and (len(self.domain) != 2 or len(self.domain[0]) != len(self.domain[1])
                                        or not all(a < b for a, b in zip(*self.domain))):
            raise ValueError(f"domain must be (lo, hi) with lo < hi componentwise, got {self.domain}")
        if not 0 < self.seed < 2**32:
            raise ValueError(f"seed must be a nonzero 32-bit value (xorshift32), got {self.seed}")

    @property
    def alphas(self) -> tuple[float, float]:
        return float(self.alpha[0]), float(self.alpha[-1])

    def plant(self):
        from systems import get_system
        return get_system(self.system, **self.params)


F32_MAX = float(np.finfo(np.float32).max)


def check_float32(field_name: str, values: Any) -> None:
    """Every entry of ``values`` is a finite number that float32 holds (the device stores
    float32): else DeviceConfigError naming the field and entry (a NaN start state once wrote
    ``nanf`` into cbf_config.hpp, and 1e39 became inf)."""
    items = list(np.ravel(np.asarray(values, dtype=object)))
    for i, value in enumerate(items):
        where = f"{field_name}[{i}]" if len(items) > 1 or np.ndim(values) else field_name
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise DeviceConfigError(f"{where} must be a number, got {value!r}")
        if not np.isfinite(float(value)):
            raise DeviceConfigError(f"{where} is {float(value)}; it must be a finite number")
        if abs(float(value)) > F32_MAX:
            raise DeviceConfigError(f"{where} = {float(value):g} overflows float32 (largest {F32_MAX:g}), which the "
                                    "device stores")


def f32(value: float) -> float:
    """The float32 the device stores for ``value``, as a Python float."""
    return float(np.float32(value))


def _cpp_float(value: float) -> str:
    """Exact float32 literal (hex float), clean under -Wdouble-promotion."""
    return float.hex(f32(value)) + "f"


def _cpp_floats(values: Any) -> str:
    return "{" + ", ".join(_cpp_float(v) for v in np.ravel(values)) + "}"


def _periodic_lines(system: Any) -> str:
    """kPeriod (0: not periodic) and kWrapLo, the plant's periodic coordinates for the closed
    loop's wrap_periodic (firmware/common/step.hpp), as ``system.wrap`` keeps them in Python."""
    period = [system.periodic.get(i, 0.0) for i in range(system.n)]
    wrap_lo = [lo if p > 0 else 0.0 for lo, p in zip(system.domain[0], period)]
    return (f"// periodic coordinates: x_i is kept in [kWrapLo_i, kWrapLo_i + kPeriod_i) (kPeriod_i = 0: not periodic)\n"
            f"inline constexpr float kPeriod[{system.n}] = {_cpp_floats(period)};\n"
            f"inline constexpr float kWrapLo[{system.n}] = {_cpp_floats(wrap_lo)};")


@dataclass(frozen=True)
class Generated:
    directory: Path
    name: str                 # the barrier's namespace / header stem
    tag: str                  # model hash from the header banner
    workspace_bytes: int
    compiled: Any             # compiler.api.CompiledSource (header text, IR model)
    config: RunConfig
    extra: tuple[Any, ...] = ()   # the CompiledSource of rows 1.. (k > 1 rows), in row order
    qp: Any = None                # cbfsim.device.qp.QPSpec of the generated solver (k > 1 rows)

    @property
    def rows(self) -> int:
        return 1 + len(self.extra)

    @property
    def compiled_rows(self) -> tuple[Any, ...]:
        return (self.compiled, *self.extra)


def compiled_source(model: Any, config: RunConfig, name: str = "barrier"):
    """The CompiledSource for ``model`` (torch module, ONNX path, IR, or already compiled)."""
    from compiler.api import CompiledSource, compile_model
    if isinstance(model, CompiledSource):
        if model.options.order != config.order:
            raise ValueError(f"barrier compiled for order {model.options.order}, run asks order {config.order}")
        return model
    return compile_model(model, inputs=config.plant().m, order=config.order, name=name, math=plant_math(config))


def plant_math(config: RunConfig) -> tuple[str, ...]:
    """The header math functions the plant's C++ calls (its 'math functions:' line), which the
    barrier header must carry besides its own; ones the header cannot offer are reported by generate()."""
    from compiler.cppmath import MATH_FUNCTIONS
    plant = config.plant().cpp_source("cbf_config::plant", scalar="float", math_prefix="m_")
    used = re.search(r"// math functions: (.*)", plant).group(1)
    return tuple(fn for fn in re.findall(r"\w+", used) if fn in MATH_FUNCTIONS)


def check_against_plant(config: RunConfig, system: Any) -> None:
    """The run's nominal controller and x0 must exist for its plant (DeviceConfigError, a ValueError)."""
    if config.nominal not in system.nominal_names:
        raise DeviceConfigError(f"{system.name} has no nominal controller {config.nominal!r}; "
                                f"available: {', '.join(system.nominal_names)}")
    if len(config.x0) != system.n:
        raise DeviceConfigError(f"x0 must have {system.n} entries for {system.name}, got {len(config.x0)}")


# More filter rows: (config, plant, out_dir, cbf_config.hpp text) -> (their CompiledSources, the
# QP spec, the text with the rows added); cbfsim.device.generate passes one for k > 1 rows.
RowsWriter = Callable[[RunConfig, Any, Path, str], tuple[Sequence[Any], Any, str]]


def generate(model: Any, config: RunConfig, out_dir: str | Path, name: str = "barrier",
             rows: RowsWriter | None = None) -> Generated:
    """Write the barrier header, ``cbf_system.hpp`` and ``cbf_config.hpp`` into ``out_dir``:
    the one-row firmware's (and the compiled engine's) config; ``rows`` adds k > 1 rows
    (``cbfsim.device.generate``, which takes the further barriers)."""
    from .filters.cpp import config_lines

    if not re.fullmatch(r"[A-Za-z_]\w*", name):
        raise ValueError(f"barrier names must be distinct C++ identifiers, got {[name]}")
    compiled = compiled_source(model, config, name)
    system = config.plant()
    check_against_plant(config, system)
    lo, hi = system.domain if config.domain is None else config.domain
    if len(lo) != system.n:
        raise ValueError(f"domain must have {system.n} entries per bound for {system.name}, got {len(lo)}")
    check_float32("x0", config.x0)            # before anything is written: all files or none
    check_float32("domain lo", lo)
    check_float32("domain hi", hi)
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
    a1, a2 = config.alphas
    if config.order == 1:
        call = "(void)Dff;\n    (void)DfG;\n    return barrier::lie(x, f, G, out);"
    else:
        call = "return barrier::lie2(x, f, G, Dff, DfG, out);"
    text = f"""// cbf_config.hpp: generated by cbfsim/firmware_config.py. Do not edit.
// system {system.name!r}, nominal {config.nominal!r}, order {config.order}, barrier {name} ({tag})
#ifndef CBF_CONFIG_HPP
#define CBF_CONFIG_HPP
#include <cstdint>
#include "{name}.hpp"
#include "cbf_system.hpp"
#include "filter_status.hpp"

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
{_periodic_lines(system)}
inline constexpr std::uint32_t kSeed = {config.seed:#x}u;
inline constexpr int kBenchCalls = {config.bench_calls};
inline constexpr char kModelTag[] = "{tag}";

inline void nominal(const float* x, float* u) noexcept {{ plant::nominal_{config.nominal}(x, u); }}

{config_lines(config.margin, config.fallback, system)}
// The barrier entry the firmware times: lie (order 1) or lie2 (order 2).
inline int barrier_call(const float* x, const float* f, const float* G, const float* Dff, const float* DfG,
                        float* out) noexcept {{
    {call}
}}

}}  // namespace cbf_config

#endif  // CBF_CONFIG_HPP
"""
    extras: Sequence[Any] = ()
    qp = None
    if rows is not None:
        if config.faces:
            raise ValueError("face rows with k > 1 barriers are not supported: give faces or extra barriers")
        extras, qp, text = rows(config, system, out, text)
    from .face_rows import with_faces
    text = with_faces(text, config.faces)
    (out / "cbf_system.hpp").write_text("#pragma once\n" + plant)
    (out / "cbf_config.hpp").write_text(text)
    return Generated(out, name, tag, workspace, compiled, config, tuple(extras), qp)
