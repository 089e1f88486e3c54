"""training/: box-bound supremum, config and model-card validation, input-mask export,
atomic outputs, and a short end-to-end run whose compiled barrier passes the verifier."""
from __future__ import annotations

import itertools
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from systems import get_system
from training.artifacts import build_card
from training.cli import main as cli_main
from training.config import ConfigError, TrainConfig
from training.lie import box_sup, lie_terms
from training.model_card import CardError, ModelCard
from training.network import MaskedBarrier, export_onnx, to_sequential
from training.samplers import system_terms

QUICK_VDP = dict(system="van_der_pol", hidden=[16, 16], activation="relu", gamma=1.0, n_uniform=6000,
                 n_boundary=2000, steps_per_round=150, warm_start_steps=300, rounds=12, check_samples=100_000,
                 check_boundary=20_000, verify_samples=30_000, backup_dt=0.05, batch_size=1024, seed=1)


# ----------------------------------------------------------------------------- box supremum

@pytest.mark.parametrize("m", [1, 2, 3])
def test_box_sup_equals_best_corner(m: int) -> None:
    rng = np.random.default_rng(m)
    a = rng.normal(size=50)
    b = rng.normal(size=(50, m))
    b[::7, 0] = 0.0                                          # ties: any bound is optimal
    lo = -rng.uniform(0.1, 3, size=m)
    hi = rng.uniform(-0.05, 3, size=m)                       # boxes not centred on 0
    hi = np.maximum(hi, lo + 0.1)
    corners = np.array(list(itertools.product(*zip(lo, hi))))            # (2^m, m)
    brute = (a[:, None] + b @ corners.T).max(axis=1)
    np.testing.assert_allclose(box_sup(a, b, lo, hi), brute, rtol=0, atol=1e-12)
    inner = rng.uniform(lo, hi, size=(200, m))                           # no interior point beats it
    assert np.all(a[:, None] + b @ inner.T <= box_sup(a, b, lo, hi)[:, None] + 1e-12)
    torch_val = box_sup(torch.tensor(a), torch.tensor(b), lo, hi).numpy()
    np.testing.assert_allclose(torch_val, brute, rtol=0, atol=1e-12)


def test_level_set_points_lie_on_the_boundary_from_inside() -> None:
    from training.samplers import level_set
    lo, hi = np.array([-2.0, -2.0]), np.array([2.0, 2.0])
    disk = lambda x: 1.0 - np.hypot(x[:, 0], x[:, 1])             # noqa: E731
    pts = level_set(disk, np.random.default_rng(0), lo, hi, 500)
    assert pts.shape == (500, 2) and np.all(disk(pts) >= 0)
    assert np.max(np.abs(disk(pts))) < 1e-7                       # 30 halvings of a <= 4*sqrt(2) segment
    angles = np.arctan2(pts[:, 1], pts[:, 0])                     # spread around the circle, not clustered
    assert np.histogram(angles, bins=8, range=(-np.pi, np.pi))[0].min() > 20
    assert level_set(lambda x: -np.ones(len(x)), np.random.default_rng(0), lo, hi, 10).shape == (0, 2)


# ----------------------------------------------------------------------------- config

def test_config_validation_names_the_field() -> None:
    pend = get_system("inverted_pendulum")
    with pytest.raises(ConfigError, match="activation 'relu'.*order 2"):
        TrainConfig(system="inverted_pendulum", order=2, activation="relu", input_mask=[0]).resolve(pend)
    with pytest.raises(ConfigError, match="theta_dot"):
        TrainConfig(system="inverted_pendulum", order=2, activation="softplus").resolve(pend)
    with pytest.raises(ConfigError, match="gamma"):
        TrainConfig(system="van_der_pol", gamma=-1.0).resolve(get_system("van_der_pol"))
    with pytest.raises(ConfigError, match="input_mask"):
        TrainConfig(system="van_der_pol", input_mask=[0, 5]).resolve(get_system("van_der_pol"))
    with pytest.raises(ConfigError, match="domain_lo"):
        TrainConfig(system="van_der_pol", domain_lo=[0, 0], domain_hi=[1, -1]).resolve(get_system("van_der_pol"))
    with pytest.raises(ConfigError, match="unknown config fields"):
        TrainConfig.from_dict({"system": "van_der_pol", "learning_rate": 1.0})
    with pytest.raises(ConfigError, match="system"):
        TrainConfig(system="segway").build_system()
    cfg = TrainConfig(system="bicycle", input_mask=[1, 2], params={"w": 2.0})
    assert TrainConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg


