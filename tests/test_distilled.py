"""ReLU barriers by distillation (training/distil.py rounds, training/distilled.py): the trainer's
``teacher_activation``.

References: the plant's float64 numpy f, G and constraint with the compiler's float64 reference
interpreter of the written ONNX (``compiler.reference``) count the failures -- not the torch
code that trained the student; the certifier is run again on the written files.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")

from compiler import reference  # noqa: E402
from compiler.api import load_model  # noqa: E402
from compiler.passes import canonicalize  # noqa: E402
from systems import get_system  # noqa: E402
from training.config import ConfigError, TrainConfig  # noqa: E402
from training.distil import distil, teacher_module  # noqa: E402
from training.network import export_onnx  # noqa: E402
from training.presets import PRESETS  # noqa: E402

MODELS = Path(__file__).resolve().parents[1] / "experiments" / "models"
BAND = 0.02


def _failures(onnx_path: Path, system, lo: np.ndarray, hi: np.ndarray, seed: int) -> tuple[int, int]:
    """(containment failures, boundary-row failures within BAND of h = 0) at 200,000 uniform
    float64 states of D, by the reference interpreter and the plant's numpy terms."""
    model = canonicalize(load_model(onnx_path))
    x = np.random.default_rng(seed).uniform(lo, hi, (200_000, system.n))
    h, lf, lg = reference.lie(model, x, system.f(x), system.G(x))
    row = lf + np.maximum(lg * system.u_min, lg * system.u_max).sum(-1)
    containment = int(np.sum((h >= 0) & (system.constraint(x) < 0)))
    return containment, int(np.sum((np.abs(h) < BAND) & (row < 0)))


def test_counterexample_rounds_remove_the_failures_a_float64_check_finds(tmp_path):
    """A rough student (300 fit steps, no tune) of the shipped Van der Pol barrier fails on
    states a fresh float64 check finds; four counterexample rounds (dense check + 3 s of
    certifier each) leave fewer, and each round's record says what it found."""
    card = json.loads((MODELS / "vdp.json").read_text())
    system = get_system(card["system"], **card["system_params"])
    lo, hi = np.asarray(card["domain_lo"]), np.asarray(card["domain_hi"])
    teacher = teacher_module(MODELS / "vdp.onnx")
    counts = {}
    for rounds in (0, 4):
        student, record = distil(teacher, system, [16, 16], lo=lo, hi=hi, fit_steps=300, tune_steps=0, batch=2048,
                                 refine_rounds=rounds, refine_steps=300, refine_time=3.0)
        path = export_onnx(student.float().eval(), tmp_path / f"student{rounds}.onnx", system.n)
        counts[rounds] = _failures(path, system, lo, hi, seed=11)
        assert len(record) <= rounds
    assert sum(counts[0]) > 0, counts                      # the rough student does fail
    assert sum(counts[4]) < sum(counts[0]), counts
    assert record[0]["sampled_failures"] > 0 or record[0]["certifier"] == "refuted"
    assert set(record[0]) >= {"sampled_failures", "tuned_around", "certifier", "certifier_counterexamples"}


def test_a_student_never_reads_a_state_it_is_told_not_to(tmp_path):
    """``reads``: the first layer's columns of the other states are exactly 0 after every step."""
    card = json.loads((MODELS / "vdp.json").read_text())
    system = get_system(card["system"], **card["system_params"])
    student, _ = distil(teacher_module(MODELS / "vdp.onnx"), system, [8], fit_steps=20, tune_steps=20, batch=256,
                        reads=np.array([True, False]))
    assert torch.all(student[0].weight[:, 1] == 0) and torch.any(student[0].weight[:, 0] != 0)


