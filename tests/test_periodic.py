"""Periodic coordinates: a plant declares its angles, refuses a period that is not one, and
every simulator keeps the angle in [lo, lo + P) while computing the same motion as an
unwrapped run (equal modulo the period)."""
from __future__ import annotations

import dataclasses
import functools
import math
from types import SimpleNamespace

import numpy as np
import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

import systems
from cbfsim.barriers import AnalyticBarrier
from cbfsim.classk import Linear
from cbfsim.filters import CBFProjection
from cbfsim.simulate import simulate, simulate_batch
from systems import PeriodicCoordinateError
from systems.base import ControlAffineSystem, Definition
from systems.dubins import Dubins

TWO_PI = 2 * math.pi


@dataclasses.dataclass(frozen=True)
class _Params:
    a: float = 1.0


def _toy(periodic, width=math.pi, drift=sp.sin, constraint=None) -> ControlAffineSystem:
    """y' = drift(theta), theta' = u on [-2, 2] x [-width, width], with the periods given."""
    class Toy(ControlAffineSystem):
        name = "toy"
        state_names = ("y", "theta")
        input_names = ("u",)
        Params = _Params

        @staticmethod
        def define(x, p: SimpleNamespace) -> Definition:
            y, th = x
            return Definition(f=[drift(th), 0], G=[[0], [1]],
                              constraint=1 - y**2 if constraint is None else constraint(y, th),
                              u_min=[-1], u_max=[1], domain=([-2, -width], [2, width]), nominal={},
                              periodic=periodic)
    return Toy()


class _Unwrapped(Dubins):
    """The Dubins car with the heading declared as an ordinary coordinate (never wrapped)."""

    @staticmethod
    def define(x, p):
        return dataclasses.replace(Dubins.define(x, p), periodic={})


def _heading_barrier() -> AnalyticBarrier:
    """h = |p|^2 - 1 + p.(cos theta, sin theta): reads the heading only through (sin, cos), so a
    state and its copy one period on get the same h, Lie terms and filtered input."""
    def h(X):
        c, s = np.cos(X[:, 2]), np.sin(X[:, 2])
        return X[:, 0] ** 2 + X[:, 1] ** 2 - 1.0 + X[:, 0] * c + X[:, 1] * s

    def grad(X):
        c, s = np.cos(X[:, 2]), np.sin(X[:, 2])
        return np.stack([2 * X[:, 0] + c, 2 * X[:, 1] + s, -X[:, 0] * s + X[:, 1] * c], axis=1)

    return AnalyticBarrier(h, grad, n=3, m=1)


