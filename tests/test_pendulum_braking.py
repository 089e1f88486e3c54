"""The inverted pendulum's designed braking set (systems.inverted_pendulum.braking_margin), checked
against the plant itself: central differences of h for the HOCBF row on its edge, scipy rollouts of
the full brake, and the backup rollouts' safe states; a weaker brake is the mutant that must fail."""
from __future__ import annotations

import math

import numpy as np
import pytest

from systems import inverted_pendulum
from systems.inverted_pendulum import BRAKING, braking_margin


def _h(system, theta: np.ndarray) -> np.ndarray:
    return braking_margin(system, np.stack([theta, np.zeros_like(theta)], axis=1))


def _derivatives(system, theta: np.ndarray, step: float = 1e-5) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    h, up, down = _h(system, theta), _h(system, theta + step), _h(system, theta - step)
    return h, (up - down) / (2 * step), (up - 2 * h + down) / step**2


def _right_edge(system, count: int = 3000) -> tuple[np.ndarray, np.ndarray]:
    """Edge states (theta, theta_dot) on the right: psi1 = h' theta_dot + alpha1 h = 0, |theta_dot| <= 1.25."""
    theta = np.linspace(0.05, system.params.theta_max - BRAKING.tip_gap - 1e-4, count)
    h, d1, _ = _derivatives(system, theta)
    with np.errstate(divide="ignore", invalid="ignore"):
        speed = np.where(d1 < 0, BRAKING.alpha1 * h / -d1, np.inf)
    on = speed <= 1.25
    return theta[on], speed[on]


def _row_with_full_brake(system, design_system, theta: np.ndarray, speed: np.ndarray) -> np.ndarray:
    """The HOCBF row psi1' + alpha2 psi1 - m at psi1 = 0 under u = -u_max, from ``system``'s f and G,
    for the set designed for ``design_system``."""
    h, d1, d2 = _derivatives(design_system, theta)
    x = np.stack([theta, speed], axis=1)
    accel = system.xdot(x, np.full((len(x), 1), -system.params.u_max))[:, 1]
    return d2 * speed**2 + d1 * accel + BRAKING.alpha1 * d1 * speed - BRAKING.filter_margin


def test_the_braking_set_is_the_constraint_set_shrunk_by_the_tip_gap_and_symmetric():
    pend = inverted_pendulum()
    tip = pend.params.theta_max - BRAKING.tip_gap
    theta = np.linspace(-math.pi / 2, math.pi / 2, 4001)
    h = _h(pend, theta)
    assert np.all((h >= 0) == (np.abs(theta) <= tip))
    np.testing.assert_allclose(h, _h(pend, -theta), rtol=0, atol=1e-12)
    assert _h(pend, np.array([math.pi / 2]))[0] < 0


def test_every_edge_state_can_hold_the_row_with_the_designed_slack_and_a_weaker_brake_cannot():
    """On psi1 = 0 the full brake leaves >= slack |h'| in the row (central differences of h, the plant's
    own theta_ddot): the filter is feasible there with its margin.  The same set on a pendulum
    whose brake is 10 instead of 12 N m fails it (the design is not vacuous)."""
    pend = inverted_pendulum()
    theta, speed = _right_edge(pend)
    assert len(theta) > 500 and speed.max() > 1.2
    _, d1, _ = _derivatives(pend, theta)
    room = _row_with_full_brake(pend, pend, theta, speed) / -d1          # [rad/s^2]
    assert room.min() >= 0.9 * BRAKING.slack, room.min()
    weak = inverted_pendulum(u_max=10.0)
    assert _row_with_full_brake(weak, pend, theta, speed).min() < 0


