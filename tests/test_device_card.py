"""A model card -> the device run (cbfsim.device.card_run, experiments/device.py): every card
field has a destination, every run-relevant one reaches RunConfig and the generated
cbf_config.hpp, the command line overrides the card, and a bad card or a missing choice is
one line, never a silent default."""
from __future__ import annotations

import dataclasses
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cbfsim import device
from cbfsim.device.config import _cpp_float
from cbfsim.preflight import certified_margin, load_certificate
from training.model_card import CardError, ModelCard

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "experiments" / "models"
CARDS = ["vdp", "pendulum", "bicycle"]


def _script():
    spec = importlib.util.spec_from_file_location("device_script", ROOT / "experiments" / "device.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _card_copy(tmp_path: Path, name: str, edit=None) -> Path:
    """The shipped card (and its ONNX) copied to tmp_path, with ``edit(dict)`` applied."""
    data = json.loads((MODELS / f"{name}.json").read_text())
    if edit:
        edit(data)
    shutil.copy(MODELS / f"{name}.onnx", tmp_path / f"{name}.onnx")
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(data))
    return path


def _x0(name: str) -> tuple[float, ...]:
    return device.SHIPPED_RUNS[name]["x0"]


def test_every_card_field_has_a_destination():
    assert set(device.CARD_KEYS) == {f.name for f in dataclasses.fields(ModelCard)}


@pytest.mark.parametrize("name", CARDS)
def test_card_values_reach_the_run_config(name):
    card = json.loads((MODELS / f"{name}.json").read_text())
    run = device.card_run(MODELS / f"{name}.json", nominal=device.SHIPPED_RUNS[name]["nominal"], x0=_x0(name))
    config = run.config
    gains = card["class_k"]
    assert config.system == card["system"]
    assert config.params == card["system_params"]
    assert config.order == card["order"]
    assert config.alpha == ((gains["gamma"],) if card["order"] == 1 else (gains["alpha1"], gains["alpha2"]))
    assert config.domain == (tuple(card["domain_lo"]), tuple(card["domain_hi"]))
    assert config.margin == certified_margin(load_certificate(MODELS / f"{name}.json"))
    assert run.model == MODELS / card["network"]["onnx"]
    if card["config"].get("dt_control") is not None:       # the certified hold period
        assert config.dt == card["config"]["dt_control"]
    plant = config.plant()
    assert list(plant.u_min) == pytest.approx(card["u_min"], rel=1e-12)
    assert list(plant.state_names) == card["state_names"]


@pytest.mark.parametrize("name, edit, field, expected", [
    ("vdp", lambda d: d["class_k"].update(gamma=3.5), "alpha", (3.5,)),
    ("pendulum", lambda d: d["class_k"].update(alpha1=1.5, alpha2=7.0), "alpha", (1.5, 7.0)),
    ("bicycle", lambda d: d["system_params"].update(v_ref=12.0), "params", None),
    ("pendulum", lambda d: d.update(domain_lo=[-1.0, -1.0]), "domain", ((-1.0, -1.0), (1.5707963267948966, 1.25))),
    ("vdp", lambda d: (d.update(order=2), d.update(class_k={"kind": "linear", "alpha1": 2.0, "alpha2": 3.0})),
     "order", 2),
])
def test_an_edited_card_changes_the_run_config(tmp_path, name, edit, field, expected):
    path = _card_copy(tmp_path, name, edit)
    config = device.card_run(path, nominal=device.SHIPPED_RUNS[name]["nominal"], x0=_x0(name)).config
    edited = json.loads(path.read_text())
    want = dict(edited["system_params"]) if field == "params" else expected
    assert getattr(config, field) == want


@pytest.mark.parametrize("name", ["pendulum", "bicycle"])
def test_card_values_reach_the_generated_headers(tmp_path, name):
    """The card's gains, order, training box and plant parameters in cbf_config.hpp /
    cbf_system.hpp (a card with non-default values, so defaults cannot pass for them)."""
    def edit(d):
        if d["order"] == 1:
            d["class_k"]["gamma"] = 4.25
        else:
            d["class_k"].update(alpha1=2.5, alpha2=30.0)
        key = "w" if name == "bicycle" else "theta_max"
        d["system_params"][key] = 0.7
    path = _card_copy(tmp_path, name, edit)
    run = device.card_run(path, nominal=device.SHIPPED_RUNS[name]["nominal"], x0=_x0(name))
    # the lane / angle limit moved, so the input box check uses the edited params too
    generated = device.generate(run.model, run.config, tmp_path / "gen")
    header = (generated.directory / "cbf_config.hpp").read_text()
    plant = (generated.directory / "cbf_system.hpp").read_text()
    card = json.loads(path.read_text())
    gains = card["class_k"]
    alphas = (gains["gamma"], gains["gamma"]) if card["order"] == 1 else (gains["alpha1"], gains["alpha2"])
    assert f"kOrder = {card['order']};" in header
    assert f"kAlpha1 = {_cpp_float(alphas[0])};" in header and f"kAlpha2 = {_cpp_float(alphas[1])};" in header
    for lo in card["domain_lo"]:
        assert _cpp_float(lo) in header.split("kDomainLo")[1].split(";")[0]
    assert run.config.plant().constraint([[0.0] * len(card["state_names"])]) == pytest.approx(0.7 ** 2)
    from systems import get_system
    source = lambda params: "#pragma once\n" + get_system(card["system"], **params).cpp_source(  # noqa: E731
        "cbf_config::plant", scalar="float", math_prefix=f"{generated.name}::detail::m_")
    assert plant == source(card["system_params"])
    assert plant != source(json.loads((MODELS / f"{name}.json").read_text())["system_params"])


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.update(colour="blue"), "unknown fields ['colour']"),
    (lambda d: d.pop("class_k"), "'class_k' is missing"),
    (lambda d: d["class_k"].pop("alpha2"), "class_k.alpha2 is missing"),
])
def test_unknown_or_missing_card_key_is_a_one_line_error(tmp_path, edit, message):
    path = _card_copy(tmp_path, "pendulum", edit)
    with pytest.raises(CardError, match=message.replace("[", r"\[").replace("]", r"\]")):
        device.card_run(path, nominal="pd", x0=(0.0, 0.0))
    result = subprocess.run([sys.executable, str(ROOT / "experiments" / "device.py"), "--model",
                             str(path.with_suffix(".onnx")), "--targets", "host", "--out", str(tmp_path / "out")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert len(result.stderr.strip().splitlines()) == 1 and message in result.stderr
    assert not (tmp_path / "out" / "summary.json").exists()


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.update(input_names=["torque"]), "input_names"),
    (lambda d: d.update(u_max=[11.0]), "u_max"),
])
def test_card_that_contradicts_its_plant_is_refused(tmp_path, edit, message):
    path = _card_copy(tmp_path, "pendulum", edit)
    with pytest.raises(device.DeviceConfigError, match=message):
        device.card_run(path, nominal="pd", x0=(0.0, 0.0))


