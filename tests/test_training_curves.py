"""training_curves.png's data: one round axis that counts on across the certifier's calls (issue
23: the rounds restarted at 0 and lines ran from round 19 back to 0), the kept network's round
marked, and each certifier verdict placed after the phase it judged."""
from __future__ import annotations

import copy

import numpy as np
import pytest

import training.certified_training as ct
from training.certify import Certificate, ConditionResult
from training.config import TrainConfig
from training.curves import curve_data, plot_training_curves
from training.trainer import train_barrier

TINY = dict(system="van_der_pol", hidden=[8], activation="tanh", n_uniform=600, n_boundary=200, steps_per_round=5,
            warm_start_steps=5, batch_size=128, rounds=3, min_rounds=3, clean_checks=99, check_samples=2000,
            check_boundary=400, backup_dt=0.05, seed=3, certify=True, certify_rounds=3, certify_train_rounds=2)


def _refusal(counterexamples: int) -> Certificate:
    """A certifier verdict 'not certified' with this many counterexamples (no compile, no search)."""
    ces = [{"x": [0.1 * i, -0.1 * i], "quantity": "h", "value": -1.0} for i in range(counterexamples)]
    return Certificate(certified=False, claim="", system="van_der_pol", order=1, dt=0.01, margin=0.0,
                       conditions={"sampled_data": ConditionResult(counterexamples=ces)},
                       boxes={"proven": 0, "refuted": 1, "undecided": 0, "evaluated": 1}, certified_coverage=0.0,
                       sampled_coverage=0.0, closed_in_domain=False, undecided=[], rounding="", wall_time_s=0.0,
                       versions={}, model_hash="", reason="refuted")


@pytest.fixture(scope="module")
def run():
    """A real (tiny) training run with three certifier calls, each refusing: three phases."""
    verdicts = iter([_refusal(5), _refusal(2), _refusal(1)])
    saved = ct.certify_barrier
    ct.certify_barrier = lambda *args, **kwargs: next(verdicts)
    try:
        result = train_barrier(TrainConfig(**TINY), None, progress=False, verify=False)
    finally:
        ct.certify_barrier = saved
    return result


def test_the_round_axis_counts_on_across_certifier_calls(run):
    history = run.card["training"]["history"]
    rounds = [row["round"] for row in history]
    assert rounds == list(range(len(history))), "rounds must increase by one across phases"
    assert [row["phase"] for row in history] == [0, 0, 0, 1, 1, 2, 2]
    data = curve_data(history, run.card["training"]["certify_history"])
    assert data["rounds"] == rounds and np.all(np.diff(data["rounds"]) > 0)


def test_the_kept_round_is_marked_once_in_the_last_phase(run):
    history = run.card["training"]["history"]
    kept = [row["round"] for row in history if row.get("kept")]
    assert len(kept) == 1 and history[kept[0]]["phase"] == 2 and history[kept[0]]["best_in_phase"]
    assert curve_data(history)["kept"] == kept[0]
    assert sum(bool(row.get("best_in_phase")) for row in history) == 3          # one per phase
    # the kept round's check is the one the run reports as final
    row = history[kept[0]]
    assert run.final_check["condition_failures"] == row["condition_failures"]
    assert run.final_check["containment_failures"] == row["containment_failures"]


def test_each_certifier_verdict_sits_after_the_phase_it_judged(run):
    data = curve_data(run.card["training"]["history"], run.card["training"]["certify_history"])
    assert [c["after_round"] for c in data["certifier"]] == [2, 4, 6]
    assert [c["verdict"] for c in data["certifier"]] == ["refuted"] * 3
    assert [c["counterexamples"] for c in data["certifier"]] == [5, 2, 1]


def test_an_older_history_that_restarts_at_zero_is_renumbered():
    old = [{"round": r, "coverage": 0.5} for r in (0, 1, 2, 0, 1, 0, 1)]
    data = curve_data(old, [{"certified": False, "counterexamples": {"c": 3}},
                            {"certified": False, "counterexamples": {"c": 1}},
                            {"certified": True, "margin": 0.05, "counterexamples": {}}])
    assert data["rounds"] == list(range(7)) and data["phases"] == [0, 0, 0, 1, 1, 2, 2]
    assert [c["after_round"] for c in data["certifier"]] == [2, 4, 6] and data["kept"] is None
    assert data["certifier"][-1]["verdict"] == "certified" and "margin 0.05" in data["certifier"][-1]["label"]


def test_the_figure_is_written(run, tmp_path):
    history = copy.deepcopy(run.card["training"]["history"])
    path = plot_training_curves(tmp_path / "curves.png", history, "tiny", run.card["training"]["certify_history"])
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 20_000


DISTILLED_ROUNDS = [
    {"round": 0, "certifier": "refuted", "certifier_counterexamples": 0, "certifier_limit_s": 30.0, "certifier_s": 0.0,
     "sampled_failures": 0, "walk_below_slack": 4, "walk_violations": 2},
    {"round": 1, "certifier": "undecided", "certifier_counterexamples": 0, "certifier_limit_s": 30.0,
     "certifier_s": 31.0, "sampled_failures": 3, "walk_below_slack": 0, "walk_violations": 0},
    {"round": 2, "certifier": "certified", "certifier_counterexamples": 0, "certifier_limit_s": 60.0,
     "certifier_s": 12.5, "sampled_failures": 0, "walk_below_slack": 0, "walk_violations": 0, "returned": True},
    {"round": 3, "certifier": "refuted", "certifier_counterexamples": 5, "certifier_limit_s": 60.0,
     "certifier_s": 2.0, "sampled_failures": 1},
]


def test_a_distilled_students_rounds_are_drawn_per_oracle():
    from training.curves import distillation_data
    data = distillation_data(DISTILLED_ROUNDS)
    assert data["rounds"] == [0, 1, 2, 3] and data["returned"] == 2
    assert data["series"]["sampled_failures"] == [0, 3, 0, 1]
    assert data["series"]["walk_below_slack"] == [4, 0, 0, None]       # round 3 did not walk
    assert data["verdicts"] == ["refuted", "undecided", "certified", "refuted"]
    unmarked = [{k: v for k, v in r.items() if k != "returned"} for r in DISTILLED_ROUNDS]
    assert distillation_data(unmarked)["returned"] == 3                # no mark: the last round's student


def test_a_written_down_teachers_run_draws_the_distillation(tmp_path):
    from training.curves import plot_distillation_rounds
    path = plot_distillation_rounds(tmp_path / "curves.png", DISTILLED_ROUNDS, "distilled")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 20_000