def _full_brake_leaves(system, design_system, theta0: np.ndarray, speed0: np.ndarray) -> np.ndarray:
    """scipy rollouts of theta_ddot = g sin theta - u_max on ``system`` from edge states of
    ``design_system``'s set, until theta_dot <= 0: the largest excess theta_dot - edge(theta)."""
    from scipy.integrate import solve_ivp
    g, u = system.params.g / system.params.L, system.params.u_max / (system.params.mass * system.params.L**2)
    theta_grid = np.linspace(0.0, design_system.params.theta_max - BRAKING.tip_gap, 20001)
    h, d1, _ = _derivatives(design_system, theta_grid)
    with np.errstate(divide="ignore", invalid="ignore"):
        edge = np.where(d1 < 0, BRAKING.alpha1 * h / -d1, np.inf)
    stop = lambda t, y: y[1]                      # noqa: E731
    stop.terminal, stop.direction = True, -1
    worst = []
    for th, om in zip(theta0, speed0):
        sol = solve_ivp(lambda t, y: [y[1], g * math.sin(y[0]) - u], (0, 5), [th, om * (1 - 1e-6)],
                        events=stop, max_step=1e-3, rtol=1e-10, atol=1e-12)
        th_t, om_t = sol.y
        assert th_t.max() < design_system.params.theta_max
        worst.append(np.max(om_t - np.interp(th_t, theta_grid, edge)))
    return np.array(worst)


def test_the_full_brake_from_the_edge_stays_inside_the_set_and_a_weaker_one_leaves_it():
    pend = inverted_pendulum()
    theta, speed = _right_edge(pend, 400)
    pick = np.linspace(0, len(theta) - 1, 25).astype(int)
    assert _full_brake_leaves(pend, pend, theta[pick], speed[pick]).max() <= 1e-6
    weak = inverted_pendulum(u_max=10.0)
    assert _full_brake_leaves(weak, pend, theta[pick], speed[pick]).max() > 1e-3


def test_the_braking_set_holds_most_backup_safe_states():
    """Greedy backup rollouts (training.samplers) label the backup-safe states; the designed set
    C = {h >= 0, psi1 >= 0} is inside them and holds >= 95% of them."""
    from training.samplers import ConstraintTools, backup_safe
    pend = inverted_pendulum()
    rng = np.random.default_rng(3)
    x = np.stack([rng.uniform(-math.pi / 4, math.pi / 4, 40_000), rng.uniform(-1.25, 1.25, 40_000)], axis=1)
    tools = ConstraintTools(pend)
    safe = backup_safe(tools, x, np.array([-12.0]), np.array([12.0]), horizon=2.0, dt=0.01)
    h, d1, _ = _derivatives(pend, x[:, 0])
    in_set = (h >= 0) & (d1 * x[:, 1] + BRAKING.alpha1 * h >= 0)
    assert np.mean(safe[in_set]) >= 0.999
    assert np.sum(in_set & safe) / np.sum(safe) >= 0.95


@pytest.mark.parametrize("bad", [dict(slack=6.0), dict(margin_accel=6.0)])
def test_a_design_asking_more_than_the_brake_gives_is_refused(bad):
    from systems.inverted_pendulum import BrakingDesign
    with pytest.raises(ValueError, match="exceed the input's deceleration"):
        braking_margin(inverted_pendulum(), np.zeros((1, 2)), BrakingDesign(**bad))


def test_label_polish_brings_the_fits_second_derivative_to_the_target():
    """L-BFGS on values, gradients and Hessians: the network's h'' (float64 autograd) ends far closer
    to the target's (a closed form, not the polish's finite differences) than where it started."""
    import torch

    from training.network import MaskedBarrier
    from training.trainer import _polish_label_fit

    def target(system, x):                         # a bump with a closed-form second derivative
        return np.exp(-2 * np.asarray(x)[..., 0] ** 2) - 0.3

    def second(theta):
        return (16 * theta**2 - 4) * np.exp(-2 * theta**2)

    torch.manual_seed(0)
    net = MaskedBarrier(2, [0], [16, 16], "softplus", seed=0).double()
    x = np.stack([np.linspace(-1.5, 1.5, 600), np.zeros(600)], axis=1)
    theta = torch.linspace(-1.0, 1.0, 101, dtype=torch.float64)

    def error() -> float:
        t = theta.clone().requires_grad_(True)
        h = net(torch.stack([t, torch.zeros_like(t)], -1)).squeeze(-1)
        (g,) = torch.autograd.grad(h.sum(), t, create_graph=True)
        (g2,) = torch.autograd.grad(g.sum(), t)
        return float(np.abs(g2.numpy() - second(theta.numpy())).max())

    before = error()
    _polish_label_fit(net, x[::4], target, None, cap=1.0, steps=120)
    assert error() < 0.15 * before, (before, error())
