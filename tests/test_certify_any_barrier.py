"""Any barrier, any plant, the literature's conditions (issue 21, item 4): a ReLU barrier built
in plain PyTorch (never trained by cbfsim, no card) for a disk obstacle of radius 0.2 -- the
obstacle-avoidance plant's unsafe set.  h(p) = sum_k ReLU(n_k . p) - c, a polygon around the
disk, plus a bump neuron that plants a containment leak inside the obstacle.  With the leak it
is refused with the leak as its confirmed counterexample (checked in torch float64); with the
leak's weight 0 the same network is certified with the boundary (Nagumo) condition on a
holonomic plant with a drift, scope in-domain (the literature's claim).  Also: initial and
unsafe sets, the replay command, the one-line refusals, an autonomous plant certified with
no card."""
from __future__ import annotations

import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from conftest import cli_in_process, module_on_path  # noqa: E402
from training.certify import CertifyError, certify_module  # noqa: E402

RADIUS = 0.2
LEAK = (0.05, 0.0)          # the bump's centre, inside the obstacle
LEAK_WIDTH = 0.05           # the bump's L1 radius: it lies in |p - LEAK| <= 0.05, inside the disk

PLANT = textwrap.dedent('''
    from dataclasses import dataclass
    from systems.base import ControlAffineSystem, Definition


    @dataclass(frozen=True)
    class HoloParams:
        drift: float = 0.5
        radius: float = 0.2


    class Holonomic(ControlAffineSystem):
        """A point in the plane carried by a constant drift, steered by a bounded velocity; a disk obstacle."""
        name = "holonomic_obstacle"
        state_names = ("x", "y")
        input_names = ("ux", "uy")
        Params = HoloParams

        @staticmethod
        def define(x, p):
            px, py = x
            return Definition(f=[p.drift, 0], G=[[1, 0], [0, 1]], constraint=px**2 + py**2 - p.radius**2,
                              u_min=[-1, -1], u_max=[1, 1], domain=([-1, -1], [1, 1]), nominal={"zero": [0, 0]})


    class Opaque(Holonomic):
        """The same plant with an expression no interval enclosure exists for."""
        name = "opaque_obstacle"

        @staticmethod
        def define(x, p):
            import sympy as sp
            d = Holonomic.define(x, p)
            return Definition(f=[p.drift * sp.asin(x[0] / 2), 0], G=d.G, constraint=d.constraint, u_min=d.u_min,
                              u_max=d.u_max, domain=d.domain, nominal=d.nominal)
''')


@pytest.fixture(scope="module")
def plant_dir(tmp_path_factory) -> Path:
    yield from module_on_path(tmp_path_factory, "holo_plant", PLANT)


def barrier(leak: bool, n: int = 2, K: int = 9, level: float = 0.26) -> nn.Sequential:
    """2-(K+4)-2-1 ReLU, float32 weights: P = ReLU(sum_k ReLU(n_k . p)) (a polygon norm), the bump
    B = ReLU(w - |x - x0| - |y - y0|), h = P + A B - c; A = 0 removes the leak.  States beyond the
    first two (the obstacle-avoidance heading) are not read."""
    theta = 2 * np.pi * np.arange(K) / K
    F = np.maximum(0.0, np.cos(np.linspace(0, 2 * np.pi, 20001)[:, None] - theta[None])).sum(1)
    c = level * F.max()                                  # h < 0 for |p| < level: the whole disk
    W1, b1 = np.zeros((K + 4, n)), np.zeros(K + 4)
    W1[:K, :2] = np.stack([np.cos(theta), np.sin(theta)], 1)
    W1[K:, :2] = [[1, 0], [-1, 0], [0, 1], [0, -1]]
    b1[K:] = [-LEAK[0], LEAK[0], -LEAK[1], LEAK[1]]
    W2, b2 = np.zeros((2, K + 4)), np.array([0.0, LEAK_WIDTH])
    W2[0, :K], W2[1, K:] = 1.0, -1.0
    W3, b3 = np.array([[1.0, 2 * c / LEAK_WIDTH if leak else 0.0]]), np.array([-c])
    net = nn.Sequential(nn.Linear(n, K + 4), nn.ReLU(), nn.Linear(K + 4, 2), nn.ReLU(), nn.Linear(2, 1))
    with torch.no_grad():
        for layer, W, b in zip(net[0::2], (W1, W2, W3), (b1, b2, b3)):
            layer.weight.copy_(torch.tensor(W))
            layer.bias.copy_(torch.tensor(b))
    return net.float().eval()


