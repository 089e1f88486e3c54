"""What goes wrong in practice, simulated on purpose: disturbances, a plant whose parameters
differ from the filter's model, measurement noise and input delay.

``Perturbation`` is a frozen description (it goes into campaign specs and trajectory metadata);
``simulate_batch(..., perturbation=P, run_seeds=S)`` applies it. Every random draw comes from
the counter-based generator of ``cbfsim.rng`` keyed by the run's seed, the control period and a
lane, so run i replays bit for bit when simulated alone with the same run seed.

* ``disturbance``: d added to xdot, held over each control period: ``"constant"`` (the vector
  ``disturbance_value``), ``"uniform"`` (d_i uniform in [-bound_i, bound_i], drawn per run and
  period) or ``"worst_case"`` (d_i = -bound_i sign(dh/dx_i) at the true state: the bounded
  disturbance that lowers h fastest); ``disturbance_bound`` is a number or one per state.
* ``plant_params``: the simulated plant is ``system.with_params(**plant_params)``; the
  controller, barrier terms and filter keep the model they were given.
* ``noise``: the controller and the filter see x + e, e_i uniform in [-noise_i, noise_i]; the
  plant integrates the true state, and h is recorded at the true state.
* ``delay``: the input applied in period k is the filter's output of period k - delay (the
  input box's point nearest 0 before the first one).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from compiler.errors import CbfsimError

from .rng import DISTURBANCE_LANE, NOISE_LANE, counter_uniform

DISTURBANCES = ("none", "constant", "uniform", "worst_case")


class PerturbationError(CbfsimError, ValueError):
    """A perturbation that does not fit the system (one line naming the field)."""


@dataclass(frozen=True)
class Perturbation:
    disturbance: str = "none"
    disturbance_bound: float | tuple = 0.0
    disturbance_value: tuple | None = None
    plant_params: dict | None = None
    noise: float | tuple = 0.0
    delay: int = 0
    seed: int = 0

    def describe(self) -> dict:
        """A JSON-ready record of every field."""
        out = dataclasses.asdict(self)
        for key in ("disturbance_bound", "noise", "disturbance_value"):
            if isinstance(out[key], np.ndarray):
                out[key] = out[key].tolist()
            elif isinstance(out[key], tuple):
                out[key] = list(out[key])
        return out


def _per_state(value: Any, n: int, name: str) -> np.ndarray:
    arr = np.broadcast_to(np.asarray(value, dtype=np.float64), (n,)) if np.ndim(value) == 0 else \
        np.asarray(value, dtype=np.float64)
    if arr.shape != (n,) or not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise PerturbationError(f"perturbation {name} must be a number or {n} numbers, finite and >= 0, "
                                f"got {value!r}")
    return arr


class ActivePerturbation:
    """A Perturbation checked against a system and bound to a batch of run seeds."""

    def __init__(self, p: Perturbation, system: Any, run_seeds: Any, batch: int):
        n = system.n
        if p.disturbance not in DISTURBANCES:
            raise PerturbationError(f"perturbation disturbance must be one of {', '.join(DISTURBANCES)}, "
                                    f"got {p.disturbance!r}")
        self.kind = p.disturbance
        self.bound = _per_state(p.disturbance_bound, n, "disturbance_bound")
        if self.kind == "constant":
            if p.disturbance_value is None or np.shape(p.disturbance_value) != (n,):
                raise PerturbationError(f"a constant disturbance needs disturbance_value with {n} numbers")
            self.value = np.asarray(p.disturbance_value, dtype=np.float64)
        self.noise = _per_state(p.noise, n, "noise")
        if not isinstance(p.delay, (int, np.integer)) or p.delay < 0:
            raise PerturbationError(f"perturbation delay must be an integer >= 0 control periods, got {p.delay!r}")
        self.delay = int(p.delay)
        try:
            self.plant = system.with_params(**p.plant_params) if p.plant_params else system
        except (TypeError, ValueError) as exc:
            raise PerturbationError(f"perturbation plant_params: {exc}") from None
        seeds = np.uint64(p.seed) + np.arange(batch, dtype=np.uint64) if run_seeds is None else \
            np.asarray(run_seeds, dtype=np.uint64)
        if seeds.shape != (batch,):
            raise PerturbationError(f"run_seeds must hold one seed per run ({batch}), got shape {seeds.shape}")
        self.seeds = seeds
        self.lanes = np.arange(n, dtype=np.uint64)
        self.record = {**p.describe(), "run_seeds": [int(s) for s in seeds]}

    def measured(self, X: np.ndarray, k: int, rows: np.ndarray) -> np.ndarray:
        """The state the controller and filter see in period k (rows: the runs' indices)."""
        if not self.noise.any():
            return X
        e = counter_uniform(self.seeds[rows, None], k, NOISE_LANE + self.lanes[None, :])
        return X + self.noise * e

    def disturbance(self, X: np.ndarray, k: int, rows: np.ndarray, barrier: Any, m: int) -> np.ndarray | None:
        """d (B, n) held over period k, or None."""
        if self.kind == "none":
            return None
        if self.kind == "constant":
            return np.broadcast_to(self.value, X.shape).copy()
        if self.kind == "uniform":
            return self.bound * counter_uniform(self.seeds[rows, None], k, DISTURBANCE_LANE + self.lanes[None, :])
        return -self.bound * np.sign(barrier_gradient(barrier, X, m))


def barrier_gradient(barrier: Any, X: np.ndarray, m: int) -> np.ndarray:
    """dh/dx (B, n) through the barrier's own Lie-term call: L_f h with f = e_i is dh/dx_i
    (n calls; the compiled header, the torch reference and analytic barriers alike)."""
    B, n = X.shape
    zeros = np.zeros((B, n, m))
    grad = np.empty((B, n))
    for i in range(n):
        e = np.zeros((B, n))
        e[:, i] = 1.0
        grad[:, i] = np.asarray(barrier.lie(X, e, zeros).Lf)
    return grad


class Disturbed:
    """The plant with a held disturbance added to xdot (for the RK4 integrator)."""

    def __init__(self, plant: Any, d: np.ndarray):
        self.plant, self.d, self.n, self.m = plant, d, plant.n, plant.m

    def xdot(self, x: np.ndarray, u: np.ndarray) -> np.ndarray:
        return self.plant.xdot(x, u) + self.d


def neutral_input(system: Any) -> np.ndarray:
    """The point of the input box nearest 0: what a delayed actuator holds before the first output."""
    return np.clip(0.0, system.u_min, system.u_max).astype(np.float64)


def disturbance_margin(model: Any, domain_lo: Any, domain_hi: Any, bound: Any, cells: int = 0) -> float:
    """The filter margin that absorbs a bounded disturbance |d_i| <= bound_i: with it the filter
    enforces  L_f h + L_G h u + alpha(h) >= eps + sum_i sup|dh/dx_i| bound_i,  and since
    |L_d h| = |grad h . d| <= sum_i sup|dh/dx_i| bound_i, the disturbed plant still has
    d/dt h >= -alpha(h) + eps. The sup is a sound interval enclosure of grad h over the
    training domain (compiler.bounds, outward rounded), computed on a grid of boxes;
    ``model`` is an ONNX path or a compiler IR model."""
    from compiler.bounds import enclose
    from compiler.interval import Interval
    if not hasattr(model, "layers"):
        from compiler.api import load_model
        from compiler.passes import canonicalize
        model = canonicalize(load_model(model))
    lo, hi = np.asarray(domain_lo, dtype=np.float64), np.asarray(domain_hi, dtype=np.float64)
    n = len(lo)
    bound = _per_state(bound, n, "disturbance_bound")
    k = cells or max(2, int(round(4096 ** (1.0 / n))))
    edges = [np.linspace(lo[i], hi[i], k + 1) for i in range(n)]
    grids = np.meshgrid(*[np.arange(k)] * n, indexing="ij")
    idx = np.stack([g.ravel() for g in grids], axis=1)
    blo = np.stack([edges[i][idx[:, i]] for i in range(n)], axis=1)
    bhi = np.stack([edges[i][idx[:, i] + 1] for i in range(n)], axis=1)
    grad = enclose(model, Interval(blo, bhi), order=1).grad
    sup = np.maximum(np.abs(grad.lo), np.abs(grad.hi)).max(axis=0)
    return float(np.nextafter((sup * bound).sum() * (1 + 1e-12), np.inf))
