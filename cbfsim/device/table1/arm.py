"""Cortex-M4F and M7 under QEMU: the firmware's benchmark mode around each method's header."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np

from .. import INSTRUCTIONS_PER_SYSTICK as INSTR_PER_TICK
from .examples import ROOT, STATES, Example, Method
from .host import host_stack


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
    if missing:       # the benchmark evaluates f and G at every state: a missing function is a bug
        raise ValueError(f"{ex.key}/{meth.key}: the header lacks the plant's math functions {missing}")
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


