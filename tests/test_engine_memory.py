"""The compiled engine checks memory before it allocates: a batch whose records cannot fit is
refused in one line with the numbers, instead of a MemoryError half-way or an OOM kill."""
from __future__ import annotations

import numpy as np
import pytest

from cbfsim.memory import ENV, MemoryLimitError, available_bytes, parse_bytes

pytestmark = pytest.mark.toolchain


@pytest.fixture(scope="module")
def vdp_loop():
    from cbfsim.device.card import shipped_card_run
    from cbfsim.engine import build_engine
    run = shipped_card_run("vdp", x0=(0.5, 0.5))
    return build_engine(run.model, run.config)


def test_the_estimate_is_the_bytes_the_engine_and_its_trajectory_really_allocate(vdp_loop):
    from cbfsim.engine import record_bytes, trajectory
    X0, steps = np.array([[0.5, 0.5], [-0.8, 0.6], [1.0, -0.2]]), 7
    out = vdp_loop.run(X0, steps)
    records = sum(out[k].nbytes for k in ("x", "u_nom", "u", "h", "status"))
    assert record_bytes(3, steps, vdp_loop.n, vdp_loop.m, widened=False) == records
    traj = trajectory(vdp_loop, X0, steps, None, None, {})
    widened = records + sum(getattr(traj, k).nbytes for k in ("x", "u_nom", "u", "h", "Lf", "Lg", "slack",
                                                              "solve_time"))
    assert widened <= record_bytes(3, steps, vdp_loop.n, vdp_loop.m, widened=True) <= 1.5 * widened


def test_a_batch_beyond_the_machines_memory_is_refused_before_anything_is_allocated(vdp_loop):
    with pytest.raises(MemoryLimitError, match=r"1,000,000 runs x 10,000,000 steps .*: needs [\d,.]+ GB, over the"):
        vdp_loop.run(np.zeros((10**6, 2)), 10**7)


def test_a_batch_beyond_the_stated_limit_is_refused_with_the_numbers(vdp_loop, monkeypatch):
    from cbfsim.engine import trajectory
    monkeypatch.setenv(ENV, "1M")
    assert available_bytes() == (1 << 20, f"the stated limit ${ENV}")
    with pytest.raises(MemoryError, match=r"100 runs x 1,000 steps \(n=2, m=1\): needs \d+\.\d\d MB, over the 1.05 MB "
                                          rf"of the stated limit \${ENV}"):
        trajectory(vdp_loop, np.full((100, 2), 0.5), 1000, None, None, {})
    monkeypatch.setenv(ENV, "1G")
    assert trajectory(vdp_loop, np.full((100, 2), 0.5), 1000, None, None, {}).x.shape == (100, 1001, 2)


def test_a_negative_step_count_is_refused_in_one_line(vdp_loop):
    with pytest.raises(ValueError, match="steps must be at least 0, got -5"):
        vdp_loop.run(np.zeros((1, 2)), -5)


@pytest.mark.parametrize("text,value", [("123", 123), ("512M", 512 << 20), ("8G", 8 << 30), ("2kb", 2048)])
def test_the_stated_limit_reads_bytes_with_a_unit(text, value):
    assert parse_bytes(text) == value


@pytest.mark.parametrize("text", ["", "lots", "-5", "1.5G"])
def test_a_stated_limit_that_is_not_a_size_is_refused_in_one_line(text):
    with pytest.raises(MemoryLimitError, match=ENV):
        parse_bytes(text)
