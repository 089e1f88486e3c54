"""The shipped pendulum (HOCBF, order 2, second-order header) and bicycle (m = 2, atan in its
nominal controller) on the firmware, configured from their model cards: the host twin
against cbfsim's float64 simulation (cbfsim.device.reference_run), and a Cortex-M4F under
QEMU bit for bit against the host. Short runs; experiments/device.py --model all is the full one."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cbfsim import device
from conftest import require_tool

MODELS = Path(__file__).resolve().parent.parent / "experiments" / "models"
# (card, nominal, x0, run options): the pendulum at 1 kHz, the bicycle at 100 Hz
RUNS = {
    "pendulum": ("pd", (0.0, 0.0), {"steps": 1500}),
    "bicycle": ("drift", (0.0, 0.0, 0.0, 10.0), {"dt": 0.01, "steps": 300}),
}


@pytest.fixture(scope="module", params=sorted(RUNS))
def system(request, tmp_path_factory, cxx):
    """(name, config, generated, build dir, host log, reference run) for one shipped card."""
    require_tool("make", "apt-get install -y make")
    name = request.param
    nominal, x0, options = RUNS[name]
    run = device.card_run(MODELS / f"{name}.json", nominal=nominal, x0=x0, **options)
    generated = device.generate(run.model, run.config, tmp_path_factory.mktemp(f"gen_{name}"))
    build = tmp_path_factory.mktemp(f"build_{name}")
    host = device.parse_log(device.run("host", device.build("host", generated, build)))
    return name, run.config, generated, build, host, device.reference_run(generated, run.config)


@pytest.mark.toolchain
def test_host_twin_matches_python_simulation_for_pendulum_and_bicycle(system):
    name, config, _, _, host, ref = system
    assert host.exit == "0" and len(host.u) == config.steps
    assert device.max_abs_diff(host.x, ref.x) < 1e-3
    assert np.mean(host.status == ref.status) > 0.99
    # the filter acted (the nominal controller alone leaves the set) and kept the constraint
    plant = config.plant()
    clipped = np.clip(host.u_nom, plant.u_min.astype(np.float32), plant.u_max.astype(np.float32))
    assert np.any(host.u != clipped, axis=1).sum() > 10, name
    assert plant.constraint(host.x.astype(np.float64)).min() > -1e-5


@pytest.mark.arm
def test_cortex_m4_bit_identical_to_host_for_pendulum_and_bicycle(system):
    for tool in ("arm-none-eabi-g++", "arm-none-eabi-gcc", "qemu-system-arm"):
        require_tool(tool, device.INSTALL["m4"])
    name, _, generated, build, host, _ = system
    elf = device.build("m4", generated, build)
    log = device.parse_log(device.run("m4", elf, timeout=120))
    assert log.exit == "0" and log.port == "cortex-m4f"
    assert device.bit_identical(log, host), name
    assert log.bench["check"] == host.bench["check"]
    assert device.heap_symbols(elf) == []


@pytest.mark.toolchain
def test_xtensa_object_needs_no_libm_for_pendulum_and_bicycle(system):
    """The whole app for an Xtensa core (lx106, compile only): atan, sin, cos come from the header."""
    require_tool("xtensa-lx106-elf-g++", device.INSTALL["xtensa"])
    _, _, generated, build, _, _ = system
    obj = device.build("xtensa", generated, build)
    undefined = device.undefined_symbols(obj)
    libm = {"atanf", "atan2f", "atan", "atan2", "sinf", "cosf", "expf", "logf", "log1pf", "sqrtf"}
    assert not undefined & (libm | set(device.HEAP_SYMBOLS))
