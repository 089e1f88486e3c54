"""One shard: a batch of runs of one setting, as a pure function of (spec, setting, shard).

Workers rebuild everything from the spec (the barrier comes from the build cache), so a shard
gives the same numbers in-process, on a LocalCluster or on a remote worker. Run r of setting s
has the seed mix(mix(seed + G) ^ (s 2^32 + r)) and the initial state X0[r] of a pool drawn once
from the certified set (common to all settings: the settings differ only in the perturbation).
"""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np

from ..fate import FAULTED
from ..rng import GOLDEN, _mix
from .spec import Spec, load_spec


def run_seeds(seed: int, setting: int, runs: np.ndarray) -> np.ndarray:
    """The uint64 seed of each global run index of a setting."""
    with np.errstate(over="ignore"):
        key = _mix(np.uint64(seed) + GOLDEN)
        return _mix(key ^ ((np.uint64(setting) << np.uint64(32)) + np.asarray(runs, dtype=np.uint64)))


@functools.lru_cache(maxsize=4)
def _loop(card_path: str) -> dict[str, Any]:
    """The model's closed loop, built once per process (the compiled barrier is cached)."""
    from systems import get_system
    from training.model_card import load_card
    from ..barriers import CompiledBarrier
    from ..preflight import certified_margin, load_certificate
    from ..runtime import compile_barrier
    card = load_card(card_path)
    system = get_system(card.system, **card.system_params)
    onnx = card.onnx_path(card_path)
    lib = compile_barrier(onnx, inputs=system.m, order=card.order)
    cert = load_certificate(Path(card_path))
    return {"card": card, "system": system, "lib": lib, "barrier": CompiledBarrier(lib), "onnx": onnx,
            "certified_margin": certified_margin(cert), "dt": float(card.config.get("dt_control") or 0.01)}


@functools.lru_cache(maxsize=4)
def initial_states(card_path: str, runs: int, seed: int) -> np.ndarray:
    """The campaign's pool of initial states: uniform in the training box, inside the certified set."""
    from training.verify import certified_value
    from ..experiment import _initial_states
    loop = _loop(card_path)
    card, lib, system = loop["card"], loop["lib"], loop["system"]
    certified = lambda x: certified_value(lib, system, x, card.order, card.gains)  # noqa: E731
    return _initial_states(certified, np.asarray(card.domain_lo), np.asarray(card.domain_hi), runs, seed)


def make_filter(spec: Spec, setting_index: int) -> Any:
    """The setting's filter: the card's gains, the spec's margin (plus the disturbance margin
    when ``robust``), the ISSf term if asked."""
    from ..classk import Linear
    from ..filters import CBFQP, CBFProjection, HOCBFQP
    from training.margin import margin_from
    from ..perturb import disturbance_margin
    loop = _loop(str(spec.card))
    card, system = loop["card"], loop["system"]
    eps = loop["certified_margin"] if spec.margin == "certified" else margin_from(spec.margin)
    pert = spec.settings[setting_index].perturbation
    if spec.robust and pert.disturbance != "none":
        eps = eps.plus(disturbance_margin(loop["onnx"], card.domain_lo, card.domain_hi, pert.disturbance_bound))
    g = card.gains
    if card.order == 2:
        return HOCBFQP(system, Linear(g["alpha1"]), Linear(g["alpha2"]), solver="projection", margin=eps)
    if system.m == 1:
        return CBFProjection(system, Linear(g["gamma"]), margin=eps, issf=spec.issf)
    return CBFQP(system, Linear(g["gamma"]), margin=eps, issf=spec.issf)


def shard_range(spec: Spec, shard: int) -> tuple[int, int]:
    lo = shard * spec.shard_size
    return lo, min(spec.runs, lo + spec.shard_size)


def run_shard(source: dict, base: str | None, setting: int, shard: int) -> dict:
    """Simulate one shard and return it as written to disk (store.envelope): per run its seed,
    fate (cbfsim/fate.py) and the step of that fate, min constraint, min h, max slack; the
    faulted runs' step, time, state and cause; the spec hash, setting, shard and a checksum."""
    from ..simulate import simulate_batch
    from .store import envelope
    spec = load_spec(source, Path(base) if base else None, check_limits=False)
    loop = _loop(str(spec.card))
    lo, hi = shard_range(spec, shard)
    runs = np.arange(lo, hi)
    X0 = initial_states(str(spec.card), spec.runs, spec.seed)[lo:hi]
    seeds = run_seeds(spec.seed, setting, runs)
    system = loop["system"]
    traj = simulate_batch(system, loop["barrier"], make_filter(spec, setting), spec.controller, X0, spec.t_final,
                          spec.dt_control or loop["dt"], perturbation=spec.settings[setting].perturbation,
                          run_seeds=seeds, engine=spec.engine)
    fates = traj.fates
    faults = [{"run": int(lo + i), "step": f.step, "time": f.time, "state": list(f.state), "cause": f.cause}
              for i, f in enumerate(fates) if f.fate == FAULTED]
    payload = {"spec_hash": spec.spec_hash, "setting": setting, "shard": shard, "runs": [int(lo), int(hi)],
               "seeds": [int(s) for s in seeds], "fate": [f.fate for f in fates], "step": [f.step for f in fates],
               "min_constraint": [f.min_constraint for f in fates], "min_h": _finite_extreme(traj.h, np.fmin),
               "max_slack": _finite_extreme(traj.slack, np.fmax), "faults": faults}
    return envelope(payload)


def _finite_extreme(values: np.ndarray, pick: Any) -> list[float | None]:
    """Per run, the min or max (``pick``: np.fmin / np.fmax) over the finite entries; None where
    there is none (a run faulted at its start)."""
    finite = np.where(np.isfinite(values), values, np.nan)
    out = pick.reduce(finite, axis=1) if finite.shape[1] else np.full(len(values), np.nan)
    return [float(v) if np.isfinite(v) else None for v in out]
