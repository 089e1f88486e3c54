"""Merge shard results per setting: violations with a Clopper-Pearson interval, the
distributions of min h and of the slack, and the worst runs with their seeds."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..robustness import clopper_pearson
from .spec import Spec

WORST = 5


def merge(spec: Spec, results: list[dict]) -> dict[str, Any]:
    """The summary of every setting from the shard results (one per (setting, shard))."""
    unique = {(r["setting"], r["shard"]): r for r in results}       # a retried shard counts once
    rows = []
    for s in spec.settings:
        parts = [unique[(s.index, k)] for k in range(spec.shards_per_setting) if (s.index, k) in unique]
        if not parts:
            rows.append({"setting": s.index, **s.label(), "runs": 0})
            continue
        cmin = np.concatenate([p["min_constraint"] for p in parts])
        hmin = np.concatenate([p["min_h"] for p in parts])
        slack = np.concatenate([p["max_slack"] for p in parts])
        seeds = np.concatenate([np.asarray(p["seeds"], dtype=np.uint64) for p in parts])
        index = np.concatenate([np.arange(*p["runs"]) for p in parts])
        k, n = int(np.sum(cmin < 0.0)), int(len(cmin))
        worst = np.argsort(cmin, kind="stable")[:WORST]
        rows.append({"setting": s.index, **s.label(), "runs": n, "violations": k, "probability": k / n,
                     "ci95": list(clopper_pearson(k, n)),
                     "min_h_quantiles": dict(zip(("min", "q01", "median"),
                                                 np.quantile(hmin, [0.0, 0.01, 0.5]).tolist())),
                     "slack_quantiles": dict(zip(("median", "q99", "max"),
                                                 np.quantile(slack, [0.5, 0.99, 1.0]).tolist())),
                     "worst_runs": [{"run": int(index[i]), "seed": int(seeds[i]),
                                     "min_constraint": float(cmin[i])} for i in worst]})
    done = sum(1 for r in rows if r["runs"] == spec.runs)
    return {"card": str(spec.card), "runs_per_setting": spec.runs, "settings": rows,
            "complete": done == len(spec.settings), "shards": len(unique)}


def plot(summary: dict, path: Any) -> None:
    """Violation probability per setting with its 95% interval."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = summary["settings"]
    x = np.arange(len(rows))
    p = np.array([r["probability"] for r in rows])
    ci = np.array([r["ci95"] for r in rows])
    fig, ax = plt.subplots(figsize=(max(4.0, 0.9 * len(rows) + 2), 3.4))
    ax.errorbar(x, p, yerr=[p - ci[:, 0], ci[:, 1] - p], fmt="o", capsize=3, color="tab:red")
    ax.set_xticks(x, [_short(r) for r in rows], rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("P(run leaves the constraint set)")
    ax.set_ylim(-0.05, 1.05)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


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
    row = min(rows, key=lambda r: r["worst_runs"][0]["min_constraint"])
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
