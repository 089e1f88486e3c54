"""Closed-loop simulation: safety from many initial states, batch = single, HOCBF derivative
model, errors, persistence, plots and the compiled barrier in the loop.

Barriers used (all valid CBFs under the systems' input bounds, derivations inline):
* double integrator, wall p <= p_max: h = p_max - p - s(v)^2 / (2 a_max), with the smooth
  ramp s(v) = (v + sqrt(v^2 + eps^2)) / 2 >= max(v, 0). With u = -a_max,
  hdot = -v + a_max phi'(v) = (r - v)^2 / (4 r) >= 0 (r = sqrt(v^2 + eps^2)), so the
  condition is feasible everywhere; L_G h = -phi'(v) < 0 never vanishes (a barrier with
  L_G h = 0 on part of its boundary lets a sampled-data loop creep out), and
  h >= 0 implies p <= p_max - eps^2/(8 a_max) < p_max (margin for the zero-order hold).
* ACC (Ames et al.): h = z - T_h v - s(v - v0)^2 / (2 c_d g). Braking at u = -c_d M g gives
  vdot <= -c_d g (F_r >= 0 for v >= 0) and hdot >= (v0 - v) + (T_h + phi') c_d g >= 0 by the
  same inequality; h >= 0 implies z - T_h v >= eps^2 / (8 c_d g) > 0.
* Van der Pol: the disk h = r_b^2 - |x|^2 with r_b = 1.4 < r = 1.5 (the constraint disk);
  hdot = -2 x2 (mu (1 - x1^2) x2 + u) can be made >= 0 since u_max = 2 >= mu r_b.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from cbfsim.barriers import AnalyticBarrier, CompiledBarrier, LieTerms2, TorchBarrier, barrier_terms
from cbfsim.classk import Linear, Tanh
from cbfsim.filters import CBFQP, HOCBFQP, CBFProjection, FilterStatus, psi1
from cbfsim.plots import phase_portrait, time_series
from cbfsim.simulate import NonFiniteStateError, TrajectoryTooLargeError, _record_bytes, simulate, simulate_batch
from cbfsim.trajectory import STEP_NOT_RUN, RunStatus, Trajectory
from compiler.errors import CbfsimError
from systems import ControlAffineSystem, get_system
from systems.base import Definition


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Tiny autograd batches gain nothing from intra-op threads, and on a busy machine the
    thread pool makes each TorchBarrier call ~50x slower; restore the setting afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def same_bits(a, b) -> bool:
    """Equal shapes, dtypes and bits (so -0.0 differs from 0.0 and NaN equals itself)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return np.array_equal(a.view(np.uint8), b.view(np.uint8))


def ramp(w, eps):
    """Smooth max(w, 0): s(w), s'(w), s''(w)."""
    r = np.sqrt(w * w + eps * eps)
    return (w + r) / 2, (1 + w / r) / 2, eps * eps / (2 * r**3)


def di_barrier(p_max=1.0, a_max=1.0, eps=0.5):
    def h(X):
        s, _, _ = ramp(X[:, 1], eps)
        return p_max - X[:, 0] - s * s / (2 * a_max)

    def grad(X):
        s, ds, _ = ramp(X[:, 1], eps)
        return np.stack([-np.ones(len(X)), -s * ds / a_max], axis=1)

    return AnalyticBarrier(h, grad, n=2, m=1)


def acc_barrier(system, eps=1.0):
    P = system.params
    dec = P.c_d * P.g

    def h(X):
        s, _, _ = ramp(X[:, 0] - P.v0, eps)
        return X[:, 1] - P.T_h * X[:, 0] - s * s / (2 * dec)

    def grad(X):
        s, ds, _ = ramp(X[:, 0] - P.v0, eps)
        return np.stack([-P.T_h - s * ds / dec, np.ones(len(X))], axis=1)

    return AnalyticBarrier(h, grad, n=2, m=1)


def disk_barrier(radius=1.4):
    return AnalyticBarrier(lambda X: radius**2 - (X**2).sum(1), lambda X: -2 * X,
                           lambda X: np.broadcast_to(-2 * np.eye(2), (len(X), 2, 2)), n=2, m=1)


