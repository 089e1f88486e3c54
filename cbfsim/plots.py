"""Figures written straight to files with matplotlib's Agg canvas (no pyplot global state,
so plotting works headless and never switches the caller's backend).

``phase_portrait``: a 2-D state projection with the barrier's zero level set, the
constraint boundary, nominal runs dashed and filtered runs solid.
``time_series``: h(t) and, per input, the applied u(t) against u_nom(t) (held, so drawn as
steps), with the input bounds and the steps where the slack was active.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from .barriers import ShapeError
from .filters.base import FilterStatus
from .trajectory import Trajectory

GridValues = tuple[np.ndarray, np.ndarray, np.ndarray]


def _runs(trajs: Trajectory | Iterable[Trajectory] | None) -> list[np.ndarray]:
    """All runs of one or several (batched) trajectories as (T+1, n) arrays."""
    if trajs is None:
        return []
    items = [trajs] if isinstance(trajs, Trajectory) else list(trajs)
    return [run for tr in items for run in tr.x]


def _grid(system: Any, dims: tuple[int, int], limits: Sequence[Sequence[float]] | None,
          fixed: Sequence[float] | None, resolution: int):
    """Grid over the two plotted coordinates; the others held at ``fixed``."""
    lo, hi = system.domain
    (x_lo, x_hi), (y_lo, y_hi) = limits if limits is not None else ((lo[dims[0]], hi[dims[0]]),
                                                                     (lo[dims[1]], hi[dims[1]]))
    xs, ys = np.linspace(x_lo, x_hi, resolution), np.linspace(y_lo, y_hi, resolution)
    XX, YY = np.meshgrid(xs, ys)
    base = np.clip(np.zeros(system.n), lo, hi) if fixed is None else np.asarray(fixed, dtype=np.float64)
    if base.shape != (system.n,):
        raise ShapeError(f"fixed: expected shape ({system.n},), got {base.shape}")
    X = np.tile(base, (XX.size, 1))
    X[:, dims[0]], X[:, dims[1]] = XX.ravel(), YY.ravel()
    return XX, YY, X


def phase_portrait(path: str | Path, system: Any,
                   barrier: Callable[[np.ndarray], np.ndarray] | Any | GridValues | None = None,
                   trajectories: Trajectory | Iterable[Trajectory] | None = None,
                   nominal: Trajectory | Iterable[Trajectory] | None = None, dims: tuple[int, int] = (0, 1),
                   constraint: bool = True, fixed: Sequence[float] | None = None,
                   limits: Sequence[Sequence[float]] | None = None, resolution: int = 200,
                   max_runs: int = 50, title: str | None = None,
                   certified: Callable[[np.ndarray], np.ndarray] | None = None) -> Path:
    """Phase portrait of states ``dims``; ``barrier`` is a callable (N, n) -> (N,), an object
    with ``.value``, or precomputed grid values (xs, ys, H) with H of shape (len(ys), len(xs)).
    ``certified`` (N, n) -> (N,), >= 0 on the set the filter keeps invariant when that is
    smaller than {h >= 0} (HOCBF: min(h, psi1)); its boundary is drawn dashed."""
    path = Path(path)
    fig = Figure(figsize=(6.0, 5.0))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    XX, YY, X = _grid(system, dims, limits, fixed, resolution)
    if constraint:
        C = np.asarray(system.constraint(X)).reshape(XX.shape)
        ax.contourf(XX, YY, C, levels=[-np.inf, 0.0], colors=["#f4cccc"], alpha=0.6)
        ax.contour(XX, YY, C, levels=[0.0], colors=["tab:red"], linewidths=1.5)
        ax.plot([], [], color="tab:red", label="constraint boundary")
    if barrier is not None:
        if isinstance(barrier, tuple):
            xs, ys, H = (np.asarray(v, dtype=np.float64) for v in barrier)
            if H.shape != (ys.size, xs.size):
                raise ShapeError(f"barrier grid values: expected shape ({ys.size}, {xs.size}), got {H.shape}")
            GX, GY = np.meshgrid(xs, ys)
        else:
            fn = barrier.value if hasattr(barrier, "value") else barrier
            GX, GY, H = XX, YY, np.asarray(fn(X)).reshape(XX.shape)
        ax.contour(GX, GY, H, levels=[0.0], colors=["black"], linewidths=1.5)
        ax.plot([], [], color="black", label="barrier h = 0")
    if certified is not None:
        ax.contour(XX, YY, np.asarray(certified(X)).reshape(XX.shape), levels=[0.0], colors=["black"],
                   linewidths=1.2, linestyles="dashed")
        ax.plot([], [], "--", color="black", label="certified set boundary")
    for style, runs, label in (("--", _runs(nominal), "nominal"), ("-", _runs(trajectories), "filtered")):
        for j, run in enumerate(runs[:max_runs]):
            line = ax.plot(run[:, dims[0]], run[:, dims[1]], style, lw=1.0, alpha=0.8,
                           color="tab:gray" if style == "--" else "tab:blue", label=label if j == 0 else None)
            ax.plot(run[0, dims[0]], run[0, dims[1]], "o", ms=3, color=line[0].get_color())
    names = list(getattr(system, "state_names", [f"x{i}" for i in range(system.n)]))
    ax.set_xlabel(names[dims[0]])
    ax.set_ylabel(names[dims[1]])
    ax.set_xlim(XX.min(), XX.max())
    ax.set_ylim(YY.min(), YY.max())
    ax.set_title(title or getattr(system, "name", ""))
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path


def time_series(path: str | Path, traj: Trajectory, run: int = 0, title: str | None = None) -> Path:
    """h(t) and u(t) vs u_nom(t) per input for one run of ``traj``."""
    path = Path(path)
    tr = traj[run]
    m = tr.u.shape[2]
    names = tr.metadata.get("input_names") or [f"u{j}" for j in range(m)]
    u_min, u_max = tr.metadata.get("u_min"), tr.metadata.get("u_max")
    fig = Figure(figsize=(7.0, 2.2 * (m + 1)))
    FigureCanvasAgg(fig)
    axes = fig.subplots(m + 1, 1, sharex=True, squeeze=False)[:, 0]
    axes[0].plot(tr.t, tr.h[0], color="black", lw=1.2, label="h")
    axes[0].axhline(0.0, color="tab:red", lw=0.8, ls=":")
    axes[0].set_ylabel("h")
    relaxed = np.flatnonzero(tr.status[0] == FilterStatus.SLACK_ACTIVE)
    for j in range(m):
        ax = axes[j + 1]
        ax.step(tr.t[:-1], tr.u_nom[0, :, j], where="post", ls="--", color="tab:gray", lw=1.0, label="u_nom")
        ax.step(tr.t[:-1], tr.u[0, :, j], where="post", color="tab:blue", lw=1.2, label="u")
        if u_min is not None and u_max is not None:
            for bound in (u_min[j], u_max[j]):
                if np.isfinite(bound):
                    ax.axhline(bound, color="tab:red", lw=0.8, ls=":")
        if relaxed.size:
            ax.plot(tr.t[relaxed], tr.u[0, relaxed, j], "x", color="tab:orange", ms=4, label="slack active")
        ax.set_ylabel(names[j] if j < len(names) else f"u{j}")
        ax.legend(loc="best", fontsize=8)
    axes[-1].set_xlabel("t [s]")
    axes[0].set_title(title or str(tr.metadata.get("system", "")))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path
