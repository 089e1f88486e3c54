"""ReLU barriers written down as a maximum (or minimum) of piecewise-linear terms
(training/designed.py: relu_max_network, relu_min_network): the spacecraft's braking slabs
(systems.spacecraft:braking_terms) and a Darboux set under a curve the flow crosses upward
(systems.darboux:lower_curve).  Each network is checked against its terms evaluated in numpy
float64 and its gradient against torch float64 autograd; the boundary condition against the
plant's own f and G at states on the network's zero level; the certifier must prove each and
refute a wrong variant with a counterexample torch confirms."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from systems.darboux import INITIAL_SET, barrier_terms, darboux, lower_curve  # noqa: E402
from systems.spacecraft import braking_terms, spacecraft  # noqa: E402
from training.designed import relu_max_network, relu_min_network  # noqa: E402

SYSTEM = spacecraft()
LO, HI = SYSTEM.domain
DESIGNS = [((0.2,), (8, 8, 8)), ((0.2, -0.3, -0.65), (16, 16, 16))]


def _terms_numpy(terms, x: np.ndarray) -> np.ndarray:
    """Every term a.x + b + sum_k w_k relu(c_k.x + d_k) at x, one column per term."""
    return np.stack([x @ a + b + sum(w * np.maximum(x @ c + d, 0.0) for w, c, d in hinges)
                     for a, b, hinges in terms], axis=1)


def _autograd(net, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    seq = net.double()
    X = torch.as_tensor(x).requires_grad_(True)
    h = seq(X)[:, 0]
    (g,) = torch.autograd.grad(h.sum(), X)
    return h.detach().numpy(), g.numpy()


def _sup_hdot(net, system, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """h and sup over the input box of hdot at x, by torch float64 autograd and the plant's own
    f and G (|u_i| <= u_max, symmetric; an autonomous plant adds nothing)."""
    h, g = _autograd(net, x)
    lg = np.einsum("bi,bij->bj", g, system.G(x))
    return h, np.einsum("bi,bi->b", g, system.f(x)) + np.abs(lg) @ system.u_max


def _confirmed(cert, net, system) -> tuple[np.ndarray, np.ndarray]:
    """h and sup_u hdot at the certificate's feasibility counterexamples (there must be some)."""
    found = cert.conditions["feasibility"].counterexamples
    assert found
    return _sup_hdot(net, system, np.array([c["x"] for c in found]))


def _states(rng, count: int) -> np.ndarray:
    return rng.uniform(LO, HI, size=(count, len(LO)))


@pytest.mark.parametrize("knots, widths", DESIGNS)
def test_the_network_is_the_maximum_of_its_terms_and_its_gradient_the_active_terms(knots, widths):
    terms = braking_terms(SYSTEM.params, knots)
    net = relu_max_network(terms, LO, HI, widths)
    assert [tuple(p.shape)[0] for p in net.parameters()][::2] == list(widths) + [1]
    x = np.vstack([_states(np.random.default_rng(0), 20000), LO[None], HI[None]])
    h, g = _autograd(net, x)
    values = _terms_numpy(terms, x)
    np.testing.assert_allclose(h, values.max(axis=1), atol=1e-6)      # float32 weights: 1e-7 relative
    # away from ties and kinks the gradient is the active term's: a + sum of the live hinges' w c
    top2 = np.sort(values, axis=1)[:, -2:]
    hinge_pre = [[x @ c + d for _, c, d in hinges] for _, _, hinges in terms]
    clear = (top2[:, 1] - top2[:, 0] > 1e-3) & np.all([np.abs(z).min(axis=0) > 1e-3 for z in hinge_pre], axis=0)
    active = values.argmax(axis=1)
    expected = np.array([terms[j][0] + sum(w * c * (x[i] @ c + d > 0) for w, c, d in terms[j][2])
                         for i, j in enumerate(active)])
    assert clear.sum() > 15000
    np.testing.assert_allclose(g[clear], expected[clear], atol=1e-6)


