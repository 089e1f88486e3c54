"""training/reach.py: the one-period tube contains every fine-step RK4 trajectory, from random
points and vertices of the box, under inputs held at random points and vertices of the input
box or switching within the period, for the experiments' plants and periods."""
from __future__ import annotations

import itertools
import zlib

import numpy as np
import pytest

from compiler.errors import CbfsimError, ShapeError
from compiler.interval import NAMESPACE, Interval
from systems import ControlAffineSystem, get_system
from training.reach import Tube, one_period_tube

EXPERIMENT_PERIODS = [("van_der_pol", 0.01), ("bicycle", 0.01), ("inverted_pendulum", 0.005)]
SHARES = (1e-3, 0.05, 0.3, 1.0)       # box edge as a share of the domain's edge
STEPS = 200                            # RK4 steps per period
# The float64 RK4 reference adds STEPS increments into x: its own rounding, up to about
# STEPS ulps of |x|, is allowed on top of the tube (the tube is tight, to 1 ulp, wherever
# a trajectory attains its extreme exactly, e.g. the bicycle's v under a held a = a_max).
REFERENCE_ROUNDING = 2.0 * STEPS * 2.0 ** -52


def boxes_in_domain(system: ControlAffineSystem, share: float, count: int, rng: np.random.Generator
                    ) -> tuple[np.ndarray, np.ndarray]:
    d_lo, d_hi = system.domain
    edge = share * (d_hi - d_lo)
    lo = rng.uniform(d_lo, d_hi - edge, size=(count, system.n))
    return lo, np.minimum(lo + edge, d_hi)


def start_points(lo: np.ndarray, hi: np.ndarray, rng: np.random.Generator, random_count: int = 10) -> np.ndarray:
    """Every vertex and random points of one box: (K, n)."""
    n = lo.shape[0]
    corners = np.array(list(itertools.product((0.0, 1.0), repeat=n)))
    share = np.concatenate([corners, rng.uniform(size=(random_count, n))])
    return np.clip(lo + share * (hi - lo), lo, hi)


