"""The shipped certificates are closed: under the hardest nominal controller, filtered runs from
the certified set stay in it and in the certified domain, forever -- tested over 10,000 periods.

Independent of the simulator: each held period is integrated by scipy (Hairer's Fortran DOP853
through ``scipy.integrate.ode``, one integrator reused for every period, tight tolerances, checked
in the middle and at the end of every period, not only at the samples); the filter's input is
the exact solution of its QP for these models (every row acts on one input, so the QP separates
into clipping per input), checked against the shipped OSQP filter on the visited states; the set
is evaluated by the network rebuilt in float64 from the ONNX weights (numpy, gradient by hand,
checked against torch autograd at the start). The filter itself
reads the float32 header through ctypes, as it does in every simulation. The nominal pushes as
hard as the input box allows: even runs against the barrier's row, odd runs toward the nearest
face of the domain (the pendulum's 'always speed up the rotation').
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy.integrate import ode

MODELS = Path(__file__).resolve().parent.parent / "experiments" / "models"
RUNS, STEPS = 200, 10_000
CHECK_INSTANTS = 3            # per period: the middle and the end (the start is the last period's end)


EMBEDDING_OPS = {"Constant", "Slice", "Mul", "Sin", "Cos", "Concat"}    # the periodic (sin, cos) prefix


class Embedding:
    """x -> the network's input: each periodic coordinate i becomes (sin, cos)(2 pi x_i / P_i) in
    place (written here from the definition, not taken from the compiler), with its chain rule."""

    def __init__(self, n: int, periods: dict[int, float]):
        self.n, self.periods = n, {int(i): float(p) for i, p in periods.items()}

    def __call__(self, x):
        cols = []
        for i in range(self.n):
            if i in self.periods:
                w = 2 * np.pi / self.periods[i]
                cols += [np.sin(w * x[:, i]), np.cos(w * x[:, i])] if isinstance(x, np.ndarray) else \
                    [(w * x[:, i]).sin(), (w * x[:, i]).cos()]
            else:
                cols.append(x[:, i])
        if isinstance(x, np.ndarray):
            return np.stack(cols, axis=1)
        import torch
        return torch.stack(cols, dim=1)

    def pull_back(self, x: np.ndarray, grad: np.ndarray) -> np.ndarray:
        """d h / d x from d h / d (embedded input)."""
        out, k = np.zeros((len(x), self.n)), 0
        for i in range(self.n):
            if i in self.periods:
                w = 2 * np.pi / self.periods[i]
                out[:, i] = w * (grad[:, k] * np.cos(w * x[:, i]) - grad[:, k + 1] * np.sin(w * x[:, i]))
                k += 2
            else:
                out[:, i] = grad[:, k]
                k += 1
        return out


def exact_softplus():
    """A torch module computing log(1 + e^x) = max(x, 0) + log1p(e^-|x|) at every x (and its
    derivative sigmoid(x), 1/2 at 0): torch.nn.Softplus returns x itself above its threshold 20,
    an error up to 2e-9 that a raw-input network reaches."""
    import torch

    class ExactSoftplus(torch.nn.Module):
        def forward(self, x):       # each branch only ever sees arguments it cannot overflow on
            pos, neg = torch.clamp(x, min=0), torch.clamp(x, max=0)
            return torch.where(x > 0, pos + torch.log1p(torch.exp(-pos)), torch.log1p(torch.exp(neg)))
    return ExactSoftplus()


def torch_net(onnx_path: Path):
    """The ONNX network (Gemm, Softplus, ...) rebuilt as a float64 torch Sequential (after the
    periodic embedding's ops, which ``Embedding`` computes)."""
    import onnx
    import torch
    from onnx import numpy_helper
    torch.set_num_threads(1)        # small batches: threads only contend
    model = onnx.load(str(onnx_path))
    weights = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer}
    layers = []
    for node in model.graph.node:
        if node.op_type == "Gemm":
            W, b = weights[node.input[1]], weights[node.input[2]]
            trans = {a.name: a.i for a in node.attribute}.get("transB", 0)
            W = W if trans else W.T
            lin = torch.nn.Linear(W.shape[1], W.shape[0]).double()
            with torch.no_grad():
                lin.weight.copy_(torch.from_numpy(W))
                lin.bias.copy_(torch.from_numpy(b))
            layers.append(lin)
        elif node.op_type == "Softplus":
            layers.append(exact_softplus())
        elif node.op_type in EMBEDDING_OPS and not layers:
            continue
        else:
            raise AssertionError(f"unexpected op {node.op_type}")
    return torch.nn.Sequential(*layers).double().eval()


