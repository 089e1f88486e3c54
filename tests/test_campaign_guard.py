"""A campaign you can trust: runs that diverge are violations or faults in both engines, never
safe; one campaign owns its folder (a lock, a spec-hash stamp); shards are checked (a damaged one
is named and run again, a foreign one refused in one line); hostile specs are refused in one
line, exit 1, no traceback, before anything runs."""
from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cbfsim import campaign
from cbfsim.cli import main as cli_main

ROOT = Path(__file__).resolve().parent.parent
CARD = ROOT / "experiments" / "models" / "vdp.json"
SMALL = {"card": str(CARD), "runs": 4, "shard_size": 2, "t_final": 0.5, "seed": 5}
HUGE_PUSH = {"disturbance": [{"kind": "constant", "value": [0.0, 1e36]}]}


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}


# ------------------------------------------------------------------ diverged runs are never safe
@pytest.mark.toolchain
@pytest.mark.parametrize("engine", ["numpy", "compiled"])
def test_a_campaign_whose_runs_all_diverge_counts_every_run_a_violation_in_both_engines(engine, tmp_path, cxx):
    spec = {**SMALL, "runs": 6, "shard_size": 3, "engine": engine, "grid": HUGE_PUSH}
    row = campaign.run(spec, tmp_path / "v", in_process=True)["settings"][0]
    assert row["violations"] == 6 and row["probability"] == 1.0
    assert row["fates"] == {"completed": 0, "left_set": 0, "faulted": 6}
    assert all(w["fate"] == "faulted" and w["step"] is not None for w in row["worst_runs"])
    apart = campaign.run({**spec, "faults": "separate"}, tmp_path / "v", in_process=True)["settings"][0]
    assert apart["fates"]["faulted"] == 6 and apart["fates"]["completed"] == 0     # reported apart, not safe
    assert apart["judged_runs"] == 0 and apart["probability"] is None


@pytest.mark.toolchain
def test_vdp_at_mu_400_counts_every_run_that_left_the_set_or_faulted(tmp_path, cxx):
    """The probe's case: 6 of 20 were reported where at least 14 of 20 left the set."""
    from systems import get_system
    spec = {**SMALL, "runs": 20, "shard_size": 10, "t_final": 1.0, "grid": {"plant_params": [{"mu": 400.0}]}}
    row = campaign.run(spec, tmp_path / "mu", in_process=True)["settings"][0]
    unsafe = 0
    system = get_system("van_der_pol", mu=1.0, r=1.5, u_max=2.0)
    for run in range(20):                          # replayed alone: left the set, or a non-finite/huge state
        import numpy as np
        with np.errstate(all="ignore"):
            x = campaign.replay(spec, 0, run).x[0]
            c = system.constraint(x[np.isfinite(x).all(axis=1)])
        unsafe += bool((c < 0).any() or not (np.abs(x) <= 1e30).all())
    assert unsafe >= 14 and row["violations"] == unsafe
    assert row["violations"] == row["fates"]["left_set"] + row["fates"]["faulted"]


# ------------------------------------------------------------------ the folder is owned
def _start(spec_path: Path, out: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "cbfsim.cli", "campaign", str(spec_path), "--out", str(out),
                             "--in-process", "--quiet"], cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


@pytest.mark.toolchain
def test_two_campaigns_started_at_once_into_one_folder_one_runs_the_other_is_refused_in_one_line(tmp_path, cxx):
    campaign.run({**SMALL, "runs": 2, "shard_size": 2}, tmp_path / "warm", in_process=True)   # build cache warm
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(json.dumps({**SMALL, "runs": 48, "shard_size": 1, "t_final": 1.0}))
    out = tmp_path / "shared"
    first, second = _start(spec_path, out), _start(spec_path, out)
    results = [(p.wait(timeout=600), *p.communicate()) for p in (first, second)]
    codes = sorted(code for code, _, _ in results)
    assert codes == [0, 1], results
    (refused,) = [err for code, _, err in results if code == 1]
    assert len(refused.strip().splitlines()) == 1 and "Traceback" not in refused
    assert "is in use by another campaign (pid " in refused and str(out) in refused
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] and summary["shards_merged"] == summary["shards_total"] == 48
    assert (out / "campaign.lock").read_text() == ""                  # released on exit


@pytest.mark.toolchain
def test_a_lock_left_by_a_dead_campaign_is_taken_over_with_a_message(tmp_path, caplog, cxx):
    out = tmp_path / "stale"
    out.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (out / "campaign.lock").write_text(f"{dead.pid}\n")
    with caplog.at_level(logging.WARNING, logger="cbfsim.campaign"):
        summary = campaign.run(SMALL, out, in_process=True)
    assert summary["complete"]
    assert f"taking over the lock of campaign pid {dead.pid} (no longer running)" in caplog.text


