"""compiler.bounds: every sampled state's h, gradient and Hessian (torch float64 autograd,
double backward) lies in its box's enclosure, for random networks of every activation;
the float32 header's outputs lie in the float32 enclosure; piecewise-linear pieces
reproduce h and its gradient and cover the reference interpreter's patterns.

Tolerance: torch's float64 results carry their own rounding (e.g. tanh' = 1 - t^2 loses
digits in the tails), so a sample may lie outside by at most TOL x (1 + max |value|)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from compiler import reference
from compiler.activations import ACTIVATIONS, ActivationSpec
from compiler.api import load_model
from compiler.bounds import UnsupportedActivationError, enclose, pieces
from compiler.bounds_activations import ENCLOSURES
from compiler.interval import Interval
from training.architectures import ACTIVATION_NAMES, activation_module

TOL = 1e-11
NONSMOOTH = ("relu", "leaky_relu", "hardtanh", "elu")
PIECEWISE_LINEAR = ("relu", "leaky_relu", "hardtanh")


def random_net(act: str, inputs: int, hidden: int, seed: int, gain: float = 3.0):
    torch.manual_seed(seed)
    layers, width = [], inputs
    for _ in range(hidden):
        layers += [torch.nn.Linear(width, 6), activation_module(act)]
        width = 6
    net = torch.nn.Sequential(*layers, torch.nn.Linear(width, 1)).double()
    with torch.no_grad():
        for layer in net[:-1:2]:
            layer.weight.mul_(gain)          # pre-activations reach the tails
            layer.bias.mul_(gain)
    return net


def random_boxes(rng, net, inputs: int, count: int) -> Interval:
    """Tiny, medium and large boxes, and boxes centred on a first-layer kink (z = 0)."""
    centre = rng.uniform(-2, 2, (count, inputs))
    width = 10.0 ** rng.uniform(-9, 0.6, (count, inputs))
    w = net[0].weight.detach().numpy()
    b = net[0].bias.detach().numpy()
    kinked = np.arange(count) % 4 == 0                    # move the centre onto z_j(x) = 0
    j = rng.integers(0, w.shape[0], count)
    z = np.einsum("bi,bi->b", w[j], centre) + b[j]
    shift = (z / np.sum(w[j] ** 2, axis=1))[:, None] * w[j]
    centre = np.where(kinked[:, None], centre - shift, centre)
    return Interval(centre - width / 2, centre + width / 2)


def torch_jets(net, x: np.ndarray):
    X = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    h = net(X)[:, 0]
    (g,) = torch.autograd.grad(h.sum(), X, create_graph=True)
    rows = []
    for i in range(x.shape[1]):
        (row,) = torch.autograd.grad(g[:, i].sum(), X, retain_graph=True, allow_unused=True)
        rows.append(torch.zeros_like(X) if row is None else row)
    return h.detach().numpy(), g.detach().numpy(), torch.stack(rows, 1).detach().numpy()


def samples_in(rng, box: Interval, per_box: int) -> np.ndarray:
    t = rng.uniform(0, 1, (per_box, *box.shape))
    t[0], t[1] = 0.0, 1.0                                 # corners
    return np.clip(box.lo + t * (box.hi - box.lo), box.lo, box.hi)   # (S, B, n)


def assert_contains(enclosure: Interval, values: np.ndarray, what: str):
    tol = TOL * (1.0 + np.max(np.abs(values)))
    outside = (values < enclosure.lo - tol) | (values > enclosure.hi + tol)
    if np.any(outside):
        i = tuple(np.argwhere(outside)[0])
        raise AssertionError(f"{what}: {values[i]!r} outside [{enclosure.lo[i]!r}, {enclosure.hi[i]!r}] at {i}")


def test_every_activation_table_entry_carries_its_own_enclosure():
    assert set(ENCLOSURES) == set(ACTIVATIONS)
    assert all(ACTIVATIONS[kind].enclosure is ENCLOSURES[kind] for kind in ACTIVATIONS)


CASES = [(act, order) for act in ACTIVATION_NAMES for order in (1, 2) if order == 1 or act not in NONSMOOTH]


@pytest.mark.parametrize("act,order", CASES)
def test_every_sampled_state_lies_in_its_boxes_enclosure_of_h_gradient_and_hessian(act, order):
    rng = np.random.default_rng(abs(hash((act, order))) % 2 ** 32)
    for trial, (inputs, hidden) in enumerate([(2, 1), (3, 2), (4, 2)]):
        net = random_net(act, inputs, hidden, seed=trial)
        model = load_model(net)
        box = random_boxes(rng, net, inputs, 48)
        jets = enclose(model, box, order=order)
        x = samples_in(rng, box, 12)
        h, g, H = torch_jets(net, x.reshape(-1, inputs))
        S, B = x.shape[:2]
        assert_contains(jets.h.broadcast_to((S, B)), h.reshape(S, B), f"{act} h")
        assert_contains(jets.grad.broadcast_to((S, B, inputs)), g.reshape(S, B, inputs), f"{act} gradient")
        if order == 2:
            assert_contains(jets.hess.broadcast_to((S, B, inputs, inputs)), H.reshape(S, B, inputs, inputs),
                            f"{act} Hessian")
        else:
            assert jets.hess is None


@pytest.mark.parametrize("act", ACTIVATION_NAMES)
def test_activation_enclosures_contain_torch_values_and_derivatives_including_tails_and_kinks(act):
    rng = np.random.default_rng(11)
    module = activation_module(act).double()
    lo = rng.normal(size=4000) * 8.0
    lo[:50] = 0.0                                          # intervals starting at a kink
    width = np.abs(rng.normal(size=4000)) * 10.0 ** rng.uniform(-10, 1.3, 4000)
    width[50:100] = 0.0                                     # points
    x = Interval(lo, lo + width)
    spec = ACTIVATIONS["gelu"] if act == "gelu_tanh" else ACTIVATIONS[act]
    params = dict(spec.defaults, **({"approximate": 1.0} if act == "gelu_tanh" else {}))
    enc = ENCLOSURES[spec.kind](x, params)
    for t in (0.0, 0.37, 1.0):
        p = torch.tensor(np.minimum(lo + t * width, lo + width), requires_grad=True)
        y = module(p)
        (d1,) = torch.autograd.grad(y.sum(), p, create_graph=True)
        d2 = torch.autograd.grad(d1.sum(), p, allow_unused=True)[0] if d1.requires_grad else None
        d2 = torch.zeros_like(p) if d2 is None else d2
        for k, ref in enumerate((y, d1, d2)):
            assert_contains(enc[k], ref.detach().numpy(), f"{act} derivative {k}")


def test_kink_derivatives_follow_torch_at_the_point_and_span_the_clarke_interval_across_it():
    relu = ENCLOSURES["relu"]
    _, at_zero, _ = relu(Interval([0.0], [0.0]), {})
    _, across, _ = relu(Interval([-1.0], [1.0]), {})
    assert at_zero.lo[0] == at_zero.hi[0] == 0.0                      # ReLU'(0) = 0
    assert across.lo[0] == 0.0 and across.hi[0] == 1.0
    hardtanh = ENCLOSURES["hardtanh"]
    _, at_bounds, _ = hardtanh(Interval([-1.0, 1.0], [-1.0, 1.0]), {"min_val": -1.0, "max_val": 1.0})
    assert np.all(at_bounds.lo == 0.0) and np.all(at_bounds.hi == 0.0)  # Hardtanh' = 0 on its bounds
    _, leaky, _ = ENCLOSURES["leaky_relu"](Interval([0.0], [0.0]), {"negative_slope": 0.1})
    assert leaky.lo[0] == leaky.hi[0] == 0.1


def test_engine_refuses_an_activation_without_enclosure_naming_it(monkeypatch):
    fake = ActivationSpec("mish", {}, True, 3, ACTIVATIONS["tanh"].reference)
    monkeypatch.setitem(ACTIVATIONS, "mish", fake)
    net = random_net("tanh", 2, 1, seed=0)
    model = load_model(net)
    from dataclasses import replace
    layers = tuple(replace(layer, kind="mish") if getattr(layer, "kind", None) == "tanh" else layer
                   for layer in model.layers)
    model = replace(model, layers=layers)
    with pytest.raises(UnsupportedActivationError, match="'mish'") as info:
        enclose(model, Interval(np.zeros((1, 2)), np.ones((1, 2))), order=1)
    assert "\n" not in str(info.value)


def test_tiny_boxes_get_enclosures_of_their_own_size():
    """The mean-value tightening: width(h) tracks |grad h| x width(box), not the IBP blow-up."""
    rng = np.random.default_rng(2)
    net = random_net("tanh", 3, 2, seed=3, gain=4.0)
    centre = rng.uniform(-1, 1, (64, 3))
    box = Interval(centre - 1e-6, centre + 1e-6)
    jets = enclose(load_model(net), box, order=1)
    _, g, _ = torch_jets(net, centre)
    assert np.all(jets.h.width <= 1.01 * 2e-6 * np.sum(np.abs(g), axis=1) + 1e-12)


# --- the float32 header ---------------------------------------------------------------------
def header_jets(net, x: np.ndarray, order: int):
    """h, gradient (and Hessian) from the compiled float32 header: f = e_i, G = I, f' = 0."""
    from cbfsim.runtime import compile_barrier
    n = x.shape[1]
    lib = compile_barrier(net, inputs=n, order=order, dtype="float")
    eye = np.broadcast_to(np.eye(n), (len(x), n, n)).copy()
    f = np.zeros_like(x)
    f[:, 0] = 1.0
    if order == 1:
        h, _, grad = lib.lie(x, f, eye)
        return h, grad, None
    hess = []
    for i in range(n):
        f = np.zeros_like(x)
        f[:, i] = 1.0
        h, _, grad, _, row = lib.lie2(x, f, eye, np.zeros_like(x), np.zeros_like(eye))
        hess.append(row)
    return h, grad, np.stack(hess, axis=1)


