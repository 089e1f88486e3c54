"""training/distil.py: a ReLU student of a smooth teacher.

References: the teacher's own torch module in float64 (the ONNX round trip must reproduce it),
torch autograd for gradients, and the plant's float64 numpy f and G for the boundary row.
"""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from systems import get_system  # noqa: E402
from training.distil import boundary_row, distil_relu, teacher_module  # noqa: E402
from training.network import export_onnx  # noqa: E402


def _teacher(tmp_path, n: int = 3):
    torch.manual_seed(1)
    net = torch.nn.Sequential(torch.nn.Linear(n, 16), torch.nn.Softplus(), torch.nn.Linear(16, 1)).float().eval()
    return net, export_onnx(net, tmp_path / "teacher.onnx", n)


def test_the_teacher_module_is_the_onnx_network(tmp_path):
    net, path = _teacher(tmp_path)
    x = torch.tensor(np.random.default_rng(0).uniform(-2, 2, (500, 3)))
    with torch.no_grad():
        assert torch.allclose(teacher_module(path)(x), net.double()(x), rtol=0, atol=1e-12)


def test_the_boundary_row_is_the_plants_sup_over_inputs():
    system = get_system("obstacle_avoidance")
    rng = np.random.default_rng(2)
    x, g = rng.uniform(-2, 2, (300, 3)), rng.normal(size=(300, 3))
    row = boundary_row(system, torch.tensor(x), torch.tensor(g)).numpy()
    a = np.einsum("bi,bij->bj", g, system.G(x))
    best = np.maximum(a * system.u_min, a * system.u_max).sum(1)
    assert np.allclose(row, np.einsum("bi,bi->b", g, system.f(x)) + best, rtol=0, atol=1e-12)


def test_the_boundary_row_toward_a_gradient_takes_that_gradients_best_input():
    """With ``toward``, one input per state: the vertex of U best for the other gradient (numpy,
    the plant's float64 G); the row there never exceeds the sup, and equals it where both gradients
    pick the same vertex."""
    system = get_system("spacecraft")
    rng = np.random.default_rng(4)
    x, g, t = rng.uniform(-1, 1, (400, 6)), rng.normal(size=(400, 6)), rng.normal(size=(400, 6))
    row = boundary_row(system, torch.tensor(x), torch.tensor(g), toward=torch.tensor(t)).numpy()
    G = system.G(x)
    u = np.where(np.einsum("bi,bij->bj", t, G) >= 0, system.u_max, system.u_min)
    expected = np.einsum("bi,bi->b", g, system.f(x)) + np.einsum("bj,bj->b", np.einsum("bi,bij->bj", g, G), u)
    assert np.allclose(row, expected, rtol=0, atol=1e-12)
    sup = boundary_row(system, torch.tensor(x), torch.tensor(g)).numpy()
    same = np.all(np.sign(np.einsum("bi,bij->bj", g, G)) == np.sign(np.einsum("bi,bij->bj", t, G)), axis=1)
    assert np.all(row <= sup + 1e-12) and same.sum() > 10 and np.allclose(row[same], sup[same], atol=1e-12)


def test_the_student_is_a_relu_network_close_to_its_teacher(tmp_path):
    """A short fit (300 steps) brings the ReLU student within a small share of the teacher's
    range, in value and in gradient, on fresh states of D; the file is a plain ReLU MLP."""
    import onnx
    _, path = _teacher(tmp_path)
    system = get_system("obstacle_avoidance")
    out = distil_relu(path, system, tmp_path / "student", [32], fit_steps=300, tune_steps=20, batch=2048)
    ops = {node.op_type for node in onnx.load(out).graph.node}
    assert "Relu" in ops and "Softplus" not in ops
    teacher, student = teacher_module(path), teacher_module(out)
    x = torch.tensor(np.random.default_rng(3).uniform(-2, 2, (4000, 3)), requires_grad=True)
    h_t, h_s = teacher(x)[:, 0], student(x)[:, 0]
    g_t = torch.autograd.grad(h_t.sum(), x)[0]
    g_s = torch.autograd.grad(h_s.sum(), x)[0]
    spread = float(h_t.detach().max() - h_t.detach().min())
    assert float((h_s - h_t).detach().abs().max()) < 0.1 * spread
    assert float((g_s - g_t).norm(dim=1).median()) < 0.25 * float(g_t.norm(dim=1).median())


def _edge_teacher() -> torch.nn.Module:
    """h = x1 - 0.05: negative on the strip 0 <= x1 < 0.05 of Darboux's initial set [0, 1] x [1, 2]."""
    lin = torch.nn.Linear(2, 1).double()
    with torch.no_grad():
        lin.weight.copy_(torch.tensor([[1.0, 0.0]]))
        lin.bias.fill_(-0.05)
    return lin


