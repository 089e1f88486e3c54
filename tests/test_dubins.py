"""The Dubins car (systems/dubins.py): constant speed, steer only, heading periodic, a ring
between an obstacle and an arena wall as its constraint, and a turn-away backup that labels
exactly the geometrically viable states on the hardest lines (heading straight at a wall)."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

import systems
from systems import get_system
from training.samplers import ConstraintTools, backup_margin


def _hand_f(X: np.ndarray, v: float = 1.0) -> np.ndarray:
    return np.stack([v * np.cos(X[:, 2]), v * np.sin(X[:, 2]), np.zeros(len(X))], axis=1)


def _states(count: int, seed: int = 0) -> np.ndarray:
    car = get_system("dubins")
    return np.random.default_rng(seed).uniform(*car.domain, size=(count, 3))


def test_f_g_and_the_input_box_against_a_hand_written_model():
    car = systems.dubins(v=1.5, omega_max=3.0)
    X = _states(64)
    np.testing.assert_allclose(car.f(X), _hand_f(X, 1.5), rtol=1e-15, atol=1e-15)
    np.testing.assert_array_equal(car.G(X), np.broadcast_to([[0.0], [0.0], [1.0]], (64, 3, 1)))
    np.testing.assert_array_equal(car.u_min, [-3.0])
    np.testing.assert_array_equal(car.u_max, [3.0])
    U = np.random.default_rng(1).uniform(-3, 3, (64, 1))
    np.testing.assert_allclose(car.xdot(X, U), _hand_f(X, 1.5) + np.concatenate([0 * U, 0 * U, U], 1), atol=1e-15)
    assert (car.n, car.m, car.state_names, car.input_names) == (3, 1, ("p_x", "p_y", "theta"), ("omega",))


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")  # inside torch.func
def test_the_jacobian_vector_product_against_torch_autograd_and_central_differences():
    car = get_system("dubins")
    X = _states(32, seed=2)
    V = np.random.default_rng(3).standard_normal((32, 3))
    _, jvp = torch.func.jvp(car.f_torch, (torch.tensor(X),), (torch.tensor(V),))
    np.testing.assert_allclose(car.df(X, V), jvp.numpy(), rtol=1e-12, atol=1e-12)
    eps = 1e-6
    central = (_hand_f(X + eps * V) - _hand_f(X - eps * V)) / (2 * eps)
    np.testing.assert_allclose(car.df(X, V), central, rtol=1e-7, atol=1e-8)


def test_the_constraint_is_the_ring_between_obstacle_and_arena_and_negative_on_the_position_faces():
    car = get_system("dubins")
    P = car.params
    rng = np.random.default_rng(4)
    ang, th = rng.uniform(-math.pi, math.pi, (2, 4000))
    rad = rng.uniform(0, 5, 4000)
    X = np.stack([rad * np.cos(ang), rad * np.sin(ang), th], axis=1)
    c = car.constraint(X)
    inside = (rad > P.r + 1e-9) & (rad < P.R - 1e-9)
    outside = (rad < P.r - 1e-9) | (rad > P.R + 1e-9)
    assert np.all(c[inside] > 0) and np.all(c[outside] < 0)
    s = rad**2
    np.testing.assert_allclose(c, (P.R**2 - s) * (s - P.r**2) / (P.R**2 - P.r**2), rtol=1e-12, atol=1e-12)
    lo, hi = car.domain
    face = rng.uniform(lo, hi, (1000, 3))
    face[:, rng.integers(0, 2, 1000)] = np.where(rng.random(1000) < 0.5, lo[0], hi[0])[:, None]
    assert np.all(car.constraint(face) < 0)                 # the safe set lies strictly inside the domain
    assert float(lo[0]) == -P.extent and P.extent > P.R


def test_the_aim_nominal_steers_at_the_obstacle_and_go_to_goal_at_the_goal():
    car = get_system("dubins")
    aim, goal = car.nominal("aim"), car.nominal("go_to_goal")
    # at (-2, 0): the obstacle centre is dead ahead at heading 0, to the left at heading -pi/2
    assert aim([-2.0, 0.0, 0.0])[0] == pytest.approx(0.0, abs=1e-15)
    assert aim([-2.0, 0.0, -math.pi / 2])[0] == pytest.approx(2.0 * math.pi / 2)
    assert aim([-2.0, 0.0, math.pi / 2])[0] == pytest.approx(-2.0 * math.pi / 2)
    # the same input one period on (atan2 of the body frame needs no wrapping)
    X = _states(64, seed=5)
    np.testing.assert_allclose(aim(X + [0, 0, 2 * math.pi]), aim(X), atol=1e-9)
    assert goal([0.0, 1.0, 0.0])[0] == pytest.approx(2.0 * math.atan2(-1.0, 2.5))


@pytest.mark.parametrize("d, safe", [(0.80, False), (0.85, False), (0.88, True), (1.0, True), (1.8, True)])
def test_the_turn_away_backup_saves_a_car_heading_straight_at_the_obstacle_from_the_geometric_distance(d, safe):
    """Turning at full rate (radius rho = v / omega_max) clears the disk from centre distance d iff
    d^2 + rho^2 >= (r + rho)^2: d >= 0.866 for r = rho = 0.5. Dead ahead, both turns are equally
    good; the greedy backup breaks the tie (without it the rollout drives straight in)."""
    car = get_system("dubins")
    low = backup_margin(ConstraintTools(car), np.array([[-d, 0.0, 0.0]]), car.u_min, car.u_max, 4.0, 0.01)
    assert (low[0] >= 0) == safe
    assert math.sqrt(0.75) < 0.88 and math.sqrt(0.75) > 0.85


@pytest.mark.parametrize("d, safe", [(2.3, True), (2.4, True), (2.46, False), (2.6, False)])
def test_the_turn_away_backup_keeps_a_car_heading_straight_at_the_wall_inside_from_the_geometric_distance(d, safe):
    """Heading straight out at distance d the full turn stays in the arena iff sqrt(d^2 + rho^2) + rho <= R:
    d <= sqrt(6) = 2.449 for R = 3."""
    car = get_system("dubins")
    low = backup_margin(ConstraintTools(car), np.array([[d, 0.0, 0.0]]), car.u_min, car.u_max, 4.0, 0.01)
    assert (low[0] >= 0) == safe


def test_the_experiments_starts_face_the_obstacle():
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parent.parent / "experiments" / "dubins.py"
    spec = importlib.util.spec_from_file_location("experiment_dubins", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    car = get_system("dubins")
    X = np.random.default_rng(6).uniform(*car.domain, size=(500, 3))
    S = module.SPEC.starts(X)
    np.testing.assert_array_equal(S[:, :2], X[:, :2])
    assert np.all(S[:, 2] >= -math.pi) and np.all(S[:, 2] < math.pi)
    to_centre = np.arctan2(-X[:, 1], -X[:, 0])
    gap = np.abs(np.mod(S[:, 2] - to_centre + math.pi, 2 * math.pi) - math.pi)
    assert gap.max() <= 0.05 + 1e-12
    # every start's straight line hits the obstacle: its miss distance |p| sin(gap) is below r
    assert np.all(np.hypot(X[:, 0], X[:, 1]) * np.sin(gap) < car.params.r)
    certificate = json.loads((path.parent / "models" / "dubins.cert.json").read_text())
    assert certificate["certified"] and certificate["closed_in_domain"]
    assert module.SPEC.controller == "aim" and module.SPEC.dt_control == certificate["dt"]   # the period proven


def test_a_constant_backup_input_circles_and_labels_the_states_whose_circle_stays_in_the_ring():
    """backup_input = [omega_max]: the car circles left (radius 0.5) about p + 0.5 (-sin theta,
    cos theta); the rollout keeps the constraint iff that circle stays in the ring
    (1.0 <= |centre| <= 2.5). From (1, 0) heading +p_y the centre is (0.5, 0): the circle touches
    the obstacle's centre; heading -p_y it is (1.5, 0): safe. The greedy backup saves both."""
    car = get_system("dubins")
    tools = ConstraintTools(car)
    X = np.array([[1.0, 0.0, math.pi / 2], [1.0, 0.0, -math.pi / 2], [2.25, 0.0, -math.pi / 2],
                  [2.25, 0.0, math.pi / 2]])
    left = backup_margin(tools, X, car.u_min, car.u_max, 4.0, 0.01, constant=[2.0])
    np.testing.assert_array_equal(left >= 0, [False, True, False, True])
    assert np.all(backup_margin(tools, X, car.u_min, car.u_max, 4.0, 0.01) >= 0)
    clipped = backup_margin(tools, X, car.u_min, car.u_max, 4.0, 0.01, constant=[50.0])    # clipped to the box
    np.testing.assert_array_equal(clipped, left)