def inside(barrier, rng, lo, hi, count, margin=0.0):
    """``count`` uniform samples of the box with h >= margin."""
    X = rng.uniform(lo, hi, (40 * count, len(lo)))
    X = X[barrier.value(X) >= margin][:count]
    assert len(X) == count
    return X


def constraint_values(system, traj):
    return system.constraint(traj.x.reshape(-1, system.n)).reshape(traj.x.shape[:2])


CASES = {
    # name: (system, barrier, nominal, box to sample, t_final, dt_control, dt_int, alpha)
    "double_integrator": lambda s: (di_barrier(s.params.p_max, s.params.a_max), "pd", ([-0.5, -1.0], [1.0, 2.0]),
                                    12.0, 0.02, 0.005, Linear(2.0)),
    "acc": lambda s: (acc_barrier(s), "cruise", ([8.0, 0.0], [26.0, 110.0]), 30.0, 0.05, 0.01, Linear(1.0)),
    "van_der_pol": lambda s: (disk_barrier(1.4), "zero", ([-1.4, -1.4], [1.4, 1.4]), 15.0, 0.02, 0.005, Linear(2.0)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_filter_keeps_every_run_safe_where_nominal_fails(name):
    system = get_system(name)
    barrier, nominal, (lo, hi), t_final, dt, dt_int, alpha = CASES[name](system)
    X0 = inside(barrier, np.random.default_rng(0), np.array(lo), np.array(hi), 60)
    free = simulate_batch(system, barrier, None, nominal, X0, t_final, dt, dt_int)
    violated = constraint_values(system, free).min(axis=1) < 0
    assert violated.mean() >= 0.5, f"nominal violates in only {violated.mean():.0%} of runs"
    safe = simulate_batch(system, barrier, CBFProjection(system, alpha), nominal, X0, t_final, dt, dt_int)
    c = constraint_values(system, safe)
    assert c.min() >= 0.0, f"filtered run violates the constraint: min {c.min()}"
    assert (safe.status != FilterStatus.SOLVER_ERROR).all()
    assert np.all(np.abs(safe.u) <= system.u_max + 1e-9)
    # the OSQP filter solves the same problem: same closed loop on a subset
    qp = simulate_batch(system, barrier, CBFQP(system, alpha), nominal, X0[:4], t_final / 2, dt, dt_int)
    ref = safe[np.arange(4)]
    T = qp.n_steps
    np.testing.assert_allclose(qp.x, ref.x[:, :T + 1], atol=1e-7 * (1 + np.abs(ref.x).max()))
    np.testing.assert_array_equal(qp.status, ref.status[:, :T])


@pytest.mark.parametrize("make_filter", [lambda s: CBFProjection(s, Linear(2.0)), lambda s: CBFQP(s, Linear(2.0))],
                         ids=["projection", "osqp"])
def test_batch_equals_single_runs(make_filter):
    system = get_system("van_der_pol")
    barrier = disk_barrier()
    X0 = inside(barrier, np.random.default_rng(1), -1.4 * np.ones(2), 1.4 * np.ones(2), 4)
    filt = make_filter(system)
    batch = simulate_batch(system, barrier, filt, "zero", X0, 4.0, 0.02, 0.005)
    assert (batch.status == FilterStatus.OK).all() and np.abs(batch.u - batch.u_nom).max() > 0.1
    for i, x0 in enumerate(X0):
        one = simulate(system, barrier, filt, "zero", x0, 4.0, 0.02, 0.005).single()
        for name in ("x", "u", "u_nom", "h", "Lf", "Lg", "slack", "status"):
            assert same_bits(getattr(one, name)[0], getattr(batch, name)[i]), name


class Angle(torch.nn.Module):
    """h = theta_max^2 - theta^2 (relative degree 2 for the pendulum)."""

    def __init__(self, theta_max):
        super().__init__()
        self.theta_max = theta_max

    def forward(self, x):
        return self.theta_max**2 - x[:, 0] ** 2


def test_single_runs_hocbf_and_noise_records_equal_the_batch_paths():
    # issue 24: a single run (B = m = 1) keeps each step's records as a row of floats and
    # writes them once at the end; a batch assigns arrays every step. Both hold the same bits,
    # at order 2 (Lf2, LgLf) and with measurement noise (h judged at the true state) too.
    from cbfsim.perturb import Perturbation
    system = get_system("inverted_pendulum")
    barrier = TorchBarrier(Angle(system.params.theta_max), m=1, n=2)
    X0 = np.array([[0.1, 0.0], [-0.2, 0.3]])
    for pert in (None, Perturbation(noise=(0.01, 0.02), seed=5)):
        filt = HOCBFQP(system, Linear(2.0), Linear(4.0), solver="projection")
        batch = simulate_batch(system, barrier, filt, "pd", X0, 0.3, 0.01, perturbation=pert)
        for i, x0 in enumerate(X0):
            one = simulate(system, barrier, filt, "pd", x0, 0.3, 0.01, perturbation=pert,
                           run_seed=None if pert is None else pert.seed + i)
            for name in ("x", "u", "u_nom", "h", "Lf", "Lg", "Lf2", "LgLf", "slack", "status"):
                assert same_bits(getattr(one, name)[0], getattr(batch, name)[i]), (name, pert)
            timing = one.metadata["timing"]
            assert all(timing[k] >= 0 for k in ("controller_s", "barrier_s", "filter_s", "integration_s"))


def test_hocbf_psi1_derivative_model_is_second_order_accurate():
    """d psi1/dt along the closed loop equals Lf2 + LgLf u + alpha1'(h) Lf h (trapezoid over
    each held step, error O(dt^2)); dropping alpha1'(h) Lf h leaves an O(1) mismatch."""
    system = get_system("inverted_pendulum")
    barrier = TorchBarrier(Angle(system.params.theta_max), m=1, n=2)
    alpha1, alpha2 = Tanh(4.0, 0.3), Linear(5.0)
    errors, wrong = [], []
    for dt in (0.01, 0.005):
        filt = HOCBFQP(system, alpha1, alpha2, solver="projection")
        tr = simulate(system, barrier, filt, "pd", np.array([0.2, 0.5]), 1.5, dt, dt / 4)
        assert tr.metadata["order"] == 2 and tr.Lf2 is not None
        assert (tr.u != tr.u_nom).any()                          # the filter was active
        terms = LieTerms2(tr.h[0, :-1], tr.Lf[0], tr.Lg[0], tr.Lf2[0], tr.LgLf[0])
        p = psi1(terms, alpha1)
        u = tr.u[0, :-1, 0]                                      # u_k held on [t_k, t_k+1]
        nxt = slice(1, None)

        def model(sl, with_term=True):
            out = terms.Lf2[sl] + terms.LgLf[sl, 0] * u
            return out + alpha1.derivative(terms.h[sl]) * terms.Lf[sl] if with_term else out

        fd = np.diff(p) / dt
        errors.append(np.abs(fd - 0.5 * (model(slice(None, -1)) + model(nxt))).max())
        wrong.append(np.abs(fd - 0.5 * (model(slice(None, -1), False) + model(nxt, False))).max())
    assert errors[1] < errors[0] / 3.5, errors                   # halving dt quarters the error
    assert errors[0] < 1e-3
    assert min(wrong) > 100 * errors[0] and wrong[1] > 0.5 * wrong[0], (wrong, errors)


class Escape(ControlAffineSystem):
    """x' = x^2 + u: from x0 > 0 the state reaches infinity at t = 1 / x0 (u = 0)."""

    name, state_names, input_names = "escape", ("x",), ("u",)

    @dataclasses.dataclass(frozen=True)
    class Params:
        u_max: float = 1.0

    @staticmethod
    def define(x, p):
        return Definition(f=[x[0] ** 2], G=[[1]], constraint=4 - x[0] ** 2, u_min=[-p.u_max], u_max=[p.u_max],
                          domain=([-2], [2]), nominal={"zero": [0]})


ESCAPE_BARRIER = AnalyticBarrier(lambda X: 4 - X[:, 0] ** 2, lambda X: -2 * X, n=1, m=1)


def _escape_runs(X0, **kw):
    with np.errstate(over="ignore", invalid="ignore"):    # numpy reports the overflow too
        return simulate_batch(Escape(), ESCAPE_BARRIER, None, "zero", np.array(X0), 1.0, 0.01, 0.0025, **kw)


def test_escaping_run_stops_and_the_healthy_runs_finish_bit_identical_to_a_batch_without_it():
    X0 = [[0.5], [10.0], [-1.0], [0.2]]
    tr = _escape_runs(X0)
    assert tr.run_status.tolist() == [RunStatus.COMPLETED, RunStatus.NON_FINITE_STATE,
                                      RunStatus.COMPLETED, RunStatus.COMPLETED]
    assert tr.completed.tolist() == [True, False, True, True]
    (fault,) = tr.metadata["faults"]
    s = fault["step"]
    assert fault["run"] == 1 and fault["time"] == pytest.approx(s * 0.01) and "non-finite state" in fault["cause"]
    assert 0.1 <= fault["time"] <= 0.13                       # blow-up of x' = x^2 from 10 at t = 0.1
    x = tr.x[1, :, 0]
    assert np.isfinite(x[:s]).all() and not np.isfinite(x[s]) and np.isnan(x[s + 1:]).all()
    assert np.isfinite(tr.h[1, :s]).all() and np.isnan(tr.h[1, s:]).all()
    assert (tr.status[1, :s] == FilterStatus.OK).all() and (tr.status[1, s:] == STEP_NOT_RUN).all()
    for name in ("u", "u_nom", "Lf", "Lg", "slack", "solve_time"):
        rows = getattr(tr, name)[1]
        assert np.isfinite(rows[:s]).all() and np.isnan(rows[s:]).all(), name
    healthy = [0, 2, 3]
    alone = _escape_runs([X0[i] for i in healthy])
    assert alone.metadata["faults"] == [] and alone.completed.all()
    for name in ("x", "u", "u_nom", "h", "Lf", "Lg", "slack", "status"):
        assert same_bits(getattr(tr, name)[healthy], getattr(alone, name)), name
    exact = np.array([x0 / (1 - x0 * tr.t) for (x0,) in (X0[i] for i in healthy)])   # x(t) = x0 / (1 - x0 t)
    np.testing.assert_allclose(tr.x[healthy, :, 0], exact, rtol=1e-8)
    picked = tr[1:3]                                           # the fault list follows the selection
    assert picked.run_status.tolist() == [1, 0] and [f["run"] for f in picked.metadata["faults"]] == [0]


def test_single_run_fault_is_marked_and_raised_only_on_request():
    tr = _escape_runs([[10.0]])
    assert tr.run_status.tolist() == [RunStatus.NON_FINITE_STATE] and tr.n_steps == 100
    s = tr.metadata["faults"][0]["step"]
    with np.errstate(over="ignore", invalid="ignore"):
        one = simulate(Escape(), ESCAPE_BARRIER, None, "zero", np.array([10.0]), 1.0, 0.01, 0.0025)
        with pytest.raises(NonFiniteStateError) as info:
            simulate(Escape(), ESCAPE_BARRIER, None, "zero", np.array([10.0]), 1.0, 0.01, 0.0025, on_fault="raise")
    assert same_bits(one.x, tr.x) and one.metadata["faults"] == tr.metadata["faults"]
    err = info.value
    assert isinstance(err, FloatingPointError) and isinstance(err, CbfsimError)
    assert err.step == s and err.run == 0 and err.time == pytest.approx(s * 0.01)
    assert not np.isfinite(err.state).all()
    assert f"control step {err.step} (t = {err.time:.6g} s)" in str(err) and "x = [" in str(err)
    part = err.trajectory                                      # every run up to the fault
    assert part.n_steps == s and same_bits(part.x, tr.x[:, :s + 1]) and same_bits(part.u, tr.u[:, :s])
    with pytest.raises(ValueError, match="on_fault must be 'stop' or 'raise', got 'ignore'"):
        _escape_runs([[1.0]], on_fault="ignore")


def test_huge_horizon_is_refused_up_front_naming_the_bytes():
    system = get_system("double_integrator")
    with pytest.raises(TrajectoryTooLargeError, match=r"simulation too large: 3 run\(s\) x 1,000,000,000,000,000 "
                       r"control steps x 2 states .* bytes of trajectory arrays, more than the .* available") as info:
        simulate_batch(system, None, None, "pd", np.zeros((3, 2)), 1e12, 1e-3)
    assert isinstance(info.value, MemoryError) and isinstance(info.value, CbfsimError)
    # the estimate is exactly what a run records (order 1 and 2)
    barrier = TorchBarrier(Angle(0.5), m=1, n=2)
    for filt in (None, HOCBFQP(get_system("inverted_pendulum"), Tanh(4.0, 0.3), Linear(5.0))):
        tr = simulate_batch(get_system("inverted_pendulum"), barrier, filt, "pd", np.zeros((3, 2)), 0.05, 0.01,
                            order=2 if filt else 1)
        recorded = sum(getattr(tr, f).nbytes for f in ("t", "x", "h", "u_nom", "u", "Lf", "Lg", "slack",
                                                       "status", "solve_time", "Lf2", "LgLf")
                       if getattr(tr, f) is not None)
        assert _record_bytes(3, 5, 2, 1, tr.metadata["order"]) == recorded


def test_time_grid_validation():
    system = get_system("double_integrator")
    with pytest.raises(ValueError, match="whole multiple of dt_int"):
        simulate(system, None, None, "pd", np.zeros(2), 1.0, 0.02, 0.003)
    with pytest.raises(ValueError, match="t_final = 1.01 must be a whole multiple of dt_control"):
        simulate(system, None, None, "pd", np.zeros(2), 1.01, 0.02)
    with pytest.raises(ValueError, match="needs a barrier"):
        simulate(system, None, CBFProjection(system), "pd", np.zeros(2), 1.0, 0.02)


def test_trajectory_save_load_roundtrip(tmp_path):
    system = get_system("inverted_pendulum")
    barrier = TorchBarrier(Angle(system.params.theta_max), m=1, n=2)
    filt = HOCBFQP(system, Tanh(4.0, 0.3), Linear(5.0))
    X0 = np.array([[0.1, 0.2], [-0.3, 0.4], [0.0, -1.0]])
    tr = simulate_batch(system, barrier, filt, "pd", X0, 0.5, 0.01, metadata={"note": "round trip"})
    timing = tr.metadata["timing"]
    assert timing["barrier_calls"] == 51 and timing["filter_calls"] == 50
    assert all(timing[k] > 0 for k in ("barrier_s", "filter_s", "integration_s"))
    path = tr.save(tmp_path / "run.npz")
    back = Trajectory.load(path)
    for name in ("t", "x", "u_nom", "u", "h", "Lf", "Lg", "slack", "status", "solve_time", "Lf2", "LgLf",
                 "run_status"):
        np.testing.assert_array_equal(getattr(back, name), getattr(tr, name), err_msg=name)
    assert back.metadata == tr.metadata and back.metadata["note"] == "round trip"
    assert back.status.dtype == np.int8
    second = back[1]
    assert second.batch_size == 1 and np.array_equal(second.x[0], tr.x[1]) and second.single() is second
    with pytest.raises(Exception, match="expected batch size 1, got 3"):
        tr.single()
    with pytest.raises(Exception, match=r"Trajectory.h: expected shape \(3, 51\), got \(3, 50\)"):
        Trajectory(**{**{k: getattr(tr, k) for k in tr.__dataclass_fields__}, "h": tr.h[:, :-1]})


def test_plots_are_written(tmp_path):
    system = get_system("van_der_pol")
    barrier = disk_barrier()
    X0 = inside(barrier, np.random.default_rng(2), -1.4 * np.ones(2), 1.4 * np.ones(2), 5)
    nominal = simulate_batch(system, barrier, None, "zero", X0, 6.0, 0.05, 0.01)
    safe = simulate_batch(system, barrier, CBFProjection(system, Linear(2.0)), "zero", X0, 6.0, 0.05, 0.01)
    p1 = phase_portrait(tmp_path / "phase.png", system, barrier, trajectories=safe, nominal=nominal)
    xs = ys = np.linspace(-3, 3, 50)
    grid = 1.4**2 - xs[None, :] ** 2 - ys[:, None] ** 2
    p2 = phase_portrait(tmp_path / "phase_grid.png", system, (xs, ys, grid), trajectories=[safe])
    p3 = time_series(tmp_path / "series.png", safe, run=1)
    for p in (p1, p2, p3):
        assert p.exists() and p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 10_000


def _fitted_disk_net(radius: float, seed: int = 0) -> torch.nn.Sequential:
    """A tanh MLP fitted (least squares on the last layer) to radius^2 - |x|^2 on [-2, 2]^2."""
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(2, 48), torch.nn.Tanh(), torch.nn.Linear(48, 1)).double()
    X = torch.rand(4000, 2, dtype=torch.float64) * 4 - 2
    with torch.no_grad():
        feats = torch.cat([net[1](net[0](X)), torch.ones(len(X), 1, dtype=torch.float64)], dim=1)
        sol = torch.linalg.lstsq(feats, (radius**2 - (X**2).sum(1, keepdim=True))).solution
        net[2].weight.copy_(sol[:-1].T)
        net[2].bias.copy_(sol[-1])
    return net.float()


def test_compiled_barrier_closed_loop_matches_torch(cxx):
    runtime = pytest.importorskip("cbfsim.runtime")
    system = get_system("van_der_pol")
    net = _fitted_disk_net(1.35)
    reference = TorchBarrier(net, m=1)
    X0 = inside(reference, np.random.default_rng(3), -1.3 * np.ones(2), 1.3 * np.ones(2), 6, margin=0.05)

    def run(barrier):
        return simulate_batch(system, barrier, CBFProjection(system, Linear(2.0)), "zero", X0, 8.0, 0.02, 0.005)

    torch_run = run(reference)
    double = run(CompiledBarrier(runtime.compile_barrier(net, inputs=1, order=1, dtype="double")))
    single = run(CompiledBarrier(runtime.compile_barrier(net, inputs=1, order=1, dtype="float")))
    np.testing.assert_allclose(double.x, torch_run.x, atol=1e-9)
    np.testing.assert_allclose(double.h, torch_run.h, atol=1e-9)
    assert np.abs(single.x - torch_run.x).max() < 1e-3
    for tr in (torch_run, double, single):
        assert constraint_values(system, tr).min() >= 0
    # second order (what HOCBF-QP consumes) through the same adapter
    second = CompiledBarrier(runtime.compile_barrier(net, inputs=1, order=2, dtype="double"))
    pendulum = get_system("inverted_pendulum")
    X = np.random.default_rng(4).uniform(-1, 1, (32, 2))
    got, want = barrier_terms(second, pendulum, X, order=2), barrier_terms(reference, pendulum, X, order=2)
    for name in ("h", "Lf", "Lg", "Lf2", "LgLf"):
        np.testing.assert_allclose(getattr(got, name), getattr(want, name), rtol=1e-10, atol=1e-12, err_msg=name)
    # one state goes through the library's single-state entry (issue 24): the same bits as
    # that state inside the batch, and torch's terms to float64 accuracy
    for dtype in ("double", "float"):
        lib = second if dtype == "double" else CompiledBarrier(
            runtime.compile_barrier(net, inputs=1, order=2, dtype="float"))
        batch = barrier_terms(lib, pendulum, X, order=2)
        for i in (0, 7):
            one = barrier_terms(lib, pendulum, X[i:i + 1], order=2)
            for name in ("h", "Lf", "Lg", "Lf2", "LgLf"):
                assert same_bits(getattr(one, name), getattr(batch, name)[i:i + 1]), (dtype, name)
                if dtype == "double":
                    np.testing.assert_allclose(getattr(one, name)[0], getattr(want, name)[i], rtol=1e-10, atol=1e-12)
