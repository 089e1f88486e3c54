"""Verify a shipped barrier the way it will run: through the compiled C++ (float32).

The ONNX file is compiled with ``compiler.api.compile_barrier`` and evaluated batched on
a dense set of states of the card's domain (``samples`` seeded uniform states, or a full
``grid``).  At every state, with f, G (and f'f, f'G) from the card's plant in float64:

* containment: h(x) >= 0 must imply constraint(x) >= 0 (no tolerance);
* condition: on the required region -- h >= 0 for order 1; h >= 0 and
  psi1 = L_f h + alpha1 h >= 0 for order 2 -- the exact box-bound supremum must satisfy
  order 1:  L_f h + sum_j max(L_Gj h u_min_j, L_Gj h u_max_j) + gamma h           >= -tol
  order 2:  L_f^2 h + sum_j max(L_GL_f h_j u_min_j, ...) + alpha1 L_f h + alpha2 psi1 >= -tol
  with tol = ATOL + RTOL * (sum of the magnitudes of the terms), ATOL = RTOL = 1e-6: a few
  float32 ulps of the compiled arithmetic, nothing more;
* order 2 also reports max |L_G h| (must be 0: relative degree 2 by construction).

The states: the uniform sample (or grid) plus ``boundary`` states on the edge of the
certified set, found by bisection (``samplers.level_set``).  The condition is tightest
there (alpha = 0) and closed-loop trajectories slide along it, yet a uniform sample puts
almost no states on it: the first bicycle model passed 200,000 uniform states and failed on
a thin sliver of its boundary that the filtered runs found.  Coverage uses the uniform part.

Coverage: the fraction of sampled constraint-set states inside {h >= 0} (``coverage``)
and inside the forward-invariant set ({h >= 0} for order 1, {h >= 0, psi1 >= 0} for
order 2, ``coverage_safe_set``); optionally also of the backup-rollout-safe states.

This is a pointwise check at finitely many states, not a proof: between samples a ReLU
network can have a linear region (or any network a narrow dip) where the condition fails.
A formal verifier (e.g. branch-and-bound over the ReLU regions) is out of scope.
"""
from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from compiler.errors import ShapeError

from .model_card import ModelCard, load_card
from .samplers import ConstraintTools, backup_safe, grid as make_grid, level_set, system_terms, uniform

ATOL = 1e-6
RTOL = 1e-6
DEFAULT_SEED = 12345
N_EXAMPLES = 5


@dataclass
class VerifyReport:
    method: str                       # "uniform" or "grid"
    n_states: int                     # uniform (or grid) states + n_boundary states
    seed: int | None
    tolerance: dict[str, float]
    order: int
    condition_failures: int
    containment_failures: int
    n_barrier_set: int                # states with h >= 0
    n_region: int                     # states where the condition is required
    n_constraint_set: int             # states with constraint >= 0
    coverage: float                   # P(h >= 0 | constraint >= 0)
    coverage_safe_set: float          # P(state in the forward-invariant set | constraint >= 0)
    worst_condition: float            # min residual over the region (negative = violated)
    worst_containment: float          # min constraint over {h >= 0} (negative = violated)
    max_abs_LGh: float | None         # order 2: must be 0
    backup_safe_fraction: float | None = None    # P(backup-rollout safe | constraint >= 0)
    coverage_backup_safe: float | None = None    # P(in safe set | backup-rollout safe)
    n_boundary: int = 0                          # states on the edge of the certified set
    condition_examples: list[dict[str, Any]] = field(default_factory=list)
    containment_examples: list[dict[str, Any]] = field(default_factory=list)
    time_s: float = 0.0
    note: str = "pointwise check at the listed states through the compiled float32 barrier; not a proof"

    @property
    def passed(self) -> bool:
        """No failures, relative degree 2 exact (order 2), and a non-empty set (an empty
        {h >= 0} satisfies every condition vacuously and certifies nothing)."""
        rd_ok = self.max_abs_LGh is None or self.max_abs_LGh == 0.0
        return self.condition_failures == 0 and self.containment_failures == 0 and rd_ok and self.n_region > 0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["passed"] = self.passed
        return {k: _jsonable(v) for k, v in d.items()}


