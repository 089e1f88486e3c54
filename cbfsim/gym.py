"""Gymnasium adapters for RL users (``pip install 'cbfsim[gym]'``).

* ``PlantEnv`` / ``make(name)``: a ``systems/`` plant as a Gymnasium environment. The
  observation is the state, the action the input (a Box of the plant's bounds), each step holds
  the action for one control period (RK4, the simulator's integrator), and an episode ends
  (``terminated``) when the state leaves the constraint set, or is truncated after ``max_steps``.
* ``SafetyFilterWrapper(env, barrier, filter)``: puts a CBF safety filter between the agent and
  the environment. The agent's action is the nominal input; the filter returns the safe input
  that is applied; ``info["cbf"]`` reports h, whether the filter intervened, both inputs and the
  filter status, so the agent can learn from the interventions.
"""
from __future__ import annotations

from typing import Any, Callable, SupportsFloat

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from compiler.errors import CbfsimError
from systems import get_system

from .barriers import Barrier, barrier_terms
from .filters.base import SafetyFilter
from .simulate import rk4_zoh

Reward = Callable[[np.ndarray, np.ndarray, np.ndarray], float]


class GymInputError(CbfsimError, ValueError):
    """An environment parameter, start state or action the adapter cannot use (names what)."""


class EpisodeOrderError(CbfsimError, gym.error.ResetNeeded, RuntimeError):
    """``step`` before the first ``reset`` or after the episode ended (terminated or truncated)."""


