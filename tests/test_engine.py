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


def test_cpp_rng_gives_the_python_generators_bits(cxx, tmp_path):
    import subprocess
    from pathlib import Path
    from cbfsim.rng import counter_uniform
    root = Path(__file__).resolve().parent.parent
    src = tmp_path / "rng.cpp"
    src.write_text('#include <cstdio>\n#include "rng.hpp"\nint main() {\n'
                   '  const std::uint64_t seeds[] = {0, 1, 18446744073709551615ull, 123456789ull};\n'
                   '  const std::uint64_t steps[] = {0, 7, 1099511627776ull}, lanes[] = {0, 1, 64, 255};\n'
                   '  for (auto s : seeds) for (auto k : steps) for (auto j : lanes)\n'
                   '    std::printf("%.17g\\n", cbf_rng::counter_uniform(s, k, j));\n}\n')
    exe = tmp_path / "rng"
    subprocess.run([cxx, "-std=c++17", "-O2", f"-I{root / 'firmware' / 'common'}", str(src), "-o", str(exe)], check=True)
    got = [float(v) for v in subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()]
    want = [float(counter_uniform(s, k, j)) for s in (0, 1, 2 ** 64 - 1, 123456789) for k in (0, 7, 2 ** 40)
            for j in (0, 1, 64, 255)]
    assert got == want


def test_perturbed_compiled_runs_track_the_numpy_engine_and_replay_alone(cxx):
    """Noise, a uniform disturbance and a delay: the same draws in both engines (the same
    counter RNG), so the runs differ only by float32 arithmetic; a run replays alone."""
    from cbfsim.barriers import CompiledBarrier
    from cbfsim.classk import Linear
    from cbfsim.filters import CBFProjection
    from cbfsim.perturb import Perturbation, PerturbationError
    from cbfsim.runtime import compile_barrier
    from cbfsim.simulate import simulate_batch
    from systems import get_system
    from pathlib import Path
    model = Path(__file__).resolve().parent.parent / "experiments" / "models" / "vdp.onnx"
    system = get_system("van_der_pol", mu=1.0, r=1.5, u_max=2.0)
    barrier = CompiledBarrier(compile_barrier(model, inputs=1))
    filt = CBFProjection(system, Linear(1.0), margin=0.05)
    X0 = np.array([[0.5, 0.5], [-0.8, 0.6], [1.0, -0.2]])
    p = Perturbation(disturbance="uniform", disturbance_bound=(0.0, 0.3), noise=0.002, delay=1, seed=9)
    common = dict(t_final=1.0, dt_control=0.005, perturbation=p)
    numpy_run = simulate_batch(system, barrier, filt, "zero", X0, **common)
    compiled = simulate_batch(system, barrier, filt, "zero", X0, engine="compiled", **common)
    plain = simulate_batch(system, barrier, filt, "zero", X0, t_final=1.0, dt_control=0.005, engine="compiled")
    assert np.max(np.abs(numpy_run.x - compiled.x)) < 1e-3 < np.max(np.abs(plain.x - compiled.x))
    alone = simulate_batch(system, barrier, filt, "zero", X0[1:2], engine="compiled", run_seeds=[10], **common)
    assert np.array_equal(alone.x[0], compiled.x[1])
    with pytest.raises(PerturbationError, match="plant_params"):
        simulate_batch(system, barrier, filt, "zero", X0, t_final=0.1, dt_control=0.005, engine="compiled",
                       perturbation=Perturbation(plant_params={"mu": 2.0}))