def h64(net: nn.Sequential, x) -> np.ndarray:
    """torch float64 of the float32 network (float32 -> float64 is exact)."""
    with torch.no_grad():
        return net.double()(torch.tensor(np.atleast_2d(x), dtype=torch.float64)).numpy()[:, 0]


def run(args, plant_dir: Path) -> subprocess.CompletedProcess:
    """``cbfsim certify ARGS`` in this process (``plant_dir`` is on sys.path, as a user's
    PYTHONPATH puts it)."""
    assert str(plant_dir) in sys.path
    return cli_in_process(["certify", *args])


def export(net: nn.Sequential, path: Path, n: int) -> Path:
    from training.network import export_onnx
    return export_onnx(net, path, n)


def test_the_planted_leak_is_refused_with_the_leak_as_its_confirmed_counterexample(plant_dir, tmp_path):
    from holo_plant import Holonomic
    net = barrier(leak=True)
    x = np.array(LEAK)
    assert h64(net, x)[0] > 0 and x @ x < RADIUS ** 2             # the leak is real
    cert = certify_module(net, Holonomic(), condition="boundary", scope="in-domain", time_limit=60,
                          onnx_path=tmp_path / "leaky.onnx")
    assert not cert.certified
    found = cert.conditions["containment"].counterexamples
    assert found, cert.summary()
    for c in found:
        p = np.array(c["x"])
        assert p @ p < RADIUS ** 2 and np.abs(p - LEAK).sum() < LEAK_WIDTH      # inside the obstacle, in the bump
        assert h64(net, p)[0] >= 0                                              # in the certified set, float64
        assert c["value"] == pytest.approx(p @ p - RADIUS ** 2, rel=1e-12)
    # its replay command re-evaluates it in float64 and names the violated condition (exit 3)
    argv = shlex.split(found[0]["replay"])
    assert argv[:3] == ["cbfsim", "certify", str(tmp_path / "leaky.onnx")]
    out = run(argv[2:], plant_dir)          # argv: cbfsim certify MODEL --system holo_plant:Holonomic ...
    assert "holo_plant:Holonomic" in argv and out.returncode == 3, out.stderr
    assert "containment  VIOLATED" in out.stdout and "feasibility  holds" in out.stdout, out.stdout


