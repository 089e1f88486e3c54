"""The compiled closed loop: the firmware's step (firmware/common/step.hpp: nominal controller,
barrier header, exact filter, fault policy, float32 RK4 with the input held) over a batch of
initial states, built for the host as a shared library and called once per batch.

It is the firmware's closed loop run on the host, so its trajectories are the host twin's bit
for bit (tests/test_engine.py). Against the float64 Python simulator it differs by float32
arithmetic (state, plant and filter in float32), which the tests bound against the Python
run. Builds are cached by the hash of every source (generated headers, firmware/common,
batch.cpp) and published whole (a private folder, then one rename), as barrier builds are.

    traj = simulate_card("experiments/models/vdp.json", X0, t_final=5.0)

Each run's fate (cbfsim/fate.py) is judged as the numpy engine judges it: a state that is not
finite or beyond fate.DIVERGENCE_BOUND (a start of 1e39, inf in float32, included) stops the
run at that control instant, marked ``faulted`` with its step and state
(``metadata["fates"]``, ``metadata["faults"]``, ``run_status``); the others are ``left_set``
or ``completed`` by the constraint at the recorded states.

It takes the same ``Perturbation`` as the numpy engine (noise, disturbances, delay; the same
counter-based draws, firmware/common/rng.hpp) except plant-parameter mismatch, which it
refuses in one line. Face rows (a certificate's enforced faces of D) run in the exact face
filter (firmware/common/face_filter.hpp); several barrier rows do not run here yet.
"""
from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from compiler.errors import CbfsimError

from .fate import DIVERGENCE_BOUND, classify, constraint_values, diverged, fault_cause
from .filters.base import check_margin
from .memory import check_allocation
from .trajectory import RunStatus, Trajectory

FIRMWARE = Path(__file__).resolve().parent.parent / "firmware"
MAX_DELAY = 64                       # kMaxDelay in firmware/host/batch.cpp
ENGINE_ABI = 2                       # cbf_engine_abi() of the batch.cpp this module calls


