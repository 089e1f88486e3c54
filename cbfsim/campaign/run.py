"""Run a campaign: shards on Dask (a LocalCluster here, or an existing scheduler), each shard's
result published atomically under OUT/shards/, merged per setting into OUT/summary.json and
OUT/violation.png.

Resuming is the same call: shards already on disk are not run again, and merging keys on
(setting, shard), so a shard a dead worker ran twice (Dask retries it) is counted once.
A folder holds one campaign and one running process (store.py: the lock, the spec-hash stamp,
checked shards: a damaged one is run again, a foreign one refused).
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Callable

from compiler.publish import atomic_write

from . import store
from .report import merge, plot, plot_worst
from .shards import run_shard
from .spec import Spec, load_spec


def pending(spec: Spec, out: Path, set_aside: bool = False) -> list[tuple[int, int]]:
    """The (setting, shard) pairs without a good shard on disk (a damaged one is pending, and
    with ``set_aside`` named and renamed NAME.damaged; a foreign one raises, naming it)."""
    good = store.scan(spec, out, set_aside) if (out / "shards").is_dir() else {}
    return [(s.index, k) for s in spec.settings for k in range(spec.shards_per_setting) if (s.index, k) not in good]


def run(spec: Spec | str | Path | dict, out: str | Path, *, scheduler: str | None = None, workers: int | None = None,
        in_process: bool = False, stop_after: int | None = None, progress: bool | None = None) -> dict:
    """Run (or resume) a campaign and return its merged summary. ``in_process`` runs the shards
    here, one after another; otherwise on Dask (``scheduler``: an existing cluster's address,
    else a LocalCluster of ``workers`` processes). ``stop_after``: run at most that many shards
    (then merge what exists; used to show resuming)."""
    if not isinstance(spec, Spec):
        spec = load_spec(spec)
    out = Path(out)
    with store.owned(out):
        store.claim(spec, out)
        todo = pending(spec, out, set_aside=True)
        todo = todo[:stop_after] if stop_after is not None else todo
        args = [(spec.source, None, s, k) for s, k in todo]    # (the card path is absolute: workers may run elsewhere)
        bar = _bar(len(todo), progress)
        if in_process or not todo:
            for a in args:
                store.save(spec, out, run_shard(*a))
                bar(1)
        else:
            _run_on_dask(spec, args, out, scheduler, workers, bar)
        summary = merge(spec, [json.loads(p.read_bytes()) for p in store.scan(spec, out).values()])
        atomic_write(out / "summary.json", json.dumps(summary, indent=2) + "\n")
        if summary["complete"]:
            plot(summary, out / "violation.png")
            plot_worst(spec, summary, out / "worst_runs.png")
    return summary


def _run_on_dask(spec: Spec, args: list, out: Path, scheduler: str | None, workers: int | None,
                 bar: Callable) -> None:
    import logging
    from distributed import Client, LocalCluster, as_completed
    for name in ("distributed", "tornado"):
        logging.getLogger(name).setLevel(logging.WARNING)
    cluster = None
    if scheduler is None:
        cluster = LocalCluster(n_workers=workers or os.cpu_count() or 1, threads_per_worker=1, processes=True,
                               dashboard_address=":0")
        client = Client(cluster)
    else:
        client = Client(scheduler)
    try:
        futures = [client.submit(run_shard, *a, key=f"cbfsim-shard-{a[2]}-{a[3]}-{os.getpid()}", retries=3,
                                 pure=False) for a in args]
        for future in as_completed(futures):
            store.save(spec, out, future.result())
            bar(1)
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def _bar(total: int, progress: bool | None) -> Callable[[int], Any]:
    if progress is None:
        progress = sys.stderr.isatty()
    if not progress or total == 0:
        return lambda _n: None
    from tqdm import tqdm
    bar = tqdm(total=total, unit="shard", desc="campaign")
    return lambda n: (bar.update(n), bar.close() if bar.n >= total else None)


def replay(spec: Spec | str | Path | dict, setting: int, run_index: int):
    """One run of the campaign, alone: the same initial state and run seed, the same trajectory."""
    import numpy as np
    from .shards import _loop, initial_states, make_filter, run_seeds
    if not isinstance(spec, Spec):
        spec = load_spec(spec)
    loop = _loop(str(spec.card))
    x0 = initial_states(str(spec.card), spec.runs, spec.seed)[run_index]
    seed = int(run_seeds(spec.seed, setting, np.array([run_index]))[0])
    from ..simulate import simulate_batch
    return simulate_batch(loop["system"], loop["barrier"], make_filter(spec, setting), spec.controller, x0[None, :],
                          spec.t_final, spec.dt_control or loop["dt"], perturbation=spec.settings[setting].perturbation,
                          run_seeds=[seed], engine=spec.engine)