def test_the_same_barrier_without_the_leak_is_certified_with_the_boundary_condition(plant_dir, tmp_path):
    from holo_plant import Holonomic
    net = barrier(leak=False)
    onnx = export(net, tmp_path / "h.onnx", 2)
    out = run([str(onnx), "--system", "holo_plant:Holonomic", "--condition", "boundary", "--claim", "in-domain",
               "--time-limit", "60", "-o", str(tmp_path / "h.cert.json")], plant_dir)
    assert out.returncode == 0, out.stdout + out.stderr
    import json
    cert = json.loads((tmp_path / "h.cert.json").read_text())
    assert cert["certified"] and cert["scope"] == "in-domain" and not cert["closed_in_domain"]
    assert "holds while the states stay in D" in cert["claim"] and cert["problem"]["system"] == "holo_plant:Holonomic"
    # the claim is true where it is checked: on {h = 0} (bisected along rays, float64) sup_u hdot >= 0,
    # with torch autograd for the gradient, and h < 0 on the disk
    s = Holonomic()
    angles = np.linspace(0, 2 * np.pi, 721)[:-1]
    lo, hi = np.zeros(len(angles)), np.ones(len(angles)) * 0.9
    rays = np.stack([np.cos(angles), np.sin(angles)], 1)
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        inside = h64(net, rays * mid[:, None]) < 0
        lo, hi = np.where(inside, mid, lo), np.where(inside, hi, mid)
    x = torch.tensor(rays * hi[:, None], dtype=torch.float64, requires_grad=True)
    net.double()(x).sum().backward()
    g = x.grad.numpy()
    rate = g @ np.array([0.5, 0.0]) + np.abs(g).sum(1)          # sup over |u_i| <= 1
    assert np.all(rate > 0)
    disk = np.random.default_rng(0).uniform(-RADIUS, RADIUS, size=(20000, 2))
    assert np.all(h64(net, disk[(disk ** 2).sum(1) <= RADIUS ** 2]) < 0)
    # the default scope (closed) refuses it: the set reaches D's faces, and the drift carries it out
    closed = certify_module(net, s, condition="boundary", time_limit=60)
    assert not closed.certified and closed.conditions["closure"].counterexamples


def test_the_leak_on_the_literature_obstacle_avoidance_plant(plant_dir, tmp_path):
    onnx = export(barrier(leak=True, n=3), tmp_path / "oa.onnx", 3)
    out = run([str(onnx), "--system", "obstacle_avoidance", "--condition", "boundary", "--claim", "in-domain",
               "--time-limit", "60", "-o", str(tmp_path / "oa.cert.json")], plant_dir)
    assert out.returncode == 3, out.stdout + out.stderr
    import json
    cert = json.loads((tmp_path / "oa.cert.json").read_text())
    found = cert["conditions"]["containment"]["counterexamples"]
    assert found
    for c in found:
        p = np.array(c["x"])
        assert p[:2] @ p[:2] < RADIUS ** 2 and h64(barrier(leak=True, n=3), p)[0] >= 0


def test_initial_and_unsafe_sets(plant_dir):
    from holo_plant import Holonomic
    net = barrier(leak=False)
    s = Holonomic()
    # an unsafe box the polygon does not cover: h >= 0 at its centre (float64), refused there
    cert = certify_module(net, s, condition="boundary", scope="in-domain", unsafe_set=["0.5,0.5:0.7,0.7"],
                          time_limit=60)
    found = cert.conditions["containment"].counterexamples
    assert not cert.certified and found
    for c in found:
        p = np.array(c["x"])
        assert np.all((p > 0.5) & (p < 0.7)) and h64(net, p)[0] >= 0
    # an initial box reaching into the polygon: refused with a state of the box where h < 0
    cert = certify_module(net, s, condition="boundary", scope="in-domain", initial_set=[([0.1, -0.1], [0.5, 0.1])],
                          time_limit=60)
    found = cert.conditions["initial"].counterexamples
    assert not cert.certified and found
    for c in found:
        p = np.array(c["x"])
        assert np.all((p >= [0.1, -0.1]) & (p <= [0.5, 0.1])) and h64(net, p)[0] < 0
    # an initial box outside the polygon and an unsafe box inside it: certified, both sets in the claim
    cert = certify_module(net, s, condition="boundary", scope="in-domain", initial_set=["0.5,0.5:0.9,0.9"],
                          unsafe_set=["-0.15,-0.15:0.15,0.15"], time_limit=60)
    assert cert.certified, cert.summary()
    assert "initial set [0.5, 0.9] x [0.5, 0.9]" in cert.claim and "unsafe set" in cert.claim
    assert h64(net, np.random.default_rng(1).uniform(0.5, 0.9, size=(5000, 2))).min() >= 0


