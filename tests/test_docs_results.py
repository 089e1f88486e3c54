"""docs/results.md lists exactly the keys of a real summary.json: an experiment is run (tiny
budget, the shipped Van der Pol barrier) and its file's keys are compared with the page's table."""
from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.toolchain


def documented_keys(text: str) -> set[str]:
    """The `keys` in the first column of the summary.json table."""
    section = text.split("## summary.json", 1)[1].split("\n## ", 1)[0]
    keys = set()
    for row in section.splitlines():
        if row.startswith("| `"):
            first = row.split("|")[1]
            keys |= set(re.findall(r"`([\w.]+)`", first))
    return keys


def summary_keys(summary: dict, prefix: str = "") -> set[str]:
    """Dotted keys of the summary (nested objects expanded; a null certificate counts as one key)."""
    keys = set()
    for key, value in summary.items():
        if isinstance(value, dict) and value:
            keys |= summary_keys(value, f"{prefix}{key}.")
        else:
            keys.add(prefix + key)
    return keys


@pytest.fixture(scope="module")
def summary(tmp_path_factory):
    spec = importlib.util.spec_from_file_location("experiment_vdp", ROOT / "experiments" / "vdp.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    from cbfsim.experiment import run_experiment
    out = tmp_path_factory.mktemp("summary")
    run_experiment(module.SPEC, out, runs=2, t_final=0.05, verify_samples=2000)
    return json.loads((out / "summary.json").read_text())


def test_docs_results_lists_exactly_the_keys_of_a_real_summary(summary, cxx):
    documented = documented_keys((ROOT / "docs" / "results.md").read_text())
    actual = summary_keys(summary)
    assert summary["certificate"] is not None, "the shipped vdp model has a certificate: its keys must be listed"
    assert sorted(documented - actual) == [], "docs/results.md lists keys summary.json does not have"
    assert sorted(actual - documented) == [], "summary.json has keys docs/results.md does not list"


def test_the_key_comparison_can_fail():
    text = "## summary.json\n\n| key | meaning |\n| --- | --- |\n| `violations`, `min_h` | old names |\n"
    assert documented_keys(text) == {"violations", "min_h"}
    assert summary_keys({"violations_filtered": 0, "verify": {"coverage": 1.0}}) == {"violations_filtered",
                                                                                     "verify.coverage"}