class CompiledLoop:
    """A loaded engine library: ``run(X0, steps)`` -> the recorded arrays."""

    def __init__(self, library: Path, config: Any, card: Any = None):
        self.library, self.config, self.card = Path(library), config, card
        self._lib = ctypes.CDLL(str(self.library))
        self._lib.cbf_engine_abi.restype = ctypes.c_int
        abi = self._lib.cbf_engine_abi()
        if abi != ENGINE_ABI:
            raise EngineError(f"{self.library}: engine ABI {abi}, this cbfsim calls ABI {ENGINE_ABI}; rebuild it")
        n, m = ctypes.c_int(), ctypes.c_int()
        self.order = self._lib.cbf_engine_dims(ctypes.byref(n), ctypes.byref(m))
        self.n, self.m = n.value, m.value
        f32 = np.ctypeslib.ndpointer(np.float32, flags="C_CONTIGUOUS")
        u64 = np.ctypeslib.ndpointer(np.uint64, flags="C_CONTIGUOUS")
        self._lib.cbf_engine_run.argtypes = [ctypes.c_int, ctypes.c_int, f32, u64, f32, ctypes.c_int, f32, f32,
                                             ctypes.c_int, ctypes.c_float, f32, f32, f32, f32,
                                             np.ctypeslib.ndpointer(np.int8, flags="C_CONTIGUOUS"),
                                             np.ctypeslib.ndpointer(np.int32, flags="C_CONTIGUOUS")]
        self._lib.cbf_engine_run.restype = ctypes.c_int
        self._lib.cbf_engine_barrier_only.argtypes = [ctypes.c_int, f32, f32]
        self._lib.cbf_engine_barrier_only.restype = None

    def run(self, X0: Any, steps: int, perturbation: Any = None, run_seeds: Any = None) -> dict[str, np.ndarray]:
        """B runs of ``steps`` periods from X0 (B, n), optionally perturbed (cbfsim.perturb;
        plant-parameter mismatch is refused: the engine's plant is its filter's model).
        ``fault_step`` (B,): the instant a run stopped on a non-finite or diverged state, or
        steps + 1; a stopped run's entries after it are unwritten (``trajectory`` blanks them)."""
        from .perturb import ActivePerturbation, Perturbation, PerturbationError
        with np.errstate(over="ignore"):          # a start beyond float32 becomes inf: a fault at step 0
            X0 = np.ascontiguousarray(np.asarray(X0, dtype=np.float64).reshape(-1, self.n), dtype=np.float32)
        B, T = len(X0), int(steps)
        if T < 0:
            raise EngineError(f"steps must be at least 0, got {T}")
        check_allocation(record_bytes(B, T, self.n, self.m, widened=False),
                         f"the compiled engine's records of {B:,} runs x {T:,} steps (n={self.n}, m={self.m})")
        pert = ActivePerturbation(perturbation or Perturbation(), self.config.plant(), run_seeds, B)
        if perturbation is not None and perturbation.plant_params:
            raise PerturbationError("the compiled engine cannot take plant_params yet (its plant is the filter's "
                                    "model); use engine='numpy'")
        if pert.delay > MAX_DELAY:
            raise PerturbationError(f"the compiled engine takes a delay of at most {MAX_DELAY} periods")
        kind = ("none", "constant", "uniform", "worst_case").index(pert.kind)
        value = getattr(pert, "value", np.zeros(self.n))
        as32 = lambda a: np.ascontiguousarray(a, dtype=np.float32)    # noqa: E731
        out = {"x": np.empty((B, T + 1, self.n), np.float32), "u_nom": np.empty((B, T, self.m), np.float32),
               "u": np.empty((B, T, self.m), np.float32), "h": np.empty((B, T), np.float32),
               "status": np.empty((B, T), np.int8), "fault_step": np.empty(B, np.int32)}
        code = self._lib.cbf_engine_run(B, T, X0, np.ascontiguousarray(pert.seeds), as32(pert.noise), kind,
                                        as32(pert.bound), as32(value), pert.delay, DIVERGENCE_BOUND, out["x"],
                                        out["u_nom"], out["u"], out["h"], out["status"], out["fault_step"])
        if code != 0:
            raise PerturbationError("the compiled engine refused the perturbation")
        out["perturbation"] = pert.record if perturbation is not None else None
        return out

    def barrier_only(self, X: Any) -> None:
        """The barrier call alone at every state (the benchmark's floor)."""
        X = np.ascontiguousarray(X, dtype=np.float32)
        terms = np.empty((len(X), 2 + self.m if self.order == 1 else 3 + 2 * self.m), np.float32)
        self._lib.cbf_engine_barrier_only(len(X), X, terms)


ENGINE_LIBRARY = "host/libcbf_engine.so"     # inside a cache entry, where firmware/Makefile writes it


def record_bytes(runs: int, steps: int, n: int, m: int, widened: bool) -> int:
    """Bytes the engine allocates for ``runs`` x ``steps``: its float32 records (x, u_nom, u, h,
    status), and with ``widened`` also the float64 Trajectory made of them (x, u_nom, u, h, Lf,
    Lg, slack, solve_time and the temporaries of the widening)."""
    per_run = (steps + 1) * n * 4 + steps * (2 * m * 4 + 4 + 1)
    if widened:
        per_run += (steps + 1) * n * 8 + steps * (2 * m * 8 + m * 8) + (steps + 1) * 8 * 2 + steps * 8 * 4
    return runs * per_run


