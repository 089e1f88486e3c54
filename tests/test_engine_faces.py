"""Face rows in the compiled engine and the firmware (cbfsim/face_rows.py, firmware/common/
face_filter.hpp): a certificate's enforced faces of D run next to the barrier row.

References: the float64 numpy engine with the Python filter (OSQP + exact refinement) on the
same faces, and the firmware's host twin (the same step.hpp) for bit identity."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cbfsim import device
from cbfsim.barriers import CompiledBarrier
from cbfsim.claim import load_claim
from cbfsim.experiment import _filters
from cbfsim.runtime import compile_barrier
from cbfsim.simulate import simulate_batch
from systems import get_system
from training.model_card import load_card

pytestmark = pytest.mark.toolchain

MODELS = Path(__file__).resolve().parent.parent / "experiments" / "models"
# nominal controllers pushed toward the open faces: the PD aims far beyond theta_max with no
# damping (theta_dot runs into +-1.25); the bicycle's speed reference 20 is beyond v <= 15
PUSH = {"pendulum": {"kp": 40.0, "kd": 0.0, "theta_ref": 1.4},
        "bicycle": {"v_ref": 20.0, "k_v": 3.0}}
STARTS = {"pendulum": [[0.0, 0.0], [0.3, 0.5], [-0.2, -1.0], [0.5, 0.0], [0.1, 1.0]],
          "bicycle": [[0.0, 0.0, 0.0, 10.0], [0.0, 1.0, 0.3, 14.0], [0.0, -1.0, -0.2, 3.0], [0.0, 0.5, 0.5, 12.0]]}
# measured max |x_compiled - x_python| (float32 vs float64 arithmetic): pendulum 8e-7; bicycle
# 2.3e-4 (p_x at ~45 m, and v: float32 drift over 1,500 steps that the tight v face passes to u)
TOLERANCE = {"pendulum": 1e-5, "bicycle": 1e-3}


def setup(name: str):
    card_path = MODELS / f"{name}.json"
    card = load_card(card_path)
    system = get_system(card.system, **{**card.system_params, **PUSH[name]})
    claim = load_claim(card_path, card, system)
    assert claim.holds and claim.faces
    barrier = CompiledBarrier(compile_barrier(card.onnx_path(card_path), inputs=system.m, order=card.order))
    return card, system, claim, barrier


def face_values(system, faces, x: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Each face row's value a + b.u - margin at the recorded states and inputs, (K, B, T)."""
    B, T, n = x[:, :-1].shape
    xs, us = x[:, :-1].reshape(-1, n), u.reshape(-1, u.shape[-1])
    f, G = system.f(xs), system.G(xs)
    out = []
    for face in faces:
        offset, gain = face.row(f, G, xs)
        out.append((offset + np.einsum("bm,bm->b", gain, us) - face.margin).reshape(B, T))
    return np.array(out)


@pytest.mark.parametrize("name", ["pendulum", "bicycle"])
def test_compiled_face_rows_track_the_python_filter_and_bind(cxx, name):
    card, system, claim, barrier = setup(name)
    filt = _filters(card, system, card.order, claim.margin, claim.faces)[0]
    X0 = np.array(STARTS[name])
    common = dict(t_final=3.0, dt_control=claim.dt)
    python = simulate_batch(system, barrier, filt, system.nominal_names[0], X0, **common)
    filt.reset()
    compiled = simulate_batch(system, barrier, filt, system.nominal_names[0], X0, engine="compiled", **common)
    gap = np.max(np.abs(python.x - compiled.x))
    assert 0 < gap < TOLERANCE[name], gap
    assert np.array_equal(python.status, compiled.status) and not python.status.any()
    rows = face_values(system, claim.faces, compiled.x, compiled.u)
    tight = np.abs(rows) < 1e-3                               # a face row holds with equality
    assert tight.sum() >= 50, "the pushed nominal should make a face row bind"
    assert rows.min() > -1e-4                                 # and the compiled filter enforces it
    lo, hi = np.asarray(card.domain_lo), np.asarray(card.domain_hi)
    for face in claim.faces:
        assert face.level(compiled.x).min() >= 0              # the states stay within the face
    assert (compiled.x[..., claim.faces[0].coord] <= hi[claim.faces[0].coord]).all()
    assert (compiled.x[..., claim.faces[0].coord] >= lo[claim.faces[0].coord]).all()


def test_without_face_rows_the_pushed_pendulum_leaves_the_domain(cxx):
    """The faces are what keeps theta_dot in D: the same loop with the barrier row alone leaves."""
    card, system, claim, barrier = setup("pendulum")
    filt = _filters(card, system, card.order, claim.margin, ())[0]
    run = simulate_batch(system, barrier, filt, "pd", np.array(STARTS["pendulum"]), t_final=3.0,
                         dt_control=claim.dt, engine="compiled")
    assert np.abs(run.x[..., 1]).max() > card.domain_hi[1]


@pytest.mark.parametrize("name", ["pendulum", "bicycle"])
def test_engine_with_faces_equals_the_host_twin_bit_for_bit(cxx, tmp_path, name):
    from cbfsim.device.card import shipped_card_run
    from cbfsim.engine import simulate_card
    params = PUSH[name]
    x0 = STARTS[name][1]
    run = shipped_card_run(name, x0=tuple(x0), steps=400, params=params)
    assert run.config.faces                      # the certificate's faces reach the run
    gen = device.generate(run.model, run.config, tmp_path / "gen")
    text = (gen.directory / "cbf_config.hpp").read_text()
    assert f"#define CBF_FACES {len(run.config.faces)}" in text
    again = device.generate(run.model, run.config, tmp_path / "gen2")
    assert (again.directory / "cbf_config.hpp").read_bytes() == text.encode()   # byte-identical
    log = device.parse_log(device.run("host", device.build("host", gen, tmp_path / "build")))
    traj = simulate_card(name, np.array([x0]), 400 * run.config.dt, params=params)
    for field, ours in (("x", traj.x[0]), ("u_nom", traj.u_nom[0]), ("u", traj.u[0]), ("h", traj.h[0, :-1])):
        theirs = np.asarray(getattr(log, field), dtype=np.float32)
        assert np.array_equal(ours.astype(np.float32).view(np.uint32), theirs.view(np.uint32)), field
    assert np.array_equal(traj.status[0], np.asarray(log.status))
    ref = device.reference_run(gen, run.config)            # the Python filter with the same faces
    assert device.max_abs_diff(log.x, ref.x) < TOLERANCE[name]


def test_a_face_filter_at_another_price_is_refused(cxx):
    from cbfsim.classk import Linear
    from cbfsim.engine import EngineError
    from cbfsim.filters import CBFQP
    card, system, claim, barrier = setup("bicycle")
    filt = CBFQP(system, Linear(card.gains["gamma"]), margin=claim.margin, faces=claim.faces, slack_penalty=1e3)
    with pytest.raises(EngineError, match="slack_penalty"):
        simulate_batch(system, barrier, filt, "drift", np.array(STARTS["bicycle"][:1]), t_final=0.01,
                       dt_control=claim.dt, engine="compiled")
