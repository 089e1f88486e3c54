"""Figures written straight to files with matplotlib's Agg canvas (no pyplot global state,
so plotting works headless and never switches the caller's backend).

``phase_portrait``: a 2-D state projection over the nominal closed loop's vector field, with
the unsafe region shaded, the constraint boundary, the learned h = 0 and the certified set,
nominal runs dashed and filtered runs solid; a 2-D slice of a larger state says so.
``time_series``: h(t) and, per input, the applied u(t) against u_nom(t) (held, so drawn as
steps), with the input bounds and the steps where the slack was active.

``STYLE`` is the one colour code of every figure (the device comparison uses it too).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from .barriers import ShapeError
from .filters.base import FilterStatus
from .trajectory import Trajectory

GridValues = tuple[np.ndarray, np.ndarray, np.ndarray]

#: One colour code for every figure: what each set and curve looks like.
STYLE: dict[str, dict[str, Any]] = {
    "unsafe": {"color": "#f4cccc", "alpha": 0.6, "label": "unsafe (constraint < 0)"},
    "constraint": {"color": "tab:red", "lw": 1.5, "ls": "-", "label": "constraint boundary"},
    "barrier": {"color": "black", "lw": 1.5, "ls": "-", "label": "learned h = 0"},
    "certified": {"color": "tab:green", "lw": 1.5, "ls": "--", "label": "certified set boundary"},
    "nominal": {"color": "tab:gray", "lw": 1.0, "ls": "--", "label": "nominal (no filter)"},
    "filtered": {"color": "tab:blue", "lw": 1.0, "ls": "-", "label": "filtered"},
    "field": {"color": "0.82", "lw": 0.6, "label": "nominal closed-loop flow (no filter)"},
}
MANY_RUNS = 10          # more filtered runs than this are drawn thin, one colour each (not one blue blob)


def _line(name: str) -> dict[str, Any]:
    """Keyword arguments for ax.plot / ax.contour of a STYLE entry (without its label)."""
    return {k: v for k, v in STYLE[name].items() if k in ("color", "lw", "ls")}


def _contour(ax: Any, X: np.ndarray, Y: np.ndarray, Z: np.ndarray, name: str) -> None:
    st = STYLE[name]
    ax.contour(X, Y, Z, levels=[0.0], colors=[st["color"]], linewidths=st["lw"], linestyles=st["ls"])
    ax.plot([], [], label=st["label"], **_line(name))


def slice_text(system: Any, dims: tuple[int, int], fixed: Sequence[float] | None) -> str:
    """"sets drawn at the slice psi = 0, v = 10 (runs projected)" for the coordinates a 2-D figure
    of an n > 2 state holds fixed (``fixed`` None: the grid's default, 0 clipped into the domain).
    Runs leave the slice, so a run may cross a drawn boundary without leaving the set."""
    if system.n <= 2:
        return ""
    if fixed is None:
        lo, hi = system.domain
        fixed = np.clip(np.zeros(system.n), lo, hi)
    names = list(getattr(system, "state_names", [f"x{i}" for i in range(system.n)]))
    held = [f"{names[i]} = {fixed[i]:.3g}" for i in range(system.n) if i not in dims]
    return "sets drawn at the slice " + ", ".join(held) + " (runs projected: they leave the slice)"


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
                   certified: Callable[[np.ndarray], np.ndarray] | None = None,
                   vector_field: Callable[[np.ndarray], np.ndarray] | None = None) -> Path:
    """Phase portrait of states ``dims``; ``barrier`` is a callable (N, n) -> (N,), an object
    with ``.value``, or precomputed grid values (xs, ys, H) with H of shape (len(ys), len(xs)).
    ``certified`` (N, n) -> (N,), >= 0 on the set the filter keeps invariant when that is
    smaller than {h >= 0} (HOCBF: min(h, psi1)); its boundary is drawn dashed.
    ``vector_field`` (N, n) -> (N, n), e.g. the nominal closed loop f + G u_nom, is drawn as
    streamlines under everything. Axes are equal when the two spans are comparable."""
    path = Path(path)
    fig = Figure(figsize=(6.4, 6.0), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    XX, YY, X = _grid(system, dims, limits, fixed, resolution)
    extra_handles: list[Any] = []
    if vector_field is not None:
        coarse = max(resolution // 8, 12)
        VX, VY, V = _grid(system, dims, limits, fixed, coarse)
        D = np.asarray(vector_field(V), dtype=np.float64)
        ax.streamplot(VX, VY, D[:, dims[0]].reshape(VX.shape), D[:, dims[1]].reshape(VX.shape),
                      color=STYLE["field"]["color"], linewidth=STYLE["field"]["lw"], density=1.1,
                      arrowsize=0.7, zorder=0)
        ax.plot([], [], color=STYLE["field"]["color"], lw=1.5, label=STYLE["field"]["label"])
    if constraint:
        C = np.asarray(system.constraint(X)).reshape(XX.shape)
        unsafe = STYLE["unsafe"]
        ax.contourf(XX, YY, C, levels=[-np.inf, 0.0], colors=[unsafe["color"]], alpha=unsafe["alpha"])
        extra_handles.append(Patch(facecolor=unsafe["color"], alpha=unsafe["alpha"], label=unsafe["label"]))
        _contour(ax, XX, YY, C, "constraint")
    if barrier is not None:
        if isinstance(barrier, tuple):
            xs, ys, H = (np.asarray(v, dtype=np.float64) for v in barrier)
            if H.shape != (ys.size, xs.size):
                raise ShapeError(f"barrier grid values: expected shape ({ys.size}, {xs.size}), got {H.shape}")
            GX, GY = np.meshgrid(xs, ys)
        else:
            fn = barrier.value if hasattr(barrier, "value") else barrier
            GX, GY, H = XX, YY, np.asarray(fn(X)).reshape(XX.shape)
        _contour(ax, GX, GY, H, "barrier")
    if certified is not None:
        _contour(ax, XX, YY, np.asarray(certified(X)).reshape(XX.shape), "certified")
    for name, runs in (("nominal", _runs(nominal)), ("filtered", _runs(trajectories))):
        runs = runs[:max_runs]
        many = name == "filtered" and len(runs) > MANY_RUNS
        colours = _run_colours(len(runs)) if many else [STYLE[name]["color"]] * len(runs)
        for j, run in enumerate(runs):
            label = None
            if j == 0:
                label = f"{STYLE[name]['label']} ({len(runs)} runs, one colour each; dot: start)" if many \
                    else STYLE[name]["label"] + (f" ({len(runs)} runs)" if len(runs) > 1 else "")
            style = {**_line(name), "color": colours[j]}
            if many:
                style["lw"] = 0.7
            ax.plot(run[:, dims[0]], run[:, dims[1]], alpha=0.7 if many else 0.85, label=label, **style)
            ax.plot(run[0, dims[0]], run[0, dims[1]], "o", ms=3, color=colours[j])
    names = list(getattr(system, "state_names", [f"x{i}" for i in range(system.n)]))
    ax.set_xlabel(names[dims[0]])
    ax.set_ylabel(names[dims[1]])
    ax.set_xlim(XX.min(), XX.max())
    ax.set_ylim(YY.min(), YY.max())
    spans = (XX.max() - XX.min(), YY.max() - YY.min())
    if max(spans) <= 1.5 * min(spans):      # comparable ranges (same units, e.g. VdP); else fill the axes
        ax.set_aspect("equal")
    ax.set_title(title or getattr(system, "name", ""))
    where = slice_text(system, dims, fixed)
    if where:
        ax.text(0.01, 0.99, where, transform=ax.transAxes, ha="left", va="top", fontsize=8,
                bbox={"facecolor": "white", "alpha": 0.8, "edgecolor": "none"})
    handles = extra_handles + ax.get_legend_handles_labels()[0]     # below the axes, never over data
    fig.legend(handles=handles, loc="outside lower center", ncol=2, fontsize=8, frameon=False)
    fig.savefig(path, dpi=120)
    return path


def _run_colours(count: int) -> list[Any]:
    """One colour per run from a rainbow map, so neighbouring runs are told apart."""
    from matplotlib import colormaps
    cmap = colormaps["turbo"]
    return [cmap(0.05 + 0.9 * k / max(count - 1, 1)) for k in range(count)]


def time_series(path: str | Path, traj: Trajectory, run: int = 0, title: str | None = None) -> Path:
    """h(t), u(t) vs u_nom(t) per input, and the row the filter acts on (L_G h at order 1,
    L_G L_f h at order 2) for one run of ``traj``. The last panel explains the filter's steps:
    a ReLU barrier's gradient is piecewise constant, so that row jumps where the state crosses
    from one linear region to the next, and the filtered input jumps with it."""
    path = Path(path)
    tr = traj[run]
    m = tr.u.shape[2]
    names = tr.metadata.get("input_names") or [f"u{j}" for j in range(m)]
    u_min, u_max = tr.metadata.get("u_min"), tr.metadata.get("u_max")
    row, row_name = (tr.LgLf, "L_G L_f h") if tr.LgLf is not None else (tr.Lg, "L_G h")
    fig = Figure(figsize=(7.0, 2.0 * (m + 2)), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(m + 2, 1, sharex=True, squeeze=False)[:, 0]
    for j in range(m):
        axes[-1].step(tr.t[:-1], row[0, :, j], where="post", lw=1.0, color=f"C{4 + j}",
                      label=f"{row_name} ({names[j]}): how strongly {names[j]} moves "
                            f"{'dh/dt' if tr.LgLf is None else 'd2h/dt2'}")
    axes[-1].set_ylabel(row_name)
    axes[0].plot(tr.t, tr.h[0], color=STYLE["barrier"]["color"], lw=1.2, label="h")
    axes[0].axhline(0.0, color=STYLE["constraint"]["color"], lw=0.8, ls=":", label="h = 0 (edge of the safe set)")
    axes[0].set_ylabel("h")
    relaxed = np.flatnonzero(tr.status[0] == FilterStatus.SLACK_ACTIVE)
    for j in range(m):
        ax = axes[j + 1]
        ax.step(tr.t[:-1], tr.u_nom[0, :, j], where="post", ls="--", color=STYLE["nominal"]["color"], lw=1.0,
                label="u_nom (nominal)")
        ax.step(tr.t[:-1], tr.u[0, :, j], where="post", color=STYLE["filtered"]["color"], lw=1.2, label="u (filtered)")
        if u_min is not None and u_max is not None:
            for bound in (u_min[j], u_max[j]):
                if np.isfinite(bound):
                    ax.axhline(bound, color="0.35", lw=0.8, ls="-.", label="input bounds u_min, u_max")
        if relaxed.size:
            ax.plot(tr.t[relaxed], tr.u[0, relaxed, j], "x", color="tab:orange", ms=4, label="slack active")
        ax.set_ylabel(names[j] if j < len(names) else f"u{j}")
    axes[-1].set_xlabel("t [s]")
    axes[0].set_title(title or str(tr.metadata.get("system", "")))
    handles = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    fig.legend(list(handles.values()), list(handles), loc="outside lower center", ncol=2, fontsize=8, frameon=False)
    fig.savefig(path, dpi=120)
    return path
