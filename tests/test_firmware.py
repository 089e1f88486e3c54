"""Firmware: the same header and closed loop on the host twin, Cortex-M4F and M7 (QEMU) and
an Xtensa object, checked against cbfsim's float64 simulator (cbfsim.device.reference_run).

A short run (2,000 steps of the Van der Pol loop) keeps this file fast; the full 10,000-step
comparison is experiments/device.py. The barrier is a hand-set 2-64-64-1 ReLU network with
a known safe region (cbfsim.device.polygon_disk_barrier), the size the paper benchmarks.
"""
from __future__ import annotations

import subprocess

import numpy as np
import pytest

from cbfsim import device
from conftest import all_activations_net, require_tool

ARM_INSTALL = device.INSTALL["m4"]
STEPS = 2000


def need_arm() -> None:
    require_tool("arm-none-eabi-g++", ARM_INSTALL)
    require_tool("arm-none-eabi-gcc", ARM_INSTALL)
    require_tool("qemu-system-arm", ARM_INSTALL)


def filter_changed_input(log: device.DeviceLog, system: str = "van_der_pol") -> np.ndarray:
    """Steps where the filter moved the input away from the (float32) clipped nominal."""
    plant = device.RunConfig(system=system).plant()
    return np.any(log.u != np.clip(log.u_nom, plant.u_min.astype(np.float32), plant.u_max.astype(np.float32)), axis=1)


@pytest.fixture(scope="module")
def config() -> device.RunConfig:
    return device.RunConfig(system="van_der_pol", x0=(0.5, 0.0), nominal="zero", alpha=(1.0,), steps=STEPS)


@pytest.fixture(scope="module")
def generated(tmp_path_factory, config) -> device.Generated:
    return device.generate(device.polygon_disk_barrier(), config, tmp_path_factory.mktemp("gen"))


@pytest.fixture(scope="module")
def build_dir(tmp_path_factory):
    require_tool("make", "apt-get install -y make")  # firmware/Makefile drives every build
    return tmp_path_factory.mktemp("build")


@pytest.fixture(scope="module")
def host_log(cxx, generated, build_dir) -> device.DeviceLog:
    return device.parse_log(device.run("host", device.build("host", generated, build_dir)))


@pytest.fixture(scope="module")
def reference(generated, config) -> device.ReferenceRun:
    return device.reference_run(generated, config)


@pytest.fixture(scope="module", params=["m4", "m7"])
def arm(request, generated, build_dir):
    """(target, elf, parsed log) for each Cortex-M board."""
    need_arm()
    elf = device.build(request.param, generated, build_dir)
    return request.param, elf, device.parse_log(device.run(request.param, elf, timeout=60))


@pytest.mark.toolchain
def test_host_twin_matches_python_reference(host_log, reference):
    assert host_log.exit == "0" and len(host_log.u) == STEPS
    assert device.max_abs_diff(host_log.x, reference.x) < 1e-3
    assert device.max_abs_diff(host_log.u, reference.u) < 1e-2
    assert np.mean(host_log.status == reference.status) > 0.99   # same FilterStatus (boundary ties aside)
    # the filter is doing something, and keeps the barrier nonnegative
    assert np.sum(filter_changed_input(host_log)) > 100
    assert host_log.h.min() > 0


@pytest.mark.arm
def test_cortex_m_bit_identical_to_host(arm, host_log):
    target, _, log = arm
    assert log.exit == "0"
    assert log.port == {"m4": "cortex-m4f", "m7": "cortex-m7"}[target]
    assert log.bits.size == host_log.bits.size > 0
    assert device.bit_identical(log, host_log)
    assert log.bench["check"] == host_log.bench["check"]  # same states, same barrier values


