"""A campaign spec: the model, the closed loop, the grid of perturbations and the run counts.

    {"card": "experiments/models/vdp.json",        # the shipped model card (ONNX beside it)
     "runs": 2000, "shard_size": 500, "t_final": 5.0,
     "dt_control": null,                            # null: the card's certified period
     "controller": "zero",
     "filter": {"margin": "certified", "robust": false, "issf": null},
     "grid": {"plant_params": [{}, {"mu": 1.25}],  # every combination of the lists is a setting
              "disturbance": [{"kind": "none"}, {"kind": "uniform", "bound": [0.0, 0.2]}],
              "noise": [0.0], "delay": [0]},
     "seed": 0, "engine": "numpy"}                 # or "compiled" (cbfsim/engine.py)

Unknown keys and bad values are refused with one line naming them (SpecError).
"""
from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compiler.errors import CbfsimError

from ..perturb import DISTURBANCES, Perturbation

TOP_KEYS = {"card", "runs", "shard_size", "t_final", "dt_control", "controller", "filter", "grid", "seed",
            "engine"}
FILTER_KEYS = {"margin", "robust", "issf"}
GRID_KEYS = {"plant_params", "disturbance", "noise", "delay"}


class SpecError(CbfsimError, ValueError):
    """A campaign spec that cannot be run (one line naming the key)."""


@dataclass(frozen=True)
class Setting:
    index: int
    perturbation: Perturbation
    robust: bool

    def label(self) -> dict:
        p = self.perturbation.describe()
        return {k: p[k] for k in ("plant_params", "disturbance", "disturbance_bound", "noise", "delay")}


@dataclass
class Spec:
    card: Path
    runs: int
    shard_size: int
    t_final: float
    dt_control: float | None
    controller: str
    margin: Any
    robust: bool
    issf: float | None
    settings: list[Setting] = field(default_factory=list)
    seed: int = 0
    engine: str = "numpy"
    source: dict = field(default_factory=dict)

    @property
    def shards_per_setting(self) -> int:
        return -(-self.runs // self.shard_size)


def _positive(value: Any, name: str, kind=float) -> Any:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0 or \
            (kind is int and int(value) != value):
        raise SpecError(f"campaign spec: {name} must be a {'positive integer' if kind is int else 'number > 0'}, "
                        f"got {value!r}")
    return kind(value)


def _check_keys(d: Any, allowed: set, where: str) -> dict:
    if not isinstance(d, dict):
        raise SpecError(f"campaign spec: {where} must be an object, got {type(d).__name__}")
    unknown = sorted(set(d) - allowed)
    if unknown:
        raise SpecError(f"campaign spec: unknown key {unknown[0]!r} in {where}; allowed: {', '.join(sorted(allowed))}")
    return d


def load_spec(source: str | Path | dict, base: Path | None = None) -> Spec:
    """The spec from a JSON file or a dict; relative card paths are taken from ``base``
    (the spec file's folder), else the working directory."""
    if not isinstance(source, dict):
        path = Path(source)
        try:
            data = json.loads(path.read_text())
        except OSError as exc:
            raise SpecError(f"campaign spec {path}: {exc.strerror}") from None
        except json.JSONDecodeError as exc:
            raise SpecError(f"campaign spec {path} is not valid JSON: {exc}") from None
        base = base or path.parent
    else:
        data = source
    _check_keys(data, TOP_KEYS, "the spec")
    if "card" not in data:
        raise SpecError("campaign spec: 'card' (the model card to run) is required")
    card = Path(data["card"])
    if not card.is_absolute() and base is not None and not card.exists():
        card = base / card
    if not card.is_file():
        raise SpecError(f"campaign spec: card {card} not found")
    filt = _check_keys(data.get("filter", {}), FILTER_KEYS, "'filter'")
    margin = filt.get("margin", "certified")
    if margin != "certified" and not (isinstance(margin, (int, float)) and margin >= 0):
        raise SpecError(f"campaign spec: filter margin must be 'certified' or a number >= 0, got {margin!r}")
    issf = filt.get("issf")
    grid = _check_keys(data.get("grid", {}), GRID_KEYS, "'grid'")
    axes = {k: grid.get(k, [default]) for k, default in
            (("plant_params", {}), ("disturbance", {"kind": "none"}), ("noise", 0.0), ("delay", 0))}
    for key, values in axes.items():
        if not isinstance(values, list) or not values:
            raise SpecError(f"campaign spec: grid {key!r} must be a non-empty list")
    seed = data.get("seed", 0)
    if not isinstance(seed, int) or seed < 0:
        raise SpecError(f"campaign spec: seed must be an integer >= 0, got {seed!r}")
    settings = []
    for i, (params, dist, noise, delay) in enumerate(itertools.product(*axes.values())):
        dist = _check_keys(dist, {"kind", "bound", "value"}, "a grid disturbance")
        if dist.get("kind", "none") not in DISTURBANCES:
            raise SpecError(f"campaign spec: disturbance kind must be one of {', '.join(DISTURBANCES)}, "
                            f"got {dist.get('kind')!r}")
        bound = dist.get("bound", 0.0)
        pert = Perturbation(disturbance=dist.get("kind", "none"),
                            disturbance_bound=tuple(bound) if isinstance(bound, list) else bound,
                            disturbance_value=tuple(dist["value"]) if "value" in dist else None,
                            plant_params=dict(params) or None,
                            noise=tuple(noise) if isinstance(noise, list) else noise, delay=delay, seed=seed)
        settings.append(Setting(i, pert, bool(filt.get("robust", False))))
    engine = data.get("engine", "numpy")
    if engine not in ("numpy", "compiled"):
        raise SpecError(f"campaign spec: engine must be 'numpy' or 'compiled', got {engine!r}")
    runs = _positive(data.get("runs", 1000), "runs", int)
    dt = data.get("dt_control")
    return Spec(card=card.resolve(), runs=runs, shard_size=min(runs, _positive(data.get("shard_size", 500),
                                                                                "shard_size", int)),
                t_final=_positive(data.get("t_final", 5.0), "t_final"),
                dt_control=None if dt is None else _positive(dt, "dt_control"),
                controller=str(data.get("controller", "zero")), margin=margin,
                robust=bool(filt.get("robust", False)), issf=None if issf is None else _positive(issf, "issf"),
                settings=settings, seed=seed, engine=engine, source=data)