def test_bad_input_is_refused_in_one_line(plant_dir, tmp_path):
    onnx3 = export(barrier(leak=False, n=3), tmp_path / "wide.onnx", 3)
    out = run([str(onnx3), "--system", "holo_plant:Holonomic", "--condition", "boundary"], plant_dir)
    assert out.returncode == 1 and len(out.stderr.strip().splitlines()) == 1
    assert "reads 3 inputs" in out.stderr and "2 states" in out.stderr
    onnx = export(barrier(leak=False), tmp_path / "h.onnx", 2)
    out = run([str(onnx), "--system", "holo_plant:Opaque", "--condition", "boundary"], plant_dir)
    assert out.returncode == 1 and len(out.stderr.strip().splitlines()) == 1 and "asin" in out.stderr, out.stderr
    out = run([str(onnx), "--system", "holo_plant:Holonomic"], plant_dir)       # filter condition, no class-K
    assert out.returncode == 1 and "--class-k" in out.stderr
    out = run([str(onnx), "--system", "holo_plant:Holonomic", "--condition", "boundary", "--initial-set", "0,0:1"],
              plant_dir)
    assert out.returncode == 1 and "--initial-set" in out.stderr and len(out.stderr.strip().splitlines()) == 1

    class Cube(nn.Module):
        def forward(self, x):
            return x ** 3
    with pytest.raises(Exception, match="Cube"):
        certify_module(nn.Sequential(nn.Linear(2, 4), Cube(), nn.Linear(4, 1)), "holo_plant:Holonomic",
                       condition="boundary")
    # an unsupported ONNX operation, from the CLI
    path = tmp_path / "cube.onnx"
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(nn.Sequential(nn.Linear(2, 4), Cube(), nn.Linear(4, 1)), (torch.zeros(1, 2),), str(path),
                          dynamo=False)
    out = run([str(path), "--system", "holo_plant:Holonomic", "--condition", "boundary"], plant_dir)
    assert out.returncode == 1 and len(out.stderr.strip().splitlines()) == 1 and "Pow" in out.stderr, out.stderr


def test_an_autonomous_plant_certifies_with_no_card(tmp_path):
    """Darboux (m = 0, no card) with a hand-built linear barrier h = x1 + 0.5 (never trained by
    cbfsim) and the plant's own initial set: refused on the literature's unsafe set (its
    counterexamples have x1 + x2^2 < 0 and h >= 0 in float64), the initial set holding."""
    net = nn.Sequential(nn.Linear(2, 1))
    with torch.no_grad():
        net[0].weight.copy_(torch.tensor([[1.0, 0.0]]))
        net[0].bias.copy_(torch.tensor([0.5]))
    cert = certify_module(net, "darboux", condition="boundary", scope="in-domain", time_limit=60,
                          initial_set=["plant"])
    found = cert.conditions["containment"].counterexamples
    assert not cert.certified and found
    assert cert.problem["initial_set"] == [[[0.0, 1.0], [1.0, 2.0]]]          # the plant's own: 0<=x1<=1, 1<=x2<=2
    assert not cert.conditions["initial"].counterexamples                     # h = x1 + 0.5 >= 0.5 there
    for c in found:
        x1, x2 = c["x"]
        assert x1 + x2 ** 2 < 0 and h64(net.float(), c["x"])[0] >= 0
    with pytest.raises(CertifyError, match="class-K"):
        certify_module(net, "darboux", condition="boundary", class_k="linear:1")


def test_an_autonomous_plant_certifies_a_hand_built_relu_barrier_closed(tmp_path):
    """The autonomous sink of test_autonomous (m = 0; that file trains, certifies and simulates it
    through a card): the polygon barrier turned inside out, h = c - P, certified with no card,
    closed (the set reaches no face of D); checked along exact flows (scipy, float64)."""
    from scipy.integrate import solve_ivp
    from test_autonomous import Sink
    net = barrier(leak=False, level=0.8)
    with torch.no_grad():
        net[4].weight.mul_(-1)
        net[4].bias.mul_(-1)
    s = Sink()
    cert = certify_module(net, s, condition="boundary", time_limit=60)
    assert cert.certified and cert.closed_in_domain and cert.scope == "closed", cert.summary()
    rng = np.random.default_rng(3)
    x0 = rng.uniform(-2, 2, size=(4000, 2))
    x0 = x0[h64(net, x0) >= 0][:40]
    assert len(x0) == 40
    for start in x0:
        sol = solve_ivp(lambda t, x: s.f(x), (0.0, 5.0), start, rtol=1e-10, atol=1e-12, max_step=0.01)
        assert h64(net, sol.y.T).min() >= -1e-9 and s.constraint(sol.y.T).min() >= 0


