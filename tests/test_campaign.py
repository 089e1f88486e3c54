"""Campaigns (cbfsim/campaign): Dask equals in-process, resuming equals running once, a retried
shard counts once, the worst run replays alone, bad specs are refused in one line."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from cbfsim import campaign
from cbfsim.campaign.report import merge

pytestmark = pytest.mark.toolchain
CARD = Path(__file__).resolve().parent.parent / "experiments" / "models" / "vdp.json"
SPEC = {"card": str(CARD), "runs": 12, "shard_size": 4, "t_final": 1.0,
        "grid": {"plant_params": [{}, {"mu": 1.6}], "disturbance": [{"kind": "none"},
                                                                    {"kind": "uniform", "bound": [0.0, 0.5]}]},
        "seed": 3}


@pytest.fixture(scope="module")
def once(tmp_path_factory, cxx):
    return campaign.run(SPEC, tmp_path_factory.mktemp("once"), in_process=True)


def test_a_two_worker_local_cluster_gives_the_in_process_results_bit_for_bit(once, tmp_path):
    pytest.importorskip("distributed")
    on_dask = campaign.run(SPEC, tmp_path / "dask", workers=2)
    assert json.dumps(on_dask["settings"]) == json.dumps(once["settings"])
    assert on_dask["complete"] and (tmp_path / "dask" / "violation.png").exists()
    assert (tmp_path / "dask" / "worst_runs.png").stat().st_size > 10_000


def test_a_resumed_campaign_equals_an_uninterrupted_one(once, tmp_path):
    out = tmp_path / "resumed"
    partial = campaign.run(SPEC, out, in_process=True, stop_after=5)
    assert not partial["complete"] and len(campaign.pending(campaign.load_spec(SPEC), out)) == 12 - 5
    resumed = campaign.run(SPEC, out, in_process=True)
    assert json.dumps(resumed["settings"]) == json.dumps(once["settings"])


def test_a_shard_run_twice_by_a_retry_is_counted_once(once, tmp_path):
    out = tmp_path / "twice"
    campaign.run(SPEC, out, in_process=True)
    results = [json.loads(p.read_text()) for p in sorted((out / "shards").glob("*.json"))]
    assert json.dumps(merge(campaign.load_spec(SPEC), results + results[:3])["settings"]) == \
        json.dumps(once["settings"])


def test_the_worst_run_replays_alone_with_the_same_numbers(once):
    row = max(once["settings"], key=lambda r: r["violations"])
    assert row["violations"] > 0                   # mu 1.6 breaks the filter's mu 1 model
    worst = row["worst_runs"][0]
    traj = campaign.replay(SPEC, row["setting"], worst["run"])
    system = __import__("systems").get_system("van_der_pol", mu=1.0, r=1.5, u_max=2.0)
    assert float(system.constraint(traj.x[0]).min()) == worst["min_constraint"]
    assert traj.metadata["perturbation"]["run_seeds"] == [worst["seed"]]


def test_bad_specs_and_a_foreign_directory_are_refused_in_one_line(tmp_path, once):
    for bad, word in [({**SPEC, "runz": 3}, "runz"), ({**SPEC, "runs": 0}, "runs"),
                      ({**SPEC, "grid": {"disturbance": [{"kind": "gale"}]}}, "kind"),
                      ({**SPEC, "card": "nowhere.json"}, "not found")]:
        with pytest.raises(campaign.SpecError, match=word):
            campaign.load_spec(bad)
    campaign.run({**SPEC, "runs": 4}, tmp_path / "one", in_process=True)
    with pytest.raises(campaign.SpecError, match="different campaign"):
        campaign.run(SPEC, tmp_path / "one", in_process=True)


def test_the_compiled_engine_runs_a_campaign_and_replays_its_worst_run(tmp_path):
    spec = {**SPEC, "engine": "compiled", "grid": {"plant_params": [{}], "disturbance": [
        {"kind": "worst_case", "bound": [0.0, 0.4]}]}}
    summary = campaign.run(spec, tmp_path / "compiled", in_process=True)
    row = summary["settings"][0]
    worst = row["worst_runs"][0]
    traj = campaign.replay(spec, 0, worst["run"])
    assert traj.metadata["engine"] == "compiled"
    system = __import__("systems").get_system("van_der_pol", mu=1.0, r=1.5, u_max=2.0)
    assert float(system.constraint(traj.x[0]).min()) == worst["min_constraint"]