@pytest.mark.parametrize("order", [1, 2])
def test_float32_header_outputs_lie_in_the_float32_enclosure(order):
    from conftest import all_activations_net
    rng = np.random.default_rng(5 + order)
    net = all_activations_net(order, inputs=3, gain=3.0, seed=order).double()
    model = load_model(net)
    centre = rng.uniform(-2, 2, (400, 3))
    width = 10.0 ** rng.uniform(-7, -1, (400, 3))
    box = Interval(centre - width, centre + width)
    jets = enclose(model, box, order=order, float32=True)
    x = samples_in(rng, box, 4).reshape(-1, 3)
    h, grad, hess = header_jets(net, x, order)
    S = 4
    assert np.all(jets.h.broadcast_to((S, 400)).contains(h.reshape(S, 400)))
    assert np.all(jets.grad.broadcast_to((S, 400, 3)).contains(grad.reshape(S, 400, 3)))
    if order == 2:
        assert np.all(jets.hess.broadcast_to((S, 400, 3, 3)).contains(hess.reshape(S, 400, 3, 3)))
    assert np.all(jets.rounding.h > 0) and jets.rounding.statement


def test_float64_enclosure_alone_misses_the_float32_header_on_point_boxes():
    """Why float32=True exists: on degenerate boxes the header's rounding falls outside."""
    from conftest import all_activations_net
    net = all_activations_net(1, inputs=2, gain=3.0, seed=1).double()
    x = np.random.default_rng(0).uniform(-2, 2, (300, 2))
    h, _, _ = header_jets(net, x, 1)
    exact = enclose(load_model(net), Interval(x, x), order=1)
    covered = enclose(load_model(net), Interval(x, x), order=1, float32=True)
    assert not np.all(exact.h.contains(h))
    assert np.all(covered.h.contains(h))


