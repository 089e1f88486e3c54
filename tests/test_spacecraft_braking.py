"""The spacecraft's braking label set (systems.spacecraft.braking_margin): held with slack at every
edge state under the CWH drift, and inside the states a full brake keeps out of the keep-out ball
(references: finite differences of the margin along f + G u over the input box's grid, RK4
rollouts of the braking input)."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from conftest import edge_states
from systems import get_system
from systems.spacecraft import braking_margin, spacecraft


def _edge_states(chaser, count: int, seed: int) -> np.ndarray:
    """Random bearings and velocities, the distance found by bisection between a state inside
    (far out) and one outside (on the ball)."""
    rng = np.random.default_rng(seed)
    along = rng.normal(size=(count, 3))
    along /= np.linalg.norm(along, axis=1, keepdims=True)
    vel = rng.uniform(-1, 1, (count, 3))
    return edge_states(lambda x: braking_margin(chaser, x), along, vel, 6.0, chaser.params.radius)


def test_the_braking_label_set_can_be_held_with_slack_at_every_edge_state():
    chaser = get_system("spacecraft")
    X = _edge_states(chaser, 3000, seed=3)
    assert np.all(np.abs(braking_margin(chaser, X)) < 1e-9)
    eps, best = 1e-6, np.full(len(X), -np.inf)
    grid = np.linspace(-1, 1, 9)
    for u in itertools.product(grid, repeat=3):
        v = chaser.xdot(X, np.tile(u, (len(X), 1)))
        rate = (braking_margin(chaser, X + eps * v) - braking_margin(chaser, X - eps * v)) / (2 * eps)
        best = np.maximum(best, rate)
    assert best.min() >= chaser.params.v_star - 1e-6, best.min()


def test_every_state_of_the_braking_set_can_stop_outside_the_ball():
    """The radial brake u = u_max sign(p) while the radial speed is < 0, CWH drift included."""
    chaser = get_system("spacecraft")
    p = chaser.params
    rng = np.random.default_rng(7)
    X = rng.uniform(*chaser.domain, (20000, 6))
    X = X[(braking_margin(chaser, X) >= 0) & (np.sum(X[:, :3] * X[:, 3:], axis=1) < 0)][:200]
    assert len(X) == 200

    def rhs(x):
        braking = np.sum(x[:, :3] * x[:, 3:], axis=1) < 0
        u = np.where(braking[:, None], p.u_max * np.sign(x[:, :3]), 0.0)
        return chaser.xdot(x, u)

    x, dt, closest = X.copy(), 1e-3, np.linalg.norm(X[:, :3], axis=1)
    for _ in range(4000):                  # 4 s of fixed-step RK4 (the brake switches: no adaptive steps)
        k1 = rhs(x)
        k2 = rhs(x + 0.5 * dt * k1)
        k3 = rhs(x + 0.5 * dt * k2)
        x = x + dt / 6 * (k1 + 2 * k2 + 2 * k3 + rhs(x + dt * k3))
        closest = np.minimum(closest, np.linalg.norm(x[:, :3], axis=1))
    assert np.all(np.sum(x[:, :3] * x[:, 3:], axis=1) >= -1e-3), "a run still closing in after 4 s"
    assert closest.min() >= p.radius + p.clearance - 1e-6, closest.min()


def test_a_brake_the_drift_leaves_no_room_for_is_refused():
    with pytest.raises(ValueError, match="brake"):
        braking_margin(spacecraft(brake=0.9), np.zeros((1, 6)))
