"""The compiled closed loop: the firmware's step (firmware/common/step.hpp: nominal controller,
barrier header, exact filter, fault policy, float32 RK4 with the input held) over a batch of
initial states, built for the host as a shared library and called once per batch.

It is the firmware's closed loop run on the host, so its trajectories are the host twin's bit
for bit (tests/test_engine.py). Against the float64 Python simulator it differs by float32
arithmetic (state, plant and filter in float32), which the tests bound against the Python
run. Builds are cached by the hash of every source (generated headers, firmware/common,
batch.cpp) and published whole (a private folder, then one rename), as barrier builds are.

    traj = simulate_card("experiments/models/vdp.json", X0, t_final=5.0)

Not yet: perturbations (use the numpy engine, ``simulate_batch(..., perturbation=...)``) and
the several-row filter.
"""
from __future__ import annotations

import ctypes
import hashlib
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from .trajectory import Trajectory

FIRMWARE = Path(__file__).resolve().parent.parent / "firmware"


class CompiledLoop:
    """A loaded engine library: ``run(X0, steps)`` -> the recorded arrays."""

    def __init__(self, library: Path, config: Any, card: Any = None):
        self.library, self.config, self.card = Path(library), config, card
        self._lib = ctypes.CDLL(str(self.library))
        n, m = ctypes.c_int(), ctypes.c_int()
        self.order = self._lib.cbf_engine_dims(ctypes.byref(n), ctypes.byref(m))
        self.n, self.m = n.value, m.value
        f32 = np.ctypeslib.ndpointer(np.float32, flags="C_CONTIGUOUS")
        self._lib.cbf_engine_run.argtypes = [ctypes.c_int, ctypes.c_int, f32, f32, f32, f32, f32,
                                             np.ctypeslib.ndpointer(np.int8, flags="C_CONTIGUOUS")]
        self._lib.cbf_engine_run.restype = None
        self._lib.cbf_engine_barrier_only.argtypes = [ctypes.c_int, f32, f32]
        self._lib.cbf_engine_barrier_only.restype = None

    def run(self, X0: Any, steps: int) -> dict[str, np.ndarray]:
        X0 = np.ascontiguousarray(np.asarray(X0, dtype=np.float64).reshape(-1, self.n), dtype=np.float32)
        B, T = len(X0), int(steps)
        out = {"x": np.empty((B, T + 1, self.n), np.float32), "u_nom": np.empty((B, T, self.m), np.float32),
               "u": np.empty((B, T, self.m), np.float32), "h": np.empty((B, T), np.float32),
               "status": np.empty((B, T), np.int8)}
        self._lib.cbf_engine_run(B, T, X0, out["x"], out["u_nom"], out["u"], out["h"], out["status"])
        return out

    def barrier_only(self, X: Any) -> None:
        """The barrier call alone at every state (the benchmark's floor)."""
        X = np.ascontiguousarray(X, dtype=np.float32)
        terms = np.empty((len(X), 2 + self.m if self.order == 1 else 3 + 2 * self.m), np.float32)
        self._lib.cbf_engine_barrier_only(len(X), X, terms)


def _digest(generated_dir: Path) -> str:
    h = hashlib.sha256()
    sources = sorted(generated_dir.glob("*.hpp")) + sorted((FIRMWARE / "common").glob("*.hpp")) + \
        [FIRMWARE / "host" / "batch.cpp", FIRMWARE / "Makefile"]
    for path in sources:
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:24]


def build_engine(model: Any, config: Any) -> CompiledLoop:
    """Generate the headers for ``model`` and ``config`` (cbfsim.device.RunConfig), build the
    engine library with firmware/Makefile (cached), and load it."""
    from compiler.cache import cache_dir
    from .device import generate
    from .device.toolchain import build
    with tempfile.TemporaryDirectory() as tmp:
        generated = generate(model, config, Path(tmp) / "gen")
        entry = cache_dir() / "engines" / _digest(generated.directory)
        library = entry / "host" / "libcbf_engine.so"
        if not library.exists():
            entry.parent.mkdir(parents=True, exist_ok=True)
            private = Path(tempfile.mkdtemp(dir=entry.parent, prefix=".build-"))
            try:
                build("engine", generated, private)
                try:
                    private.rename(entry)          # one rename publishes the whole build
                except OSError:
                    pass                           # another process published it first
            finally:
                shutil.rmtree(private, ignore_errors=True)
    return CompiledLoop(library, config)


def simulate_card(card: str | Path, X0: Any, t_final: float, **overrides: Any) -> Trajectory:
    """Simulate B runs from X0 (B, n) of the model a card describes (its certified period and
    margin, the shipped runs' nominal controller; ``overrides``: RunConfig fields) in the
    compiled engine; float32 records widened to float64."""
    from .device.card import shipped_card_run
    X0 = np.atleast_2d(np.asarray(X0, dtype=np.float64))
    run = shipped_card_run(card, x0=tuple(X0[0]), **overrides)
    loop = build_engine(run.model, run.config)
    steps = int(round(t_final / run.config.dt))
    out = loop.run(X0, steps)
    B, T, m = len(X0), steps, loop.m
    nan = np.full((B, T), np.nan)
    h = np.concatenate([out["h"].astype(np.float64), np.full((B, 1), np.nan)], axis=1)
    return Trajectory(t=np.arange(T + 1) * float(np.float32(run.config.dt)), x=out["x"].astype(np.float64),
                      u_nom=out["u_nom"].astype(np.float64), u=out["u"].astype(np.float64), h=h, Lf=nan,
                      Lg=np.full((B, T, m), np.nan), slack=np.zeros((B, T)), status=out["status"],
                      solve_time=np.zeros((B, T)),
                      metadata={"engine": "compiled", "system": run.config.system, "dt_control": run.config.dt,
                                "margin": run.config.margin, "library": str(loop.library), "card": str(card)})