def as_action(action: Any, m: int) -> np.ndarray:
    """The action as a float64 (m,) array: shape (m,), or a scalar when m = 1; any other shape
    is refused naming both (reshape used to accept (m, 1) and fail on (2,) with numpy's words)."""
    try:
        u = np.asarray(action, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise GymInputError(f"the action must be numbers of shape ({m},), got {action!r}") from exc
    if u.shape == (m,) or (m == 1 and u.shape == ()):
        return u.reshape(m)
    raise GymInputError(f"the action must have shape ({m},) (the plant's {m} input{'s' if m > 1 else ''}), "
                        f"got shape {u.shape}")


def _quadratic_reward(x: np.ndarray, u: np.ndarray, x_next: np.ndarray) -> float:
    """Default task: regulate to the origin with a small input cost."""
    return -float(x_next @ x_next + 0.01 * (u @ u))


class PlantEnv(gym.Env):
    """A control-affine plant from ``systems/`` as an environment (see the module docstring).

    Initial states are drawn uniformly from the plant's domain inside the constraint set (or
    given as ``reset(options={"x0": ...})``)."""

    metadata = {"render_modes": []}

    def __init__(self, system: Any, dt: float = 0.01, substeps: int = 1, max_steps: int = 1000,
                 reward: Reward | None = None):
        try:
            ok = bool(np.isfinite(float(dt)) and float(dt) > 0 and int(substeps) == substeps >= 1
                      and int(max_steps) == max_steps >= 1)
        except (TypeError, ValueError, OverflowError):
            ok = False
        if not ok:
            raise GymInputError(f"need a finite dt > 0 and whole substeps >= 1, max_steps >= 1; got dt={dt!r}, "
                                f"substeps={substeps!r}, max_steps={max_steps!r}")
        self.system, self.dt, self.substeps, self.max_steps = system, float(dt), int(substeps), int(max_steps)
        self.reward_fn = reward or _quadratic_reward
        self.action_space = spaces.Box(system.u_min.astype(np.float32), system.u_max.astype(np.float32),
                                       dtype=np.float32)
        self.observation_space = spaces.Box(-np.inf, np.inf, shape=(system.n,), dtype=np.float64)
        self.state = np.zeros(system.n)
        self._steps = 0
        self._ended: str | None = "reset has not been called"     # why step may not run now

    def _sample_safe_state(self) -> np.ndarray:
        lo, hi = (np.asarray(v, dtype=np.float64) for v in self.system.domain)
        for _ in range(1000):
            x = self.np_random.uniform(lo, hi)
            if self.system.constraint(x[None, :])[0] >= 0:
                return x
        raise RuntimeError(f"{self.system.name}: no state of the domain inside the constraint set in 1000 draws")

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        x0 = (options or {}).get("x0")
        self.state = self._sample_safe_state() if x0 is None else self._start_state(x0)
        self._steps = 0
        self._ended = None
        return self.state.copy(), {"constraint": float(self.system.constraint(self.state[None, :])[0])}

    def _start_state(self, x0: Any) -> np.ndarray:
        n = self.system.n
        try:
            x = np.array(x0, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise GymInputError(f"options['x0'] must be {n} numbers, got {x0!r}") from exc
        if x.shape != (n,):
            raise GymInputError(f"options['x0'] must have shape ({n},), got shape {x.shape}")
        if not np.all(np.isfinite(x)):
            raise GymInputError(f"options['x0'] must be finite, got {x.tolist()}")
        return x

    def step(self, action: Any):
        if self._ended is not None:
            raise EpisodeOrderError(f"step() called but {self._ended}; call reset() first")
        u = np.clip(as_action(action, self.system.m), self.system.u_min, self.system.u_max)
        x = self.state
        x_next = rk4_zoh(self.system, x[None, :], u[None, :], self.dt / self.substeps, self.substeps)[0]
        if getattr(self.system, "periodic", None):      # angles back into [lo, lo + P), as the simulator does
            x_next = self.system.wrap(x_next)
        self.state, self._steps = x_next, self._steps + 1
        constraint = float(self.system.constraint(x_next[None, :])[0])
        terminated = not constraint >= 0            # left the safe set (or the state is not finite)
        truncated = self._steps >= self.max_steps
        reward: SupportsFloat = self.reward_fn(x, u, x_next)
        if terminated or truncated:
            self._ended = (f"the episode ended at step {self._steps} "
                           f"({'the state left the constraint set' if terminated else 'max_steps reached'})")
        return x_next.copy(), reward, terminated, truncated, {"constraint": constraint}


def make(name: str, dt: float = 0.01, substeps: int = 1, max_steps: int = 1000, reward: Reward | None = None,
         **params: float) -> PlantEnv:
    """``PlantEnv`` for a plant by name (built in, registered or ``module:Class``), with parameters."""
    return PlantEnv(get_system(name, **params), dt=dt, substeps=substeps, max_steps=max_steps, reward=reward)


class SafetyFilterWrapper(gym.Wrapper):
    """Filters every action through a CBF safety filter before the environment sees it.

    ``state_fn(env)`` returns the plant state the barrier needs; by default the unwrapped
    environment's ``state`` attribute (``PlantEnv`` has one). ``tol`` is the input change above
    which a step counts as an intervention."""

    def __init__(self, env: gym.Env, barrier: Barrier, filter: SafetyFilter, system: Any = None,
                 state_fn: Callable[[gym.Env], np.ndarray] | None = None, tol: float = 1e-9):
        super().__init__(env)
        self.barrier, self.filter, self.tol = barrier, filter, float(tol)
        self.system = system if system is not None else getattr(env.unwrapped, "system", None)
        if self.system is None:
            raise ValueError("SafetyFilterWrapper needs the plant: pass system=... for a non-cbfsim environment")
        self.state_fn = state_fn or (lambda e: np.asarray(e.unwrapped.state, dtype=np.float64))

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        self.filter.reset()
        return self.env.reset(seed=seed, options=options)

    def step(self, action: Any):
        ended = getattr(self.env.unwrapped, "_ended", None)
        if ended is not None:          # before filtering a stale state
            raise EpisodeOrderError(f"step() called but {ended}; call reset() first")
        u_nom = as_action(action, self.system.m)[None, :]
        x = self.state_fn(self.env)[None, :]
        terms = barrier_terms(self.barrier, self.system, x, self.filter.order)
        result = self.filter.filter(x, u_nom, terms)
        u = result.u[0]
        obs, reward, terminated, truncated, info = self.env.step(u)     # float64: exactly the filtered input
        info = dict(info)
        info["cbf"] = {"h": float(terms.h[0]), "intervened": bool(np.max(np.abs(u - u_nom[0])) > self.tol),
                       "u_nom": u_nom[0].copy(), "u": u.copy(), "status": int(result.status[0])}
        return obs, reward, terminated, truncated, info