def _softplus(a: np.ndarray) -> np.ndarray:
    """log(1 + e^a) = max(a, 0) + log1p(e^-|a|), stable at every a; in one new array (the loop
    evaluates it 40,000 times per plant: the temporaries were a tenth of the test's time)."""
    out = np.abs(a)
    np.negative(out, out=out)
    np.exp(out, out=out)
    np.log1p(out, out=out)
    out += np.maximum(a, 0.0)
    return out


class NumpyMLP:
    """The same network in plain numpy float64 (Gemm / Softplus only), with its gradient by hand:
    a second independent evaluation, cheap enough for 10,000 periods of 200 runs."""

    def __init__(self, net, embedding: Embedding):
        import torch
        self.layers = [(m.weight.detach().numpy(), m.bias.detach().numpy()) if isinstance(m, torch.nn.Linear)
                       else None for m in net]
        self.embedding = embedding

    def value(self, x: np.ndarray) -> np.ndarray:
        """h alone (the forward pass of ``value_and_grad``, without the slopes it keeps)."""
        a = self.embedding(x)
        for layer in self.layers:
            a = _softplus(a) if layer is None else a @ layer[0].T + layer[1]
        return a[:, 0]

    def value_and_grad(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        a, slopes = self.embedding(x), []
        for layer in self.layers:
            if layer is None:               # softplus, stable; its derivative is the sigmoid
                slopes.append(0.5 * (1.0 + np.tanh(0.5 * a)))
                a = _softplus(a)
            else:
                W, b = layer
                a = a @ W.T + b
        grad = np.ones((len(x), 1))             # backward: d h / d (each layer's input)
        for layer in reversed(self.layers):
            if layer is None:
                grad = grad * slopes.pop()
            else:
                grad = grad @ layer[0]
        return a[:, 0], self.embedding.pull_back(x, grad)


def level(net, system, x: np.ndarray, order: int, alpha1: float) -> np.ndarray:
    """h (order 2: min(h, psi1 = L_f h + alpha1 h)), float64."""
    if order == 1:
        return net.value(x)
    h, grad = net.value_and_grad(x)
    return np.minimum(h, (grad * system.f(x)).sum(1) + alpha1 * h)


def _check_against_autograd(net: NumpyMLP, onnx_path: Path, n: int) -> None:
    import torch
    seq = torch_net(onnx_path)
    x = np.random.default_rng(1).normal(size=(64, n)) * 2
    X = torch.as_tensor(x).requires_grad_(True)
    h = seq(net.embedding(X))[:, 0]
    (g,) = torch.autograd.grad(h.sum(), X)
    mine_h, mine_g = net.value_and_grad(x)
    np.testing.assert_allclose(mine_h, h.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(net.value(x), h.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(mine_g, g.numpy(), rtol=1e-10, atol=1e-12)


def exact_filter(rows: list[tuple[np.ndarray, np.ndarray]], u_nom: np.ndarray, lo: np.ndarray, hi: np.ndarray
                 ) -> np.ndarray:
    """argmin ||u - u_nom|| s.t. offset + gain.u >= 0 for every row, lo <= u <= hi, when every
    row's gain is nonzero in at most one input (the QP separates per input). Infeasible -> fail."""
    B, m = u_nom.shape
    L, U = np.tile(lo, (B, 1)), np.tile(hi, (B, 1))
    for offset, gain in rows:
        active = gain != 0
        assert np.all(active.sum(1) <= 1), "a row acts on two inputs: the QP does not separate"
        assert np.all((active.sum(1) == 1) | (offset >= 0)), "a row with no input is violated"
        for j in range(m):
            g = np.where(active[:, j], gain[:, j], 0.0)
            with np.errstate(divide="ignore", invalid="ignore"):
                bound = -offset / g
            L[:, j] = np.where(g > 0, np.maximum(L[:, j], bound), L[:, j])
            U[:, j] = np.where(g < 0, np.minimum(U[:, j], bound), U[:, j])
    assert np.all(L <= U + 1e-12), f"the filter is infeasible at {np.flatnonzero(np.any(L > U, 1))[:5]}"
    return np.clip(u_nom, L, np.maximum(L, U))


def filter_rows(lib, system, card, cert, faces, x, f, G):
    """The filter's rows at x (offset, gain), the barrier's from the float32 header with the
    certificate's margin, the faces' in float64 with theirs; f, G: the plant's at x."""
    from training.margin import margin_from
    g = card.gains
    if card.order == 1:
        h, lf, lg = lib.lie(x, f, G)
        offset, gain = lf + g["gamma"] * h, lg
    else:
        h, lf, lg, l2, lglf = lib.lie2(x, f, G, system.df(x, f), system.df(x, G))
        offset, gain = l2 + g["alpha1"] * lf + g["alpha2"] * (lf + g["alpha1"] * h), lglf
    margin = margin_from(cert["margin"], cert.get("margin_scale")).at(x)
    rows = [(np.asarray(offset, float) - margin, np.asarray(gain, float))]
    for face in faces:
        b, a = face.row(f, G, x)
        rows.append((b - face.margin, a))
    return rows


def adversarial(rows, faces, system, x, f, G, lo, hi, runs: np.ndarray) -> np.ndarray:
    """Even runs: the input-box vertex that lowers the barrier's row the most; odd runs: the one
    that drives toward the nearest face of the domain (through a face coordinate when there is
    one, else along the whole state away from the domain's centre)."""
    gain = rows[0][1]
    toward_face = np.zeros_like(gain)
    if faces:
        for face in faces:
            near = (face.level(x) <= np.abs(face.bound - 0.5 * (lo[face.coord] + hi[face.coord])))
            toward_face += np.where(near[:, None], face.row(f, G, x)[1], 0.0)
    else:
        away = x - 0.5 * (lo + hi)
        toward_face = -np.einsum("bi,bij->bj", away, G)
    direction = np.where((runs % 2 == 0)[:, None], gain, toward_face)
    return np.where(direction > 0, lo_u(system), hi_u(system))


def wrap(x: np.ndarray, periods: dict[int, float], lo: np.ndarray) -> np.ndarray:
    """Each periodic coordinate back into [lo_i, lo_i + P_i), as the simulator wraps it."""
    x = np.array(x)
    for i, p in periods.items():
        x[..., i] = lo[i] + np.mod(x[..., i] - lo[i], p)
    return x


def plant_field(system):
    """x' = f(x) + G(x) u for a batch, written out from each plant's equations (the docstrings of
    systems/*.py) rather than through the project's generic plant evaluation: the integration
    then depends on the project only for the parameters, and it costs a third as much per call.
    Checked against system.f + G u at the start of each test."""
    p, name = system.params, system.name
    if name == "van_der_pol":
        def columns(x, u, out):
            x1, x2 = x[:, 0], x[:, 1]
            out[:, 0] = x2
            out[:, 1] = p.mu * (1 - x1 * x1) * x2 - x1 + u[:, 0]
    elif name == "inverted_pendulum":
        def columns(x, u, out):
            out[:, 0] = x[:, 1]
            out[:, 1] = p.g / p.L * np.sin(x[:, 0]) + u[:, 0] / (p.mass * p.L ** 2)
    elif name == "bicycle":
        def columns(x, u, out):
            psi, v = x[:, 2], x[:, 3]
            out[:, 0] = v * np.cos(psi)
            out[:, 1] = v * np.sin(psi)
            out[:, 2] = v / p.l_w * u[:, 1]
            out[:, 3] = u[:, 0]
    elif name == "dubins":
        def columns(x, u, out):
            out[:, 0] = p.v * np.cos(x[:, 2])
            out[:, 1] = p.v * np.sin(x[:, 2])
            out[:, 2] = u[:, 0]
    else:
        raise AssertionError(f"no hand-written field for {name}")

    def field(x: np.ndarray, u: np.ndarray) -> np.ndarray:
        out = np.empty_like(x)
        columns(x, u, out)
        return out
    return field


def _check_field(field, system) -> None:
    rng = np.random.default_rng(2)
    x = rng.uniform(-2, 2, size=(64, system.n))
    u = rng.uniform(lo_u(system), hi_u(system), size=(64, system.m))
    np.testing.assert_allclose(field(x, u), system.f(x) + np.einsum("bij,bj->bi", system.G(x), u),
                               rtol=1e-13, atol=1e-13)


def lo_u(system):
    return np.asarray(system.u_min, float)


def hi_u(system):
    return np.asarray(system.u_max, float)


@pytest.mark.toolchain
@pytest.mark.slow
@pytest.mark.parametrize("name", ["vdp", "pendulum", "bicycle", "dubins"])
def test_adversarial_filtered_runs_never_leave_the_certified_set_or_domain(name, cxx):
    from cbfsim.claim import load_claim
    from cbfsim.filters import CBFQP, HOCBFQP
    from cbfsim.classk import Linear
    from cbfsim.runtime import compile_barrier
    from systems import get_system
    from training.model_card import load_card

    card_path = MODELS / f"{name}.json"
    card = load_card(card_path)
    system = get_system(card.system, **card.system_params)
    cert = json.loads((MODELS / f"{name}.cert.json").read_text())
    assert cert["certified"] and cert["closed_in_domain"], f"{name}: the shipped certificate is not closed"
    claim = load_claim(card_path, card, system)
    assert claim.holds
    lib = compile_barrier(card.onnx_path(card_path), inputs=system.m, order=card.order)
    net = NumpyMLP(torch_net(card.onnx_path(card_path)), Embedding(system.n, system.periodic))
    alpha1 = card.gains.get("alpha1", 0.0)
    _check_against_autograd(net, card.onnx_path(card_path), system.n)
    dt = cert["dt"]
    dom_lo, dom_hi = claim.lo, claim.hi
    box_lo, box_hi = np.asarray(card.domain_lo, float), np.asarray(card.domain_hi, float)

    rng = np.random.default_rng(0)
    x = rng.uniform(box_lo, box_hi, size=(50 * RUNS, system.n))
    inside = (level(net, system, x, card.order, alpha1) >= 0)
    for face in claim.faces:
        inside &= face.level(x) >= 0
    x = x[inside][:RUNS]
    assert len(x) == RUNS
    runs = np.arange(RUNS)
    if card.order == 1:
        osqp = CBFQP(system, Linear(card.gains["gamma"]), margin=claim.margin, faces=claim.faces)
    else:
        osqp = HOCBFQP(system, Linear(card.gains["alpha1"]), Linear(card.gains["alpha2"]), margin=claim.margin,
                       faces=claim.faces)
    lowest, checked = np.inf, 0

    field = plant_field(system)
    _check_field(field, system)

    def rhs(_t, z, u):
        return field(z.reshape(RUNS, system.n), u).ravel()

    # Hairer's DOP853 (Fortran), one integrator for every period: solve_ivp's Python stepper
    # built a new solver per period and cost three times as much per period
    integrator = ode(rhs).set_integrator("dop853", rtol=1e-10, atol=1e-12, first_step=dt / (CHECK_INSTANTS - 1),
                                         nsteps=100_000)
    instants = np.linspace(0.0, dt, CHECK_INSTANTS)[1:]

    for step in range(STEPS):
        f, G = system.f(x), system.G(x)
        rows = filter_rows(lib, system, card, cert, claim.faces, x, f, G)
        u_nom = adversarial(rows, claim.faces, system, x, f, G, box_lo, box_hi, runs)
        u = exact_filter(rows, u_nom, lo_u(system), hi_u(system))
        if step % 2500 == 0:            # the closed form is the shipped OSQP filter's answer
            from cbfsim.barriers import CompiledBarrier
            barrier = CompiledBarrier(lib)
            for k in range(0, RUNS, 40):
                terms = (barrier.lie(x[k], system.f(x[k]), system.G(x[k])) if card.order == 1 else
                         barrier.lie2(x[k], system.f(x[k]), system.G(x[k]), system.df(x[k], system.f(x[k])),
                                      system.df(x[k], system.G(x[k]))))
                got = osqp.filter(x[k], u_nom[k], terms).u
                np.testing.assert_allclose(np.ravel(got), u[k], atol=1e-4, rtol=0)
                checked += 1
        integrator.set_initial_value(x.ravel(), 0.0).set_f_params(u)
        states = []
        for t in instants:
            states.append(integrator.integrate(t))
            assert integrator.successful(), f"DOP853 failed in period {step} (status {integrator.get_return_code()})"
        # the claim leaves a periodic coordinate unbounded (-inf, inf): wrap it into the card's box
        path = wrap(np.reshape(states, (CHECK_INSTANTS - 1, RUNS, system.n)), system.periodic, box_lo)
        flat = path.reshape(-1, system.n)
        lv = level(net, system, flat, card.order, alpha1).reshape(CHECK_INSTANTS - 1, RUNS)
        outside = ~np.all((path >= dom_lo) & (path <= dom_hi), axis=2)
        bad = (lv < 0) | outside
        assert not bad.any(), (f"{name}: run {np.argwhere(bad)[0][1]} left the certified "
                               f"{'set' if (lv < 0).any() else 'domain'} in period {step}: "
                               f"x = {path[tuple(np.argwhere(bad)[0])]}")
        lowest = min(lowest, float(lv.min()))
        x = path[-1]
    assert checked >= 20 and lowest >= 0


def test_the_float64_reference_is_exact_past_torch_softplus_threshold():
    """The shipped Dubins network reads raw positions, so its pre-activations pass 20, where
    torch.nn.Softplus returns x itself; this test's reference (``exact_softplus``) and its numpy
    twin must still agree with autograd to 1e-12 there (they did not with nn.Softplus)."""
    import torch
    onnx_path = MODELS / "dubins.onnx"
    net = NumpyMLP(torch_net(onnx_path), Embedding(3, {2: 2 * np.pi}))
    x = np.random.default_rng(1).normal(size=(64, 3)) * 2
    pre = torch.as_tensor(net.embedding(x)) @ torch.as_tensor(net.layers[0][0]).T + torch.as_tensor(net.layers[0][1])
    assert float(pre.abs().max()) > 20, "no pre-activation passes the threshold: the test would say nothing"
    _check_against_autograd(net, onnx_path, 3)
