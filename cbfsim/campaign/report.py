"""Merge shard results per setting: each run's fate (cbfsim/fate.py) counted, violations with a
Clopper-Pearson interval (a faulted run is a violation, or with ``"faults": "separate"`` is
counted apart and left out of the probability -- never counted safe), the distributions of min h
and of the slack, and the worst runs with their seeds."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..fate import FATES, FAULTED, count, tally
from ..robustness import clopper_pearson
from .spec import Spec

WORST = 5


def _quantiles(values: np.ndarray, names: tuple, qs: list) -> dict | None:
    finite = values[np.isfinite(values)]
    return dict(zip(names, np.quantile(finite, qs).tolist())) if finite.size else None


def _column(parts: list[dict], key: str) -> np.ndarray:
    return np.array([np.nan if v is None else v for p in parts for v in p[key]], dtype=np.float64)


def merge(spec: Spec, results: list[dict]) -> dict[str, Any]:
    """The summary of every setting from the shards (store.envelope, one per (setting, shard);
    each is verified against the spec first: a foreign one raises, naming it)."""
    from .store import verify
    unique = {}
    for i, result in enumerate(results):
        payload = verify(spec, result, f"shard result {i}")
        unique[(payload["setting"], payload["shard"])] = payload      # a retried shard counts once
    rows = []
    for s in spec.settings:
        parts = [unique[(s.index, k)] for k in range(spec.shards_per_setting) if (s.index, k) in unique]
        if not parts:
            rows.append({"setting": s.index, **s.label(), "runs": 0, "fates": count([])})
            continue
        fates = np.array([f for p in parts for f in p["fate"]])
        cmin, hmin, slack = _column(parts, "min_constraint"), _column(parts, "min_h"), _column(parts, "max_slack")
        step = np.array([-1 if v is None else v for p in parts for v in p["step"]])
        seeds = np.concatenate([np.asarray(p["seeds"], dtype=np.uint64) for p in parts])
        index = np.concatenate([np.arange(*p["runs"]) for p in parts])
        stats = tally(fates.tolist(), spec.faults)
        k, n = stats["violations"], stats["judged_runs"]
        # worst first: faulted runs (earliest fault first), then by the lowest constraint value
        order = np.lexsort((np.where(np.isnan(cmin), -np.inf, cmin), np.where(fates == FAULTED, step, 1 << 62),
                            fates != FAULTED))
        rows.append({"setting": s.index, **s.label(), "runs": int(len(fates)), **stats,
                     "ci95": list(clopper_pearson(k, n)) if n else None,
                     "min_h_quantiles": _quantiles(hmin, ("min", "q01", "median"), [0.0, 0.01, 0.5]),
                     "slack_quantiles": _quantiles(slack, ("median", "q99", "max"), [0.5, 0.99, 1.0]),
                     "worst_runs": [{"run": int(index[i]), "seed": int(seeds[i]), "fate": str(fates[i]),
                                     "step": None if step[i] < 0 else int(step[i]),
                                     "min_constraint": None if np.isnan(cmin[i]) else float(cmin[i])}
                                    for i in order[:WORST]]})
    done = sum(1 for r in rows if r["runs"] == spec.runs)
    totals = count([])
    for r in rows:
        for f in FATES:
            totals[f] += r["fates"][f]
    return {"card": str(spec.card), "runs_per_setting": spec.runs, "settings": rows, "fates": totals,
            "fault_policy": spec.faults, "complete": done == len(spec.settings),
            "shards_merged": len(unique), "shards_total": spec.total_shards}


def plot(summary: dict, path: Any) -> None:
    """Violation probability per setting with its 95% interval."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = summary["settings"]
    x = np.arange(len(rows))
    p = np.array([np.nan if r["probability"] is None else r["probability"] for r in rows])
    ci = np.array([[np.nan, np.nan] if r["ci95"] is None else r["ci95"] for r in rows])
    fig, ax = plt.subplots(figsize=(max(4.0, 0.9 * len(rows) + 2), 3.4))
    ax.errorbar(x, p, yerr=[p - ci[:, 0], ci[:, 1] - p], fmt="o", capsize=3, color="tab:red")
    ax.set_xticks(x, [_short(r) for r in rows], rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("P(run leaves the set or faults)")
    ax.set_ylim(-0.05, 1.05)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _worst_key(row: dict) -> tuple:
    """Rows with a faulted run first (earliest fault), then by the lowest constraint value."""
    worst = row["worst_runs"][0]
    low = worst["min_constraint"]
    return (worst["fate"] != FAULTED, worst["step"] if worst["fate"] == FAULTED else 0,
            -np.inf if low is None else low)


def _short(row: dict) -> str:
    parts = [f"{k}={v}" for k, v in (row.get("plant_params") or {}).items()]
    if row.get("disturbance") not in (None, "none"):
        parts.append(f"{row['disturbance']} {row['disturbance_bound']}")
    if row.get("noise"):
        parts.append(f"noise {row['noise']}")
    if row.get("delay"):
        parts.append(f"delay {row['delay']}")
    return ", ".join(parts) or "nominal"


def plot_worst(spec: Spec, summary: dict, path: Any, count: int = WORST) -> None:
    """The worst runs of the setting with the lowest constraint, replayed alone: the
    constraint function over time (below 0: the run left the set)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from .run import replay
    from .shards import _loop
    rows = [r for r in summary["settings"] if r.get("worst_runs")]
    if not rows:
        return
    row = min(rows, key=_worst_key)
    system = _loop(str(spec.card))["system"]
    fig, ax = plt.subplots(figsize=(6.0, 3.4))
    for worst in row["worst_runs"][:count]:
        traj = replay(spec, row["setting"], worst["run"])
        ax.plot(traj.t, system.constraint(traj.x[0]), lw=1, label=f"run {worst['run']} (seed {worst['seed']})")
    ax.axhline(0.0, color="black", lw=0.8)
    ax.set_xlabel("t [s]")
    ax.set_ylabel("constraint(x)")
    ax.set_title(f"worst runs of setting {row['setting']}: {_short(row)}", fontsize=9)
    ax.legend(fontsize=7, loc="lower left")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