# ----------------------------------------------------------------------------- model card

def _card() -> ModelCard:
    cfg = TrainConfig(system="inverted_pendulum", order=2, activation="softplus", input_mask=[0],
                      alpha1=2.0, alpha2=40.0)
    system = cfg.build_system()
    return build_card(cfg, system, cfg.resolve(system), training={"time_s": 1.0})


def test_model_card_round_trip(tmp_path: Path) -> None:
    card = _card()
    path = tmp_path / "model.json"
    text = card.to_json(path)
    assert ModelCard.from_json(path) == card
    assert ModelCard.from_json(text) == card
    data = json.loads(text)
    assert data["constraint"]["expression"] == "0.6168502750680849 - theta**2"
    assert data["network"]["widths"] == [2, 32, 32, 1] and data["network"]["input_mask"] == [0]
    assert data["class_k"] == {"kind": "linear", "alpha1": 2.0, "alpha2": 40.0}


@pytest.mark.parametrize("mutate, field", [
    (lambda d: d.pop("order"), "'order' is missing"),
    (lambda d: d.update(order=3), "order must be 1 or 2"),
    (lambda d: d["class_k"].pop("alpha2"), "class_k.alpha2 is missing"),
    (lambda d: d.update(u_min=[1.0, 2.0]), "u_min must be a list of 1"),
    (lambda d: d["network"].update(widths=[3, 32, 1]), "network.widths must start with the state dimension 2"),
    (lambda d: d.update(domain_hi=[0.0, float("nan")]), r"domain_hi\[1\] must be a finite number"),
    (lambda d: d["constraint"].update(system="acc"), "constraint.system"),
    (lambda d: d.update(colour="red"), "unknown fields"),
])
def test_model_card_validation_errors(mutate, field: str) -> None:
    data = _card().to_dict()
    mutate(data)
    with pytest.raises(CardError, match=field):
        ModelCard.from_dict(data)
    with pytest.raises(CardError, match="not valid JSON"):
        ModelCard.from_json("{not json")


# ----------------------------------------------------------------------------- input mask

@pytest.mark.toolchain
def test_input_mask_exports_zero_column_and_compiles(tmp_path: Path, cxx: str) -> None:
    from cbfsim.runtime import compile_barrier
    system = get_system("inverted_pendulum")
    lo, hi = system.domain
    barrier = MaskedBarrier(2, [0], [8, 8], "softplus", seed=0, center=(lo + hi) / 2, half_width=(hi - lo) / 2)
    seq = to_sequential(barrier)
    w1 = seq[0].weight.detach()
    assert w1.shape == (8, 2) and torch.all(w1[:, 1] == 0)
    x = torch.as_tensor(np.random.default_rng(0).uniform(lo, hi, size=(64, 2)), dtype=torch.float32)
    torch.testing.assert_close(seq(x), barrier(x), rtol=1e-5, atol=1e-6)
    path = export_onnx(seq, tmp_path / "mask.onnx", 2)
    lib = compile_barrier(str(path), inputs=1, order=2)
    xs = x.double().numpy()
    terms = system_terms(system, xs, 2)
    h, Lf, LG, Lf2, LGLf = lib.lie2(xs, terms["f"], terms["G"], terms["Dff"], terms["DfG"])
    assert np.all(LG == 0.0)                                    # relative degree 2, exactly
    ref = lie_terms(barrier.double(), torch.as_tensor(xs), *(torch.as_tensor(terms[k]) for k in ("f", "G")),
                    2, torch.as_tensor(terms["Dff"]), torch.as_tensor(terms["DfG"]), create_graph=False)
    for got, want in ((h, ref.h), (Lf, ref.Lf), (Lf2, ref.Lf2), (LGLf, ref.LGLf)):
        np.testing.assert_allclose(got, want.detach().numpy().reshape(np.shape(got)), rtol=1e-4, atol=1e-4)