def _jsonable(v: Any) -> Any:
    if isinstance(v, float) and not np.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_jsonable(x) for x in v]
    return v


def _load_lib(model: Any, card: ModelCard, card_source: Any):
    """A CompiledLie from a lib, an ONNX path, or the card's ONNX next to its file."""
    if hasattr(model, "lie") and hasattr(model, "order"):
        if model.order < card.order:
            raise ValueError(f"the compiled barrier has order {model.order}, the card needs {card.order}")
        return model
    if model is None:
        if not isinstance(card_source, (str, os.PathLike)) or not Path(card_source).is_file():
            raise ValueError("no model given and the card was not read from a file: pass the ONNX path")
        model = card.onnx_path(card_source)
    path = Path(model)
    if path.is_dir():
        path = path / card.network["onnx"]
    if not path.is_file():
        raise FileNotFoundError(f"barrier model {path} not found")
    from compiler.api import compile_barrier
    return compile_barrier(str(path), inputs=len(card.input_names), order=card.order, dtype="float")


def _system(card: ModelCard):
    from systems import get_system
    system = get_system(card.system, **card.system_params)
    if list(system.state_names) != card.state_names or list(system.input_names) != card.input_names:
        raise ValueError(f"card state/input names {card.state_names}/{card.input_names} do not match "
                         f"system {card.system!r}: {list(system.state_names)}/{list(system.input_names)}")
    return system


def verify(model: Any, card: ModelCard | Mapping[str, Any] | str | os.PathLike, samples: int = 200_000,
           grid: int | None = None, seed: int = DEFAULT_SEED, backup_samples: int = 20_000,
           chunk: int = 100_000, boundary: int | None = None) -> VerifyReport:
    """Check the compiled barrier on ``samples`` seeded uniform states of the card's domain (or
    on a ``grid`` with that many points per axis); see the module docstring for the tests and
    the tolerance.  ``model``: an ONNX path, a directory holding it, a loaded
    ``compile_barrier`` library, or None (the card's ONNX file next to the card).
    ``backup_samples`` > 0 also measures coverage of backup-rollout-safe states; ``boundary``
    states on the edge of the certified set are added (default: half as many as the uniform
    or grid states)."""
    t0 = time.perf_counter()
    source = card
    card = load_card(card)
    system = _system(card)
    lib = _load_lib(model, card, source)
    if lib.n != system.n or lib.m != system.m:
        raise ShapeError(f"compiled barrier has n={lib.n}, m={lib.m}; system {card.system!r} has "
                         f"n={system.n}, m={system.m}")
    lo, hi = np.asarray(card.domain_lo), np.asarray(card.domain_hi)
    umin, umax = np.asarray(card.u_min), np.asarray(card.u_max)
    if grid is not None:
        x, method, used_seed = make_grid(lo, hi, grid), "grid", None
    else:
        x, method, used_seed = uniform(np.random.default_rng(seed), lo, hi, samples), "uniform", seed
    g = card.gains
    n_uniform = len(x)
    boundary = n_uniform // 2 if boundary is None else int(boundary)
    edge = level_set(lambda z: certified_value(lib, system, z, card.order, g), np.random.default_rng([seed, 2]),
                     lo, hi, boundary)
    x = np.concatenate([x, edge])
    ev = evaluate_compiled(lib, system, x, card.order, umin, umax, g, chunk)
    c = np.asarray(system.constraint(x), dtype=np.float64)
    h, res, region, safe = ev["h"], ev["res"], ev["region"], ev["safe"]
    cont = (h >= 0) & (c < 0)
    cond = region & (res < -(ATOL + RTOL * ev["scale"]))
    inside = c[:n_uniform] >= 0
    backup_frac = backup_cov = None
    if backup_samples:
        backup_frac, backup_cov = _backup_coverage(system, card, lib, x[:n_uniform][inside], umin, umax, g, backup_samples, seed)
    report = VerifyReport(
        method=method, n_states=len(x), seed=used_seed,
        tolerance={"condition_atol": ATOL, "condition_rtol": RTOL, "containment": 0.0},
        order=card.order, condition_failures=int(cond.sum()), containment_failures=int(cont.sum()),
        n_barrier_set=int((h >= 0).sum()), n_region=int(region.sum()), n_constraint_set=int(inside.sum()),
        coverage=_frac(h[:n_uniform][inside] >= 0), coverage_safe_set=_frac(safe[:n_uniform][inside]),
        worst_condition=float(res[region].min()) if region.any() else float("inf"),
        worst_containment=float(c[h >= 0].min()) if (h >= 0).any() else float("inf"),
        max_abs_LGh=float(np.abs(ev["LG"]).max()) if card.order == 2 else None,
        backup_safe_fraction=backup_frac, coverage_backup_safe=backup_cov, n_boundary=len(edge),
        condition_examples=_examples(x, cond, res, "residual", h),
        containment_examples=_examples(x, cont, c, "constraint", h),
    )
    report.time_s = round(time.perf_counter() - t0, 3)
    return report