@pytest.mark.parametrize("act", ACTIVATION_NAMES)
def test_each_activation_float32_body_stays_within_its_stated_error_on_a_dense_grid(act):
    """1-act-1 network with unit weights: the header returns sigma, sigma', sigma'' of x itself."""
    order = 1 if act in NONSMOOTH else 2
    net = torch.nn.Sequential(torch.nn.Linear(1, 1), activation_module(act), torch.nn.Linear(1, 1)).double()
    with torch.no_grad():
        for layer in (net[0], net[2]):
            layer.weight.fill_(1.0)
            layer.bias.fill_(0.0)
    x = np.concatenate([np.linspace(-40, 40, 40001), np.linspace(-3, 3, 20001),
                        np.array([0.0, 1.0, -1.0, 20.0, 20.000002])])[:, None]
    x = x.astype(np.float32).astype(np.float64)
    h, grad, hess = header_jets(net, x, order)
    jets = enclose(load_model(net), Interval(x, x), order=order, float32=True)
    assert np.all(jets.h.contains(h)), act
    assert np.all(jets.grad.contains(grad)), act
    if order == 2:
        assert np.all(jets.hess.contains(hess)), act


# --- pieces of piecewise-linear networks ------------------------------------------------------
def reference_pattern(model, x: np.ndarray) -> np.ndarray:
    """Region of every hidden neuron at x, by the interpreter's layers (ReLU'(0) = 0 side)."""
    from compiler.ir import Activation, Dense
    a, codes = x, []
    for layer in model.layers:
        if isinstance(layer, Dense):
            a = a @ layer.weight.T + layer.bias
        else:
            p = dict(layer.params)
            if layer.kind == "hardtanh":
                codes.append(np.where(a <= p["min_val"], 0, np.where(a >= p["max_val"], 2, 1)))
            elif layer.kind == "identity":
                codes.append(np.zeros(a.shape, dtype=int))
            else:
                codes.append((a > 0).astype(int))
            from compiler.activations import evaluate
            a = evaluate(layer.kind, p, a)[0]
    return np.concatenate(codes, axis=1)