# ------------------------------------------------------------------ shards are checked
@pytest.fixture(scope="module")
def finished(tmp_path_factory, cxx):
    out = tmp_path_factory.mktemp("finished")
    return out, campaign.run(SMALL, out, in_process=True)


def _copy(finished, tmp_path) -> Path:
    import shutil
    out = tmp_path / "copy"
    shutil.copytree(finished[0], out)
    return out


@pytest.mark.toolchain
@pytest.mark.parametrize("damage", ["truncated", "not_json", "checksum"])
def test_a_damaged_shard_is_named_and_run_again(finished, tmp_path, caplog, damage):
    out = _copy(finished, tmp_path)
    shard = out / "shards" / "s0000-k00001.json"
    text = shard.read_text()
    if damage == "truncated":
        shard.write_text(text[: len(text) // 2])
    elif damage == "not_json":
        shard.write_bytes(b"\x00\xff garbage")
    else:
        data = json.loads(text)
        data["payload"]["min_h"][0] += 1.0
        shard.write_text(json.dumps(data))
    with caplog.at_level(logging.WARNING, logger="cbfsim.campaign"):
        again = campaign.run(SMALL, out, in_process=True)
    assert f"damaged shard: {shard}" in caplog.text and "run again" in caplog.text
    assert json.dumps(again["settings"]) == json.dumps(finished[1]["settings"])
    assert json.loads(shard.read_text()) == json.loads((finished[0] / "shards" / shard.name).read_text())
    assert (shard.parent / (shard.name + ".damaged")).exists()


def _forge(payload: dict, **changes) -> dict:
    from cbfsim.campaign.store import envelope
    return envelope({**payload, **changes})


def _refusals(finished, tmp_path):
    """(name, what to write into s0000-k00001.json or how to misplace a shard, the words expected)."""
    good = json.loads((finished[0] / "shards" / "s0000-k00001.json").read_text())
    payload = good["payload"]
    other = campaign.load_spec({**SMALL, "seed": 6}).spec_hash
    return [("a JSON list", [payload], "holds a JSON list, not a campaign shard"),
            ("another campaign", _forge(payload, spec_hash=other), "was written by another campaign"),
            ("another setting", _forge(payload, setting=0, shard=0), "claims setting 0, shard 0, not its name's 0, 1"),
            ("forged seeds", _forge(payload, seeds=[1, 2]), "run seeds that are not this campaign's"),
            ("forged fate", _forge(payload, fate=["safe", "safe"]), "a fate outside completed, left_set, faulted"),
            ("no envelope", payload, "is not a cbfsim-campaign-shard/2 file")]


@pytest.mark.toolchain
def test_foreign_forged_and_list_shards_are_refused_in_one_line_naming_the_file(finished, tmp_path, capsys):
    for name, content, words in _refusals(finished, tmp_path):
        out = _copy(finished, tmp_path / name.replace(" ", "_"))
        shard = out / "shards" / "s0000-k00001.json"
        shard.write_text(json.dumps(content))
        with pytest.raises(campaign.ForeignShardError, match=words):
            campaign.run(SMALL, out, in_process=True)
        spec_path = out / "spec-copy.json"
        spec_path.write_text(json.dumps(SMALL))
        assert cli_main(["campaign", str(spec_path), "--out", str(out), "--in-process", "--quiet"]) == 1, name
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and str(shard) in err and words in err, (name, err)


@pytest.mark.toolchain
def test_the_summary_says_how_many_shards_it_merged_of_how_many(tmp_path, cxx):
    spec = {**SMALL, "grid": {"noise": [0.0, 0.001]}}
    part = campaign.run(spec, tmp_path / "p", in_process=True, stop_after=3)
    assert (part["shards_merged"], part["shards_total"], part["complete"]) == (3, 4, False)
    whole = campaign.run(spec, tmp_path / "p", in_process=True)
    assert (whole["shards_merged"], whole["shards_total"], whole["complete"]) == (4, 4, True)
    stamp = json.loads((tmp_path / "p" / "campaign.json").read_text())
    assert stamp["spec_hash"] == campaign.load_spec(spec).spec_hash
    for shard in (tmp_path / "p" / "shards").glob("*.json"):
        data = json.loads(shard.read_text())
        canonical = json.dumps(data["payload"], sort_keys=True, separators=(",", ":")).encode()
        assert data["sha256"] == hashlib.sha256(canonical).hexdigest()
        assert data["payload"]["spec_hash"] == stamp["spec_hash"]


# ------------------------------------------------------------------ hostile specs
def _nested(depth: int) -> str:
    return '{"card": "x", "grid": {"plant_params": ' + "[" * depth + "]" * depth + "}}"


def _hostile() -> list[tuple[str, str, str]]:
    """(name, spec text, words the one-line error must hold)."""
    def spec(**changes) -> str:
        return json.dumps({**SMALL, **changes})
    axis = 1400                                          # 1400^3 = 2.7e9 settings in ~35 KB
    big_grid = {"plant_params": [{}] * axis, "disturbance": [{"kind": "none"}] * axis, "noise": [0.0] * axis}
    return [
        ("runs 1e18", spec(runs=1e18), "runs: expected an integer"),
        ("runs 10^18", spec(runs=10 ** 18), "runs: expected an integer in [1, 1000000000]"),
        ("2.7e9 settings", spec(grid=big_grid), "2.74e+09 settings, more than the limit"),
        ("work", spec(runs=10 ** 9, t_final=1000.0), "state-steps, more than max_state_steps"),
        ("memory", spec(runs=10 ** 7, shard_size=10 ** 7, t_final=5.0), "bytes of memory available"),
        ("robust 'false'", spec(filter={"robust": "false"}), "filter.robust: expected true or false"),
        ("robust 'no'", spec(filter={"robust": "no"}), "filter.robust: expected true or false"),
        ("robust '0'", spec(filter={"robust": "0"}), "filter.robust: expected true or false"),
        ("robust 0", spec(filter={"robust": 0}), "filter.robust: expected true or false"),
        ("seed 2^70", spec(seed=2 ** 70), "seed: expected an integer in [0, 18446744073709551615]"),
        ("seed -1", spec(seed=-1), "seed: expected an integer"),
        ("t_final Infinity", spec().replace('"t_final": 0.5', '"t_final": Infinity'), "t_final: expected a finite"),
        ("t_final NaN", spec().replace('"t_final": 0.5', '"t_final": NaN'), "t_final: expected a finite"),
        ("t_final -1", spec(t_final=-1.0), "t_final: expected a finite number > 0"),
        ("string noise", spec(grid={"noise": ["loud"]}), "grid.noise[0]: expected"),
        ("string disturbance", spec(grid={"disturbance": [{"kind": "uniform", "bound": "big"}]}),
         "grid.disturbance[0].bound: expected"),
        ("string disturbance value", spec(grid={"disturbance": [{"kind": "constant", "value": ["a", "b"]}]}),
         "grid.disturbance[0].value[0]: expected a finite number"),
        ("list plant_params", spec(grid={"plant_params": [[1.25]]}), "grid.plant_params[0]: expected an object"),
        ("plant_params not a list", spec(grid={"plant_params": {"mu": 2}}), "grid.plant_params: expected a list"),
        ("string plant value", spec(grid={"plant_params": [{"mu": "big"}]}), "grid.plant_params[0].mu: expected"),
        ("numeric card", spec(card=5), "card: expected a string"),
        ("nested 20", _nested(20), "nested deeper than 8 levels"),
        ("nested 100000", _nested(100_000), "nested too deeply"),
        ("noise of 3 states", spec(grid={"noise": [[0.1, 0.1, 0.1]]}),
         "grid.noise[0]: expected one number per state (2)"),
        ("t_final not a whole number of periods", spec(t_final=0.0123), "whole number of control periods"),
        ("unknown key", spec(runz=3), "unknown key 'runz'"),
        ("a JSON list", "[1, 2]", "the spec: expected an object"),
    ]


@pytest.mark.parametrize("name,text,words", _hostile(), ids=[h[0].replace(" ", "_") for h in _hostile()])
def test_a_hostile_spec_is_refused_in_one_line_with_exit_1_before_anything_runs(name, text, words, tmp_path, capsys):
    path = tmp_path / "spec.json"
    path.write_text(text)
    started = time.perf_counter()
    assert cli_main(["campaign", str(path), "--out", str(tmp_path / "out"), "--in-process"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("cbfsim campaign: error: campaign spec") and words in err, err[:500]
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "out").exists()                           # refused before anything ran
    assert time.perf_counter() - started < 60


def test_a_hostile_spec_gives_one_line_and_exit_1_from_the_command_itself(tmp_path):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps({**SMALL, "runs": 1e18, "filter": {"robust": "false"}}))
    done = subprocess.run([sys.executable, "-m", "cbfsim.cli", "campaign", str(path), "--in-process"], cwd=tmp_path,
                          env=_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr and "runs" in done.stderr
