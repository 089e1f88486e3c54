"""Robustness study: how often the shipped filters fail when the model is wrong.

For a shipped model (its card, certificate margin and experiment spec) and a list of levels,
each setting runs a batch from states of the certified set under one perturbation -- a
plant-parameter mismatch or the worst-case bounded disturbance (along -grad h) on the actuated states -- with the
nominal filter (the certificate's margin) and the robust one (plus
``perturb.disturbance_margin`` for the disturbance bound), and counts each run's fate
(cbfsim/fate.py) and the violations -- runs that leave the constraint set or fault (a faulted
run is a violation unless ``faults="separate"``, then counted apart and left out of the
probability, never counted safe) -- with a Clopper-Pearson 95% interval on the probability.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .barriers import CompiledBarrier
from .experiment import ExperimentSpec, _filters, _initial_states, shipped_model
from .fate import check_policy, tally
from .perturb import Perturbation, disturbance_margin
from .preflight import certified_margin, load_certificate
from .runtime import compile_barrier
from .simulate import simulate_batch


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Exact (Clopper-Pearson) confidence interval for a binomial proportion k / n."""
    from scipy.stats import beta
    a = (1.0 - level) / 2.0
    lo = 0.0 if k == 0 else float(beta.ppf(a, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(1.0 - a, k + 1, n - k))
    return lo, hi


@dataclass
class Study:
    """What to vary for one model: ``mismatch`` maps a level s to plant parameters; the
    disturbance acts on the states in ``actuated`` with bound = level."""
    spec: ExperimentSpec
    mismatch: Any                     # level -> dict of plant parameters
    mismatch_levels: tuple
    actuated: tuple
    disturbance_levels: tuple


def run_study(study: Study, runs: int, t_final: float, seed: int = 0, faults: str = "violation") -> list[dict]:
    """One row per (kind, level, filter): runs, fates, violations, probability and its 95% interval."""
    from training.verify import certified_value
    check_policy(faults)
    spec = study.spec
    card, system, onnx, card_path = shipped_model(spec)
    lib = compile_barrier(onnx, inputs=system.m, order=card.order, name=spec.name)
    barrier = CompiledBarrier(lib)
    margin = certified_margin(load_certificate(card_path))
    lo, hi = np.asarray(card.domain_lo), np.asarray(card.domain_hi)
    X0 = _initial_states(lambda x: certified_value(lib, system, x, card.order, card.gains), lo, hi, runs, seed)
    n = system.n
    settings = [("mismatch", s, Perturbation(plant_params=study.mismatch(s), seed=seed), 0.0)
                for s in study.mismatch_levels]
    for b in study.disturbance_levels:
        bound = tuple(b if i in study.actuated else 0.0 for i in range(n))
        extra = disturbance_margin(onnx, lo, hi, bound) if b > 0 else 0.0
        settings.append(("disturbance", b, Perturbation(disturbance="worst_case", disturbance_bound=bound, seed=seed),
                         extra))
    rows = []
    for kind, level, pert, extra in settings:
        for name, eps in (("nominal", margin), ("robust", margin.plus(extra))):
            if name == "robust" and kind == "mismatch":
                continue                        # the disturbance margin needs a known bound
            filt = _filters(card, system, card.order, eps)[0]
            traj = simulate_batch(system, barrier, filt, spec.controller, X0, t_final, spec.dt_control,
                                  spec.dt_int, perturbation=pert)
            rows.append({"model": spec.name, "kind": kind, "level": float(level), "filter": name, "margin": eps.eps,
                         "margin_scale": eps.scale, "runs": runs, **fate_row(traj, faults),
                         "slack_steps": int(np.sum(traj.slack > 1e-9))})
    return rows


def fate_row(traj: Any, faults: str = "violation") -> dict:
    """A study row's statistics from a batch: fate.tally, its 95% interval, the lowest constraint."""
    fates = traj.fates
    stats = tally((f.fate for f in fates), faults)
    k, n = stats["violations"], stats["judged_runs"]
    lows = [f.min_constraint for f in fates if f.min_constraint is not None]
    return {**stats, "ci95": clopper_pearson(k, n) if n else None, "min_constraint": min(lows) if lows else None}


def plot_study(rows: list[dict], path: Any) -> None:
    """Violation probability vs level (95% intervals), one panel per model and kind."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    panels = sorted({(r["model"], r["kind"]) for r in rows})
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4), squeeze=False)
    for ax, (model, kind) in zip(axes[0], panels):
        for name, style in (("nominal", dict(color="tab:red", marker="o")), ("robust", dict(color="tab:blue", marker="s"))):
            sel = [r for r in rows if r["model"] == model and r["kind"] == kind and r["filter"] == name]
            if not sel:
                continue
            x = np.array([r["level"] for r in sel])
            p = np.array([np.nan if r["probability"] is None else r["probability"] for r in sel])
            ci = np.array([[np.nan, np.nan] if r["ci95"] is None else r["ci95"] for r in sel])
            ax.errorbar(x, p, yerr=[p - ci[:, 0], ci[:, 1] - p], capsize=3, label=f"{name} filter", **style)
        ax.set_title(f"{model}: {kind}")
        ax.set_xlabel("relative parameter error" if kind == "mismatch" else "disturbance bound")
        ax.set_ylabel("P(run leaves the set or faults)")
        ax.set_ylim(-0.05, 1.05)
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
