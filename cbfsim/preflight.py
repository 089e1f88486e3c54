"""What a run rests on, checked before it starts, so that a simulation never looks safer than it is.

Two kinds of findings, each a warning by default and an error with ``strict``:

* where the initial states lie: outside the constraint set (the run starts unsafe), or
  outside the set the filter keeps invariant ({h >= 0}; {h >= 0, psi1 >= 0} for order 2), where
  no barrier guarantee applies;
* what the model card proves: its sampled verification failed, or it has no certificate.

Every finding is also recorded (``Finding.to_dict``) in the trajectory metadata and in the
experiments' ``summary.json``.
"""
from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from compiler.errors import CbfsimError
from training.margin import Margin, margin_from


class UnsafeRunError(CbfsimError, ValueError):
    """A ``strict`` run whose preflight found a problem (the message lists the findings)."""


class PreflightWarning(UserWarning):
    """A run that starts outside its guarantee, or whose model card proves less than it seems."""


@dataclass(frozen=True)
class Finding:
    kind: str                       # x0_outside_constraint_set, x0_outside_certified_set, ...
    message: str
    runs: list[int] = field(default_factory=list)   # which runs of the batch (empty: all)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "message": self.message, "runs": list(self.runs)}


def _runs_text(runs: np.ndarray, total: int) -> str:
    shown = ", ".join(str(int(r)) for r in runs[:5]) + (", ..." if len(runs) > 5 else "")
    return f"{len(runs)} of {total} runs (run {shown})"


def initial_state_findings(constraint: np.ndarray, h: np.ndarray | None, psi1: np.ndarray | None = None
                           ) -> list[Finding]:
    """Findings for initial states with these constraint values, barrier values and (order 2) psi1."""
    found: list[Finding] = []
    c = np.asarray(constraint, dtype=np.float64)
    total = len(c)
    bad = np.flatnonzero(~(c >= 0))
    if len(bad):
        worst = c[bad][~np.isnan(c[bad])]
        lowest = f"min constraint {worst.min():.4g}" if len(worst) else "constraint NaN"
        found.append(Finding("x0_outside_constraint_set",
                             f"{_runs_text(bad, total)} start outside the constraint set "
                             f"({lowest}): they are unsafe from step 0", bad.tolist()))
    if h is not None:
        certified = np.asarray(h, dtype=np.float64) >= 0
        what = "{h >= 0}"
        if psi1 is not None:
            certified &= np.asarray(psi1, dtype=np.float64) >= 0
            what = "{h >= 0, psi1 >= 0}"
        bad = np.flatnonzero(~certified)
        if len(bad):
            found.append(Finding("x0_outside_certified_set",
                                 f"{_runs_text(bad, total)} start outside the set the filter keeps invariant "
                                 f"{what}: no barrier guarantee applies to them", bad.tolist()))
    return found


def card_findings(card: Any, certificate: Mapping[str, Any] | None = None) -> list[Finding]:
    """Findings about what a model card proves (``card``: a ModelCard or its dict)."""
    verification = card.get("verification") if isinstance(card, Mapping) else getattr(card, "verification", None)
    found: list[Finding] = []
    if verification is None:
        found.append(Finding("card_not_verified", "the model card has no verification report"))
    elif not verification.get("passed", False):
        found.append(Finding("card_verification_failed",
                             f"the model card's sampled verification FAILED (condition failures "
                             f"{verification.get('condition_failures')}, containment failures "
                             f"{verification.get('containment_failures')})"))
    if certificate is None:
        found.append(Finding("no_certificate", "the model has no certificate: its conditions are checked at "
                                               "samples only, not proven (run `cbfsim certify`)"))
    elif not certificate.get("certified", False):
        found.append(Finding("certificate_failed", "the model's certificate says NOT certified"))
    return found


def report(findings: Sequence[Finding], strict: bool = False, where: str = "simulation") -> list[dict[str, Any]]:
    """Warn about (or, with ``strict``, raise on) the findings; return them as dicts to record."""
    prefix = f"{where}: " if where else ""
    if findings and strict:
        raise UnsafeRunError(prefix + "; ".join(f.message for f in findings))
    for finding in findings:
        warnings.warn(prefix + finding.message, PreflightWarning, stacklevel=3)
    return [f.to_dict() for f in findings]


def load_certificate(card_path: Path) -> dict[str, Any] | None:
    """The certificate stored beside a model card (``NAME.cert.json``), or None."""
    path = card_path.with_suffix(".cert.json")
    return json.loads(path.read_text()) if path.is_file() else None


def certified_margin(certificate: dict[str, Any] | None) -> Margin:
    """The filter margin a certificate asks for (0 when there is no certificate or it failed),
    with its state scale when it has one (training/margin.py)."""
    if not (certificate and certificate.get("certified")):
        return Margin()
    return margin_from(float(certificate.get("margin") or 0.0), certificate.get("margin_scale"))


def certificate_entry(certificate: dict[str, Any] | None) -> dict[str, Any] | None:
    """The summary's ``certificate`` entry: what was proven, over how much of the set, in how long."""
    if certificate is None:
        return None
    keys = ("certified", "certified_coverage", "backup_safe_coverage", "dt", "margin", "margin_scale", "wall_time_s")
    return {k: certificate.get(k) for k in keys}
