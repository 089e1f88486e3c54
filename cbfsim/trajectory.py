"""The one result type of a closed-loop run, always batched.

Convention: every per-run array has a leading batch axis B (B = 1 for a single run), then
time. States and h are sampled at the T+1 control instants t_0..t_T; inputs, Lie terms,
slack, status and solve time belong to the T control steps (held on [t_k, t_{k+1})).
``traj[i]`` / ``traj.single()`` give B = 1 views; ``save``/``load`` use a plain .npz
(allow_pickle=False) with the metadata stored as a JSON string.

Fates (cbfsim/fate.py, the one table): ``metadata["fates"]`` holds one record per run
(``RunFate.to_dict``: completed, left_set or faulted, with the step and the state), read back
by ``traj.fates`` and counted by ``traj.fate_counts()``. A faulted run -- its state became
non-finite or diverged (|x_i| > fate.DIVERGENCE_BOUND) -- stops there while the others go on:
``run_status`` (B,) says how each run ended (``RunStatus``) and ``metadata["faults"]`` lists
the stopped runs ({"run", "step", "time", "cause"}: the first such control instant; step 0
for a start state beyond the bound). A stopped run keeps its record up to that instant (x
there is the state the integrator produced); after it x, h and the per-step floats are NaN
and the step status is ``STEP_NOT_RUN``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, fields, replace
from enum import IntEnum
from pathlib import Path
from typing import Any

import numpy as np

from .barriers import ShapeError
from .fate import RunFate, count, fates_of

_OPTIONAL = ("Lf2", "LgLf", "run_status")
STEP_NOT_RUN = -1   # step status of the steps after a run stopped (FilterStatus values are >= 0)


class RunStatus(IntEnum):
    """How one run of a batch ended (stored as int8 in ``Trajectory.run_status``)."""

    COMPLETED = 0         # every control step ran
    FAULTED = 1           # the state became non-finite or diverged; the run stopped there (metadata["faults"])
    NON_FINITE_STATE = 1  # (the former name of FAULTED)


@dataclass(frozen=True)
class Trajectory:
    """t (T+1,); x (B, T+1, n); h (B, T+1); u_nom, u, Lg (B, T, m); Lf, slack, solve_time
    (B, T); status (B, T) int8 (FilterStatus, or STEP_NOT_RUN after a run stopped); Lf2 (B, T)
    and LgLf (B, T, m) for order-2 runs, else None; run_status (B,) int8 (RunStatus, all
    COMPLETED when not given); metadata: JSON-serialisable dict (system, filter, timing,
    faults, ...)."""

    t: np.ndarray
    x: np.ndarray
    u_nom: np.ndarray
    u: np.ndarray
    h: np.ndarray
    Lf: np.ndarray
    Lg: np.ndarray
    slack: np.ndarray
    status: np.ndarray
    solve_time: np.ndarray
    metadata: dict = field(default_factory=dict)
    Lf2: np.ndarray | None = None
    LgLf: np.ndarray | None = None
    run_status: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.x.ndim != 3:
            raise ShapeError(f"Trajectory.x: expected shape (B, T+1, n), got {self.x.shape}")
        B, T1, n = self.x.shape
        if self.run_status is None:
            object.__setattr__(self, "run_status", np.full(B, RunStatus.COMPLETED, dtype=np.int8))
        T, m = T1 - 1, self.u.shape[-1] if self.u.ndim == 3 else -1
        expected = {"t": (T1,), "u_nom": (B, T, m), "u": (B, T, m), "h": (B, T1), "Lf": (B, T),
                    "Lg": (B, T, m), "slack": (B, T), "status": (B, T), "solve_time": (B, T),
                    "Lf2": (B, T), "LgLf": (B, T, m), "run_status": (B,)}
        for name, shape in expected.items():
            value = getattr(self, name)
            if value is None and name in _OPTIONAL:
                continue
            if np.shape(value) != shape:
                raise ShapeError(f"Trajectory.{name}: expected shape {shape}, got {np.shape(value)}")

    # -- shape helpers
    @property
    def batch_size(self) -> int:
        return int(self.x.shape[0])

    @property
    def n_steps(self) -> int:
        """Number of control steps T."""
        return int(self.x.shape[1] - 1)

    @property
    def completed(self) -> np.ndarray:
        """(B,) bool: the runs that ran every control step."""
        return self.run_status == RunStatus.COMPLETED

    @property
    def fates(self) -> list[RunFate]:
        """Each run's fate (cbfsim/fate.py); empty when the producer recorded none."""
        return fates_of(self.metadata.get("fates"))

    def fate_counts(self) -> dict[str, int]:
        """{fate: runs} over every fate of the table."""
        return count(f.fate for f in self.fates)

    def __len__(self) -> int:
        return self.batch_size

    def __getitem__(self, index: int | slice | np.ndarray) -> "Trajectory":
        """Select runs along the batch axis; an integer keeps a batch axis of size 1. The
        fault list in the metadata is renumbered to the selected runs."""
        sel = slice(index, index + 1 if index != -1 else None) if isinstance(index, (int, np.integer)) else index
        if isinstance(index, (int, np.integer)) and not -self.batch_size <= index < self.batch_size:
            raise IndexError(f"trajectory index {index} out of range for batch size {self.batch_size}")
        picked = np.arange(self.batch_size)[sel].tolist()
        faults = [{**f, "run": new} for new, old in enumerate(picked)
                  for f in self.metadata.get("faults", []) if f["run"] == old]
        metadata = {**self.metadata, "faults": faults} if "faults" in self.metadata else self.metadata
        if "fates" in self.metadata:
            metadata = {**metadata, "fates": [self.metadata["fates"][i] for i in picked]}
        return replace(self, metadata=metadata, **{f.name: getattr(self, f.name)[sel] for f in fields(self)
                                                   if f.name not in ("t", "metadata")
                                                   and getattr(self, f.name) is not None})

    def single(self) -> "Trajectory":
        """The run itself, checked to be a batch of one."""
        if self.batch_size != 1:
            raise ShapeError(f"single(): expected batch size 1, got {self.batch_size}; index with traj[i]")
        return self

    # -- persistence
    def save(self, path: str | Path) -> Path:
        """Write an .npz (no pickles); returns the path written."""
        path = Path(path)
        arrays = {f.name: getattr(self, f.name) for f in fields(self)
                  if f.name != "metadata" and getattr(self, f.name) is not None}
        np.savez(path, metadata=np.array(json.dumps(self.metadata, sort_keys=True)), **arrays)
        return path if path.suffix == ".npz" else path.with_name(path.name + ".npz")

    @classmethod
    def load(cls, path: str | Path) -> "Trajectory":
        with np.load(Path(path), allow_pickle=False) as data:
            kwargs: dict[str, Any] = {k: data[k] for k in data.files if k != "metadata"}
            kwargs["metadata"] = json.loads(str(data["metadata"][()]))
        return cls(**kwargs)