def input_schedules(u_min: np.ndarray, u_max: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """(S, STEPS, m) piecewise-constant inputs: held at every vertex of the input box, held at
    random points, and switching 1-3 times within the period between vertices and points."""
    m = u_min.shape[0]
    vertices = [u_min + np.array(c) * (u_max - u_min) for c in itertools.product((0.0, 1.0), repeat=m)]
    values = vertices + [rng.uniform(u_min, u_max) for _ in range(3)]
    schedules = [np.tile(v, (STEPS, 1)) for v in values]
    for _ in range(6):
        switches = np.sort(rng.choice(np.arange(1, STEPS), size=rng.integers(1, 4), replace=False))
        pieces = np.split(np.arange(STEPS), switches)
        sched = np.empty((STEPS, m))
        for piece in pieces:
            pick = rng.integers(len(values) + 1)
            sched[piece] = values[pick] if pick < len(values) else rng.uniform(u_min, u_max)
        schedules.append(sched)
    return np.array(schedules)


def rk4_states(system: ControlAffineSystem, x0: np.ndarray, inputs: np.ndarray, T: float) -> np.ndarray:
    """RK4 states (STEPS + 1, N, n) from x0 (N, n) with inputs (N, STEPS, m) held over each step."""
    h = T / STEPS
    x = x0.copy()
    out = [x]
    for k in range(STEPS):
        u = inputs[:, k]
        k1 = system.xdot(x, u)
        k2 = system.xdot(x + 0.5 * h * k1, u)
        k3 = system.xdot(x + 0.5 * h * k2, u)
        k4 = system.xdot(x + h * k3, u)
        x = x + h / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
        out.append(x)
    return np.array(out)


def _distance(box: Interval, points: np.ndarray) -> np.ndarray:
    """How far each coordinate of the points lies outside the box (0 inside)."""
    return np.maximum(np.maximum(box.lo - points, points - box.hi), 0.0)


def assert_trajectories_inside(system: ControlAffineSystem, tube: Tube, lo: np.ndarray, hi: np.ndarray,
                               u_lo: np.ndarray, u_hi: np.ndarray, T: float, rng: np.random.Generator) -> None:
    """RK4 trajectories from each box b (inputs in [u_lo[b], u_hi[b]]) stay in R[b], end in end[b]."""
    assert tube.ok.all(), "the tube closes for the experiment's period"
    assert tube.R.shape == tube.end.shape == lo.shape
    for b in range(lo.shape[0]):
        starts = start_points(lo[b], hi[b], rng)
        schedules = input_schedules(u_lo[b], u_hi[b], rng)
        pairs = list(itertools.product(range(len(starts)), range(len(schedules))))
        x0 = starts[[p for p, _ in pairs]]
        inputs = schedules[[s for _, s in pairs]]
        states = rk4_states(system, x0, inputs, T)                     # (STEPS + 1, N, n)
        slack = REFERENCE_ROUNDING * (1.0 + np.abs(states).max(axis=(0, 1)))
        inside = _distance(tube.R[b], states) <= slack
        assert inside.all(), f"box {b}: a trajectory leaves R at step {np.argwhere(~inside)[0][0]}"
        at_end = _distance(tube.end[b], states[-1]) <= slack
        assert at_end.all(), f"box {b}: x(T) outside the end set"


@pytest.mark.parametrize("name, T", EXPERIMENT_PERIODS)
@pytest.mark.parametrize("share", SHARES)
def test_every_rk4_trajectory_stays_in_the_tube_and_ends_in_its_end_set(name: str, T: float, share: float) -> None:
    system = get_system(name)
    rng = np.random.default_rng(zlib.crc32(f"{name} {share}".encode()))
    lo, hi = boxes_in_domain(system, share, count=4, rng=rng)
    tube = one_period_tube(system.enclosure(NAMESPACE), Interval(lo, hi), Interval(system.u_min, system.u_max), T)
    u_lo, u_hi = (np.broadcast_to(u, lo.shape[:1] + u.shape) for u in (system.u_min, system.u_max))
    assert_trajectories_inside(system, tube, lo, hi, u_lo, u_hi, T, rng)


@pytest.mark.parametrize("name, T", EXPERIMENT_PERIODS)
def test_per_box_input_boxes_enclose_their_own_trajectories(name: str, T: float) -> None:
    """u_box (B, m): each box with its own sub-box of inputs (as a filter's admissible set)."""
    system = get_system(name)
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    lo, hi = boxes_in_domain(system, 0.05, count=4, rng=rng)
    a, b = rng.uniform(system.u_min, system.u_max, size=(2, 4, system.m))
    u_lo, u_hi = np.minimum(a, b), np.maximum(a, b)
    plant = system.enclosure(NAMESPACE)
    tube = one_period_tube(plant, Interval(lo, hi), Interval(u_lo, u_hi), T)
    assert_trajectories_inside(system, tube, lo, hi, u_lo, u_hi, T, rng)
    shared = Interval(system.u_min, system.u_max)
    per_box = Interval(*(np.broadcast_to(u, (4, system.m)) for u in (system.u_min, system.u_max)))
    one, each = one_period_tube(plant, Interval(lo, hi), shared, T), one_period_tube(plant, Interval(lo, hi), per_box, T)
    assert np.array_equal(one.R.lo, each.R.lo) and np.array_equal(one.R.hi, each.R.hi)
    assert np.all(tube.R.width <= one.R.width), "fewer inputs never widen the tube here"


def test_the_end_set_is_inside_the_tube_and_the_tube_contains_the_box() -> None:
    system = get_system("van_der_pol")
    lo, hi = boxes_in_domain(system, 0.05, 50, np.random.default_rng(0))
    tube = one_period_tube(system.enclosure(NAMESPACE), Interval(lo, hi), Interval(system.u_min, system.u_max), 0.01)
    assert tube.ok.all()
    assert tube.end.subset(tube.R).all() and Interval(lo, hi).subset(tube.R).all()


def test_a_period_too_long_to_close_is_reported_not_ok() -> None:
    """Van der Pol over its whole domain: the tube closes for 10 ms; for 2 s the Picard
    iteration cannot close (x2dot grows like x1^2 x2), so ok is False."""
    system = get_system("van_der_pol")
    box = Interval(*(d[None] for d in system.domain))
    plant, u = system.enclosure(NAMESPACE), Interval(system.u_min, system.u_max)
    assert one_period_tube(plant, box, u, 0.01).ok.all()
    assert not one_period_tube(plant, box, u, 2.0).ok.any()


def test_bad_shapes_and_periods_are_refused_with_one_line() -> None:
    system = get_system("bicycle")
    plant = system.enclosure(NAMESPACE)
    box = Interval(np.zeros((2, 4)), np.ones((2, 4)))
    u = Interval(system.u_min, system.u_max)
    with pytest.raises(ShapeError, match=r"box must be an Interval of shape \(B, 4\)"):
        one_period_tube(plant, Interval(np.zeros((2, 3)), np.ones((2, 3))), u, 0.01)
    with pytest.raises(ShapeError, match=r"u_box must be an Interval of shape \(2,\) or \(B, 2\)"):
        one_period_tube(plant, box, Interval(np.zeros(1), np.ones(1)), 0.01)
    for T in (0.0, -0.01, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="period T must be a finite number > 0"):
            one_period_tube(plant, box, u, T)
    assert issubclass(ShapeError, CbfsimError)


@pytest.mark.parametrize("name, T", EXPERIMENT_PERIODS)
def test_the_tube_of_a_point_under_a_held_input_is_tight(name: str, T: float) -> None:
    """Not merely sound: from a single state under one held input, R is within 1.5x the
    trajectory's own range, and the end set within 2% of it (the Taylor remainder)."""
    system = get_system(name)
    rng = np.random.default_rng(zlib.crc32(name.encode()) + 1)
    x = rng.uniform(*system.domain, size=(5, system.n))
    u = rng.uniform(system.u_min, system.u_max)
    tube = one_period_tube(system.enclosure(NAMESPACE), Interval(x, x), Interval(u, u), T)
    assert tube.ok.all()
    states = rk4_states(system, x, np.broadcast_to(u, (5, STEPS, system.m)), T)
    spread = states.max(axis=0) - states.min(axis=0)
    assert np.all(tube.R.width <= 1.5 * spread + 1e-12)
    assert np.all(tube.end.width <= 0.02 * spread + 1e-12)
