"""The trainer's counterexample search: a dense float64 autograd check of the conditions.

Each round draws fresh states (uniform over the domain, the plant's initial set if it has one,
and states on the edge of the certified set found by bisection, where failures live),
evaluates h and its exact Lie derivatives in float64, and returns strict failures (what the
verifier would count, initial states outside the set included) and near failures (within
half a margin): both become training counterexamples.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from .lie import lie_terms, psi1, residual
from .margin import condition_margin
from .samplers import ConstraintTools, in_initial, initial_states, level_set, system_terms, uniform


@dataclass
class CheckResult:
    n_checked: int
    condition_failures: int
    containment_failures: int
    worst_condition: float           # min residual over the required region (>= 0 is good)
    worst_containment: float         # min constraint over states with h >= 0 (>= 0 is good)
    coverage: float                  # fraction of uniform constraint-set states in the safe set
    robust_failures: int = 0         # failures on the slightly enlarged set {h >= -delta}
    initial_failures: int = 0        # states of the plant's initial set outside the certified set
    counterexamples: np.ndarray = field(repr=False, default_factory=lambda: np.empty((0, 0)))

    @property
    def failures(self) -> int:
        return self.condition_failures + self.containment_failures + self.initial_failures

    def summary(self) -> dict[str, float | None]:
        """JSON-safe numbers (None where undefined, e.g. the worst value over an empty set)."""
        def num(v: float) -> float | None:
            return float(v) if np.isfinite(v) else None
        return {"n_checked": self.n_checked, "condition_failures": self.condition_failures,
                "containment_failures": self.containment_failures, "robust_failures": self.robust_failures,
                "initial_failures": self.initial_failures,
                "worst_condition": num(self.worst_condition), "worst_containment": num(self.worst_containment),
                "coverage": num(self.coverage)}


def evaluate(barrier: torch.nn.Module, system, x: np.ndarray, cfg, u_min: np.ndarray, u_max: np.ndarray,
             chunk: int = 50_000) -> dict[str, np.ndarray]:
    """h, residual, psi1 (order 2) and the required region at x, float64, in chunks."""
    out: dict[str, list[np.ndarray]] = {"h": [], "res": [], "region": [], "psi1": [], "LG": []}
    dtype = next(barrier.parameters()).dtype
    for start in range(0, len(x), chunk):
        xs = x[start:start + chunk]
        terms = {k: torch.as_tensor(v, dtype=dtype) for k, v in system_terms(system, xs, cfg.order).items()}
        t = lie_terms(barrier, torch.as_tensor(xs, dtype=dtype), terms["f"], terms["G"], cfg.order,
                      terms.get("Dff"), terms.get("DfG"), create_graph=False).detach()
        res, region, _ = residual(t, cfg.order, u_min, u_max, cfg.gamma, cfg.alpha1, cfg.alpha2)
        out["h"].append(t.h.numpy())
        out["res"].append(res.numpy())
        out["region"].append(region.numpy())
        out["psi1"].append(psi1(t, cfg.alpha1).numpy() if cfg.order == 2 else t.h.numpy())
        out["LG"].append(t.LG.numpy())
    return {k: np.concatenate(v) for k, v in out.items()}


def certified_value(barrier: torch.nn.Module, system, x: np.ndarray, cfg) -> np.ndarray:
    """>= 0 exactly on the certified set: h (order 1) or min(h, psi1) (order 2), float64."""
    xt = torch.as_tensor(x, dtype=next(barrier.parameters()).dtype)
    if cfg.order == 1:
        with torch.no_grad():
            return barrier(xt).squeeze(-1).numpy()
    terms = system_terms(system, x, 1)
    t = lie_terms(barrier, xt, torch.as_tensor(terms["f"], dtype=xt.dtype), torch.as_tensor(terms["G"], dtype=xt.dtype),
                  1, create_graph=False)
    return torch.minimum(t.h, psi1(t, cfg.alpha1)).detach().numpy()


def check(barrier64: torch.nn.Module, system, tools: ConstraintTools, cfg, lo: np.ndarray, hi: np.ndarray,
          u_min: np.ndarray, u_max: np.ndarray, rng: np.random.Generator) -> CheckResult:
    """Fresh dense check of containment and the (HO)CBF condition; see the module docstring."""
    xu = uniform(rng, lo, hi, cfg.check_samples)
    parts = [xu, initial_states(system, rng, lo, hi, cfg.check_samples // 10)]
    if cfg.check_boundary:
        parts.append(level_set(lambda z: certified_value(barrier64, system, z, cfg), rng, lo, hi,
                               cfg.check_boundary, iters=20))
    x = np.concatenate(parts)
    c = tools.constraint(x)
    ev = evaluate(barrier64, system, x, cfg, u_min, u_max)
    h, res, region, p1 = ev["h"], ev["res"], ev["region"], ev["psi1"]
    cont = (h >= 0) & (c < 0)
    cond = region & (res < 0)
    start = in_initial(system, x) & (np.minimum(h, p1) < 0)      # the initial set must lie in the set
    # robust failures: the same tests with half the trained margins (containment: h below
    # -unsafe_margin/2 outside; condition: a quarter margin on a slightly enlarged set), so a
    # clean check leaves a buffer against the states the next (independent) sample will hit
    grown = np.minimum(h, p1) >= -0.25 * cfg.band
    margin = condition_margin(cfg, x)
    robust = int((((h >= -0.5 * cfg.unsafe_margin) & (c < 0)) | (grown & (res < 0.25 * margin))).sum())
    near_region = (h >= -0.5 * cfg.band) & (p1 >= -0.5 * cfg.band)
    near = ((h >= -0.5 * cfg.unsafe_margin) & (c < 0)) | (near_region & (res < 0.5 * margin))
    strict_idx = np.flatnonzero(cont | cond | start)
    near_idx = np.setdiff1d(np.flatnonzero(near), strict_idx)
    cap = cfg.ce_max_per_round
    if len(strict_idx) > cap:
        strict_idx = rng.choice(strict_idx, cap, replace=False)
    room = max(cap - len(strict_idx), 0)
    if len(near_idx) > room:
        near_idx = rng.choice(near_idx, room, replace=False)
    ce = x[np.concatenate([strict_idx, near_idx]).astype(int)]
    nu = len(xu)
    inside = c[:nu] >= 0
    safe_set = (h[:nu] >= 0) & (p1[:nu] >= 0)
    coverage = float(safe_set[inside].mean()) if inside.any() else float("nan")
    worst_cond = float(res[region].min()) if region.any() else float("inf")
    worst_cont = float(c[h >= 0].min()) if (h >= 0).any() else float("inf")
    return CheckResult(len(x), int(cond.sum()), int(cont.sum()), worst_cond, worst_cont, coverage, robust,
                       int(start.sum()), ce)