def test_the_dense_check_finds_the_initial_states_below_the_clearance():
    from training.distil import Hinges, uniform_failures
    system = get_system("darboux")
    found = uniform_failures(_edge_teacher(), system, *system.domain, count=20000, hinges=Hinges(clearance=0.02))
    start = found[(found[:, 0] >= 0) & (found[:, 0] <= 1) & (found[:, 1] >= 1) & (found[:, 1] <= 2)]
    assert start[:, 0].max() < 0.05 + 0.01                       # h < clearance / 2 = 0.01
    assert 80 < len(start) < 160          # of the 2,000 initial states, the 6% with x1 < 0.06 (binomial: 120 +- 11)


def test_the_tune_lifts_the_student_onto_the_initial_set():
    """The teacher dips below 0 on a strip of the initial set; the student's tune has a hinge
    h >= clearance there."""
    from training.distil import Hinges, distil
    system = get_system("darboux")
    student, _ = distil(_edge_teacher(), system, [16], fit_steps=300, tune_steps=600, batch=2048,
                        hinges=Hinges(clearance=0.02))
    grid = torch.tensor(np.stack(np.meshgrid(np.linspace(0, 1, 41), np.linspace(1, 2, 41)), -1).reshape(-1, 2))
    with torch.no_grad():
        assert float(student(grid).min()) > 0         # without the hinge: -0.01 (the teacher's strip)


def test_the_stability_hinge_is_each_kinks_minority_side_and_moves_the_kinks_off_the_near_states():
    """``_stability_hinge`` against numpy (per hidden neuron, the smaller of sum relu(z) and sum
    relu(-z) over the near states, over their sum |z|; the mean over neurons, then layers), zero
    where no state is near; and steps on it alone leave few first-layer kinks crossing a slab of
    near states."""
    from training.distil import _stability_hinge
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(3, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8), torch.nn.ReLU(),
                              torch.nn.Linear(8, 1)).double()
    x = torch.rand(4000, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1)) * 2 - 1
    near = (x[:, 0].abs() < 0.1).double()                   # a slab, as the states near a zero level
    with torch.no_grad():
        z1 = net[0](x).numpy()
        z2 = net[2](net[1](net[0](x))).numpy()
    w = near.numpy()[:, None]
    expected = [np.mean(np.minimum((np.maximum(z, 0) * w).sum(0), (np.maximum(-z, 0) * w).sum(0))
                        / (np.abs(z) * w).sum(0)) for z in (z1, z2)]
    assert float(_stability_hinge(net, x, near)) == pytest.approx(np.mean(expected), rel=1e-12)
    assert float(_stability_hinge(net, x, torch.zeros(4000, dtype=torch.float64))) == 0.0

    def crossing() -> int:
        with torch.no_grad():
            z = net[0](x)[near > 0]
            return int(((z > 0).any(dim=0) & (z < 0).any(dim=0)).sum())
    before = crossing()
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    for _ in range(300):
        opt.zero_grad()
        _stability_hinge(net, x, near).backward()
        opt.step()
    assert before >= 8 and crossing() <= 2, (before, crossing())


def test_the_rounds_return_the_latest_certified_student_when_the_last_is_refuted(monkeypatch):
    """Scripted verdicts (certified, refuted, refuted): the student left is the one round 0
    checked, bit for bit, and its record says so; with the last round certified, the last one
    (no tune after the last check)."""
    from training import distil
    system = get_system("obstacle_avoidance")
    lo, hi = (np.asarray(v, float) for v in system.domain)
    verdicts = iter(["certified", "refuted", "refuted"])
    seen = []

    def scripted(student, *args):
        seen.append({k: v.clone() for k, v in student.state_dict().items()})
        x = np.random.default_rng(len(seen)).uniform(lo, hi, (4, system.n))
        return x, {"certifier": next(verdicts), "sampled_failures": 4}
    monkeypatch.setattr(distil, "_counterexamples", scripted)
    teacher = torch.nn.Sequential(torch.nn.Linear(3, 1)).double()
    student = distil._student(system.n, [8], lo, hi, 0, "relu")
    tune = torch.optim.Adam(student.parameters(), lr=1e-2)
    rounds = distil._rounds(student, teacher, system, lo, hi, distil.Hinges(), tune, None, torch.Generator(),
                            lambda: None, 64, 3, 3, 1.0, 2, None)
    assert [r["certifier"] for r in rounds] == ["certified", "refuted", "refuted"]
    assert rounds[0].get("returned") and not any(r.get("returned") for r in rounds[1:])
    assert not torch.equal(seen[0]["0.weight"], seen[2]["0.weight"])          # the tunes moved it
    for name, value in student.state_dict().items():
        assert torch.equal(value, seen[0][name])
    verdicts = iter(["refuted", "certified"])
    seen.clear()
    rounds = distil._rounds(student, teacher, system, lo, hi, distil.Hinges(), tune, None, torch.Generator(),
                            lambda: None, 64, 2, 3, 1.0, 2, None)
    assert not any(r.get("returned") for r in rounds)
    for name, value in student.state_dict().items():
        assert torch.equal(value, seen[-1][name])