@pytest.mark.parametrize("act", PIECEWISE_LINEAR)
def test_every_sampled_state_matches_a_piece_of_its_box_and_its_pattern_is_listed(act):
    rng = np.random.default_rng(len(act))
    for trial, (inputs, hidden) in enumerate([(2, 1), (2, 2), (3, 2), (4, 1)]):
        net = random_net(act, inputs, hidden, seed=10 + trial, gain=1.0)
        model = load_model(net)
        box = random_boxes(rng, net, inputs, 40)
        result = pieces(model, box, max_unstable=10)
        assert result.enumerated.any()
        x = samples_in(rng, box, 10)                                 # (S, B, n)
        S, B = x.shape[:2]
        h, g, _ = torch_jets(net, x.reshape(-1, inputs))
        h, g = h.reshape(S, B), g.reshape(S, B, inputs)
        patterns = reference_pattern(model, x.reshape(-1, inputs)).reshape(S, B, -1)
        for b in np.flatnonzero(result.enumerated):
            mine = np.flatnonzero(result.box_index == b)
            gi, ci = result.g_interval[mine], result.c_interval[mine]
            for s in range(S):
                value = (gi * x[s, b]).sum(axis=1) + ci
                tol = TOL * (1 + abs(h[s, b]))
                fits = (value.lo - tol <= h[s, b]) & (h[s, b] <= value.hi + tol) & np.all(
                    (gi.lo - tol <= g[s, b]) & (g[s, b] <= gi.hi + tol), axis=1)
                listed = np.all(result.pattern[mine] == patterns[s, b], axis=1)
                assert np.any(fits & listed), f"{act}: state {x[s, b]} of box {b} has no matching piece"


def test_pieces_marks_boxes_with_too_many_unstable_neurons_and_branches_the_others():
    net = random_net("relu", 2, 2, seed=4, gain=1.0)
    model = load_model(net)
    box = Interval(np.array([[-3.0, -3.0], [0.1, 0.1]]), np.array([[3.0, 3.0], [0.1 + 1e-9, 0.1 + 1e-9]]))
    result = pieces(model, box, max_unstable=2)
    assert not result.enumerated[0] and result.enumerated[1]
    assert np.all(result.box_index == 1) and len(result.box_index) == 1
    wide = pieces(model, box, max_unstable=12)
    assert np.sum(wide.box_index == 0) > 1 and wide.branched[wide.box_index == 0].any()


def test_pieces_refuses_a_smooth_activation_naming_it():
    with pytest.raises(UnsupportedActivationError, match="'tanh'"):
        pieces(load_model(random_net("tanh", 2, 1, seed=0)), Interval(np.zeros((1, 2)), np.ones((1, 2))))


