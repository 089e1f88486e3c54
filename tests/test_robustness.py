"""The robustness study's statistics and its experiment script."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from scipy.stats import binomtest

from cbfsim.robustness import clopper_pearson

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("k,n", [(0, 20), (1, 20), (5, 20), (20, 20), (3, 300000), (299990, 300000)])
def test_clopper_pearson_equals_scipys_exact_binomial_interval(k, n):
    ref = binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
    lo, hi = clopper_pearson(k, n)
    # (scipy finds its bounds by root finding, to about 1e-7 relative; ours come from beta.ppf)
    assert lo == pytest.approx(ref.low, rel=1e-6, abs=1e-15) and hi == pytest.approx(ref.high, rel=1e-6, abs=1e-15)


@pytest.mark.toolchain
def test_robustness_experiment_fast_writes_every_setting_with_both_filters(tmp_path, cxx):
    out = tmp_path / "robustness"
    done = subprocess.run([sys.executable, str(ROOT / "experiments" / "robustness.py"), "--fast", "--runs", "8",
                           "--out", str(out)], capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    rows = json.loads((out / "summary.json").read_text())["rows"]
    assert {(r["model"], r["kind"]) for r in rows} == {(m, k) for m in ("vdp", "bicycle")
                                                       for k in ("mismatch", "disturbance")}
    robust = [r for r in rows if r["filter"] == "robust" and r["level"] > 0]
    assert robust and all(r["margin"] > 0 for r in robust)
    assert all(r["ci95"][0] <= r["probability"] <= r["ci95"][1] for r in rows)
    assert (out / "violation.png").stat().st_size > 10_000
