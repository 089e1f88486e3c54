"""Certificates that hold without a "while in D" clause, and certifier answers in seconds.

Each refusal is confirmed here independently of the certifier: the network rebuilt in torch
float64 from the ONNX weights, the plant's own numpy f and G, and scipy's integrator.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from scipy.integrate import solve_ivp

from conftest import cli_in_process
from test_adversarial_closed_loop import torch_net

MODELS = Path(__file__).resolve().parent.parent / "experiments" / "models"


def _h(net, x) -> np.ndarray:
    import torch
    with torch.no_grad():
        return net(torch.as_tensor(np.atleast_2d(x), dtype=torch.float64))[:, 0].numpy()


def _row(net, system, x, gamma):
    """(b, a) of the order-1 row a.u + b at x, torch float64 autograd."""
    import torch
    X = torch.as_tensor(np.atleast_2d(x), dtype=torch.float64).requires_grad_(True)
    h = net(X)[:, 0]
    (grad,) = torch.autograd.grad(h.sum(), X)
    g = grad.numpy()
    xs = np.atleast_2d(x)
    return (g * system.f(xs)).sum(1) + gamma * h.detach().numpy(), np.einsum("bi,bij->bj", g, system.G(xs))


@pytest.fixture()
def vdp_copy(tmp_path):
    """The shipped VdP card and network, copied so a test may change either."""
    shutil.copy(MODELS / "vdp.onnx", tmp_path / "vdp.onnx")
    card = json.loads((MODELS / "vdp.json").read_text())
    return tmp_path, card


def _write(tmp_path: Path, card: dict) -> Path:
    path = tmp_path / "vdp.json"
    path.write_text(json.dumps(card))
    return path


def test_a_set_leaking_through_a_face_of_the_domain_is_refused_with_a_confirmed_counterexample_on_that_face(vdp_copy):
    from systems import get_system
    from training.certify import certify
    tmp_path, card = vdp_copy
    card["domain_lo"], card["domain_hi"] = [-1.0, -3.0], [1.0, 3.0]      # {h >= 0} reaches |x1| = 1
    cert = certify(tmp_path / "vdp.onnx", _write(tmp_path, card), time_limit=60)
    assert not cert.certified and not cert.closed_in_domain
    leaks = cert.conditions["closure"].counterexamples
    assert leaks
    net = torch_net(tmp_path / "vdp.onnx")
    system = get_system("van_der_pol")
    for leak in leaks:
        x = np.array(leak["x"])
        assert abs(x[0]) == 1.0, "the counterexample lies on the face it leaks through"
        assert _h(net, x)[0] >= 0, "in the set"
        outward = np.sign(x[0]) * (system.f(x[None])[0, 0] + system.G(x[None])[0, 0] @ np.array(leak["u"]))
        assert outward > 0 and np.isclose(outward, leak["value"])
    assert [c for c in cert.coordinates if c["name"] == "x1"][0]["case"] == "open"


def test_a_vdp_barrier_scaled_down_20x_is_refused_with_a_confirmed_sampled_data_counterexample_within_30_s(vdp_copy):
    import onnx
    from onnx import numpy_helper

    from systems import get_system
    from training.certify import certify
    tmp_path, card = vdp_copy
    model = onnx.load(str(tmp_path / "vdp.onnx"))
    for i, init in enumerate(model.graph.initializer):
        if init.name == "0.weight":                  # h(20 x): the same shape, 20 times smaller
            w = numpy_helper.to_array(init) * 20
            model.graph.initializer[i].CopyFrom(numpy_helper.from_array(w.astype(np.float32), init.name))
    onnx.save(model, str(tmp_path / "vdp.onnx"))
    cert = certify(tmp_path / "vdp.onnx", _write(tmp_path, card), time_limit=30)
    assert not cert.certified
    found = cert.conditions["sampled_data"].counterexamples
    assert found, cert.summary()
    net = torch_net(tmp_path / "vdp.onnx")
    system = get_system("van_der_pol")
    gamma = card["class_k"]["gamma"]
    confirmed = 0
    for c in found:
        x0, u = np.array(c["x"]), np.array(c["u"])
        b, a = _row(net, system, x0, gamma)
        assert _h(net, x0)[0] >= 0 and (a @ u + b)[0] >= c["margin"] - 1e-6, "an input the filter may return"
        sol = solve_ivp(lambda _t, z: system.f(z[None])[0] + system.G(z[None])[0] @ u, (0, cert.dt), x0,
                        method="DOP853", rtol=1e-11, atol=1e-13, dense_output=True)
        confirmed += _h(net, sol.sol(np.linspace(0, cert.dt, 201)).T).min() < 0
    assert confirmed == len(found)


def test_a_face_no_input_drives_is_refused_in_one_line_naming_it(vdp_copy):
    from training.certify import certify
    from training.certify.problem import CertifyError
    tmp_path, card = vdp_copy
    card["config"]["faces"] = {"x1": {"gamma": 1.0, "margin": 0.1}}
    with pytest.raises(CertifyError, match="no input drives 'x1' directly") as info:
        certify(tmp_path / "vdp.onnx", _write(tmp_path, card), time_limit=5)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("bad, message", [
    ({"speed": {"gamma": 1, "margin": 1}}, "'speed' is not a state"),
    ({"x2": {"gamma": 0, "margin": 1}}, r"faces\['x2'\]\['gamma'\] must be a finite number > 0"),
    ({"x2": {"gamma": 1, "margin": "1"}}, r"faces\['x2'\]\['margin'\] must be a finite number > 0"),
    ({"x2": 3}, r"faces\['x2'\] must be"),
])
def test_malformed_faces_are_refused_naming_the_entry(vdp_copy, bad, message):
    from training.certify import certify
    from training.certify.problem import CertifyError
    tmp_path, card = vdp_copy
    card["config"]["faces"] = bad
    with pytest.raises(CertifyError, match=message):
        certify(tmp_path / "vdp.onnx", _write(tmp_path, card), time_limit=5)


def test_every_shipped_certificate_is_closed_and_says_why_per_coordinate():
    for name, expected in (("vdp", {"x1": "barrier", "x2": "barrier"}),
                           ("pendulum", {"theta": "barrier", "theta_dot": "enforced"}),
                           ("bicycle", {"p_x": "irrelevant", "p_y": "barrier", "v": "enforced"})):
        cert = json.loads((MODELS / f"{name}.cert.json").read_text())
        assert cert["certified"] and cert["closed_in_domain"], name
        cases = {c["name"]: c["case"] for c in cert["coordinates"]}
        assert all(cases[k] == v for k, v in expected.items()), (name, cases)
        assert "while" not in cert["claim"] and "no condition on the domain" in cert["claim"]
        assert cert["conditions"]["closure"]["proven"]


def test_the_joint_feasibility_bound_holds_for_its_input_at_every_state_of_the_enclosures():
    """The bound says one input u* satisfies every row with at least that much room for every
    (a, b) in the enclosures: sampled (a, b) never give less (m = 1 and m = 2); and the bound
    is the best of a brute-force grid at the enclosures' worst corners, up to the grid's step."""
    from compiler.interval import Interval
    from training.certify.faces import best_common_input
    rng = np.random.default_rng(3)
    for m in (1, 2):
        B, rows = 300, []
        lo_u, hi_u = -rng.uniform(0.5, 3, m), rng.uniform(0.5, 3, m)
        for _ in range(3):
            bc, ac = rng.normal(size=B), rng.normal(size=(B, m)) * 2
            br, ar = rng.uniform(0, 0.3, B), rng.uniform(0, 0.5, (B, m)) * (rng.uniform(size=(B, m)) < 0.5)
            rows.append((Interval(bc - br, bc + br), Interval(ac - ar, ac + ar), rng.uniform(0, 0.2, B)))
        bound, u = best_common_input(rows, lo_u, hi_u)
        assert np.all((u >= lo_u) & (u <= hi_u))
        for _ in range(20):
            room = np.min([rng.uniform(b.lo, b.hi) + (rng.uniform(a.lo, a.hi) * u).sum(1) - margin
                           for b, a, margin in rows], axis=0)
            assert np.all(room >= bound)
        grids = np.meshgrid(*[np.linspace(lo_u[j], hi_u[j], 201 if m == 1 else 41) for j in range(m)], indexing="ij")
        U = np.stack([g.ravel() for g in grids], 1)                          # (K, m)
        worst = np.min([b.lo[:, None] + np.minimum(a.lo[:, None, :] * U, a.hi[:, None, :] * U).sum(-1)
                        - margin[:, None] for b, a, margin in rows], axis=0)
        step = max((hi_u - lo_u) / (200 if m == 1 else 40)) * max(np.max(np.abs(a.hi)) for _, a, _ in rows) * m
        assert np.all(bound >= worst.max(axis=1) - step - 1e-9) if m == 1 else np.mean(bound >= worst.max(axis=1) - step) > 0.95


def test_margin_search_moves_down_on_infeasibility_up_on_a_held_input_and_stops_where_the_walls_meet():
    from training.certify.margins import MarginWalls
    from training.certify.branch import SearchResult

    def refuted(eps, name):
        r = SearchResult(eps, refuted=1, stopped="counterexample")
        r.counterexamples[name].append({"x": [0.0]})
        return r

    walls = MarginWalls(0.05)
    assert walls.next() == 0.05
    walls.record(0.05, refuted(0.05, "sampled_data"))
    up = walls.next()
    assert up > 0.05
    walls.record(up, refuted(up, "feasibility"))
    mid = walls.next()
    assert 0.05 < mid < up and np.isclose(mid, np.sqrt(0.05 * up))
    while (eps := walls.next()) is not None:
        walls.record(eps, refuted(eps, "sampled_data" if eps < 0.1 else "feasibility"))
    assert walls.high / walls.low <= 1.3 and "walls met" in walls.crossed
    assert MarginWalls(0.2, fixed=True).next() == 0.2


def test_certify_help_prints_its_default_time_limit_and_it_is_the_library_default():
    from training.certify import DEFAULT_TIME_LIMIT
    import cbfsim.cli as cli
    assert cli.DEFAULT_TIME_LIMIT == DEFAULT_TIME_LIMIT
    out = cli_in_process(["certify", "--help"])
    text = " ".join(out.stdout.split())
    assert f"(default: {DEFAULT_TIME_LIMIT:g})" in text or f"(default: {DEFAULT_TIME_LIMIT})" in text, text


@pytest.mark.toolchain
def test_strict_simulation_refuses_a_period_the_certificate_does_not_cover(tmp_path, cxx):
    out = cli_in_process(["simulate", str(MODELS / "pendulum.json"), "--x0", "0.1", "0", "--t-final", "0.05",
                          "--dt", "0.01", "--strict", "--out", str(tmp_path / "run")])
    assert out.returncode == 1
    assert "not the certified period 0.005 s" in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "run" / "trajectory.npz").exists()
    ok = cli_in_process(["simulate", str(MODELS / "pendulum.json"), "--x0", "0.1", "0", "--t-final", "0.05",
                         "--strict", "--out", str(tmp_path / "ok")])
    assert ok.returncode == 0, ok.stderr


def test_a_run_leaving_the_certified_set_or_domain_is_flagged_with_its_first_step_and_state():
    from cbfsim.claim import Claim
    claim = Claim({"certified": True}, dt=0.01, lo=np.array([-1.0, -np.inf]), hi=np.array([1.0, np.inf]))
    x = np.zeros((3, 5, 2))
    x[1, 3:, 0] = 1.5                         # run 1 leaves the domain at step 3
    x[2, 2, 1] = 7.0                          # run 2 leaves the set at step 2 (level = 5 - x2)
    x[0, 4] = np.nan                          # run 0 faults at step 4: out of the set, never in it
    events = claim.excursions(x, lambda z: 5.0 - z[:, 1], ("a", "b"))
    got = {(e["run"], e["kind"]): (e["step"], e["state"]) for e in events}
    assert got[(1, "left_domain")][0] == 3 and got[(1, "left_domain")][1]["a"] == 1.5
    assert got[(2, "left_certified_set")] == (2, {"a": 0.0, "b": 7.0})
    assert got[(0, "left_certified_set")][0] == 4
    assert (2, "left_domain") not in got and (1, "left_certified_set") not in got


def test_a_certificate_for_another_model_or_period_is_never_applied_silently(tmp_path):
    from cbfsim.claim import load_claim
    from systems import get_system
    from training.model_card import load_card
    for name in ("pendulum.json", "pendulum.cert.json"):
        shutil.copy(MODELS / name, tmp_path / name)
    data = bytearray((MODELS / "pendulum.onnx").read_bytes())
    data[-5] ^= 0x01                           # another network, same file name
    (tmp_path / "pendulum.onnx").write_bytes(bytes(data))
    card = load_card(tmp_path / "pendulum.json")
    system = get_system(card.system)
    claim = load_claim(tmp_path / "pendulum.json", card, system)
    assert not claim.holds and claim.findings[0].kind == "certificate_for_another_model"
    shutil.copy(MODELS / "pendulum.onnx", tmp_path / "pendulum.onnx")
    claim = load_claim(tmp_path / "pendulum.json", card, system)
    assert claim.holds and [f.label for f in claim.faces] == [
        "theta_dot <= 1.25", "theta_dot >= -1.25"]
    assert [f.kind for f in claim.settings_findings(0.01)] == ["period_not_certified"]
    certified = json.loads((MODELS / "pendulum.cert.json").read_text())["margin"]
    assert [f.kind for f in claim.settings_findings(0.005, 0.5 * certified)] == ["margin_below_certified"]
    assert claim.settings_findings(0.005, certified) == []
    assert [f.kind for f in claim.domain_findings(np.array([[0.1, 2.0], [0.0, 0.0]]))] == ["x0_outside_domain"]


def test_a_margin_the_search_ran_out_of_time_at_is_reported_undecided_not_refuted():
    """The Dubins run: infeasible at 0.05 (a counterexample), sampled-unsafe at 0.0125 (a
    counterexample), then 0.025, 0.035 and 0.042 ran out of time with their open boxes failing
    sampled data.  The search stops where its walls meet, but the report must not call 0.042
    sampled-unsafe: only 0.0125 was refuted."""
    from training.certify.margins import MarginWalls
    from training.certify.branch import SearchResult

    def ended(eps, name=None):
        r = SearchResult(eps, refuted=int(name is not None), stopped="counterexample" if name else "time")
        if name:
            r.counterexamples[name].append({"x": [0.0]})
        else:
            r.undecided, r.failing["sampled_data"] = 10, 10
        return r

    walls = MarginWalls(0.05)
    walls.record(walls.next(), ended(0.05, "feasibility"))
    walls.record(walls.next(), ended(0.0125, "sampled_data"))
    while (eps := walls.next()) is not None:
        walls.record(eps, ended(eps))
    text = walls.describe() + " " + walls.crossed
    assert "infeasible from 0.05" in text and "sampled-unsafe up to 0.0125" in text
    assert "undecided at 0.025" in text and "sampled-unsafe at 0.04" not in text, text
