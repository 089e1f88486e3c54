"""Training against the certifier: its counterexamples and undecided boxes reach the
training pool, and the run ends with a certificate beside the model or a diagnosis."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from training.certified_training import evidence_points
from training.certify import Certificate, ConditionResult
from training.config import ConfigError, TrainConfig

TINY_VDP = dict(system="van_der_pol", hidden=[8, 8], activation="relu", gamma=1.0, n_uniform=3000,
                n_boundary=1000, steps_per_round=60, warm_start_steps=150, rounds=3, check_samples=20_000,
                check_boundary=4000, verify_samples=10_000, backup_dt=0.05, batch_size=512, seed=1,
                certify=True, certify_rounds=2, certify_train_rounds=1, certify_time_limit=8.0, dt_control=0.01)


def _certificate(counterexamples: list[list[float]], undecided: list[tuple[list[float], list[float]]]) -> Certificate:
    conditions = {"containment": ConditionResult(),
                  "feasibility": ConditionResult(),
                  "sampled_data": ConditionResult(counterexamples=[{"x": x, "quantity": "h", "value": -1.0}
                                                                   for x in counterexamples])}
    return Certificate(certified=False, claim="", system="van_der_pol", order=1, dt=0.01, margin=0.0,
                       conditions=conditions, boxes={"proven": 0, "refuted": 1, "undecided": len(undecided),
                                                     "evaluated": 1},
                       certified_coverage=0.0, sampled_coverage=0.0, closed_in_domain=False,
                       undecided=[{"lo": a, "hi": b, "why": "time"} for a, b in undecided], rounding="",
                       wall_time_s=0.0, versions={}, model_hash="")


def test_evidence_points_are_the_counterexamples_and_each_undecided_boxs_centre_and_corners() -> None:
    lo, hi = np.array([-3.0, -3.0]), np.array([3.0, 3.0])
    cert = _certificate([[0.5, -1.25]], [([0.0, 1.0], [0.5, 2.0])])
    points = evidence_points(cert, lo, hi)
    expected = {(0.5, -1.25), (0.25, 1.5), (0.0, 1.0), (0.0, 2.0), (0.5, 1.0), (0.5, 2.0)}
    assert {tuple(p) for p in points} == expected and len(points) == len(expected)


def test_evidence_points_stay_inside_the_training_box() -> None:
    lo, hi = np.array([-1.0, -1.0]), np.array([1.0, 1.0])
    cert = _certificate([[2.0, 0.0]], [([0.5, 0.5], [1.5, 1.5])])
    points = evidence_points(cert, lo, hi)
    assert np.all(points >= lo) and np.all(points <= hi)
    assert (1.0, 0.0) in {tuple(p) for p in points}


def test_certify_settings_are_validated_with_the_field_named() -> None:
    from systems import get_system
    with pytest.raises(ConfigError, match="dt_control"):
        TrainConfig(system="van_der_pol", dt_control=-0.01).resolve(get_system("van_der_pol"))
    with pytest.raises(ConfigError, match="certify_time_limit"):
        TrainConfig(system="van_der_pol", certify_time_limit=0.0).resolve(get_system("van_der_pol"))


@pytest.mark.toolchain
def test_certifier_evidence_enters_the_pool_and_the_run_ends_with_a_certificate_or_a_diagnosis(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    import training.certified_training as ct
    import training.trainer as trainer
    from training.cli import main as cli_main
    certificates: list = []
    pooled: list[np.ndarray] = []
    real_certify, real_pool = ct.certify_barrier, trainer._ce_pool

    def spy_certify(*args, **kwargs):
        certificates.append(real_certify(*args, **kwargs))
        return certificates[-1]

    def spy_pool(system, tools, cfg, res, x, rng):
        pooled.append(np.array(x, copy=True))
        return real_pool(system, tools, cfg, res, x, rng)

    monkeypatch.setattr(ct, "certify_barrier", spy_certify)
    monkeypatch.setattr(trainer, "_ce_pool", spy_pool)
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps({k: v for k, v in TINY_VDP.items() if k != "certify"}))
    out = tmp_path / "run"
    code = cli_main(["train", "--config", str(config), "--certify", "--out", str(out), "--no-progress"])
    text = capsys.readouterr().out
    assert certificates, "the certifier never ran"
    first = certificates[0]
    stored = json.loads((out / "model.cert.json").read_text())
    card = json.loads((out / "model.json").read_text())
    assert stored["certified"] == certificates[-1].certified and stored["dt"] == 0.01
    assert [h["certified"] for h in card["training"]["certify_history"]] == [c.certified for c in certificates]
    if first.certified:
        assert code == 0 and len(certificates) == 1
        return
    # the first certificate's evidence went into the pool of the next sampled rounds
    evidence = evidence_points(first, np.array(card["domain_lo"]), np.array(card["domain_hi"]))
    assert len(certificates) == 2 and len(evidence) > 0
    assert any(x.shape == evidence.shape and np.array_equal(x, evidence) for x in pooled)
    if certificates[-1].certified:
        assert code == 0 and "CERTIFIED" in text
    else:
        assert code == 1 and "the certifier did not certify it" in text and "try --" in text