def evaluate_compiled(lib, system, x: np.ndarray, order: int, umin: np.ndarray, umax: np.ndarray,
                      gains: Mapping[str, float], chunk: int = 100_000) -> dict[str, np.ndarray]:
    """h, residual, region, scale, safe-set membership and L_G h from the compiled library."""
    from .lie import Terms, residual
    parts: dict[str, list[np.ndarray]] = {k: [] for k in ("h", "res", "region", "scale", "safe", "LG")}
    for start in range(0, len(x), chunk):
        xs = x[start:start + chunk]
        terms = system_terms(system, xs, order)
        if order == 1:
            t = Terms(*lib.lie(xs, terms["f"], terms["G"]))
            res, region, scale = residual(t, 1, umin, umax, gamma=gains["gamma"])
            safe = t.h >= 0
        else:
            t = Terms(*lib.lie2(xs, terms["f"], terms["G"], terms["Dff"], terms["DfG"]))
            res, region, scale = residual(t, 2, umin, umax, alpha1=gains["alpha1"], alpha2=gains["alpha2"])
            safe = region
        for k, v in (("h", t.h), ("res", res), ("region", region), ("scale", scale), ("safe", safe), ("LG", t.LG)):
            parts[k].append(np.asarray(v))
    return {k: np.concatenate(v) for k, v in parts.items()}


def certified_value(lib, system, x: np.ndarray, order: int, gains: Mapping[str, float]) -> np.ndarray:
    """>= 0 exactly on the certified set: h (order 1), min(h, psi1) with psi1 = L_f h + alpha1 h
    (order 2), from the compiled first-order entry."""
    terms = system_terms(system, x, 1)
    h, Lf, _ = lib.lie(x, terms["f"], terms["G"])
    h = np.asarray(h, dtype=np.float64)
    return h if order == 1 else np.minimum(h, np.asarray(Lf) + gains["alpha1"] * h)


def _backup_coverage(system, card: ModelCard, lib, inside: np.ndarray, umin, umax, gains, count: int, seed: int):
    """(fraction of constraint-set states that are backup-rollout safe, fraction of those in the safe set)."""
    if len(inside) == 0:
        return None, None
    cfg = card.config
    rng = np.random.default_rng([seed, 1])
    pick = inside[rng.choice(len(inside), min(count, len(inside)), replace=False)]
    ok = backup_safe(ConstraintTools(system), pick, umin, umax, float(cfg.get("backup_horizon", 2.0)),
                     float(cfg.get("backup_dt", 0.01)), list(cfg.get("backup_hold", [])),
                     constant=cfg.get("backup_input"))
    if not ok.any():
        return 0.0, None
    ev = evaluate_compiled(lib, system, pick[ok], card.order, umin, umax, gains)
    return _frac(ok), _frac(ev["safe"])


def _frac(mask: np.ndarray) -> float:
    return float(np.mean(mask)) if len(mask) else float("nan")


def _examples(x: np.ndarray, fail: np.ndarray, value: np.ndarray, name: str, h: np.ndarray) -> list[dict]:
    """The worst few failing states (most negative value first)."""
    idx = np.flatnonzero(fail)
    idx = idx[np.argsort(value[idx])][:N_EXAMPLES]
    return [{"x": [float(v) for v in x[i]], "h": float(h[i]), name: float(value[i])} for i in idx]