@pytest.mark.parametrize("changes, named", [
    ({"teacher_activation": "relu", "activation": "tanh"}, "not smooth"),
    ({"teacher_activation": "softplus", "activation": "softplus"}, "student's activation too"),
    ({"teacher_activation": "nonesuch"}, "unknown"),
    ({"teacher_activation": "softplus", "activation": "relu", "certify": True}, "drop certify"),
    ({"teacher_activation": "softplus", "distil_rounds": -1}, "distil_rounds"),
    ({"teacher_activation": "softplus", "distil_time_limit": 0.0}, "distil_time_limit"),
])
def test_a_distillation_the_trainer_cannot_run_is_refused_in_one_line(changes, named):
    cfg = TrainConfig(system="van_der_pol", activation="relu",
                      **{k: v for k, v in changes.items() if k != "activation"})
    if "activation" in changes:
        cfg = cfg.replace(activation=changes["activation"])
    with pytest.raises(ConfigError, match=named) as err:
        cfg.resolve(cfg.build_system())
    assert "\n" not in str(err.value)


def test_order_two_and_periodic_plants_are_refused():
    with pytest.raises(ConfigError, match="order 1"):
        TrainConfig(system="inverted_pendulum", order=2, activation="tanh", teacher_activation="softplus",
                    input_mask=[0]).resolve(get_system("inverted_pendulum"))
    with pytest.raises(ConfigError, match="periodic"):
        TrainConfig(system="dubins", activation="relu", teacher_activation="softplus").resolve(get_system("dubins"))