def test_piece_error_bounds_contain_the_exact_rational_gradient_and_offset():
    """Each piece recomputed in exact rational arithmetic (float weights are exact rationals)."""
    from fractions import Fraction

    from compiler.ir import Dense
    net = random_net("leaky_relu", 3, 2, seed=21, gain=1.0)
    model = load_model(net)
    rng = np.random.default_rng(8)
    box = random_boxes(rng, net, 3, 6)
    result = pieces(model, box, max_unstable=10)
    dense = [layer for layer in model.layers if isinstance(layer, Dense)]
    acts = [dict(layer.params) for layer in model.layers if not isinstance(layer, Dense)]
    checked = 0
    for p in range(0, len(result.box_index), max(1, len(result.box_index) // 25)):
        A = [[Fraction(v) for v in row] for row in dense[0].weight]
        c = [Fraction(v) for v in dense[0].bias]
        start = 0
        for layer, params in zip(dense[1:], acts):
            codes = result.pattern[p, start:start + len(c)]
            start += len(c)
            slope = [Fraction(1) if code == 1 else Fraction(params["negative_slope"]) for code in codes]
            A = [[slope[i] * v for v in A[i]] for i in range(len(A))]
            c = [slope[i] * c[i] for i in range(len(c))]
            W = [[Fraction(v) for v in row] for row in layer.weight]
            A = [[sum(W[o][i] * A[i][j] for i in range(len(A))) for j in range(3)] for o in range(len(W))]
            c = [sum(W[o][i] * c[i] for i in range(len(c))) + Fraction(layer.bias[o]) for o in range(len(W))]
        for j in range(3):
            assert abs(Fraction(result.g[p, j]) - A[0][j]) <= Fraction(result.g_err[p, j])
        assert abs(Fraction(result.c[p]) - c[0]) <= Fraction(result.c_err[p])
        checked += 1
    assert checked >= 5


@pytest.mark.parametrize("float32", [False, True])
def test_order_zero_encloses_h_alone_and_contains_the_reference_value(float32):
    rng = np.random.default_rng(9)
    net = random_net("silu", 2, 2, seed=5)
    box = random_boxes(rng, net, 2, 32)
    jets = enclose(load_model(net), box, order=0, float32=float32)
    assert jets.grad is None and jets.hess is None
    x = samples_in(rng, box, 8)
    h = reference.value(load_model(net), x.reshape(-1, 2)).reshape(8, 32)
    assert_contains(jets.h.broadcast_to((8, 32)), h, "h")


@pytest.mark.parametrize("beta", [1.0, 0.37, 3.0])
def test_softplus_point_path_holds_the_exact_values_at_every_magnitude(beta):
    """The plain-float64 fast path every softplus image's endpoints go through
    (``_p_softplus_smooth``, widened by its counted error) against mpmath at 60 digits: value,
    sigmoid and sigmoid', out to the overflow range of exp and down to subnormal results."""
    import mpmath
    from compiler.bounds_activations import _p_softplus_smooth
    mpmath.mp.dps = 60
    rng = np.random.default_rng(4)
    a = np.concatenate([rng.normal(size=400) * 3, rng.normal(size=200) * 60, [0.0, -0.0, 1e-300, -1e-300],
                        np.linspace(-800, 800, 81), np.linspace(-40, 40, 401) / beta])
    enc = _p_softplus_smooth(a, {"beta": beta})
    for i, x in enumerate(a):
        z = mpmath.mpf(beta) * mpmath.mpf(float(x))
        s, sc = 1 / (1 + mpmath.exp(-z)), 1 / (1 + mpmath.exp(z))      # sc = 1 - s, without cancellation
        exact = (mpmath.log1p(mpmath.exp(z)) / beta, s, beta * s * sc)
        for k, value in enumerate(exact):
            assert enc[k].lo[i] <= value <= enc[k].hi[i], (beta, x, k, enc[k].lo[i], float(value), enc[k].hi[i])


def test_tanh_point_path_holds_the_exact_values_at_every_magnitude():
    """``_p_tanh`` (the float64 fast path of tanh's images) against mpmath at 60 digits:
    tanh, sech^2 and -2 tanh sech^2, from 0 and subnormal arguments out to where sech^2
    underflows."""
    import mpmath
    from compiler.bounds_activations import _p_tanh
    mpmath.mp.dps = 60
    rng = np.random.default_rng(5)
    a = np.concatenate([rng.normal(size=400) * 2, rng.normal(size=200) * 30, [0.0, -0.0, 1e-300, -1e-300, 5e-324],
                        np.linspace(-400, 400, 81), np.linspace(-20, 20, 401)])
    enc = _p_tanh(a, {})
    for i, x in enumerate(a):
        t = mpmath.tanh(mpmath.mpf(float(x)))
        sech2 = 1 / mpmath.cosh(mpmath.mpf(float(x))) ** 2
        for k, value in enumerate((t, sech2, -2 * t * sech2)):
            assert enc[k].lo[i] <= value <= enc[k].hi[i], (x, k, enc[k].lo[i], float(value), enc[k].hi[i])
