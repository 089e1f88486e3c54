"""`cbfsim certify --condition boundary` (the continuous-time Nagumo condition on {h = 0}) and
`--max-boxes`: certified claims checked against torch float64 autograd on the zero level set,
refutations confirmed there, one-line refusals."""
from __future__ import annotations

import subprocess

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from test_certify import U_MAX, _diamond_layers, _torch_terms, _write  # noqa: E402

from training.certify import DEFAULT_MAX_BOXES, CertifyError, certify  # noqa: E402


def _zero_level(seq, count: int = 4000, seed: int = 3) -> np.ndarray:
    """States on {h = 0} by bisection (torch float64) along rays from the origin (h(0) > 0)."""
    rng = np.random.default_rng(seed)
    d = rng.normal(size=(count, 2))
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    a, b = np.zeros(count), np.full(count, 3.0)
    for _ in range(60):
        mid = 0.5 * (a + b)
        inside = _torch_terms(seq, mid[:, None] * d)[0] >= 0
        a, b = np.where(inside, mid, a), np.where(inside, b, mid)
    return a[:, None] * d


@pytest.fixture(scope="module")
def diamond(tmp_path_factory):
    seq = _diamond_layers()
    return (seq, *_write(tmp_path_factory.mktemp("nagumo"), seq, "diamond"))


def test_boundary_condition_certifies_and_holds_on_the_zero_level_set_by_autograd(diamond):
    seq, onnx, card = diamond
    cert = certify(onnx, card, condition="boundary", time_limit=120)
    assert cert.certified and cert.condition == "boundary" and cert.dt == 0 and cert.margin == 0
    assert "Nagumo" in cert.claim and "boundary (Nagumo)" in cert.summary()
    x = _zero_level(seq)
    h, lf, lg = _torch_terms(seq, x)
    assert np.abs(h).max() < 1e-9
    assert (lf + U_MAX * np.abs(lg)).min() >= 0          # what the certificate claims


def test_boundary_violation_is_refuted_with_a_counterexample_on_the_zero_level_set(tmp_path):
    """Van der Pol's drift leaves the diamond somewhere; with |u| <= 0.01 no input saves it."""
    seq = _diamond_layers()
    small = 0.01
    onnx, card = _write(tmp_path, seq, "weak", u_min=[-small], u_max=[small])
    x = _zero_level(seq)
    h, lf, lg = _torch_terms(seq, x)
    assert (lf + small * np.abs(lg)).min() < 0            # the reference says it fails
    cert = certify(onnx, card, condition="boundary", time_limit=60)
    assert not cert.certified
    found = cert.conditions["feasibility"].counterexamples
    assert found and "h = 0" in found[0]["quantity"]
    pts = np.array([c["x"] for c in found])
    h, lf, lg = _torch_terms(seq, pts)
    assert np.abs(h).max() <= 1e-8 and np.all(lf + small * np.abs(lg) < 0)


def test_boundary_condition_refuses_a_sampled_period_and_a_margin_in_one_line(diamond):
    _, onnx, card = diamond
    with pytest.raises(CertifyError, match="--dt 0.01"):
        certify(onnx, card, condition="boundary", dt=0.01)
    with pytest.raises(CertifyError, match="no margin"):
        certify(onnx, card, condition="boundary", margin=0.1)
    with pytest.raises(CertifyError, match="--condition"):
        certify(onnx, card, condition="nagumo")
    with pytest.raises(CertifyError, match="--max-boxes"):
        certify(onnx, card, max_boxes=0)


def test_max_boxes_stops_the_search_undecided_never_certified(diamond):
    _, onnx, card = diamond
    cert = certify(onnx, card, condition="boundary", max_boxes=3, time_limit=60)
    assert not cert.certified and cert.boxes["undecided"] > 0 and cert.boxes["evaluated"] <= 3
    assert "budget" in cert.reason


def _cli(*args: str) -> subprocess.CompletedProcess:
    from conftest import cli_in_process
    return cli_in_process(["certify", *args])


def test_command_line_max_boxes_and_condition(diamond):
    from cbfsim import cli
    assert cli.DEFAULT_MAX_BOXES == DEFAULT_MAX_BOXES
    helped = _cli("--help")
    assert f"(default: {DEFAULT_MAX_BOXES})" in " ".join(helped.stdout.split()) and "--condition" in helped.stdout
    _, onnx, card = diamond
    ok = _cli(str(onnx), str(card), "--condition", "boundary", "--time-limit", "120")
    assert ok.returncode == 0 and "CERTIFIED" in ok.stdout, ok.stderr
    budget = _cli(str(onnx), str(card), "--condition", "boundary", "--max-boxes", "1")
    assert budget.returncode == 3
    sampled = _cli(str(onnx), str(card), "--condition", "boundary", "--dt", "0.01")
    assert sampled.returncode == 1 and sampled.stderr.count("\n") == 1 and "--dt" in sampled.stderr
    assert _cli(str(onnx), str(card), "--max-boxes", "0").returncode == 2


def test_the_boundary_bound_is_below_torch_on_the_zero_level_set_and_not_asked_off_it(tmp_path):
    """The branch and bound's own bound (not the falsifier): on small boxes around states of
    {h = 0} it lies below sup_u hdot there (torch float64); boxes inside or outside the set,
    not meeting h = 0, are not asked (+inf), unlike the filter's condition on all of C."""
    from compiler.interval import Interval
    from training.certify.conditions import evaluate
    from training.certify.problem import load_problem
    seq = _diamond_layers()
    small = 0.01
    onnx, card = _write(tmp_path, seq, "weak", u_min=[-small], u_max=[small])
    problem = load_problem(onnx, card, 0.0)
    problem.condition = "boundary"
    x = _zero_level(seq, count=300)
    _, lf, lg = _torch_terms(seq, x)
    rate = lf + small * np.abs(lg)
    for width in (1e-2, 1e-4):
        bounds = evaluate(problem, Interval(x - width, x + width), 0.0)
        score = bounds.scores["feasibility"]
        assert np.all(np.isfinite(score)) and np.all(score <= rate + 1e-12)
        assert np.all(bounds.scores["sampled_data"] == np.inf)
    assert np.max(rate - evaluate(problem, Interval(x - 1e-4, x + 1e-4), 0.0).scores["feasibility"]) < 0.05
    centre = np.zeros((1, 2))                                   # h(0) = 1.4 - ... > 0: inside, off h = 0
    inside = evaluate(problem, Interval(centre - 0.05, centre + 0.05), 0.0)
    assert inside.scores["feasibility"][0] == np.inf
    problem.condition = "filter"
    assert np.isfinite(evaluate(problem, Interval(centre - 0.05, centre + 0.05), 0.0).scores["feasibility"][0])