def test_shipped_run_takes_the_cards_hold_period_and_its_horizon(tmp_path):
    path = _card_copy(tmp_path, "pendulum", lambda d: d["config"].update(dt_control=0.004))
    run = device.shipped_card_run(path)
    assert run.config.dt == 0.004
    assert run.config.steps == round(device.SHIPPED_RUNS["pendulum"]["t_final"] / 0.004)
    assert device.shipped_card_run(path, dt=0.002, steps=9).config.dt == 0.002     # the command line wins
    assert not device.shipped_card_run(path).certificate_covers_run    # the copy has no certificate beside it


def test_missing_nominal_or_x0_or_unknown_option_is_an_error_not_a_default():
    card = MODELS / "bicycle.json"
    with pytest.raises(device.DeviceConfigError, match="nominal"):
        device.card_run(card, nominal=None, x0=(0.0, 0.0, 0.0, 10.0))
    with pytest.raises(device.DeviceConfigError, match="x0"):
        device.card_run(card, nominal="drift", x0=None)
    with pytest.raises(device.DeviceConfigError, match="'alfa'"):
        device.card_run(card, nominal="drift", x0=(0.0, 0.0, 0.0, 10.0), alfa=(1.0,))
    with pytest.raises(device.DeviceConfigError, match="no nominal controller 'zero'"):
        device.card_run(card, nominal="zero", x0=(0.0, 0.0, 0.0, 10.0))


def test_command_line_overrides_the_card():
    script = _script()
    args = script.build_parser().parse_args(
        ["--model", "pendulum", "--alpha", "3", "4", "--nominal", "zero", "--x0", "0.1", "0.2",
         "--param", "kp=6", "--margin", "0.01", "--dt", "0.002", "--steps", "77", "--fallback", "input"])
    _, config, _ = script.resolve("pendulum", args)
    assert (config.alpha, config.nominal, config.x0) == ((3.0, 4.0), "zero", (0.1, 0.2))
    assert config.params["kp"] == 6.0 and config.params["kd"] == 4.0      # merged into the card's
    assert (config.margin, config.dt, config.steps, config.fallback.kind) == (0.01, 0.002, 77, "input")
    default = script.resolve("pendulum", script.build_parser().parse_args(["--model", "pendulum"]))[1]
    gains = json.loads((ROOT / "experiments" / "models" / "pendulum.json").read_text())["class_k"]
    assert (default.alpha, default.nominal) == ((gains["alpha1"], gains["alpha2"]), "pd")   # the card's gains, the run table's


def test_system_checks_verdicts():
    """checks.system_checks on hand-made entries: each failing fact turns the verdict."""
    def entry(**over):
        base = {"bit_identical_to_host": True, "max_abs_dx": 1e-6, "heap_symbols": [],
                "workspace": {"header_bytes": 64, "symbol_bytes": 64},
                "benchmark": {"median": 1000, "min": 999, "max": 1001}}
        return {**base, **over}
    host = {"bit_identical_to_host": True, "max_abs_dx": 1e-6}
    assert device.system_checks({"host": host, "m4": entry()}, relu=True)["ok"]
    for bad in (entry(bit_identical_to_host=False), entry(max_abs_dx=2e-3), entry(heap_symbols=["malloc"]),
                entry(workspace={"header_bytes": 64, "symbol_bytes": 72}),
                entry(benchmark={"median": 1000, "min": 990, "max": 1011})):
        assert not device.system_checks({"host": host, "m4": bad}, relu=False)["ok"]
    two_ticks = entry(benchmark={"median": 1000, "min": 998, "max": 1000})
    assert device.system_checks({"host": host, "m4": two_ticks}, relu=False)["ok"]
    assert not device.system_checks({"host": host, "m4": two_ticks}, relu=True)["ok"]
