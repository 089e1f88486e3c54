"""The compiled closed loop (cbfsim/engine.py): the host twin's trajectories bit for bit, and
within float32 round-off of the float64 Python simulation."""
from __future__ import annotations

import numpy as np
import pytest

from cbfsim import device
from cbfsim.device.card import shipped_card_run
from cbfsim.engine import simulate_card

pytestmark = pytest.mark.toolchain


@pytest.mark.parametrize("model,X0,t_final", [
    ("vdp", [[0.5, 0.5], [-0.8, 0.6], [1.0, -0.2]], 2.0),
    ("pendulum", [[0.2, 0.0], [-0.3, 0.5]], 1.0),
])
def test_compiled_loop_equals_the_host_twin_bit_for_bit(cxx, tmp_path, model, X0, t_final):
    require = pytest.importorskip("subprocess")
    assert require
    X0 = np.asarray(X0)
    traj = simulate_card(model, X0, t_final)
    steps = traj.u.shape[1]
    for b in range(len(X0)):
        run = shipped_card_run(model, x0=tuple(X0[b]), steps=steps)
        gen = device.generate(run.model, run.config, tmp_path / f"gen{b}")
        log = device.parse_log(device.run("host", device.build("host", gen, tmp_path / f"build{b}")))
        for name, ours in (("x", traj.x[b]), ("u_nom", traj.u_nom[b]), ("u", traj.u[b]), ("h", traj.h[b, :-1])):
            theirs = np.asarray(getattr(log, name), dtype=np.float32)
            assert np.array_equal(ours.astype(np.float32).view(np.uint32), theirs.view(np.uint32)), (model, b, name)
        assert np.array_equal(traj.status[b], np.asarray(log.status))


def test_compiled_loop_stays_within_float32_roundoff_of_the_python_simulation(cxx):
    """The same loop in float64 (numpy engine, the same certified margin and nominal input):
    the difference is the float32 arithmetic of state, plant and filter; the device
    acceptance bound 1e-3 holds with room (the device runs measure 1e-6)."""
    from cbfsim.experiment import _filters, shipped_model
    from cbfsim.barriers import CompiledBarrier
    from cbfsim.preflight import certified_margin, load_certificate
    from cbfsim.runtime import compile_barrier
    from cbfsim.simulate import simulate_batch
    import importlib.util
    from pathlib import Path
    spec_path = Path(__file__).resolve().parent.parent / "experiments" / "vdp.py"
    module = importlib.util.module_from_spec(importlib.util.spec_from_file_location("vdp_spec", spec_path))
    module.__spec__.loader.exec_module(module)
    spec = module.SPEC
    card, system, onnx, card_path = shipped_model(spec)
    X0 = np.array([[0.5, 0.5], [-0.8, 0.6], [1.0, -0.2], [0.0, -1.0]])
    python = simulate_batch(system, CompiledBarrier(compile_barrier(onnx, inputs=1)),
                            _filters(card, system, 1, certified_margin(load_certificate(card_path)))[0],
                            spec.controller, X0, 2.0, spec.dt_control)
    compiled = simulate_card("vdp", X0, 2.0)
    gap = np.max(np.abs(python.x - compiled.x))
    assert 0 < gap < 1e-3