def _digest(generated_dir: Path) -> str:
    h = hashlib.sha256()
    sources = sorted(generated_dir.glob("*.hpp")) + sorted((FIRMWARE / "common").glob("*.hpp")) + \
        [FIRMWARE / "host" / "batch.cpp", FIRMWARE / "Makefile"]
    for path in sources:
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def build_engine(model: Any, config: Any) -> CompiledLoop:
    """Generate the headers for ``model`` and ``config`` (cbfsim.firmware_config.RunConfig), build the
    engine library with firmware/Makefile, and load it. The build goes through the one build
    cache (``compiler.cache.get_or_build``, entries under ``engines/``): keyed by every source,
    the compiler, its version, the flags and what -march=native means on this CPU; published
    by rename; size and sha256 checked before dlopen; a damaged entry is rebuilt."""
    from compiler import cache
    from compiler.build import toolchain_identity
    from .firmware_build import build, engine_toolchain
    from .firmware_config import generate
    cxx, flags = engine_toolchain()
    # The engine reads neither the firmware's start state nor its step count (they come with
    # each run): fixed here, so that one library serves every batch and no state reaches the headers.
    neutral = dataclasses.replace(config, x0=(0.0,) * len(config.x0), steps=1)
    with tempfile.TemporaryDirectory() as tmp:
        generated = generate(model, neutral, Path(tmp) / "gen")
        key = hashlib.sha256("\0".join([_digest(generated.directory), toolchain_identity(cxx, flags)]).encode())

        def compile_into(folder: Path) -> None:
            build("engine", generated, folder)          # writes folder/host/libcbf_engine.so

        entry = cache.get_or_build(key.hexdigest()[:32], ENGINE_LIBRARY, compile_into, kind="engine")
    return CompiledLoop(entry / ENGINE_LIBRARY, config)


def simulate_card(card: str | Path, X0: Any, t_final: float, perturbation: Any = None, run_seeds: Any = None,
                  **overrides: Any) -> Trajectory:
    """Simulate B runs from X0 (B, n) of the model a card describes (its certified period and
    margin, the shipped runs' nominal controller; ``overrides``: RunConfig fields) in the
    compiled engine; float32 records widened to float64."""
    from .card_run import shipped_card_run
    X0 = np.atleast_2d(np.asarray(X0, dtype=np.float64))
    run = shipped_card_run(card, **overrides)      # (its x0 is unused: the engine starts from X0)
    loop = build_engine(run.model, run.config)
    return trajectory(loop, X0, int(round(t_final / run.config.dt)), perturbation, run_seeds, {"card": str(card)})


def trajectory(loop: CompiledLoop, X0: np.ndarray, steps: int, perturbation: Any, run_seeds: Any,
               extra: dict) -> Trajectory:
    """Run the loaded engine and return its records as a Trajectory (h at the final state: NaN),
    with each run's fate judged as the numpy engine judges it (a stopped run's record blanked
    after its fault; a start beyond the bound recorded as given, in float64)."""
    from .simulate import NonFiniteStateError, _stop_runs
    X0 = np.atleast_2d(np.asarray(X0, dtype=np.float64))
    if not np.all(np.isfinite(X0)):
        bad = int(np.flatnonzero(~np.isfinite(X0).all(axis=1))[0])
        raise NonFiniteStateError(0, 0.0, X0[bad], bad)
    B, T, m = len(X0), steps, loop.m
    check_allocation(record_bytes(B, T, loop.n, m, widened=True),
                     f"the compiled engine's trajectory of {B:,} runs x {T:,} steps (n={loop.n}, m={m})")
    out = loop.run(X0, steps, perturbation, run_seeds)
    t = np.arange(T + 1) * float(np.float32(loop.config.dt))
    rec = {"x": out["x"].astype(np.float64), "u_nom": out["u_nom"].astype(np.float64),
           "u": out["u"].astype(np.float64),
           "h": np.concatenate([out["h"].astype(np.float64), np.full((B, 1), np.nan)], axis=1),
           "Lf": np.full((B, T), np.nan), "Lg": np.full((B, T, m), np.nan), "slack": np.zeros((B, T)),
           "status": out["status"], "solve_time": np.zeros((B, T))}
    fault_step = out["fault_step"].astype(np.int64)
    start = diverged(X0)                      # judged in float64, as the numpy engine does
    fault_step[start] = 0
    rec["x"][start, 0] = X0[start]            # the start as given, not its float32 inf
    faulted = fault_step <= T
    if faulted.any():
        _stop_runs(rec, fault_step)
    faults = [{"run": int(b), "step": int(fault_step[b]), "time": float(t[fault_step[b]]),
               "cause": fault_cause(rec["x"][b, fault_step[b]])} for b in np.flatnonzero(faulted)]
    fates = classify(constraint_values(loop.config.plant(), rec["x"]), t, rec["x"], fault_step,
                     {f["run"]: f["cause"] for f in faults})
    meta = {"engine": "compiled", "system": loop.config.system, "dt_control": loop.config.dt,
            "margin": check_margin(loop.config.margin).to_dict(), "library": str(loop.library), **extra,
            "faults": faults, "fates": [f.to_dict() for f in fates]}
    if out["perturbation"] is not None:
        meta["perturbation"] = out["perturbation"]
    run_status = np.where(faulted, RunStatus.FAULTED, RunStatus.COMPLETED).astype(np.int8)
    return Trajectory(t=t, metadata=meta, run_status=run_status, **rec)


