"""The model card (model.json): everything needed to use and re-check a shipped barrier.

A barrier's numbers mean nothing without the plant, constraint, input bounds, class-K gains,
order and domain it was certified for; the card carries them next to the ONNX file and the
verifier's result, and ``validate`` refuses a card with a missing or inconsistent field
(naming it) rather than letting a simulation run with the wrong assumptions.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from compiler.errors import CbfsimError

from .architectures import ACTIVATION_NAMES

SCHEMA = "cbfsim.model_card/1"


class CardError(CbfsimError, ValueError):
    """A model card field is missing or invalid (the message names the field)."""


@dataclass
class ModelCard:
    system: str                               # systems.get_system name, or an import path module:Class
    system_params: dict[str, float]           # full parameter set used in training
    state_names: list[str]
    input_names: list[str]
    u_min: list[float]                        # input box the condition was certified under
    u_max: list[float]
    constraint: dict[str, str]                # {"system", "expression", "safe_when"}
    order: int                                # 1: CBF, 2: HOCBF
    class_k: dict[str, Any]                   # {"kind": "linear", "gamma"} or {"kind", "alpha1", "alpha2"}
    domain_lo: list[float]                    # training / verification box
    domain_hi: list[float]
    network: dict[str, Any]                   # widths, activation, input_mask, onnx, state_dict, io names
    seed: int
    config: dict[str, Any]                    # the TrainConfig as a dict
    training: dict[str, Any] = field(default_factory=dict)       # time_s, rounds, check history, ...
    verification: dict[str, Any] | None = None                    # VerifyReport.to_dict()
    system_origin: str = "builtin"            # "builtin", "registered" or "import" (systems.system_origin)
    schema: str = SCHEMA

    # ------------------------------------------------------------------ (de)serialisation
    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self, path: str | os.PathLike | None = None) -> str:
        """JSON text (sorted keys, 2-space indent); also written to ``path`` if given."""
        self.validate()
        text = json.dumps(self.to_dict(), indent=2, sort_keys=True, allow_nan=False) + "\n"
        if path is not None:
            Path(path).write_text(text)
        return text

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "ModelCard":
        if not isinstance(data, Mapping):
            raise CardError(f"model card must be a JSON object, got {type(data).__name__}")
        names = [f.name for f in dataclasses.fields(cls)]
        required = [f.name for f in dataclasses.fields(cls)
                    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        missing = [k for k in required if k not in data]
        if missing:
            raise CardError(f"model card field {missing[0]!r} is missing")
        unknown = sorted(set(data) - set(names))
        if unknown:
            raise CardError(f"model card has unknown fields {unknown}")
        card = cls(**{k: data[k] for k in names if k in data})
        card.validate()
        return card

    @classmethod
    def from_json(cls, source: str | os.PathLike) -> "ModelCard":
        """From JSON text or a path to a .json file."""
        text = str(source)
        if not (isinstance(source, os.PathLike) or (not text.lstrip().startswith("{") and Path(text).is_file())):
            return cls._from_text(text)
        try:                                    # name the file in every complaint about it
            return cls._from_text(Path(source).read_text())
        except (CardError, UnicodeDecodeError) as exc:
            raise CardError(f"{source}: {exc}") from None

    @classmethod
    def _from_text(cls, text: str) -> "ModelCard":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise CardError(f"model card is not valid JSON: {exc}") from None
        return cls.from_dict(data)

    # ------------------------------------------------------------------ validation
    def validate(self) -> "ModelCard":
        """Check types and cross-field consistency; raise CardError naming the first bad field."""
        if self.schema != SCHEMA:
            raise CardError(f"schema must be {SCHEMA!r}, got {self.schema!r}")
        _string(self.system, "system")
        if self.system_origin not in ("builtin", "registered", "import"):
            raise CardError(f"system_origin must be 'builtin', 'registered' or 'import', got {self.system_origin!r}")
        _names(self.state_names, "state_names")
        _names(self.input_names, "input_names", empty_ok=True)     # [] : an autonomous plant (m = 0)
        n, m = len(self.state_names), len(self.input_names)
        if not isinstance(self.system_params, Mapping):
            raise CardError("system_params must be an object of name -> number")
        for k, v in self.system_params.items():
            _number(v, f"system_params.{k}")
        _numbers(self.u_min, m, "u_min")
        _numbers(self.u_max, m, "u_max")
        if any(a > b for a, b in zip(self.u_min, self.u_max)):
            raise CardError(f"u_min {self.u_min} exceeds u_max {self.u_max}")
        _numbers(self.domain_lo, n, "domain_lo")
        _numbers(self.domain_hi, n, "domain_hi")
        if any(a >= b for a, b in zip(self.domain_lo, self.domain_hi)):
            raise CardError(f"domain_lo {self.domain_lo} must be below domain_hi {self.domain_hi}")
        if not isinstance(self.constraint, Mapping):
            raise CardError("constraint must be an object with 'system' and 'expression'")
        for key in ("system", "expression"):
            _string(self.constraint.get(key), f"constraint.{key}")
        if self.constraint["system"] != self.system:
            raise CardError(f"constraint.system {self.constraint['system']!r} differs from system {self.system!r}")
        if self.order not in (1, 2) or isinstance(self.order, bool):
            raise CardError(f"order must be 1 or 2, got {self.order!r}")
        self._validate_class_k()
        self._validate_network(n)
        if not isinstance(self.seed, int) or isinstance(self.seed, bool):
            raise CardError(f"seed must be an integer, got {self.seed!r}")
        if not isinstance(self.config, Mapping):
            raise CardError("config must be an object (the TrainConfig)")
        if not isinstance(self.training, Mapping):
            raise CardError("training must be an object")
        if self.verification is not None and not isinstance(self.verification, Mapping):
            raise CardError("verification must be an object or null")
        return self

    def _validate_class_k(self) -> None:
        ck = self.class_k
        if not isinstance(ck, Mapping):
            raise CardError("class_k must be an object")
        if ck.get("kind") != "linear":
            raise CardError(f"class_k.kind must be 'linear', got {ck.get('kind')!r}")
        keys = ("gamma",) if self.order == 1 else ("alpha1", "alpha2")
        for key in keys:
            if key not in ck:
                raise CardError(f"class_k.{key} is missing (needed for order {self.order})")
            _number(ck[key], f"class_k.{key}")
            if ck[key] <= 0:
                raise CardError(f"class_k.{key} must be > 0, got {ck[key]!r}")

    def _validate_network(self, n: int) -> None:
        net = self.network
        if not isinstance(net, Mapping):
            raise CardError("network must be an object")
        for key in ("widths", "activation", "onnx"):
            if key not in net:
                raise CardError(f"network.{key} is missing")
        widths = net["widths"]
        if (not isinstance(widths, list) or len(widths) < 2
                or any(not isinstance(w, int) or isinstance(w, bool) or w < 1 for w in widths)):
            raise CardError(f"network.widths must list >= 2 positive integers, got {widths!r}")
        if widths[0] != n or widths[-1] != 1:
            raise CardError(f"network.widths must start with the state dimension {n} and end with 1, got {widths}")
        if net["activation"] not in ACTIVATION_NAMES:
            raise CardError(f"network.activation {net['activation']!r} unknown")
        mask = net.get("input_mask")
        if mask is not None and (not isinstance(mask, list) or not mask
                                 or any(not isinstance(i, int) or not 0 <= i < n for i in mask)):
            raise CardError(f"network.input_mask must list state indices in [0, {n}) or be null, got {mask!r}")
        _string(net["onnx"], "network.onnx")
        periodic = net.get("periodic")
        if periodic is not None:
            if not isinstance(periodic, Mapping) or not periodic:
                raise CardError(f"network.periodic must be an object of state index -> period, got {periodic!r}")
            for key, period in periodic.items():
                if not (isinstance(key, str) and key.isdigit() and int(key) < n):
                    raise CardError(f"network.periodic: {key!r} is not a state index in 0..{n - 1}")
                _number(period, f"network.periodic.{key}")
                if period <= 0:
                    raise CardError(f"network.periodic.{key} must be a period > 0, got {period!r}")
            if net.get("embedded_width") != n + len(periodic):
                raise CardError(f"network.embedded_width must be {n + len(periodic)} (n + periodic coordinates), "
                                f"got {net.get('embedded_width')!r}")

    # ------------------------------------------------------------------ convenience
    @property
    def gains(self) -> dict[str, float]:
        return {k: float(v) for k, v in self.class_k.items() if k != "kind"}

    def onnx_path(self, card_path: str | os.PathLike) -> Path:
        """The ONNX file next to ``card_path``."""
        return Path(card_path).parent / self.network["onnx"]


def _string(value: Any, name: str) -> None:
    if not isinstance(value, str) or not value:
        raise CardError(f"{name} must be a non-empty string, got {value!r}")


def _names(value: Any, name: str, empty_ok: bool = False) -> None:
    if not isinstance(value, list) or not (value or empty_ok) or any(not isinstance(v, str) or not v for v in value):
        what = "a list of strings ([] for no inputs)" if empty_ok else "a non-empty list of strings"
        raise CardError(f"{name} must be {what}, got {value!r}")


def _number(value: Any, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise CardError(f"{name} must be a finite number, got {value!r}")


def _numbers(value: Any, size: int, name: str) -> None:
    if not isinstance(value, list) or len(value) != size:
        raise CardError(f"{name} must be a list of {size} numbers, got {value!r}")
    for i, v in enumerate(value):
        _number(v, f"{name}[{i}]")


def load_card(card: "ModelCard | Mapping[str, Any] | str | os.PathLike") -> ModelCard:
    """A ModelCard from a card, a dict, JSON text or a path."""
    if isinstance(card, ModelCard):
        return card.validate()
    if isinstance(card, Mapping):
        return ModelCard.from_dict(card)
    return ModelCard.from_json(card)