def test_a_backup_input_of_the_wrong_length_is_refused_naming_the_field():
    from training.config import ConfigError, TrainConfig
    with pytest.raises(ConfigError, match="^backup_input must be 1 finite numbers"):
        TrainConfig(system="dubins", backup_input=[1.0, 2.0]).resolve(get_system("dubins"))


@pytest.mark.parametrize("path, message", [
    ("left_circling_margin", "^label_set must be an import path package.module:function"),
    ("systems.dubins:no_such_set", "^label_set 'systems.dubins:no_such_set': cannot import it"),
    ("systems.dubins:DubinsParams.v", "^label_set 'systems.dubins:DubinsParams.v': cannot import it"),
])
def test_a_label_set_that_is_not_an_importable_function_is_refused_naming_the_field(path, message):
    from training.config import ConfigError, TrainConfig
    with pytest.raises(ConfigError, match=message):
        TrainConfig(system="dubins", label_set=path).resolve(get_system("dubins"))


def test_zero_rounds_are_refused_without_a_label_set_whose_fit_would_be_the_network():
    from training.config import ConfigError, TrainConfig
    with pytest.raises(ConfigError, match=r"^rounds must be an integer >= 1 \(0 only with a label_set\), got 0$"):
        TrainConfig(system="dubins", rounds=0).resolve(get_system("dubins"))
    with_set = TrainConfig(system="dubins", rounds=0, label_set="systems.dubins:left_circling_margin")
    with_set.resolve(get_system("dubins"))