@pytest.mark.parametrize("knots, widths", DESIGNS)
def test_the_slabs_hold_the_boundary_condition_and_stay_out_of_the_keep_out_ball(knots, widths):
    net = relu_max_network(braking_terms(SYSTEM.params, knots), LO, HI, widths)
    rng = np.random.default_rng(1)
    x = _states(rng, 40000)
    # move each state onto {h = 0} along the position axis of its active slab: h is affine there
    # with slope +-1, so one Newton step lands within float round-off
    for _ in range(3):
        h, g = _autograd(net, x)
        axis = np.argmax(np.abs(g[:, :3]), axis=1)
        x[np.arange(len(x)), axis] -= h / g[np.arange(len(x)), axis]
    x = x[np.all((x >= LO) & (x <= HI), axis=1)]
    h, sup_hdot = _sup_hdot(net, SYSTEM, x)
    on = np.abs(h) < 1e-9
    assert on.sum() > 10000
    assert sup_hdot[on].min() >= 0.1 - 1e-6                            # the design's margin
    # containment: h >= 0 only where |p| >= radius + clearance (dense in the ball too)
    y = np.vstack([_states(rng, 40000), np.hstack([rng.uniform(-0.4, 0.4, (40000, 3)), rng.uniform(-1, 1, (40000, 3))])])
    h_y, _ = _autograd(net, y)
    assert np.linalg.norm(y[h_y >= 0, :3], axis=1).min() >= 0.35 - 1e-6


def test_bad_designs_are_refused_in_one_line():
    terms = braking_terms(SYSTEM.params)
    cases = [(lambda: relu_max_network(terms, LO, HI, (8, 8)), "4 terms need 1 \\+ 2 hidden layers"),
             (lambda: relu_max_network(terms, LO, HI, (7, 8, 8)), "layer 1 \\(a lift per term and every hinge\\) needs 8 units"),
             (lambda: relu_max_network(braking_terms(SYSTEM.params, (0.2, -0.3, -0.65)), LO, HI, (8, 8, 8)),
              "layer 1 \\(a lift per term and every hinge\\) needs 16 units"),
             (lambda: relu_max_network(terms, LO[:5], HI[:5]), "length 5"),
             (lambda: relu_max_network([], LO, HI), "at least one term"),
             (lambda: braking_terms(SYSTEM.params, (-0.3, 0.2)), "knots must decrease"),
             (lambda: braking_terms(SYSTEM.params, (0.05,)), "from >= margin"),
             (lambda: braking_terms(SYSTEM.params.__class__(u_max=0.1)), "uses the whole input")]
    for build, message in cases:
        with pytest.raises(ValueError, match=message) as err:
            build()
        assert "\n" not in str(err.value)


@pytest.mark.toolchain
def test_the_certifier_proves_the_slabs_in_6d_and_refutes_shallow_slopes(tmp_path):
    from training.certify import certify_module
    claim = dict(condition="boundary", scope="in-domain", time_limit=120)
    good = relu_max_network(braking_terms(SYSTEM.params), LO, HI)
    cert = certify_module(good, "spacecraft", onnx_path=tmp_path / "good.onnx", **claim)
    assert cert.certified, cert.summary()
    assert cert.boxes["undecided"] == 0 and cert.conditions["containment"].proven

    # margin -0.3: the slopes are too shallow to brake from v = -1, sup_u hdot = -0.3 there
    bad = relu_max_network(braking_terms(SYSTEM.params, margin=-0.3), LO, HI)
    cert = certify_module(bad, "spacecraft", onnx_path=tmp_path / "bad.onnx", **claim)
    assert not cert.certified
    h, sup_hdot = _confirmed(cert, bad, SYSTEM)
    assert np.abs(h).max() < 1e-4 and sup_hdot.max() < 0


DARBOUX = darboux()
CURVES = [(16, 0.05, (32, 32)), (128, 0.02, (256, 256))]