def _angle_gap(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """|a - b| modulo 2 pi, in [0, pi]."""
    return np.abs(np.mod(a - b + math.pi, TWO_PI) - math.pi)


# ----------------------------------------------------------------------------- declaration

def test_the_dubins_car_declares_its_heading_periodic_with_the_domain_width():
    car = systems.dubins()
    assert car.periodic == {2: TWO_PI}
    lo, hi = car.domain
    assert (lo[2], hi[2]) == (-math.pi, math.pi)
    assert systems.van_der_pol().periodic == {}


@pytest.mark.parametrize("periodic, width, drift, match", [
    ({1: 2 * sp.pi}, 3.0, sp.sin, r"^toy: periodic coordinate 'theta' \(coordinate 1\) has period 6.28318530717958"
                                   r"6 but its domain \[-3.0, 3.0\] is 6.0 wide; they must match$"),
    ({1: sp.pi}, sp.pi / 2, sp.sin, r"^toy: f is not periodic in 'theta' \(coordinate 1\) with period 3.14159"),
    ({1: 2 * sp.pi}, sp.pi, lambda t: t, r"^toy: f is not periodic in 'theta' \(coordinate 1\)"),
    ({1: 2 * sp.pi}, sp.pi, lambda t: sp.sin(t / 2), r"^toy: f is not periodic in 'theta'"),
    ({3: 1}, sp.pi, sp.sin, r"^toy: periodic coordinate 3 is not a state index in 0..1$"),
    ({1: -1}, sp.pi, sp.sin, r"^toy: periodic coordinate 'theta' \(coordinate 1\): the period must be a finite"),
    ({"1": 2 * sp.pi}, sp.pi, sp.sin, r"^toy: periodic coordinate '1' is not a state index"),
])
def test_a_periodic_coordinate_that_is_not_one_is_refused_in_one_line_naming_it(periodic, width, drift, match):
    with pytest.raises(PeriodicCoordinateError, match=match) as info:
        _toy(periodic, width, drift)
    assert "\n" not in str(info.value)
    assert isinstance(info.value, ValueError)


def test_a_constraint_that_does_not_repeat_with_the_period_is_refused():
    with pytest.raises(PeriodicCoordinateError, match="the constraint is not periodic in 'theta'"):
        _toy({1: 2 * sp.pi}, constraint=lambda y, th: 1 - y**2 - th**2)
    assert _toy({1: 2 * sp.pi}, constraint=lambda y, th: 1 - y**2 + sp.cos(th)).periodic == {1: TWO_PI}


# ----------------------------------------------------------------------------- wrap

@functools.lru_cache(maxsize=None)
def _dubins():
    """One Dubins car for the 300 examples below (building the plant costs 18 ms; wrap is pure)."""
    return systems.dubins()


@settings(max_examples=300, deadline=None)
@given(st.floats(-1e6, 1e6, allow_nan=False))
def test_wrap_puts_the_heading_in_one_period_and_keeps_it_modulo_the_period(theta):
    car = _dubins()
    x = np.array([0.25, -1.5, theta])
    w = car.wrap(x)
    assert -math.pi <= w[2] < math.pi
    assert w[0] == 0.25 and w[1] == -1.5                      # the other coordinates are untouched
    assert _angle_gap(w[2], theta) <= 1e-15 * max(1.0, abs(theta)) + 1e-15
    if -math.pi <= theta < math.pi:
        assert w[2] == theta                                  # inside: the same bits


def test_wrap_edges_batch_shapes_and_non_finite_entries():
    car = systems.dubins()
    X = np.array([[0, 0, math.pi], [0, 0, -math.pi], [0, 0, -math.pi - 1e-17], [0, 0, 3 * math.pi + 0.5],
                  [0, 0, np.nan], [0, 0, np.inf], [0, 0, -0.0]])
    W = car.wrap(X)
    assert W.shape == X.shape and W is not X
    np.testing.assert_array_equal(W[:3, 2], [-math.pi] * 3)
    assert W[3, 2] == pytest.approx(-math.pi + 0.5, abs=1e-14)
    assert np.isnan(W[4, 2]) and W[5, 2] == np.inf
    assert math.copysign(1.0, W[6, 2]) == -1.0
    np.testing.assert_array_equal(car.wrap(X[3]), W[3])
    vdp = systems.van_der_pol()
    Y = np.array([[5.0, -7.0]])
    np.testing.assert_array_equal(vdp.wrap(Y), Y)


# ----------------------------------------------------------------------------- simulators

def test_the_wrapped_simulator_equals_the_unwrapped_one_modulo_two_pi_over_long_runs():
    """30 s (3000 control periods, the heading turning through many periods) of filtered runs
    aimed at the obstacle: positions agree, headings agree modulo 2 pi, and only the wrapped
    run keeps the heading in [-pi, pi)."""
    car, free = systems.dubins(), _Unwrapped()
    barrier = _heading_barrier()
    rng = np.random.default_rng(3)
    ang = rng.uniform(-math.pi, math.pi, 12)
    rad = rng.uniform(1.8, 2.6, 12)
    X0 = np.stack([rad * np.cos(ang), rad * np.sin(ang), ang + math.pi + rng.uniform(-0.3, 0.3, 12)], axis=1)
    X0 = car.wrap(X0)

    def run(plant):
        filt = CBFProjection(plant, Linear(2.0))
        return simulate_batch(plant, barrier, filt, "aim", X0, 30.0, 0.01)

    wrapped, unwrapped = run(car), run(free)
    assert np.all(wrapped.x[..., 2] >= -math.pi) and np.all(wrapped.x[..., 2] < math.pi)
    assert np.ptp(unwrapped.x[..., 2]) > 4 * TWO_PI             # the unwrapped heading went round and round
    np.testing.assert_allclose(wrapped.x[..., :2], unwrapped.x[..., :2], rtol=0, atol=1e-8)
    assert _angle_gap(wrapped.x[..., 2], unwrapped.x[..., 2]).max() < 1e-8
    np.testing.assert_allclose(car.wrap(unwrapped.x.reshape(-1, 3)).reshape(wrapped.x.shape)[..., :2],
                               wrapped.x[..., :2], atol=1e-8)
    assert np.nanmin(wrapped.h) > 0                                 # and the filter held the set
    assert np.all(car.constraint(wrapped.x.reshape(-1, 3)) > 0)

    one = simulate(car, barrier, CBFProjection(car, Linear(2.0)), "aim", X0[0], 30.0, 0.01)
    assert np.array_equal(one.x[0], wrapped.x[0])                  # the single run's fast path: same bits


def test_an_initial_heading_outside_the_period_is_wrapped_before_the_first_step():
    car = systems.dubins()
    traj = simulate(car, None, None, "go_to_goal", [-2.0, 0.0, 7 * math.pi], 0.1, 0.01)
    assert traj.x[0, 0, 2] == pytest.approx(-math.pi, abs=1e-12) or traj.x[0, 0, 2] == pytest.approx(math.pi)
    assert np.all(np.abs(traj.x[0, :, 2]) <= math.pi)


def test_the_gymnasium_adapter_wraps_the_heading():
    pytest.importorskip("gymnasium")
    from cbfsim.gym import PlantEnv
    env = PlantEnv(systems.dubins(), dt=0.05)
    env.reset(seed=0, options={"x0": [1.5, 0.0, 3.0]})
    headings = [env.step(np.array([2.0]))[0][2] for _ in range(20)]     # turning left at full rate
    assert all(-math.pi <= th < math.pi for th in headings)
    assert min(headings) < 0 < max(headings)                            # it crossed the seam


@pytest.mark.toolchain
def test_the_compiled_loop_wraps_the_heading_and_tracks_the_numpy_engine_modulo_two_pi(cxx):
    """The firmware's closed loop (cbf_config.hpp kPeriod/kWrapLo, step.hpp wrap_periodic) run on
    the host: the heading stays in [-pi, pi) in float32 and, where the filter is idle (h > 0 by a
    wide bias), the float32 run tracks the float64 simulator modulo 2 pi."""
    import torch

    from cbfsim.barriers import CompiledBarrier
    from cbfsim.runtime import compile_barrier

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Softplus(), torch.nn.Linear(8, 1))
    with torch.no_grad():
        net[2].weight.mul_(0.01)
        net[2].bias.fill_(50.0)
    car = systems.dubins()
    barrier = CompiledBarrier(compile_barrier(net, inputs=1))
    X0 = np.array([[-2.0, 0.5, 0.0], [1.0, 2.0, 3.1], [2.0, -1.0, -3.1]])
    runs = {engine: simulate_batch(car, barrier, CBFProjection(car, Linear(1.0)), "go_to_goal", X0, 20.0, 0.01,
                                   engine=engine) for engine in ("numpy", "compiled")}
    compiled, python = runs["compiled"].x, runs["numpy"].x
    lo, period = np.float32(-math.pi), np.float32(TWO_PI)
    assert np.all(compiled[..., 2] >= lo) and np.all(compiled[..., 2] < lo + period)
    assert np.ptp(compiled[..., 2]) > 6.0                       # the loop really crossed the seam
    np.testing.assert_allclose(compiled[..., :2], python[..., :2], atol=1e-3)
    assert _angle_gap(compiled[..., 2], python[..., 2]).max() < 1e-3