def test_train_with_a_teacher_writes_a_relu_barrier_and_its_teacher(tmp_path):
    """``cbfsim train --activation relu --teacher-activation softplus`` (smoke budgets): the
    directory's model is a ReLU network with the card's widths, the card says so and records the
    rounds, the teacher's Softplus files and card sit in teacher/, and the student's state dict
    is the ONNX network."""
    from conftest import cli_in_process
    out = tmp_path / "relu"
    run = cli_in_process(["train", "--system", "van_der_pol", "--widths", "16", "--activation", "relu",
                                   "--teacher-activation", "softplus", "--quick", "--no-verify", "--no-progress",
                                   "--out", str(out)])
    assert run.returncode in (1, 4), run.stderr          # a smoke run: passed (4) or failed (1), never crashed
    assert "distilled from a softplus teacher" in run.stdout + run.stderr
    ops = {node.op_type for node in onnx.load(out / "model.onnx").graph.node}
    assert "Relu" in ops and "Softplus" not in ops
    card = json.loads((out / "model.json").read_text())
    assert card["network"]["activation"] == "relu" and card["network"]["widths"] == [2, 16, 1]
    distilled = card["training"]["distillation"]
    assert distilled["teacher_activation"] == "softplus" and 1 <= len(distilled["rounds"]) <= 2
    teacher_ops = {node.op_type for node in onnx.load(out / "teacher" / "model.onnx").graph.node}
    assert "Softplus" in teacher_ops and "Relu" not in teacher_ops
    assert json.loads((out / "teacher" / "model.json").read_text())["network"]["activation"] == "softplus"
    state = torch.load(out / "state_dict.pt")
    student = torch.nn.Sequential(torch.nn.Linear(2, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    student.load_state_dict(state)
    x = np.random.default_rng(0).uniform(-2, 2, (500, 2))
    with torch.no_grad():
        ours = student.double()(torch.as_tensor(x)).numpy()[:, 0]
    theirs = reference.lie(canonicalize(load_model(out / "model.onnx")), x, np.zeros_like(x), np.zeros((500, 2, 1)))[0]
    assert np.allclose(ours, theirs, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("changes, named", [
    ({"teacher": "training.teachers:darboux_curve", "teacher_activation": "softplus"}, "give one"),
    ({"teacher": "training.teachers:nonesuch"}, "cannot import"),
    ({"teacher": "training.teachers"}, "package.module:function"),
    ({"teacher": "training.teachers:darboux_curve", "certify": True}, "drop certify"),
])
def test_a_written_down_teacher_the_trainer_cannot_run_is_refused_in_one_line(changes, named):
    cfg = TrainConfig(system="darboux", activation="relu", hidden=[32, 32], **changes)
    with pytest.raises(ConfigError, match=named) as err:
        cfg.resolve(cfg.build_system())
    assert "\n" not in str(err.value)


def three_state_teacher(system, widths):
    return torch.nn.Sequential(torch.nn.Linear(3, widths[0]), torch.nn.ReLU(), torch.nn.Linear(widths[0], 1))


def two_output_teacher(system, widths):
    return torch.nn.Sequential(torch.nn.Linear(system.n, widths[0]), torch.nn.ReLU(), torch.nn.Linear(widths[0], 2))


@pytest.mark.parametrize("teacher, hidden, named", [
    ("training.teachers:darboux_curve", [16, 16], r"designed for first hidden widths \[32, 256\]"),
    ("training.teachers:spacecraft_slabs", [8, 8, 8], "designed for the spacecraft plant, got 'darboux'"),
    ("test_distilled:three_state_teacher", [32, 32], "does not take the 2 states of 'darboux'"),
    ("test_distilled:two_output_teacher", [32, 32], r"returns shape \(2,\) per state"),
])
def test_a_teacher_that_does_not_fit_is_refused_before_any_training(tmp_path, teacher, hidden, named):
    """A design not made for the widths, or for another plant's states: one line, nothing written."""
    from training.trainer import train_barrier
    cfg = TrainConfig(system="darboux", activation="relu", hidden=hidden, teacher=teacher)
    with pytest.raises(ConfigError, match=named) as err:
        train_barrier(cfg, tmp_path / "out", progress=False, verify=False)
    assert "\n" not in str(err.value) and not (tmp_path / "out").exists()


def test_train_from_a_written_down_teacher_writes_the_student_and_that_teacher(tmp_path):
    """``cbfsim train --teacher training.teachers:darboux_curve`` (a rough budget): the model is a
    ReLU student, the card names the teacher and records no teacher training, and teacher/model.onnx
    is the written-down network (values by the reference interpreter against the design's own
    terms, min(x1 + 0.3, x2 - phi(x1)), in float64, where the curve phi is defined)."""
    from conftest import cli_in_process
    from systems.darboux import lower_curve
    out = tmp_path / "relu"
    run = cli_in_process(["train", "--system", "darboux", "--widths", "32,32", "--activation", "relu",
                          "--teacher", "training.teachers:darboux_curve", "--distil-steps", "300",
                          "--distil-rounds", "0", "--no-verify", "--no-progress", "--out", str(out)])
    assert run.returncode in (0, 1), run.stderr
    assert "distilled from the written-down teacher training.teachers:darboux_curve" in run.stdout + run.stderr
    card = json.loads((out / "model.json").read_text())
    assert card["network"]["activation"] == "relu" and card["network"]["widths"] == [2, 32, 32, 1]
    distilled = card["training"]["distillation"]
    assert distilled["teacher"] == "training.teachers:darboux_curve" and distilled["teacher_activation"] is None
    assert distilled["teacher_time_s"] == 0.0 and card["training"]["history"] == []
    assert not (out / "teacher" / "model.json").exists()
    xs, ys = lower_curve(16, 0.05)            # the curve spans x1 in [-0.3, 2]: the states where it is defined
    x = np.random.default_rng(3).uniform([xs[0], -2.0], [xs[-1], 2.0], (2000, 2))
    design = np.minimum(x[:, 0] - xs[0], x[:, 1] - np.interp(x[:, 0], xs, ys))
    h = reference.lie(canonicalize(load_model(out / "teacher" / "model.onnx")), x, np.zeros_like(x),
                      np.zeros((len(x), 2, 0)))[0]
    assert np.allclose(h, design, atol=1e-4 * (1 + np.abs(design))), np.max(np.abs(h - design))


@pytest.mark.parametrize("name", sorted(name for name, cfg in PRESETS.items() if cfg.teacher))
def test_every_preset_with_a_written_down_teacher_gets_one_for_its_widths(name):
    """A preset whose widths its teacher has no design for would fail only after minutes of
    setup: the teacher is built here, reads the plant's states, and is a barrier that separates
    (h < 0 somewhere in D where the constraint fails, h >= 0 somewhere)."""
    from training.distilled import _teacher
    cfg = PRESETS[name]
    system = cfg.build_system()
    teacher = _teacher(cfg, system, progress=False)
    assert teacher.trained is None
    x = np.random.default_rng(0).uniform(*system.domain, (20_000, system.n))
    with torch.no_grad():
        h = teacher.network(torch.as_tensor(x)).numpy()[:, 0]
    assert np.any(h >= 0) and np.all(h[system.constraint(x) < 0] < 0)
