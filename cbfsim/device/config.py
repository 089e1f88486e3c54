"""The device's generated headers: the one-row config comes from cbfsim/firmware_config.py
(shared with the compiled engine); this adds the k > 1 rows (further barrier headers and the
OSQP filter, cbfsim/device/qp.py), which only the device runs."""
from __future__ import annotations

import re
from functools import partial
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..firmware_config import (F32_MAX, Generated, RunConfig, check_against_plant, check_float32, compiled_source,
                               f32, plant_math)
from ..firmware_config import _cpp_float, _cpp_floats  # noqa: F401  (tests read the literal format)
from ..firmware_config import generate as generate_one_row

__all__ = ["F32_MAX", "Generated", "RunConfig", "check_against_plant", "check_float32", "compiled_source", "f32",
           "generate", "plant_math"]


def generate(model: Any, config: RunConfig, out_dir: str | Path, name: str = "barrier",
             extra: Sequence[tuple[Any, str]] = (), slack_penalty: float | None = None) -> Generated:
    """Write the barrier header, ``cbf_system.hpp`` and ``cbf_config.hpp`` into ``out_dir``.

    ``extra``: (model, name) of further barriers, one filter row each (same order and class-K
    gains as the first); their headers are namespaced by ``name``, and the filter QP for the
    k = 1 + len(extra) rows is generated with OSQP (cbfsim/device/qp.py, price ``slack_penalty``,
    default qp.DEVICE_SLACK_PENALTY). Without ``extra`` the output is exactly the one-row firmware's."""
    names = [name, *(n for _, n in extra)]
    if len(set(names)) != len(names) or not all(re.fullmatch(r"[A-Za-z_]\w*", n) for n in names):
        raise ValueError(f"barrier names must be distinct C++ identifiers, got {names}")
    if slack_penalty is not None and not extra:
        raise ValueError("slack_penalty applies to k > 1 rows only (one row uses the exact projection)")
    rows = partial(_multirow, tuple(extra), slack_penalty) if extra else None
    return generate_one_row(model, config, out_dir, name, rows=rows)


def _multirow(extra: Sequence[tuple[Any, str]], slack_penalty: float | None, config: RunConfig, system: Any,
              out: Path, text: str) -> tuple[list[Any], Any, str]:
    """The further barrier headers, the generated QP and the cbf_config.hpp text for k > 1 rows."""
    from .qp import DEVICE_SLACK_PENALTY, QPSpec, emit_qp

    extras = []
    for model, extra_name in extra:
        item = compiled_source(model, config, extra_name)
        if (int(item.model.input_dim), item.name) != (system.n, extra_name):
            raise ValueError(f"barrier {extra_name!r} takes {item.model.input_dim} states, {system.name} has {system.n}")
        item.write(out)
        extras.append(item)
    k = 1 + len(extras)
    rho = DEVICE_SLACK_PENALTY if slack_penalty is None else float(slack_penalty)
    qp = QPSpec(tuple(float(v) for v in np.float32(system.u_min)), tuple(float(v) for v in np.float32(system.u_max)),
                k, slack_penalty=rho)
    emit_qp(qp, out)
    call = ("(void)Dff;\n        (void)DfG;\n        return {ns}::lie(x, f, G, out);" if config.order == 1
            else "return {ns}::lie2(x, f, G, Dff, DfG, out);")
    cases = "".join(f"    case {i}:\n        {call.format(ns=item.name)}\n" for i, item in enumerate(extras, 1))
    includes = "".join(f'#include "{item.name}.hpp"\n' for item in extras)
    asserts = "".join(f"static_assert({item.name}::kStateDim == plant::kStateDim && {item.name}::kInputDim == "
                      f"plant::kInputDim, \"barrier {item.name} has other dimensions than the plant\");\n"
                      for item in extras)
    rows = f"""
// k = {k} rows: row 0 is barrier_call, rows 1.. the barriers {', '.join(item.name for item in extras)};
// filtered by the generated OSQP solver (qp_filter.hpp, cbf_qp_config.hpp, osqp/).
inline constexpr int kRows = {k};
{asserts}inline int barrier_call_row(int row, const float* x, const float* f, const float* G, const float* Dff,
                            const float* DfG, float* out) noexcept {{
    switch (row) {{
{cases}    default:
        return barrier_call(x, f, G, Dff, DfG, out);
    }}
}}
"""
    text = text.replace("#define CBF_CONFIG_HPP\n", f"#define CBF_CONFIG_HPP\n#define CBF_ROWS {k}\n", 1)
    text = text.replace('#include "cbf_system.hpp"\n', f'{includes}#include "cbf_system.hpp"\n', 1)
    text = text.replace("\n}  // namespace cbf_config\n", rows + "\n}  // namespace cbf_config\n", 1)
    return extras, qp, text