# ----------------------------------------------------------------------------- atomic outputs

def test_failed_run_leaves_no_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import training.artifacts as artifacts
    from training.trainer import train_barrier

    def broken_export(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(artifacts, "export_onnx", broken_export)
    out = tmp_path / "run"
    cfg = TrainConfig(**{**QUICK_VDP, "rounds": 1, "steps_per_round": 10, "warm_start_steps": 10})
    with pytest.raises(RuntimeError, match="disk full"):
        train_barrier(cfg, out, progress=False, verify=False)
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []                       # no temp directory left behind
    out.mkdir()
    (out / "keep.txt").write_text("old")
    with pytest.raises(FileExistsError, match="overwrite"):
        train_barrier(cfg, out, progress=False, verify=False)
    assert (out / "keep.txt").read_text() == "old"


# ----------------------------------------------------------------------------- end to end

@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory, cxx: str):
    from training.trainer import train_barrier
    out = tmp_path_factory.mktemp("vdp") / "run"
    return train_barrier(TrainConfig(**QUICK_VDP), out, progress=False), out


@pytest.mark.toolchain
def test_short_training_passes_the_verifier(trained) -> None:
    from training.verify import verify
    result, out = trained
    assert result.passed and result.final_check["condition_failures"] == 0
    assert sorted(p.name for p in out.iterdir()) == ["model.json", "model.onnx", "state_dict.pt", "training_curves.png"]
    assert (out / "training_curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert repr(result).startswith("TrainResult(PASS: van_der_pol") and "\n" not in repr(result)
    card = ModelCard.from_json(out / "model.json")
    assert card.verification["passed"] and card.training["time_s"] > 0
    report = verify(out / "model.onnx", out / "model.json", grid=301)          # an independent dense grid
    assert report.method == "grid" and report.n_boundary == 301 ** 2 // 2
    assert report.n_states == 301 ** 2 + report.n_boundary
    assert report.condition_failures == 0 and report.containment_failures == 0
    assert report.coverage > 0.5
    state = torch.load(out / "state_dict.pt")
    assert isinstance(state, dict) and "net.0.weight" in state


@pytest.mark.toolchain
def test_cli_verify_and_errors(trained, capsys: pytest.CaptureFixture) -> None:
    _, out = trained
    assert cli_main(["verify", str(out / "model.onnx"), str(out / "model.json"), "--samples", "20000"]) == 0
    assert "PASS" in capsys.readouterr().out
    assert cli_main(["train", "--system", "inverted_pendulum", "--order", "2", "--activation", "relu",
                     "--out", str(out.parent / "bad")]) == 1          # an invalid config: error, one line
    assert "order 2" in capsys.readouterr().err
    assert not (out.parent / "bad").exists()


def test_cli_help_and_presets(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as info:
        cli_main(["train", "--help"])
    assert info.value.code == 0
    text = capsys.readouterr().out
    for flag in ("--system", "--widths", "--activation", "--order", "--gamma", "--alpha1", "--out", "--seed",
                 "--rounds", "--quick", "--input-mask"):
        assert flag in text
    assert cli_main(["presets"]) == 0
    assert {"vdp", "bicycle", "pendulum"} <= {line.split(":")[0] for line in capsys.readouterr().out.splitlines()}
    assert math.isfinite(1.0)


def test_every_train_config_field_is_a_train_flag() -> None:
    """Each TrainConfig field can be set from the command line, and reaches the config."""
    import dataclasses
    from training.cli import _config_from_args, build_parser
    parser = build_parser()
    sample = {"int": "7", "float": "0.375", "list[int]": "0,1", "list[float]": "0.5,1.5"}
    for f in dataclasses.fields(TrainConfig):
        if f.name in ("system", "params"):
            continue
        kind = str(f.type).split(" |")[0]
        flag = {"hidden": "--widths"}.get(f.name, "--" + f.name.replace("_", "-"))
        argv = ["train", "--system", "van_der_pol", "--out", "x"]
        if f.name in ("activation", "teacher_activation"):
            argv += [flag, "tanh"]
        elif f.name in ("label_set", "teacher"):
            argv += [flag, "systems.dubins:left_circling_margin"]
        elif f.name == "order":
            argv += [flag, "2"]
        elif f.name == "faces":
            argv += [flag, "x2:10:1", "x1:2:0.5"]
        elif kind == "bool":
            argv += [flag]
        else:
            argv += [flag, sample[kind]]
        cfg = _config_from_args(parser.parse_args(argv))
        expected = {"bool": True, "int": 7, "float": 0.375, "list[int]": [0, 1], "list[float]": [0.5, 1.5]}.get(kind, "tanh")
        expected = 2 if f.name == "order" else expected
        expected = "systems.dubins:left_circling_margin" if f.name in ("label_set", "teacher") else expected
        expected = ({"x2": {"gamma": 10.0, "margin": 1.0}, "x1": {"gamma": 2.0, "margin": 0.5}}
                    if f.name == "faces" else expected)
        assert getattr(cfg, f.name) == expected, f"{flag} did not set TrainConfig.{f.name}"


def test_a_failed_run_is_diagnosed_with_knobs_that_exist_as_flags() -> None:
    from training.cli import build_parser
    from training.diagnose import KNOBS, diagnose
    check = {"condition_failures": 12, "containment_failures": 3, "coverage": 0.4}
    verification = {"condition_failures": 5, "containment_failures": 0, "n_region": 100,
                    "condition_examples": [{"x": [0.5, -1.0]}, {"x": [0.7, -1.2]}]}
    lines = diagnose(check, verification, ["x1", "x2"])
    assert lines[0].startswith("the CBF condition fails at 12") and "x1 in [0.5, 0.7], x2 in [-1.2, -1]" in lines[0]
    assert any(line.startswith("containment fails") for line in lines)
    assert diagnose({"condition_failures": 0, "containment_failures": 0, "coverage": 0.5},
                    {"condition_failures": 0, "containment_failures": 0, "n_region": 10}, ["x1", "x2"]) == []
    flags = {opt: action.dest for action in build_parser()._subparsers._group_actions[0].choices["train"]._actions
             for opt in action.option_strings}
    import dataclasses
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    for knob in (k for knobs in KNOBS.values() for k in knobs):
        for flag in knob.flag.split("/"):
            assert flag in flags, f"advice names a flag that does not exist: {flag}"
        assert knob.field in fields, f"advice reads a config field that does not exist: {knob.field}"


def test_the_diagnosis_reads_the_runs_config_and_never_suggests_what_is_set() -> None:
    """A softplus run with --label-lost is not told to use softplus or --label-lost (the issue's
    complaint); a knob to raise comes with its next value and the current one."""
    import dataclasses
    from training.diagnose import diagnose
    check = {"condition_failures": 12, "containment_failures": 3, "coverage": 0.4}
    cfg = dataclasses.asdict(TrainConfig(system="cart", activation="softplus", label_lost=True, w_condition=10.0,
                                         safe_fraction=0.3, gamma=2.0))
    text = "\n".join(diagnose(check, None, ["p", "v"], cfg))
    assert "--activation" not in text and "--label-lost" not in text
    assert "--w-condition 100 (now 10)" in text and "--gamma 4 (now 2)" in text
    assert "--safe-fraction 0.5 (now 0.3): label FEWER states safe" in text
    assert "--alpha1" not in text                                   # an order-1 run
    relu = dataclasses.asdict(TrainConfig(system="cart"))
    text = "\n".join(diagnose(check, None, ["p", "v"], relu))
    assert "--activation softplus (or tanh; now relu)" in text and "--label-lost" in text
    at_top = dataclasses.asdict(TrainConfig(system="cart", safe_fraction=0.9))
    assert "--safe-fraction" not in "\n".join(diagnose(check, None, ["p", "v"], at_top))


def test_an_empty_set_is_told_to_label_more_states_safe_not_fewer() -> None:
    import dataclasses
    from training.diagnose import diagnose
    cfg = dataclasses.asdict(TrainConfig(system="cart", safe_fraction=0.3))
    lines = diagnose({"condition_failures": 5, "containment_failures": 0, "coverage": 0.0}, None, ["p", "v"], cfg)
    safe = [line for line in lines if "--safe-fraction" in line]
    assert safe == ["  try --safe-fraction 0.15 (now 0.3): label MORE states safe (a lower threshold on the backup "
                    "rollout's constraint)"]


def test_a_margin_scale_scales_the_trained_and_checked_condition_margin_and_a_negative_one_is_refused():
    """With ``margin_scale`` the trainer's loss and check ask for condition_margin (bias + w.x)
    at each state (the room the scaled filter margin needs), and a scale that goes negative on
    the training box is a one-line ConfigError."""
    from training.config import validate
    from training.margin import condition_margin
    system = get_system("bicycle")
    cfg = TrainConfig(system="bicycle", condition_margin=0.4, margin_scale=[0.0, 0.0, 0.0, 0.0, 0.1],
                      domain_lo=[-10, -3.5, -1, 2], domain_hi=[10, 3.5, 1, 15])
    validate(cfg, system)
    x = np.random.default_rng(0).uniform(cfg.domain_lo, cfg.domain_hi, size=(50, 4))
    np.testing.assert_allclose(condition_margin(cfg, x), 0.04 * x[:, 3], rtol=1e-12)
    np.testing.assert_allclose(condition_margin(cfg, torch.tensor(x)).numpy(), 0.04 * x[:, 3], rtol=1e-12)
    assert condition_margin(cfg.replace(margin_scale=None), x) == 0.4
    with pytest.raises(ConfigError, match="falls to .* < 0 on the domain"):
        validate(cfg.replace(margin_scale=[0.0, 0.0, 0.0, 0.0, -0.1]), system)


@pytest.mark.parametrize("name", ["vdp", "pendulum", "bicycle", "dubins"])
def test_each_shipped_card_records_the_config_its_preset_gives(name: str) -> None:
    """`cbfsim train --preset NAME` must reproduce what the shipped card says, the face rows and
    the filter margin included: a card edited by hand after training (the pendulum's theta_dot
    faces) left the preset's run uncertifiable (closure counterexamples on the open faces)."""
    from training.presets import preset
    card = json.loads((Path(__file__).resolve().parent.parent / "experiments" / "models" / f"{name}.json").read_text())
    mine = preset(name).to_dict()
    defaults = TrainConfig(system=mine["system"]).to_dict()
    for key, value in mine.items():
        recorded = card["config"].get(key, defaults[key])     # older cards omit fields added since, at their default
        assert recorded == value, f"{name}: config[{key!r}] is {recorded!r} in the shipped card, {value!r} in the preset"


@pytest.mark.parametrize("faces, message", [
    ({"omega": {"gamma": 1.0, "margin": 1.0}}, "'omega' is not a state of inverted_pendulum"),
    ({"theta": {"gamma": 1.0, "margin": 1.0}}, "no input drives 'theta' directly"),
    ({"theta_dot": {"gamma": -1.0, "margin": 1.0}}, "faces['theta_dot']['gamma'] must be a finite number > 0"),
])
def test_a_config_with_bad_faces_is_refused_in_one_line(faces: dict, message: str) -> None:
    from training.presets import preset
    cfg = preset("pendulum").replace(faces=faces)
    with pytest.raises(ConfigError, match=re.escape(message)) as err:
        cfg.resolve(cfg.build_system())
    assert "\n" not in str(err.value)


def test_a_hocbf_condition_failure_is_told_to_lower_alpha1_and_raise_alpha2() -> None:
    """Order 2: the set {psi1 = hdot + alpha1 h >= 0} grows with alpha1, and braking along its edge
    asks alpha1 |hdot| of the input (the pendulum: alpha1 5 and 7 made the filter infeasible near
    the theta_dot faces), so the advice is to lower alpha1, and to raise alpha2, never alpha1 up."""
    import dataclasses
    from training.diagnose import diagnose
    cfg = dataclasses.asdict(TrainConfig(system="inverted_pendulum", order=2, alpha1=4.0, alpha2=40.0,
                                         activation="softplus", label_lost=True))
    text = "\n".join(diagnose({"condition_failures": 128, "containment_failures": 0, "coverage": 0.88}, None,
                              ["theta", "theta_dot"], cfg))
    assert "--alpha1 2 (now 4)" in text and "--alpha2 80 (now 40)" in text
    assert "--alpha1 8" not in text


def test_the_bicycle_turn_away_set_lies_in_the_lane_and_every_edge_state_can_raise_its_margin() -> None:
    """systems.bicycle.turn_away_margin (a label_set): m >= 0 only well inside the lane, and on the
    set's edge some input of the box raises m at >= 0.035 v (the filter's margin is 0.015 v).
    dm/dt by central differences of the margin along f + G u (not its formula's derivative),
    at the input box's corners (dm/dt is linear in u wherever m is differentiable)."""
    from systems.bicycle import turn_away_margin
    car = get_system("bicycle")
    rng = np.random.default_rng(4)
    x = rng.uniform([-10, -1.75, -np.pi / 3, 2], [10, 1.75, np.pi / 3, 15], (300_000, 4))
    m = turn_away_margin(car, x)
    assert np.all(np.abs(x[m >= 0, 1]) <= car.params.w - 0.05 + 1e-12)
    edge = x[np.abs(m) < 1e-3]
    assert len(edge) > 100
    best = _edge_rates(turn_away_margin, car, edge)
    assert np.min(best / edge[:, 3]) >= 0.035, np.min(best / edge[:, 3])


def _edge_rates(margin, car, edge: np.ndarray) -> np.ndarray:
    """The best dm/dt over the input box's corners, by central differences of the margin along
    f + G u (dm/dt is linear in u wherever m is differentiable)."""
    best = np.full(len(edge), -np.inf)
    for a in (car.u_min[0], car.u_max[0]):
        for steer in (car.u_min[1], car.u_max[1]):
            F = car.f(edge) + np.einsum("bij,j->bi", car.G(edge), np.array([a, steer]))
            best = np.maximum(best, (margin(car, edge + 1e-7 * F) - margin(car, edge - 1e-7 * F)) / 2e-7)
    return best


def test_the_rounded_bicycle_set_lies_in_the_lane_is_closed_and_every_edge_state_can_raise_its_margin() -> None:
    """systems.bicycle.rounded_turn_away_margin (the shipped barrier's label_set): m >= 0 only
    inside the lane and off the box's heading faces, and on the set's edge some input of the
    box raises m at >= 0.04 v (the filter asks for eps v / 10 with eps ~ 0.3)."""
    from systems.bicycle import rounded_turn_away_margin as margin
    car = get_system("bicycle")
    rng = np.random.default_rng(5)
    x = rng.uniform([-10, -1.75, -np.pi / 3, 2], [10, 1.75, np.pi / 3, 15], (300_000, 4))
    m = margin(car, x)
    assert np.all(np.abs(x[m >= 0, 1]) <= car.params.w - 0.03 + 1e-12)
    face = x.copy()
    face[:, 2] = np.where(x[:, 2] > 0, np.pi / 3, -np.pi / 3)
    assert np.all(margin(car, face) < 0)
    edge = x[np.abs(m) < 1e-3]
    assert len(edge) > 100
    best = _edge_rates(margin, car, edge)
    assert np.min(best / edge[:, 3]) >= 0.04, np.min(best / edge[:, 3])


def _arc(py: np.ndarray, psi: np.ndarray, kappa: float, s: float) -> tuple[np.ndarray, np.ndarray]:
    """The kinematic car's exact (p_y, psi) after arclength s at constant curvature kappa."""
    if kappa == 0.0:
        return py + s * np.sin(psi), psi
    return py + (np.cos(psi) - np.cos(psi + kappa * s)) / kappa, psi + kappa * s


def _hold_failures(margin, car, eps: float, period: float = 0.002, gamma: float = 5.0, v: float = 15.0) -> float:
    """Sampled-data check of a margin taken as the barrier at its fastest speed: every edge state
    (0 <= m < 0.03) and every steering the filter may pick there (dm/dt + gamma m >= eps v / 10,
    dm/dt by central differences along the exact arc) held for the period (the arclength
    v T + a_max T^2 / 2: the path's shape does not depend on the speed), m along the exact arc.
    Returns the least m met (< 0: the set is left within a period)."""
    rng = np.random.default_rng(6)
    py = rng.uniform(-1.75, 1.75, 600_000)
    psi = rng.uniform(-np.pi / 3, np.pi / 3, 600_000)

    def m_of(y, p):
        return margin(car, np.stack([np.zeros_like(y), y, p, np.full_like(y, v)], axis=-1))
    m = m_of(py, psi)
    keep = (m >= 0) & (m < 0.03)
    py, psi, m = py[keep], psi[keep], m[keep]
    reach = v * period + 0.5 * car.params.a_max * period ** 2
    worst = np.inf
    for steer in np.linspace(car.u_min[1], car.u_max[1], 41):
        kappa = float(steer) / car.params.l_w
        rate = v * (m_of(*_arc(py, psi, kappa, 1e-6)) - m_of(*_arc(py, psi, kappa, -1e-6))) / 2e-6
        allowed = rate + gamma * m >= eps * v / 10
        low = m.copy()
        for s in np.linspace(0.0, reach, 9)[1:]:
            low = np.minimum(low, m_of(*_arc(py, psi, kappa, s)))
        if allowed.any():
            worst = min(worst, float(low[allowed].min()))
    return worst


def test_the_rounded_bicycle_set_is_kept_over_a_2ms_hold_and_a_sharp_cornered_one_is_not(monkeypatch) -> None:
    """The rounding is what lets a 2 ms hold keep the set: with the filter's margin at 0.25 v / 10,
    no edge state steers out of the rounded set within a period (exact arcs), while the same
    set with its corners rounded at 0.05 m instead of 0.5 m is left (the mutant this test exists
    to catch: its corner's curvature eats the margin within the period)."""
    import importlib
    bicycle = importlib.import_module("systems.bicycle")   # the package re-exports a function of that name
    car = get_system("bicycle")
    assert _hold_failures(bicycle.rounded_turn_away_margin, car, eps=0.25) >= -1e-9
    monkeypatch.setattr(bicycle, "ROUNDED_RADIUS", 0.05)
    assert _hold_failures(bicycle.rounded_turn_away_margin, car, eps=0.25) < -1e-4