@pytest.mark.arm
def test_benchmark_reports_sane_counts(arm, host_log):
    _, _, log = arm
    bench = device.bench_summary(log)
    assert bench["calls"] == 1000 and bench["unit"].startswith("systick")
    # a 2-64-64-1 network with three channels is ~12k multiply-adds: between 1e4 and 1e6 instructions
    assert 1e4 < bench["median_instructions"] <= bench["max_instructions"] < 1e6
    assert bench["max"] - bench["min"] <= 2  # deterministic under -icount
    host = device.bench_summary(host_log)
    assert host["unit"] == "ns" and 0 < host["min"] <= host["median"] <= host["max"]


@pytest.mark.arm
def test_no_heap_symbols_linked(arm):
    _, elf, _ = arm
    assert device.heap_symbols(elf) == []


@pytest.mark.arm
def test_workspace_symbol_matches_header(arm, generated):
    _, elf, log = arm
    size, section = device.symbol_size(elf, f"{generated.name}::g_workspace")
    assert (size, section) == (generated.workspace_bytes, ".bss")
    assert int(log.header["ws"]) == generated.workspace_bytes
    assert device.footprint(elf)["sections"][".bss"] >= size


@pytest.mark.arm
def test_stack_report_bounds_the_measured_peak(arm):
    _, elf, log = arm
    report = device.stack_report(elf.parent)
    peak = int(log.port_facts["stack_peak"])
    assert any("lie(" in fn for fn in report.path)
    # static analysis covers everything but the libc leaves (memcpy/memset), a few words
    assert set(report.unknown) <= {"memcpy", "memset", "__indirect_call"}
    assert report.worst_bytes <= peak <= report.worst_bytes + 128


@pytest.mark.toolchain
def test_xtensa_object_compiles(generated, build_dir):
    require_tool("xtensa-lx106-elf-g++", device.INSTALL["xtensa"])
    obj = device.build("xtensa", generated, build_dir)
    nm = subprocess.run(["xtensa-lx106-elf-nm", "-u", str(obj)], capture_output=True, text=True, check=True)
    undefined = {line.split()[-1] for line in nm.stdout.splitlines() if line.strip()}
    libm = {"expf", "logf", "log1pf", "expm1f", "tanhf", "erff", "sinf", "cosf", "sqrtf", "powf"}
    assert not undefined & (libm | set(device.HEAP_SYMBOLS))


@pytest.mark.toolchain
def test_projection_filter_matches_numpy(cxx, build_dir):
    from cbfsim.filters import FilterStatus
    from cbfsim.filters.projection import project_halfspace_box

    exe = device.build("filter-check", None, build_dir)
    rng = np.random.default_rng(7)
    branches = set()
    for m in (1, 2, 3):
        count = 400
        lo = -rng.uniform(0.1, 2.0, (count, m))
        hi = rng.uniform(0.1, 2.0, (count, m))
        b = rng.normal(size=(count, m)) * (rng.random((count, m)) > 0.15)   # some exact zeros
        u_nom = rng.normal(scale=2.0, size=(count, m))                       # often outside the box
        a = rng.normal(scale=3.0, size=count)                                # some infeasible rows
        rows = [" ".join(repr(float(v)) for v in (a[i], 0.0, *b[i], *u_nom[i], *lo[i], *hi[i])) for i in range(count)]
        out = subprocess.run([str(exe)], input=f"{count} {m}\n" + "\n".join(rows) + "\n",
                             capture_output=True, text=True, check=True).stdout.split("\n")
        status = np.array([int(line.split()[0]) for line in out if line])
        u = np.array([[int(w, 16) for w in line.split()[1:]] for line in out if line], dtype=np.uint64).view(np.float64)
        for i in range(count):  # bounds differ per problem: one call each
            ref = project_halfspace_box(a[i:i + 1], b[i:i + 1], u_nom[i:i + 1], lo[i], hi[i])
            np.testing.assert_allclose(u[i], ref.u[0], rtol=1e-10, atol=1e-10, err_msg=f"m={m} problem {i}")
            expected = FilterStatus.OK if ref.feasible[0] else FilterStatus.SLACK_ACTIVE
            assert status[i] == expected, f"m={m} problem {i}"
            branches.add((int(status[i]), bool(np.array_equal(u[i], np.clip(u_nom[i], lo[i], hi[i])))))
    assert {(0, True), (0, False), (1, False)} <= branches   # nominal kept, row active, infeasible