def _edge_states(car, count: int, seed: int) -> np.ndarray:
    """States on the edge of left_circling_margin's set: random headings and bearings, the
    distance found by bisection between a state inside and one outside the set."""
    from systems.dubins import left_circling_margin
    rng = np.random.default_rng(seed)
    ang, th = rng.uniform(-math.pi, math.pi, (2, count))
    along = np.stack([np.cos(ang), np.sin(ang), np.zeros(count)], axis=1)
    base = np.stack([np.zeros(count), np.zeros(count), th], axis=1)
    # the set is inside the ring: from 1.75 m (the ring's middle) outward and inward to its walls
    edges = []
    for inner in (True, False):
        a, b = np.full(count, 1.75), np.full(count, 0.3 if inner else 3.2)
        for _ in range(60):
            mid = (a + b) / 2
            inside = left_circling_margin(car, base + mid[:, None] * along) >= 0
            a, b = np.where(inside, mid, a), np.where(inside, b, mid)
        ok = left_circling_margin(car, base + a[:, None] * along) >= 0
        edges.append((base + a[:, None] * along)[ok])
    return np.concatenate(edges)


def test_the_circling_label_set_can_be_held_with_slack_at_every_edge_state():
    """Central differences of the margin along f + G u, u on a grid of the input box: at every
    edge state some input raises it by >= 0.065 m/s (the full-left-safe set's edge has 0)."""
    from systems.dubins import left_circling_margin
    car = get_system("dubins")
    X = _edge_states(car, 3000, seed=5)
    assert len(X) > 4000 and np.all(np.abs(left_circling_margin(car, X)) < 1e-9)
    eps, best = 1e-6, np.full(len(X), -np.inf)
    for u in np.linspace(car.u_min[0], car.u_max[0], 81):
        v = car.xdot(X, np.full((len(X), 1), u))
        rate = (left_circling_margin(car, X + eps * v) - left_circling_margin(car, X - eps * v)) / (2 * eps)
        best = np.maximum(best, rate)
    assert best.min() >= 0.065, best.min()