class EngineError(CbfsimError, ValueError):
    """A closed loop the compiled engine cannot run (one line naming the part)."""


def simulate_objects(system: Any, barrier: Any, filter: Any, controller: Any, X0: Any, t_final: float,
                     dt_control: float, substeps: int, perturbation: Any, run_seeds: Any) -> Trajectory:
    """``simulate_batch(..., engine="compiled")``: the same loop from the simulator's objects --
    a compiled barrier (its source model), a projection or one-row QP filter with linear
    class-K gains, and the face rows it enforces (the firmware solves the same problem exactly:
    firmware/common/filter.hpp, face_filter.hpp), a nominal controller named by the system --
    as a RunConfig, built and run in the engine."""
    import dataclasses
    from .classk import Linear
    from .firmware_config import RunConfig
    model = getattr(getattr(barrier, "lib", None), "source_model", None)
    if model is None:
        raise EngineError("engine='compiled' needs a barrier from cbfsim.runtime.compile_barrier")
    if not isinstance(controller, str):
        raise EngineError("engine='compiled' needs the nominal controller by name (one of system.nominal's)")
    if filter is None or getattr(filter, "n_barriers", 1) != 1 or getattr(filter, "issf", None) is not None:
        raise EngineError("engine='compiled' needs a one-barrier CBF/HOCBF filter without the ISSf term")
    faces = _engine_faces(filter)
    alphas = list(getattr(filter, "alphas", [])) if filter.order == 1 else [filter.alpha1, filter.alpha2]
    if not all(isinstance(a, Linear) for a in alphas):
        raise EngineError("engine='compiled' needs linear class-K functions (the firmware's row)")
    params = dataclasses.asdict(system.params) if dataclasses.is_dataclass(system.params) else {}
    config = RunConfig(system=system.name, x0=(0.0,) * system.n, nominal=controller, order=filter.order,
                       alpha=tuple(a.gain for a in alphas), dt=float(dt_control), steps=1, substeps=int(substeps),
                       params=params, margin=filter.margin, fallback=filter.faults.fallback, faces=faces)
    loop = build_engine(model, config)
    return trajectory(loop, np.atleast_2d(np.asarray(X0, dtype=np.float64)),
                      int(round(t_final / dt_control)), perturbation, run_seeds, {"controller": controller})


def _engine_faces(filter: Any) -> tuple:
    """The filter's face rows for the engine, whose exact face filter solves P_rho at the price
    cbfsim.face_rows.FACE_SLACK_PENALTY: a filter priced otherwise is refused in one line."""
    from .face_rows import FACE_SLACK_PENALTY
    faces = tuple(getattr(filter, "faces", ()))
    rho = getattr(getattr(filter, "solver", None), "slack_penalty", FACE_SLACK_PENALTY)
    if faces and rho != FACE_SLACK_PENALTY:
        raise EngineError(f"engine='compiled' enforces face rows at slack_penalty {FACE_SLACK_PENALTY:g}; "
                          f"the filter has {rho:g}: use engine='numpy' or the default")
    return faces