def test_replay_of_a_held_input_against_scipy(plant_dir):
    """``replay`` with a held input: a state just inside the set and the input the filter's row
    admits there that pushes hardest toward the obstacle (gamma 100 lets h fall at 100 h), held for
    0.05 s; its verdict on the sampled-data condition matches scipy's integration of the same hold
    with torch float64's h, for a long hold (violated) and a short one (holds)."""
    from scipy.integrate import solve_ivp
    from holo_plant import Holonomic
    from training.certify.build import build_problem
    from training.certify.counterexamples import point_terms
    from training.certify.replay import replay
    net = barrier(leak=False)
    s = Holonomic()
    x = np.array([-0.30, 0.0])
    assert 0 < h64(net, x)[0] < 0.2
    for dt, violated in ((0.05, True), (0.002, False)):
        problem = build_problem(net, system=s, class_k="linear:100", dt=dt)
        t = point_terms(problem, x[None])
        a, b = t["a"][0], t["b"][0]
        u = np.array([1.0, 0.0])                          # toward the obstacle: a . u + b must stay >= 0
        assert a @ u + b >= 1e-6, (a @ u + b)
        lines, bad = replay(problem, x, u, margin=0.0)
        sol = solve_ivp(lambda _, z: s.f(z) + s.G(z) @ u, (0.0, dt), x, rtol=1e-11, atol=1e-13, max_step=dt / 200)
        reference = h64(net, sol.y.T).min() < 0
        assert reference == violated and bad == violated, lines
        assert any(line.strip().startswith("sampled_data " + ("VIOLATED" if violated else "holds")) for line in lines)


def test_a_containment_failure_at_h_zero_is_recorded_where_it_replays():
    """A batch and a single state are evaluated by different BLAS kernels, so a failure found at
    h = +1e-16 may replay at h = -1e-16 (here: a state at h = -2e-15).  ``replayable`` moves it along grad h until the state
    alone fails (h > 0 inside the unsafe set), and the replay says VIOLATED; a state with no
    failure near it gives None.  h = x1 + 0.5 on Darboux (unsafe where x1 + x2^2 < 0)."""
    from systems import get_system
    from training.certify.build import build_problem
    from training.certify.counterexamples import check_points, replayable
    from training.certify.replay import replay
    net = torch.nn.Sequential(torch.nn.Linear(2, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
    with torch.no_grad():                     # relu(x1 + 3) - 3 + 0.5 = x1 + 0.5 on D = [-2, 2]^2
        net[0].weight.zero_(), net[0].bias.zero_(), net[2].weight.zero_()
        net[0].weight[0, 0], net[0].bias[0], net[2].weight[0, 0], net[2].bias[0] = 1.0, 3.0, 1.0, -2.5
    problem = build_problem(net, system=get_system("darboux"), condition="boundary")
    x = np.array([-0.5 - 2e-15, 0.0])                             # h = -2e-15: holds alone
    assert np.isnan(check_points(problem, x[None], 0.0)["containment"][0])
    moved, value = replayable(problem, x, "containment", 0.0)
    assert 0 < np.abs(moved - x).max() < 1e-6
    assert check_points(problem, moved[None], 0.0)["containment"][0] == value < 0
    lines, violated = replay(problem, moved)
    assert violated and "containment  VIOLATED" in "\n".join(lines)
    assert replayable(problem, np.array([0.2, 0.0]), "containment", 0.0) is None
