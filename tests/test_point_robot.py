"""The planar point robot's braking label set: held with slack at every edge state, and inside
the states a full brake keeps out of the disk (references: finite differences of the margin
along f + G u over a grid of the input box, and scipy rollouts of the braking input)."""
from __future__ import annotations

import numpy as np
from scipy.integrate import solve_ivp

from conftest import edge_states
from systems import get_system
from systems.point_robot import braking_margin


def _edge_states(robot, count: int, seed: int) -> np.ndarray:
    """States on the set's edge: random bearings and velocities, the distance found by bisection
    between a state inside (3 m out) and one outside (on the disk)."""
    rng = np.random.default_rng(seed)
    ang = rng.uniform(-np.pi, np.pi, count)
    vel = rng.uniform(-1, 1, (count, 2))
    along = np.stack([np.cos(ang), np.sin(ang)], axis=1)
    return edge_states(lambda x: braking_margin(robot, x), along, vel, 3.0, robot.params.radius)


def test_the_braking_label_set_can_be_held_with_slack_at_every_edge_state():
    """At every edge state some input of the box raises the margin by >= v_star (0.2 m/s): the
    exact braking set's edge has none where it meets the clearance circle."""
    robot = get_system("point_robot")
    X = _edge_states(robot, 4000, seed=3)
    assert np.all(np.abs(braking_margin(robot, X)) < 1e-9)
    eps, best = 1e-6, np.full(len(X), -np.inf)
    grid = np.linspace(-1, 1, 21)
    for ux in grid:
        for uy in grid:
            v = robot.xdot(X, np.tile([ux, uy], (len(X), 1)))
            rate = (braking_margin(robot, X + eps * v) - braking_margin(robot, X - eps * v)) / (2 * eps)
            best = np.maximum(best, rate)
    assert best.min() >= robot.params.v_star - 1e-6, best.min()


def test_every_state_of_the_braking_set_can_stop_outside_the_disk():
    """scipy rollouts of the radial brake u = a_max sign(p) (the input that cancels the inward
    speed fastest; held until the radial speed is >= 0): from states in the set the robot never
    comes within the clearance of the disk."""
    robot = get_system("point_robot")
    p = robot.params
    rng = np.random.default_rng(7)
    X = rng.uniform(*robot.domain, (20000, 4))
    X = X[braking_margin(robot, X) >= 0][:300]
    assert len(X) == 300

    def rhs(_t, flat):                      # all starts in one ODE
        x = flat.reshape(-1, 4)
        braking = np.sum(x[:, :2] * x[:, 2:], axis=1) < 0
        u = np.where(braking[:, None], p.a_max * np.sign(x[:, :2]), 0.0)
        return np.hstack([x[:, 2:], u]).ravel()

    sol = solve_ivp(rhs, (0.0, 3.0), X.ravel(), max_step=0.002, rtol=1e-9, atol=1e-12)
    paths = sol.y.reshape(len(X), 4, -1)
    closest = np.hypot(paths[:, 0], paths[:, 1]).min(axis=1)
    assert closest.min() >= p.radius + p.clearance - 1e-6, X[np.argmin(closest)]
