"""A model card -> the device run it describes (``RunConfig``), so the firmware runs the
plant, gains, order and input box the barrier was trained and verified for.

Every field of the card has a destination in ``CARD_KEYS``: a ``RunConfig`` field, a check
against the plant ``systems/`` builds from the card, the model itself, or provenance (kept in
``CardRun`` and the experiment's summary, not run). A card with an unknown or missing field is
refused by ``training.model_card`` (one line naming it); a card whose names or input box do
not match its own plant is refused here. What a card does not hold -- the nominal controller
and x0 (experiment choices) -- must be given; nothing is filled in silently. Keyword
overrides (the command line) replace the card's values; ``params`` overrides are merged into
the card's plant parameters.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .filters.base import check_margin
from .firmware_config import DeviceConfigError, RunConfig, check_against_plant
from .preflight import certified_margin, load_certificate

# Every model card field and where it goes (tests/test_device_card.py checks this covers
# training.model_card.ModelCard's fields, so a new card field cannot be ignored unnoticed).
CARD_KEYS: dict[str, str] = {
    "system": "RunConfig.system",
    "system_params": "RunConfig.params (the plant's parameters: cbf_system.hpp)",
    "order": "RunConfig.order (lie or lie2 in cbf_config.hpp)",
    "class_k": "RunConfig.alpha: (gamma,) for order 1, (alpha1, alpha2) for order 2",
    "domain_lo": "RunConfig.domain (the benchmark's state box, kDomainLo)",
    "domain_hi": "RunConfig.domain (kDomainHi)",
    "state_names": "checked: the plant's state names",
    "input_names": "checked: the plant's input names",
    "u_min": "checked: the plant's input box (kUMin)",
    "u_max": "checked: the plant's input box (kUMax)",
    "constraint": "checked: names the card's system (the plant's constraint is the one plotted)",
    "network": "the model: the ONNX file network.onnx beside the card",
    "system_origin": "checked: the plant resolves through systems.get_system",
    "schema": "checked by training.model_card",
    "seed": "provenance (the training seed)",
    "config": "config.dt_control -> RunConfig.dt (the certified hold period) when present; else provenance "
              "(the face rows come from the certificate: RunConfig.faces)",
    "training": "provenance (training history)",
    "verification": "provenance (the sampled verification; reported in the summary)",
}
MODELS_DIR = Path(__file__).resolve().parents[1] / "experiments" / "models"
# What a card does not hold, for each shipped model (experiments/models/NAME.json): its
# experiment's nominal controller (experiments/NAME.py), x0 (VdP: the device's original
# start) and horizon t_final (steps = t_final / dt). dt is the card's certified hold period
# (config.dt_control) where it has one; the bicycle's card has none, so it runs at its
# experiment's 100 Hz (at 1 kHz for 10 s its p_x reaches 100 m, where float32 integration
# alone drifts ~5e-3 from float64: a 1e-3 comparison would measure that, not the filter).
SHIPPED_RUNS: dict[str, dict[str, Any]] = {
    "vdp": {"nominal": "zero", "x0": (0.5, 0.0), "t_final": 10.0},
    "pendulum": {"nominal": "pd", "x0": (0.0, 0.0), "t_final": 10.0},
    "bicycle": {"nominal": "drift", "x0": (0.0, 0.0, 0.0, 10.0), "t_final": 5.0},
}


@dataclass(frozen=True)
class CardRun:
    config: RunConfig
    model: Path                         # the ONNX barrier the card names
    card: Any                           # training.model_card.ModelCard
    certificate: dict[str, Any] | None  # NAME.cert.json beside the card, if any
    card_path: Path

    @property
    def certificate_covers_run(self) -> bool:
        """True when the certificate certifies exactly this loop: its hold period and margin."""
        cert = self.certificate
        return bool(cert and cert.get("certified") and cert.get("dt") is not None
                    and np.float32(cert["dt"]) == np.float32(self.config.dt)
                    and certified_margin(cert) == check_margin(self.config.margin))


def card_path_of(model: str | os.PathLike) -> Path:
    """The card of a shipped model name (vdp, pendulum, bicycle) or of an ONNX / JSON path."""
    return MODELS_DIR / f"{model}.json" if str(model) in SHIPPED_RUNS else Path(model).with_suffix(".json")


def shipped_card_run(model: str | os.PathLike, *, nominal: str | None = None, x0: Sequence[float] | None = None,
                     **overrides: Any) -> CardRun:
    """``card_run`` for a model name or path, with SHIPPED_RUNS[card stem] (when there is one)
    as the defaults under the card and the explicit arguments (None: not given)."""
    path = card_path_of(model)
    run = dict(SHIPPED_RUNS.get(path.stem, {}))
    table_nominal, table_x0 = run.pop("nominal", None), run.pop("x0", None)
    return card_run(path, nominal=nominal or table_nominal, x0=x0 if x0 is not None else table_x0, defaults=run,
                    **overrides)


def card_gains(card: Any) -> tuple[float, ...]:
    """The card's linear class-K gains in RunConfig.alpha order."""
    keys = ("gamma",) if card.order == 1 else ("alpha1", "alpha2")
    return tuple(float(card.class_k[k]) for k in keys)