def _darboux_net(segments: int, slack: float, widths: tuple[int, ...]):
    xs, ys = lower_curve(segments, slack)
    return relu_min_network(barrier_terms(xs, ys), *DARBOUX.domain, widths), barrier_terms(xs, ys)


@pytest.mark.parametrize("segments, slack, widths", CURVES)
def test_the_darboux_set_is_the_minimum_of_its_terms_crossed_inward_by_the_flow(segments, slack, widths):
    net, terms = _darboux_net(segments, slack, widths)
    rng = np.random.default_rng(2)
    x = rng.uniform(-2, 2, size=(20000, 2))
    h, _ = _autograd(net, x)
    np.testing.assert_allclose(h, _terms_numpy(terms, x).min(axis=1), atol=1e-6)
    # states on {h = 0}: the left edge x1 = -0.3 above the curve, and the curve itself
    xs, ys = lower_curve(segments, slack)
    x1 = rng.uniform(xs[0], 2, size=4000)
    on = np.vstack([np.column_stack([x1, np.interp(x1, xs, ys)]),
                    np.column_stack([np.full(1000, xs[0]), rng.uniform(ys[0], 2, size=1000)])])
    on = on[np.all(np.abs(on) <= 2, axis=1)]
    h, hdot = _sup_hdot(net, DARBOUX, on)
    assert np.abs(h).max() < 1e-5
    assert hdot.min() > 0
    # the initial set inside, the unsafe set x1 + x2^2 <= 0 outside
    (a, b), (c, d) = INITIAL_SET
    h0, _ = _autograd(net, np.column_stack([rng.uniform(a, b, 4000), rng.uniform(c, d, 4000)]))
    assert h0.min() >= 0
    hx, _ = _autograd(net, x)
    assert DARBOUX.constraint(x[hx >= 0]).min() > 0


def test_a_curve_that_reaches_the_x1_axis_is_refused():
    with pytest.raises(ValueError, match="where the flow turns") as err:
        lower_curve(16, slack=1.0)
    assert "\n" not in str(err.value)


@pytest.mark.toolchain
def test_the_certifier_proves_the_darboux_set_and_refutes_a_curve_against_the_flow(tmp_path):
    from training.certify import certify_module
    claim = dict(condition="boundary", scope="in-domain", initial_set=["plant"], time_limit=120)
    good, _ = _darboux_net(*CURVES[0])
    cert = certify_module(good, "darboux", onnx_path=tmp_path / "good.onnx", **claim)
    assert cert.certified, cert.summary()
    assert cert.conditions["initial"].proven and cert.conditions["containment"].proven

    # slack -0.3: each segment climbs 0.3 steeper than the flow, which then leaves the set
    bad, _ = _darboux_net(16, -0.3, (32, 32))
    cert = certify_module(bad, "darboux", onnx_path=tmp_path / "bad.onnx", **claim)
    assert not cert.certified
    h, hdot = _confirmed(cert, bad, DARBOUX)
    assert np.abs(h).max() < 1e-4 and hdot.max() < 0


def test_the_darboux_label_set_is_the_curve_network_and_keeps_room_under_the_initial_set():
    from systems.darboux import CURVE_BELOW, CURVE_SEGMENTS, CURVE_SLACK, curve_margin
    xs, ys = lower_curve(CURVE_SEGMENTS, CURVE_SLACK, below=CURVE_BELOW)
    net = relu_min_network(barrier_terms(xs, ys), *DARBOUX.domain, (128, 128))
    x = np.random.default_rng(3).uniform(-2, 2, size=(20000, 2))
    h, _ = _autograd(net, x)
    label = curve_margin(DARBOUX, x)
    span = x[:, 0] >= xs[0]                       # left of it np.interp holds phi level: both < 0 there
    np.testing.assert_allclose(label[span], h[span], atol=1e-5)
    assert np.array_equal(label >= 0, h >= 0)
    (a, b), (c, _) = INITIAL_SET
    corners = np.array([[a, c], [b, c]])
    assert curve_margin(DARBOUX, corners).min() >= 0.2 - 1e-9
