"""Firmware with a periodic input embedding: the inverted pendulum's angle enters the barrier
as (sin theta, cos theta). The host twin runs the HOCBF loop (lie2 through the embedding)
against cbfsim's float64 reference, and the Cortex-M4F (QEMU) computes the same bits as the
host over the benchmark's states (m_sincos is branch-free, so scalar cores and vector targets
agree)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from cbfsim import device
from conftest import require_tool
from test_firmware import filter_changed_input, need_arm


def _barrier():
    """h = 0.5 tanh(2 (cos theta - cos 0.3)) + 0.01 tanh(0.3 sin theta + 0.1 theta_dot): safe for |theta| < ~0.3."""
    import torch
    import torch.nn as nn

    from compiler.periodic import periodic_embedding
    net = nn.Sequential(periodic_embedding(2, {0: 2 * math.pi}), nn.Linear(3, 2), nn.Tanh(), nn.Linear(2, 1))
    with torch.no_grad():
        net[1].weight.copy_(torch.tensor([[0.0, 2.0, 0.0], [0.3, 0.0, 0.1]]))
        net[1].bias.copy_(torch.tensor([-2 * math.cos(0.3), 0.0]))
        net[3].weight.copy_(torch.tensor([[0.5, 0.01]]))
        net[3].bias.zero_()
    return net


@pytest.fixture(scope="module")
def build_dir(tmp_path_factory):
    require_tool("make", "apt-get install -y make")
    return tmp_path_factory.mktemp("build")


@pytest.fixture(scope="module")
def config() -> device.RunConfig:
    return device.RunConfig(system="inverted_pendulum", nominal="zero", order=2, alpha=(1.0, 1.0), x0=(0.1, 0.0),
                            steps=500, bench_calls=200)


@pytest.fixture(scope="module")
def generated(tmp_path_factory, config) -> device.Generated:
    return device.generate(_barrier(), config, tmp_path_factory.mktemp("gen"))


@pytest.mark.toolchain
def test_host_twin_with_an_embedded_angle_matches_python_reference(cxx, generated, config, build_dir):
    assert "detail::embed2<2, 3, 1>" in (generated.directory / "barrier.hpp").read_text()
    log = device.parse_log(device.run("host", device.build("host", generated, build_dir / "host")))
    ref = device.reference_run(generated, config)
    assert log.exit == "0" and len(log.u) == config.steps
    assert device.max_abs_diff(log.x, ref.x) < 1e-5 and device.max_abs_diff(log.u, ref.u) < 1e-4
    assert np.sum(filter_changed_input(log, "inverted_pendulum")) > 400      # the filter holds the pendulum
    assert np.max(np.abs(log.x[:, 0])) < 0.3 and log.h.min() > 0


@pytest.mark.arm
def test_cortex_m_computes_the_host_bits_through_the_embedding(generated, build_dir):
    need_arm()
    checks = {}
    for target in ("host", "m4"):
        exe = device.build(target, generated, build_dir / f"bench_{target}", modes=2)   # benchmark only
        checks[target] = device.parse_log(device.run(target, exe, timeout=120)).bench["check"]
    assert checks["host"] == checks["m4"]