@pytest.mark.toolchain
def test_the_firmware_loop_wraps_the_heading_as_the_python_reference_does(cxx, tmp_path):
    """firmware/common/app.hpp's closed loop on the host port: the heading stays in [-pi, pi)
    (float32) and tracks cbfsim's float64 reference run (which wraps too) modulo 2 pi."""
    import torch

    from cbfsim import device
    from cbfsim.device.config import RunConfig
    from conftest import require_tool
    require_tool("make", "apt-get install -y make")

    torch.manual_seed(1)
    net = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Softplus(), torch.nn.Linear(8, 1))
    with torch.no_grad():
        net[2].weight.mul_(0.01)
        net[2].bias.fill_(50.0)                 # h > 0 everywhere: the filter passes u_nom through
    config = RunConfig(system="dubins", x0=(-2.0, 0.5, 0.0), nominal="go_to_goal", dt=0.01, steps=1500)
    generated = device.generate(net, config, tmp_path / "gen")
    header = (generated.directory / "cbf_config.hpp").read_text()
    assert "kPeriod[3] = {0x0.0p+0f, 0x0.0p+0f, 0x1.921fb60000000p+2f}" in header
    host = device.parse_log(device.run("host", device.build("host", generated, tmp_path / "build")))
    ref = device.reference_run(generated, config)
    th = np.asarray(host.x, dtype=np.float32)[:, 2]
    assert np.all(th >= np.float32(-math.pi)) and np.all(th < np.float32(-math.pi) + np.float32(TWO_PI))
    assert np.ptp(th) > 6.0                                         # it crossed the seam
    assert device.max_abs_diff(np.asarray(host.x)[:, :2], ref.x[:, :2]) < 1e-3
    assert _angle_gap(np.asarray(host.x)[:, 2], ref.x[: len(host.x), 2]).max() < 1e-3
