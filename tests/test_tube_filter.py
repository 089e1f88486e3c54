"""The tube filter (training/tube_rows.py, cbfsim/filters/tube.py, --condition tube): rows that
hold over the whole held period on every ReLU piece it can reach.

References: scipy's ODE solutions (rtol 1e-11) for the tube and for h along the period, torch
float64 autograd for the gradients, the exact projection onto the rows' interval for one input.
"""
from __future__ import annotations

import shlex

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from scipy.integrate import solve_ivp  # noqa: E402

from conftest import cli_in_process  # noqa: E402
from test_ridges import roof, roof_plant, ridge_point  # noqa: E402,F401  (roof_plant: the fixture)

from compiler.interval import Interval  # noqa: E402
from systems import get_system  # noqa: E402
from training import tube_rows as tr  # noqa: E402
from training.certify.problem import load_network, plant_enclosure  # noqa: E402


def _net(seed: int, n: int = 3, width: int = 16) -> nn.Sequential:
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(n, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 1))
    with torch.no_grad():
        net[-1].bias.add_(0.5)
    return net.float().eval()


def _h64(net: nn.Sequential, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return net.double()(torch.tensor(np.atleast_2d(x), dtype=torch.float64)).numpy()[:, 0]


def _grad64(net: nn.Sequential, x: np.ndarray) -> np.ndarray:
    xt = torch.tensor(np.atleast_2d(x), dtype=torch.float64, requires_grad=True)
    net.double()(xt).sum().backward()
    return xt.grad.numpy()


def _setup(seed: int, T: float, gamma: float = 1.0):
    system = get_system("obstacle_avoidance")
    net = _net(seed)
    pn = tr.PieceNet(load_network(net)[0])
    plant = plant_enclosure(system)
    lo, hi = (np.asarray(b, float) for b in system.domain)
    spec = tr.tube_spec(plant, lo, hi, system.u_min, system.u_max, T, gamma)
    return system, net.double(), pn, plant, spec, lo, hi


def _boxes(rng, lo: np.ndarray, hi: np.ndarray, count: int, widest: float) -> Interval:
    """Random boxes inside D, half-widths up to ``widest``."""
    centre = lo + (hi - lo) * (0.1 + 0.8 * rng.random((count, len(lo))))
    half = widest * rng.random((count, len(lo)))
    return Interval(centre - half, centre + half)


def _flow(system, x0: np.ndarray, u: np.ndarray, T: float):
    return solve_ivp(lambda t, x: system.f(x[None])[0] + system.G(x[None])[0] @ u, (0.0, T), x0,
                     rtol=1e-11, atol=1e-13, dense_output=True)


@pytest.mark.parametrize("seed", [0, 1])
def test_an_input_that_satisfies_the_rows_keeps_h_over_the_whole_period(seed):
    """h(x(t)) >= h(x_k) (1 - gamma t) along scipy's solution, with the input the rows admit
    best (maximin), from states of the set; a long period (50 ms) so that many runs cross kinks."""
    T, gamma = 0.05, 1.0
    system, net, pn, plant, spec, lo, hi = _setup(seed, T, gamma)
    rng = np.random.default_rng(seed)
    x = lo + (hi - lo) * (0.1 + 0.8 * rng.random((400, 3)))
    x = x[_h64(net, x) >= 0][:60]
    rows, _ = pn.rows(plant, Interval(x, x.copy()), spec)
    checked = crossed = 0
    for xk, r in zip(x, rows):
        value, u = tr.maximin(r, spec.u_lo, spec.u_hi, want=0.0)
        if value < 0:
            continue
        sol = _flow(system, xk, u, T)
        t = np.linspace(0.0, T, 201)
        path = sol.sol(t).T
        h0 = _h64(net, xk)[0]
        assert np.all(_h64(net, path) >= h0 * (1.0 - gamma * t) - 1e-12)
        checked += 1
        start, end = pn_pattern(net, xk), pn_pattern(net, path[-1])
        crossed += int(np.any(start != end))
    assert checked >= 20 and crossed >= 5, (checked, crossed)


def pn_pattern(net: nn.Sequential, x: np.ndarray) -> np.ndarray:
    """The hidden neurons' signs at x (torch float64)."""
    with torch.no_grad():
        z = torch.tensor(np.atleast_2d(x), dtype=torch.float64)
        signs = []
        for layer in net[:-1]:
            z = layer(z)
            if isinstance(layer, nn.Linear):
                signs.append((z > 0).numpy())
    return np.concatenate(signs, axis=1)


def test_the_tube_holds_every_trajectory_of_the_period():
    T = 0.05
    system, net, pn, plant, spec, lo, hi = _setup(0, T)
    rng = np.random.default_rng(3)
    x = lo + (hi - lo) * rng.random((40, 3))
    R, ok = tr.tube(plant, Interval(x, x.copy()), spec)
    assert ok.all()
    for i, xk in enumerate(x):
        u = rng.uniform(spec.u_lo, spec.u_hi)
        path = _flow(system, xk, u, T).sol(np.linspace(0, T, 101)).T
        assert np.all((path >= R.lo[i]) & (path <= R.hi[i]))


@pytest.mark.parametrize("enumerated", [0, 3, tr.MAX_UNSTABLE])
def test_every_state_of_the_tube_has_its_gradient_in_some_row(enumerated):
    """torch's gradient at random states of each tube lies in the gradient interval of some
    row (with 0 neurons enumerated: in the one interval row)."""
    T = 0.2
    system, net, pn, plant, spec, lo, hi = _setup(1, T)
    rng = np.random.default_rng(4)
    x = lo + (hi - lo) * (0.1 + 0.8 * rng.random((30, 3)))
    R, _ = tr.tube(plant, Interval(x, x.copy()), spec)
    ranges, _, _ = pn.bounds(R)
    for i in range(len(x)):
        g, e, _ = pn.gradients(ranges, i, enumerated, tube_box=(R.lo[i], R.hi[i]))
        pts = R.lo[i] + (R.hi[i] - R.lo[i]) * rng.random((50, 3))
        for grad in _grad64(net, pts):
            assert np.any(np.all(np.abs(grad[None] - g) <= e, axis=1)), (i, grad)


@pytest.mark.parametrize("enumerated,filter_enumerates", [(0, tr.MAX_UNSTABLE), (2, tr.MAX_UNSTABLE), (2, 3), (3, 3)])
def test_the_certifiers_rows_over_a_box_lie_below_the_filters_at_its_states(enumerated, filter_enumerates):
    """The input proving a box (its maximin over the cushioned rows, any number of neurons
    enumerated up to the filter's) satisfies the filter's own rows at every state of the box
    in the set, by at least the box's value.  With the filter enumerating only 3 neurons, the
    states' tubes often have more, and the proof leans on the fixed order (``_priority``); a
    per-box order (by width) broke it in none of 23,613 pairs, so this is a check of the
    whole, not a detector of that mutation."""
    T = 0.05
    system, net, pn, plant, spec, lo, hi = _setup(2, T)
    rng = np.random.default_rng(5)
    box = _boxes(rng, lo, hi, 60, 0.1)
    cert_spec = tr.TubeSpec(spec.T, spec.u_lo, spec.u_hi, spec.gamma, spec.radius, enumerated)
    filt_spec = tr.TubeSpec(spec.T, spec.u_lo, spec.u_hi, spec.gamma, spec.radius, filter_enumerates)
    cert_rows, _ = pn.rows(plant, box, cert_spec, cushion=True, in_set=True)
    tested = beyond = 0
    for i, r in enumerate(cert_rows):
        value, u = tr.maximin(r, spec.u_lo, spec.u_hi, want=np.inf)
        pts = box.lo[i] + (box.hi[i] - box.lo[i]) * rng.random((20, 3))
        pts = pts[_h64(net, pts) >= 0]
        if not len(pts):
            continue
        rows, count = pn.rows(plant, Interval(pts, pts.copy()), filt_spec)
        for fr in rows:
            assert tr.row_values(fr, u)[0] >= value - 1e-12
            tested += 1
        beyond += int((count > filter_enumerates).sum())
    assert tested >= 200 and (filter_enumerates == tr.MAX_UNSTABLE or beyond >= 50), (tested, beyond)


def test_the_filter_returns_the_exact_projection_onto_its_rows():
    """One input: the rows a + b u >= DELTA and the input box leave an interval of u; the
    filter's input is the nominal clipped into it (to OSQP's refined accuracy)."""
    from cbfsim.filters import FilterStatus, TubeFilter
    system = get_system("obstacle_avoidance")
    net = _net(0)
    filt = TubeFilter(net, system, dt=0.01, gamma=1.0)
    rng = np.random.default_rng(6)
    lo, hi = (np.asarray(b, float) for b in system.domain)
    x = lo + (hi - lo) * (0.1 + 0.8 * rng.random((200, 3)))
    u_nom = rng.uniform(-4, 4, (200, 1))
    res = filt.filter(x, u_nom)
    compared = 0
    for i, r in enumerate(filt.rows(x)):
        b, need = r.b[:, 0], tr.DELTA - r.a
        left = max([system.u_min[0]] + [need[k] / b[k] for k in range(len(b)) if b[k] > 0])
        right = min([system.u_max[0]] + [need[k] / b[k] for k in range(len(b)) if b[k] < 0])
        if np.any((b == 0) & (need > 0)) or left > right:
            continue
        assert res.status[i] == FilterStatus.OK
        assert res.u[i, 0] == pytest.approx(np.clip(u_nom[i, 0], left, right), abs=1e-7)
        assert tr.row_values(r, res.u[i])[0] >= 0
        compared += 1
    assert compared >= 100


def test_on_the_roof_a_held_input_crosses_the_ridge_under_one_row_and_not_under_the_tube(roof_plant):
    """Drift 0.1, nominal u = 2 from just left of the ridge on {h = 0}: the one-row filter sees the
    left piece (hdot = 3u/2 + 0.1), keeps u = 2 for the 10 ms and crosses onto the right piece
    (hdot = -u/2 + 0.1 = -0.9), so h falls below 0; the tube filter's rows cover both pieces."""
    from cbfsim.barriers import CompiledBarrier
    from cbfsim.classk import Linear
    from cbfsim.filters import CBFQP, TubeFilter
    from cbfsim.runtime import compile_barrier
    from cbfsim.simulate import simulate_batch
    from training.network import export_onnx
    import tempfile
    from pathlib import Path
    net = roof()
    system = roof_plant.Roof(roof_plant.RoofParams(drift=0.1))
    a = ridge_point(net)[0]
    x1 = a - np.array([1e-3, 3e-3, 6e-3])
    X0 = np.stack([x1, -(1.5 * x1 - a) + 1e-9], axis=1)           # h = +1e-9 on the left piece
    with tempfile.TemporaryDirectory() as d:
        onnx = export_onnx(net, Path(d) / "roof.onnx", 2)
        barrier = CompiledBarrier(compile_barrier(onnx, inputs=1, order=1))
        push = lambda X: np.full((len(X), 1), 2.0)                   # noqa: E731
        one_row = simulate_batch(system, barrier, CBFQP(system, Linear(1.0)), push, X0, 0.2, 0.01, dt_int=1e-4)
        tube = simulate_batch(system, barrier, TubeFilter(roof(), system, 0.01, 1.0), push, X0, 0.2, 0.01, dt_int=1e-4)
    h_one = _h64(roof().double(), one_row.x.reshape(-1, 2))
    h_tube = _h64(roof().double(), tube.x.reshape(-1, 2))
    assert h_one.min() < -1e-3
    assert h_tube.min() >= -1e-9


def test_the_roof_is_certified_for_the_tube_filter_at_10_ms(roof_plant):
    """Drift 0.1: u = 0 serves both pieces of the ridge, with room for the period's drift."""
    from training.certify import certify_module
    cert = certify_module(roof(), roof_plant.Roof(roof_plant.RoofParams(drift=0.1)), condition="tube", dt=0.01,
                          class_k="linear:1", scope="in-domain", time_limit=120)
    assert cert.certified, cert.summary()
    assert "tube filter" in cert.claim and cert.condition == "tube"


def test_the_roof_without_a_common_input_is_refused_at_its_ridge_and_the_replay_agrees(roof_plant, tmp_path):
    """Drift -1/2: on {h = 0} near the ridge no input satisfies both pieces' rows (u >= 1/3 and
    u <= -1): a feasibility counterexample within a tube's width of the ridge, confirmed by
    weak duality, and ``--replay`` finds the same."""
    from training.certify import certify_module
    net = roof()
    cert = certify_module(net, roof_plant.Roof(), condition="tube", dt=0.01, class_k="linear:1", scope="in-domain",
                          time_limit=120, onnx_path=tmp_path / "roof.onnx")
    assert not cert.certified
    found = cert.conditions["feasibility"].counterexamples
    assert found, cert.summary()
    a = ridge_point(net)[0]
    for c in found:
        assert c["value"] < 0 and abs(c["x"][0] - a) <= 0.05, c
    out = cli_in_process(shlex.split(found[0]["replay"])[1:])
    assert out.returncode == 3 and "feasibility  VIOLATED" in out.stdout, out.stdout + out.stderr
    assert "tube filter" in out.stdout


@pytest.mark.parametrize("args,message", [
    (["--dt", "0"], "needs --dt > 0"),
    (["--margin", "0.1"], "--condition tube has no margin"),
])
def test_the_tube_condition_refuses_what_it_cannot_prove_in_one_line(roof_plant, tmp_path, args, message):
    from training.network import export_onnx
    onnx = export_onnx(roof(), tmp_path / "roof.onnx", 2)
    out = cli_in_process(["certify", str(onnx), "--system", "roof_plant:Roof", "--condition", "tube",
                          "--class-k", "linear:1", "--claim", "in-domain", "--dt", "0.01", *args])
    assert out.returncode != 0 and message in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_a_softplus_network_is_refused_by_the_tube_filter_naming_the_layer():
    from cbfsim.filters import TubeFilter
    net = nn.Sequential(nn.Linear(3, 8), nn.Softplus(), nn.Linear(8, 1))
    with pytest.raises(ValueError, match="needs a ReLU network.*softplus"):
        TubeFilter(net, get_system("obstacle_avoidance"), dt=0.01)


def test_a_certificate_for_one_filter_does_not_cover_a_run_with_the_other():
    from cbfsim.claim import Claim
    tube = Claim({"certified": True}, condition="tube")
    row = Claim({"certified": True}, condition="filter")
    assert [f.kind for f in tube.filter_findings("osqp")] == ["filter_not_certified"]
    assert [f.kind for f in tube.filter_findings("projection")] == ["filter_not_certified"]
    assert tube.filter_findings("tube") == [] and row.filter_findings("osqp") == []
    assert [f.kind for f in row.filter_findings("tube")] == ["filter_not_certified"]
    assert Claim(None, condition="tube").filter_findings("osqp") == []


def test_the_batched_interval_rows_are_the_one_row_per_box_rows():
    """The certifier's first stage (every box at once) gives each box's interval row: the same
    row as ``rows(..., interval=True)`` box by box, to rounding."""
    T = 0.02
    system, net, pn, plant, spec, lo, hi = _setup(3, T)
    box = _boxes(np.random.default_rng(7), lo, hi, 50, 0.05)
    batch, ok = pn.interval_rows(plant, pn.tubes(plant, box, spec, cushion=True, in_set=True), spec)
    single, _ = pn.rows(plant, box, spec, cushion=True, in_set=True, interval=True)
    assert ok.all()
    for i, r in enumerate(single):
        assert len(r.a) == 1
        assert batch.a[i] == pytest.approx(r.a[0], rel=1e-9, abs=1e-12)
        assert np.allclose(batch.b[i], r.b[0], rtol=1e-9, atol=1e-12)
    best = tr.single_row_maximin(batch, spec.u_lo, spec.u_hi)
    for i in range(len(best)):
        value, _ = tr.maximin(tr.Rows(batch.a[i:i + 1], batch.b[i:i + 1]), spec.u_lo, spec.u_hi, want=np.inf)
        assert best[i] == pytest.approx(value, abs=1e-12)


def test_the_one_input_maximiser_matches_highs():
    """maximin's one-input path (a grid, then the active rows' crossings) against HiGHS's LP
    on the same rows, both values recomputed at their inputs: never short by more than
    round-off, over rows of very different scales."""
    rng = np.random.default_rng(11)
    for _ in range(400):
        P = int(rng.integers(1, 120))
        rows = tr.Rows(rng.normal(size=P) * 10 ** rng.uniform(-6, 1), rng.normal(size=(P, 1)) * 10 ** rng.uniform(-6, 1))
        lo, hi = np.array([-rng.uniform(0.5, 3)]), np.array([rng.uniform(0.5, 3)])
        mine = tr.row_values(rows, tr._line_max(rows, lo[0], hi[0]))[0]
        x, _ = tr._maximin_lp(rows, lo, hi)
        ref = tr.row_values(rows, np.clip(x[:1], lo, hi))[0]
        assert mine >= ref - 1e-13 * (np.abs(rows.a).max() + np.abs(rows.b).max() * max(-lo[0], hi[0]))