def test_the_circling_label_set_lies_inside_the_full_left_safe_states_and_holds_most_of_them():
    """Full-left rollouts by scipy (not the trainer's RK4): every state of the set keeps the
    ring for a whole turn, and the set holds >= 85% of the states that do."""
    from scipy.integrate import solve_ivp

    from systems.dubins import left_circling_margin
    car = get_system("dubins")
    X = _states(6000, seed=6)
    X = X[car.constraint(X) >= 0]
    turn = 2 * math.pi / car.params.omega_max

    def rates(t: float, flat: np.ndarray) -> np.ndarray:       # every car at once, each on its own
        states = flat.reshape(-1, 3)
        return car.xdot(states, np.broadcast_to(car.u_max, (len(states), 1))).ravel()

    sol = solve_ivp(rates, (0, turn), X.ravel(), method="DOP853", rtol=1e-10, atol=1e-12, dense_output=True)
    path = sol.sol(np.linspace(0, turn, 1000)).T.reshape(1000, len(X), 3)
    keep = car.constraint(path.reshape(-1, 3)).reshape(1000, len(X)).min(axis=0)
    held = left_circling_margin(car, X) >= 0
    assert np.all(keep[held] >= -1e-9), keep[held].min()
    share = np.mean(held[keep >= 0])
    assert share >= 0.85, share


def test_the_fit_of_a_label_set_is_a_candidate_and_is_kept_when_the_rounds_only_make_it_worse(monkeypatch):
    """With a label set the warm-started network is checked before any round (row 0, 'start') and
    competes with the trained ones: when every round wrecks the network (h == 1 everywhere, so
    h >= 0 outside the ring), the network returned is the fit itself, value for value."""
    import training.trainer as trainer
    from training.config import TrainConfig

    def wreck(barrier, *args, **kwargs):
        with torch.no_grad():
            for name, p in barrier.net.named_parameters():
                p.fill_(1.0 if name == f"{len(barrier.net) - 1}.bias" else 0.0)
        return {}

    fits = []
    original_fit = trainer._fit_label_set
    monkeypatch.setattr(trainer, "_fit_label_set", lambda b, *a: (original_fit(b, *a), fits.append(
        {k: v.clone() for k, v in b.state_dict().items()})))
    monkeypatch.setattr(trainer, "_train_round", wreck)
    cfg = TrainConfig(system="dubins", hidden=[8], label_set="systems.dubins:left_circling_margin",
                      n_uniform=3000, n_boundary=500, check_samples=3000, check_boundary=500,
                      warm_start_steps=100, rounds=2, min_rounds=2, dt_control=0.0)
    result = trainer.train_barrier(cfg, verify=False)
    rows = result.history
    assert rows[0].get("start") and not any(r.get("start") for r in rows[1:]) and len(rows) == 3
    assert [r["round"] for r in rows] == [0, 1, 2]
    assert all(r["containment_failures"] > 0 for r in rows[1:])
    assert [i for i, r in enumerate(rows) if r.get("kept")] == [0]
    assert result.final_check == {k: v for k, v in rows[0].items() if k in result.final_check}
    kept = result.barrier.state_dict()
    assert all(torch.equal(kept[k], v) for k, v in fits[0].items())