@pytest.mark.toolchain
def test_second_order_loop_matches_python_reference(cxx, build_dir, tmp_path):
    """HOCBF path (lie2, f'(x) f and f'(x) G from the plant header): a double integrator with
    h = 1 - (softplus(4p) + softplus(-4p)) / 4, relative degree 2."""
    import torch

    from training.architectures import mlp

    net = mlp([2, 2, 1], "softplus", seed=0)
    with torch.no_grad():
        net[0].weight.copy_(torch.tensor([[4.0, 0.0], [-4.0, 0.0]]))
        net[0].bias.zero_()
        net[2].weight.fill_(-0.25)
        net[2].bias.fill_(1.0)
    config = device.RunConfig(system="double_integrator", nominal="pd", order=2, alpha=(2.0, 2.0),
                              x0=(0.0, 0.0), steps=1500, bench_calls=50)
    generated = device.generate(net, config, tmp_path / "gen")
    log = device.parse_log(device.run("host", device.build("host", generated, build_dir / "order2")))
    ref = device.reference_run(generated, config)
    assert device.max_abs_diff(log.x, ref.x) < 1e-4
    assert np.sum(filter_changed_input(log, "double_integrator")) > 500 and log.h.min() > 0


def test_parse_log_ignores_noise_and_rejects_truncation():
    text = ("rst:0x1 (POWERON),boot:0x8\r\nI (312) cpu_start: Starting scheduler\r\n"
            "H port=esp32s3 n=1 m=1 order=1 steps=2 substeps=1 dt=3a83126f ws=4 model=x\r\n"
            "S 0 3f800000 00000000 00000000 3f000000 0\r\nS 1 3f800000 00000000 bf800000 3e800000 1\r\n"
            "F 2 3f000000\r\nB calls=3 median=5 max=9 min=4 overhead=1 check=00000001 unit=cycles\r\nE 0\r\n")
    log = device.parse_log(text)
    assert log.x[:, 0].tolist() == [1.0, 1.0, 0.5] and log.u[:, 0].tolist() == [0.0, -1.0]
    assert log.status.tolist() == [0, 1] and log.bench["median"] == 5 and log.bench["unit"] == "cycles"
    restarted = text.split("S 1")[0] + text[text.index("H port="):]   # board reset mid-capture
    assert device.bit_identical(device.parse_log(restarted), log)
    with pytest.raises(device.DeviceError):
        device.parse_log(text.split("F 2")[0])
    with pytest.raises(device.DeviceError):
        device.parse_log(text.replace("3e800000", "3e8#0000"))
    with pytest.raises(device.DeviceError):
        device.parse_log(text.replace("S 1 ", "S 3 "))


@pytest.mark.arm
@pytest.mark.parametrize("order", [1, 2])
def test_every_activation_bit_identical_on_cortex_m(tmp_path, build_dir, order):
    """The header's math and activation selects compile to different code on scalar cores
    (c ? a : b) and vector targets (bit-mask selects): the firmware benchmark's hash of every
    output bit over 1,000 states must agree between the host twin and the Cortex-M4F."""
    need_arm()
    config = device.RunConfig(system="inverted_pendulum" if order == 2 else "van_der_pol", nominal="zero",
                              order=order, alpha=(1.0,) * order, x0=(0.1, 0.0), steps=1, bench_calls=1000)
    generated = device.generate(all_activations_net(order, inputs=2, gain=30.0, seed=order), config, tmp_path / "gen")
    checks = {}
    for target in ("host", "m4"):
        exe = device.build(target, generated, build_dir / f"act{order}", modes=2)   # benchmark only
        log = device.parse_log(device.run(target, exe, timeout=120))
        checks[target] = log.bench["check"]
    assert checks["host"] == checks["m4"]