def check_card_matches_plant(card: Any, plant: Any) -> None:
    """The card's names and input box must be those of the plant built from its parameters."""
    for key, mine in (("state_names", plant.state_names), ("input_names", plant.input_names)):
        if list(getattr(card, key)) != list(mine):
            raise DeviceConfigError(f"model card {key} {getattr(card, key)} differ from {plant.name}'s {list(mine)}")
    for key, mine in (("u_min", plant.u_min), ("u_max", plant.u_max)):
        theirs = np.asarray(getattr(card, key), dtype=np.float64)
        if not np.allclose(theirs, mine, rtol=1e-12, atol=0.0):
            raise DeviceConfigError(f"model card {key} {list(theirs)} differs from {plant.name}'s {list(mine)} "
                                    "for the card's system_params")


def certified_faces(certificate: dict[str, Any] | None, card: Any) -> tuple:
    """The face rows a certifying certificate was proven with (its ``faces``, over the card's
    domain), which the firmware's filter must enforce for the run to be inside the claim."""
    if not (certificate and certificate.get("certified") and certificate.get("faces")):
        return ()
    from systems import get_system
    from training.certify.faces import faces_from_config
    return faces_from_config(get_system(card.system, **card.system_params), {"faces": certificate["faces"]},
                             np.asarray(card.domain_lo, float), np.asarray(card.domain_hi, float))


def card_run(card_path: str | os.PathLike, *, nominal: str | None, x0: Sequence[float] | None,
             defaults: dict[str, Any] | None = None, **overrides: Any) -> CardRun:
    """The device run a model card describes, with ``nominal`` and ``x0`` (not in cards) and
    ``overrides`` (RunConfig fields; ``params`` merged into the card's; None: not given) on
    top, and ``defaults`` (RunConfig fields, or t_final: steps = t_final / dt) under the card.
    dt is the card's certified hold (config.dt_control) when it has one; the filter margin is
    the certificate's when it certifies (cbfsim.preflight.certified_margin), as in the
    experiments, and so are its face rows (``certified_faces``). Raises DeviceConfigError / CardError with one line naming the problem."""
    from systems import get_system
    from training.model_card import load_card

    path = Path(card_path)
    if not path.is_file():
        raise DeviceConfigError(f"{path}: no model card")
    card = load_card(path)
    known = {f.name for f in dataclasses.fields(RunConfig)} - {"nominal", "x0"}
    defaults = dict(defaults or {})
    t_final = defaults.pop("t_final", None)
    unknown = sorted((set(overrides) | set(defaults)) - known)
    if unknown:
        raise DeviceConfigError(f"unknown run option {unknown[0]!r}; known: {', '.join(sorted(known))}")
    check_card_matches_plant(card, get_system(card.system, **card.system_params))
    if nominal is None:
        raise DeviceConfigError(f"{path.name}: a model card names no nominal controller; give one "
                                f"(--nominal) of {', '.join(get_system(card.system).nominal_names)}")
    if x0 is None:
        raise DeviceConfigError(f"{path.name}: a model card holds no initial state; give x0 "
                                f"({len(card.state_names)} values: {', '.join(card.state_names)})")
    certificate = load_certificate(path)
    values: dict[str, Any] = dict(defaults)
    if card.config.get("dt_control") is not None:
        values["dt"] = float(card.config["dt_control"])
    values.update(
        system=card.system, params=dict(card.system_params), order=card.order, alpha=card_gains(card),
        domain=(tuple(map(float, card.domain_lo)), tuple(map(float, card.domain_hi))),
        margin=certified_margin(certificate), faces=certified_faces(certificate, card), nominal=nominal,
        x0=tuple(float(v) for v in x0))
    params = overrides.pop("params", None) or {}
    values.update({k: v for k, v in overrides.items() if v is not None})
    values["params"] = {**values["params"], **params}
    if t_final is not None and overrides.get("steps") is None:
        values["steps"] = max(1, round(t_final / values.get("dt", RunConfig.dt)))
    if len(values["alpha"]) != values["order"]:
        raise DeviceConfigError(f"order {values['order']} needs {values['order']} class-K gain(s), "
                                f"got alpha {tuple(values['alpha'])}")
    config = RunConfig(**values)
    check_against_plant(config, config.plant())
    return CardRun(config, card.onnx_path(path), card, certificate, path)
