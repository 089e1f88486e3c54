"""A campaign spec: the model, the closed loop, the grid of perturbations and the run counts.

    {"card": "experiments/models/vdp.json",        # the shipped model card (ONNX beside it)
     "runs": 2000, "shard_size": 500, "t_final": 5.0,
     "dt_control": null,                            # null: the card's certified period
     "controller": "zero",
     "filter": {"margin": "certified", "robust": false, "issf": null},
     "grid": {"plant_params": [{}, {"mu": 1.25}],  # every combination of the lists is a setting
              "disturbance": [{"kind": "none"}, {"kind": "uniform", "bound": [0.0, 0.2]}],
              "noise": [0.0], "delay": [0]},
     "seed": 0, "engine": "numpy",                  # or "compiled" (cbfsim/engine.py)
     "faults": "violation"}                         # or "separate" (cbfsim/fate.py)

SCHEMA below is the whole contract: every key's type, range and size. Before anything runs,
``load_spec`` also checks the spec against the card (per-state lists have n entries, t_final is
a whole number of control periods) and estimates the grid's total work (runs x settings x
steps, at most ``max_state_steps``) and memory (one shard's record plus the merged summary,
at most the memory available), refusing more with the numbers. Every refusal is one line
naming the key (SpecError); the CLI exits 1 without a traceback.
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compiler.errors import CbfsimError

from ..fate import FAULT_POLICIES
from ..perturb import DISTURBANCES, Perturbation
from .schema import Bool, Choice, Either, Int, List, Map, Num, Obj, SchemaError, Str, check, depth

MAX_SPEC_BYTES = 1 << 20            # a spec file larger than this is refused unread
MAX_DEPTH = 8                       # deepest nesting a spec needs is 5 (grid.disturbance[i].bound[j])
MAX_SETTINGS = 10_000               # the grid's combinations
MAX_STATE_STEPS = 10 ** 11          # default work limit: ~4 days at 0.25 million state-steps/s
MERGED_BYTES_PER_RUN = 64           # what the driver keeps per run while merging (report.py)
PER_STATE = Either(options=(Num(lo=0.0), List(item=Num(lo=0.0), min_items=1, max_items=64)))

SCHEMA = Obj(fields={
    "card": Str(max_len=4096),
    "runs": Int(1, 10 ** 9, default=1000),
    "shard_size": Int(1, 10 ** 7, default=500),
    "t_final": Num(0.0, 1e9, lo_open=True, default=5.0),
    "dt_control": Num(0.0, 1e6, lo_open=True, default=None, nullable=True),
    "controller": Str(max_len=64, default="zero"),
    "filter": Obj(default={}, fields={
        "margin": Either(default="certified", options=(Choice(choices=("certified",)), Num(lo=0.0))),
        "robust": Bool(default=False),
        "issf": Num(0.0, lo_open=True, default=None, nullable=True)}),
    "grid": Obj(default={}, fields={
        "plant_params": List(item=Map(item=Num(), max_items=32), min_items=1, default=[{}]),
        "disturbance": List(min_items=1, default=[{"kind": "none"}], item=Obj(fields={
            "kind": Choice(choices=DISTURBANCES, default="none"),
            "bound": Either(default=0.0, options=PER_STATE.options),
            "value": List(item=Num(), min_items=1, max_items=64, default=None, nullable=True)})),
        "noise": List(item=PER_STATE, min_items=1, default=[0.0]),
        "delay": List(item=Int(0, 100_000), min_items=1, default=[0])}),
    "seed": Int(0, 2 ** 64 - 1, default=0),
    "engine": Choice(choices=("numpy", "compiled"), default="numpy"),
    "faults": Choice(choices=FAULT_POLICIES, default="violation"),
    "max_state_steps": Int(1, 10 ** 15, default=MAX_STATE_STEPS),
})
NOT_HASHED = ("faults", "max_state_steps")     # they change no shard: a campaign may be resumed with others


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
    faults: str = "violation"
    spec_hash: str = ""
    steps: int = 0

    @property
    def shards_per_setting(self) -> int:
        return -(-self.runs // self.shard_size)

    @property
    def total_shards(self) -> int:
        return self.shards_per_setting * len(self.settings)


def _read(source: str | Path) -> Any:
    path = Path(source)
    try:
        size = path.stat().st_size
        if size > MAX_SPEC_BYTES:
            raise SpecError(f"campaign spec {path} is {size:,} bytes, more than the {MAX_SPEC_BYTES:,} a spec may have")
        return json.loads(path.read_text())
    except OSError as exc:
        raise SpecError(f"campaign spec {path}: {(exc.strerror or str(exc)).lower()}") from None
    except UnicodeDecodeError as exc:
        raise SpecError(f"campaign spec {path} is not a text file ({exc.reason})") from None
    except json.JSONDecodeError as exc:
        raise SpecError(f"campaign spec {path} is not valid JSON: {exc}") from None
    except RecursionError:
        raise SpecError(f"campaign spec {path} is nested too deeply to read") from None


def _card_facts(card: Path) -> dict:
    """n, m, order and the certified period of the card (and the bytes that identify the model)."""
    from training.model_card import load_card
    try:
        loaded = load_card(card)
        onnx = loaded.onnx_path(card).read_bytes()
    except (CbfsimError, OSError, ValueError) as exc:
        raise SpecError(f"campaign spec: card {card}: {exc}") from None
    digest = hashlib.sha256(card.read_bytes()).hexdigest() + hashlib.sha256(onnx).hexdigest()
    return {"n": len(loaded.state_names), "m": len(loaded.input_names), "order": loaded.order,
            "dt": float(loaded.config.get("dt_control") or 0.01), "digest": digest}


def _per_state_sizes(data: dict, n: int) -> None:
    def sized(value: Any, where: str) -> None:
        if isinstance(value, list) and len(value) != n:
            raise SpecError(f"campaign spec: {where}: expected one number per state ({n}), got {len(value)}")
    grid = data["grid"]
    for i, noise in enumerate(grid["noise"]):
        sized(noise, f"grid.noise[{i}]")
    for i, dist in enumerate(grid["disturbance"]):
        sized(dist["bound"], f"grid.disturbance[{i}].bound")
        if dist["value"] is not None:
            sized(dist["value"], f"grid.disturbance[{i}].value")
        elif dist["kind"] == "constant":
            raise SpecError(f"campaign spec: grid.disturbance[{i}].value: a constant disturbance needs {n} numbers")


def _steps(t_final: float, dt: float) -> int:
    ratio = t_final / dt
    k = int(round(ratio))
    if k < 1 or abs(ratio - k) > 1e-9 * max(1.0, ratio):
        raise SpecError(f"campaign spec: t_final = {t_final!r} must be a whole number of control periods "
                        f"dt_control = {dt!r} (ratio {ratio:.6g})")
    return k


def _check_work(data: dict, sizes: list[int], steps: int, facts: dict) -> None:
    """Refuse, before anything runs, a grid whose work or memory is beyond the limits."""
    from ..simulate import _available_memory, _record_bytes
    settings = math.prod(sizes)
    if settings > MAX_SETTINGS:
        raise SpecError(f"campaign spec: grid: {' x '.join(map(str, sizes))} = {settings:.3g} settings, more than "
                        f"the limit of {MAX_SETTINGS:,}")
    runs, limit = data["runs"], data["max_state_steps"]
    work = runs * settings * steps
    if work > limit:
        raise SpecError(f"campaign spec: runs x settings x steps = {runs:,} x {settings:,} x {steps:,} = {work:.3g} "
                        f"state-steps, more than max_state_steps = {limit:.3g}; lower runs, the grid or t_final "
                        f"(or raise max_state_steps)")
    shard = min(runs, data["shard_size"])
    per_shard = _record_bytes(shard, steps, facts["n"], facts["m"], facts["order"])
    if data["engine"] == "compiled":
        per_shard += per_shard // 2                          # its float32 records beside the widened ones
    merged = runs * settings * MERGED_BYTES_PER_RUN
    have = _available_memory()
    if have is not None and per_shard + merged > have:
        raise SpecError(f"campaign spec: a shard of {shard:,} runs x {steps:,} steps records {per_shard:.3g} bytes and "
                        f"merging {runs * settings:,} runs needs {merged:.3g}: {per_shard + merged:.3g} bytes, more "
                        f"than the {have:.3g} bytes of memory available; lower shard_size, runs or the grid")


def spec_hash(data: dict, card_digest: str) -> str:
    """sha256 of what determines every shard: the checked spec (defaults filled, ``NOT_HASHED``
    keys left out) with the card's path replaced by the bytes of the card and its ONNX file."""
    keyed = {k: v for k, v in data.items() if k not in NOT_HASHED}
    keyed["card"] = card_digest
    return hashlib.sha256(json.dumps(keyed, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def load_spec(source: str | Path | dict, base: Path | None = None, check_limits: bool = True) -> Spec:
    """The spec from a JSON file or a dict, checked against SCHEMA and the card; relative card
    paths are taken from ``base`` (the spec file's folder), else the working directory.
    ``check_limits=False`` (a worker running one shard) skips the work and memory estimate."""
    if not isinstance(source, dict):
        base = base or Path(source).parent
        raw = _read(source)
    else:
        raw = source
    try:
        depth(raw, MAX_DEPTH)
        data = check(raw, SCHEMA)
    except SchemaError as exc:
        raise SpecError(f"campaign spec: {exc}") from None
    card = Path(data["card"])
    if not card.is_absolute() and base is not None and not card.exists():
        card = base / card
    if not card.is_file():
        raise SpecError(f"campaign spec: card {card} not found")
    card = card.resolve()
    facts = _card_facts(card)
    _per_state_sizes(data, facts["n"])
    steps = _steps(data["t_final"], data["dt_control"] or facts["dt"])
    grid = data["grid"]
    axes = [grid[k] for k in ("plant_params", "disturbance", "noise", "delay")]
    if check_limits:
        _check_work(data, [len(a) for a in axes], steps, facts)
    filt = data["filter"]
    settings = []
    index = 0
    for params in axes[0]:
        for dist in axes[1]:
            for noise in axes[2]:
                for delay in axes[3]:
                    bound = dist["bound"]
                    pert = Perturbation(disturbance=dist["kind"],
                                        disturbance_bound=tuple(bound) if isinstance(bound, list) else bound,
                                        disturbance_value=None if dist["value"] is None else tuple(dist["value"]),
                                        plant_params=dict(params) or None,
                                        noise=tuple(noise) if isinstance(noise, list) else noise, delay=delay,
                                        seed=data["seed"])
                    settings.append(Setting(index, pert, filt["robust"]))
                    index += 1
    return Spec(card=card, runs=data["runs"], shard_size=min(data["runs"], data["shard_size"]),
                t_final=float(data["t_final"]), dt_control=data["dt_control"], controller=data["controller"],
                margin=filt["margin"], robust=filt["robust"], issf=filt["issf"], settings=settings,
                seed=data["seed"], engine=data["engine"], source={**data, "card": str(card)},
                faults=data["faults"], spec_hash=spec_hash(data, facts["digest"]), steps=steps)
