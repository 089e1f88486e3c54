"""A certificate's claim applied to a simulation: run it where the claim holds, flag where it does not.

A certificate (``NAME.cert.json`` beside a card) proves safety for one model, one control
period, one filter margin and the face rows it lists, for states in its certified set. A
simulation that changes any of these runs outside the proof. ``Claim`` carries what the
simulation must use (period, margin, face rows), the findings when it deviates (a warning,
or with ``strict`` an error), and per-run flags for a run that leaves the certified set or
the domain D it was proven over (the coordinates the certificate calls open).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from training.margin import Margin

from .preflight import Finding, certified_margin

PERIOD_RTOL = 1e-9


@dataclass
class Claim:
    """What a certificate holds for (all None/empty without a usable certificate)."""
    certificate: Mapping[str, Any] | None
    dt: float | None = None                  # the proven control period
    margin: Margin = field(default_factory=Margin)
    faces: tuple = ()                        # training.certify.faces.Face rows the filter must enforce
    lo: np.ndarray | None = None             # the box the sampled states must stay in (-inf/+inf: any value)
    hi: np.ndarray | None = None
    findings: list[Finding] = field(default_factory=list)   # the certificate does not apply as loaded
    condition: str = "filter"                # "filter" (the one-row filter), "tube" (the tube filter), ...

    @property
    def holds(self) -> bool:
        return self.certificate is not None and bool(self.certificate.get("certified")) and not self.findings

    def settings_findings(self, dt: float, margin: Margin | float | None = None) -> list[Finding]:
        """A run at another period, or with a smaller margin, than the certificate's."""
        if not self.holds:
            return []
        found = []
        if self.dt is not None and abs(dt - self.dt) > PERIOD_RTOL * max(self.dt, 1e-300):
            found.append(Finding("period_not_certified", f"the control period {dt:g} s is not the certified "
                                                         f"period {self.dt:g} s: the certificate does not cover this run"))
        eps = margin.eps if isinstance(margin, Margin) else margin
        if eps is not None and eps < self.margin.eps:
            found.append(Finding("margin_below_certified", f"the filter margin {eps:g} is below the certified "
                                                           f"margin {self.margin.eps:g}"))
        return found

    def filter_findings(self, name: str) -> list[Finding]:
        """A run with another filter than the one the certificate proves (``cbfsim simulate
        --filter``: osqp and projection are the one-row filter, tube the tube filter)."""
        if not self.holds or name == "none":
            return []
        if (self.condition == "tube") != (name == "tube"):
            proven = "the tube filter (--filter tube)" if self.condition == "tube" else "the one-row filter"
            return [Finding("filter_not_certified", f"the certificate proves {proven}; --filter {name} runs "
                                                    f"outside it")]
        return []

    def domain_findings(self, x0: np.ndarray) -> list[Finding]:
        """Initial states outside the certified domain box."""
        if self.lo is None:
            return []
        x0 = np.atleast_2d(x0)
        out = np.flatnonzero(~np.all((x0 >= self.lo) & (x0 <= self.hi), axis=1))
        if not len(out):
            return []
        shown = ", ".join(str(int(r)) for r in out[:5]) + (", ..." if len(out) > 5 else "")
        return [Finding("x0_outside_domain", f"{len(out)} of {len(x0)} runs (run {shown}) start outside the "
                                             f"certified domain: no guarantee applies to them", out.tolist())]

    def excursions(self, x: np.ndarray, level: Callable[[np.ndarray], np.ndarray], names: tuple[str, ...]
                   ) -> list[dict[str, Any]]:
        """Per run that leaves the certified set (its level < 0) or the domain box: the first step
        and state of each (x: (B, T+1, n) trajectories; level: (K, n) -> (K,))."""
        B, T1, n = x.shape
        flat = x.reshape(-1, n)
        finite = np.all(np.isfinite(flat), axis=1)
        values = np.full(len(flat), np.nan)
        if finite.any():
            values[finite] = level(flat[finite])
        out_set = ~(values.reshape(B, T1) >= 0)          # a non-finite state or level counts as out
        out_dom = np.zeros((B, T1), dtype=bool)
        if self.lo is not None:
            out_dom = ~np.all((x >= self.lo) & (x <= self.hi), axis=2)
        events = []
        for kind, mask in (("left_certified_set", out_set), ("left_domain", out_dom)):
            for run in np.flatnonzero(mask.any(axis=1)):
                step = int(np.argmax(mask[run]))
                events.append({"run": int(run), "kind": kind, "step": step,
                               "state": {nm: float(v) for nm, v in zip(names, x[run, step])}})
        return events


def load_claim(card_path: Path, card: Any, system: Any, model_path: Path | None = None) -> Claim:
    """The claim of the certificate beside ``card_path`` for this card's model (None: no claim)."""
    from .preflight import load_certificate
    certificate = load_certificate(Path(card_path))
    if certificate is None:
        return Claim(None)
    findings = []
    model_path = Path(model_path) if model_path is not None else card.onnx_path(card_path)
    recorded = certificate.get("model_hash")
    if recorded and model_path.is_file() and hashlib.sha256(model_path.read_bytes()).hexdigest() != recorded:
        findings.append(Finding("certificate_for_another_model",
                                f"the certificate beside {Path(card_path).name} is for another model (hash "
                                f"{recorded[:12]}...): it does not apply"))
    if certificate.get("system") not in (None, card.system):
        findings.append(Finding("certificate_for_another_system", f"the certificate is for system "
                                                                  f"{certificate.get('system')!r}, not {card.system!r}"))
    lo, hi = _domain(certificate, card)
    return Claim(certificate, dt=float(certificate["dt"]) if certificate.get("dt") is not None else None,
                 margin=certified_margin(certificate), faces=_faces(certificate, card, system), lo=lo, hi=hi,
                 findings=findings, condition=str(certificate.get("condition") or "filter"))


def _domain(certificate: Mapping[str, Any], card: Any) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The box the sampled states must stay in: the card's domain, except coordinates the
    certificate proves irrelevant or periodic (any value), when it lists them."""
    coords = certificate.get("coordinates") or []
    if not certificate.get("certified"):
        return None, None
    lo, hi = np.asarray(card.domain_lo, float).copy(), np.asarray(card.domain_hi, float).copy()
    for i, c in enumerate(coords[:len(lo)]):
        if c.get("case") in ("irrelevant", "periodic"):
            lo[i], hi[i] = -np.inf, np.inf
    return lo, hi


def _faces(certificate: Mapping[str, Any], card: Any, system: Any) -> tuple:
    """The face rows the certificate was proven with (its ``faces``), as filter rows."""
    spec = certificate.get("faces") or {}
    if not spec or not certificate.get("certified"):
        return ()
    from training.certify.faces import faces_from_config
    return faces_from_config(system, {"faces": spec}, np.asarray(card.domain_lo, float), np.asarray(card.domain_hi, float))
