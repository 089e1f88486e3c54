"""The certifier's result: what was proven, where it failed, and under which assumptions.

A ``Certificate`` is plain data (``to_dict`` / ``to_json``) so it can be written beside a
model, read back by the experiment runner (which must run its filter with ``margin``) and
quoted in a summary.  ``certified`` is True only when every condition is proven on every
box: a time limit, a box budget or a minimum box width that runs out leaves boxes
*undecided*, and an undecided box is never a pass.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

CONDITIONS = ("containment", "feasibility", "sampled_data", "closure", "initial")


@dataclass
class ConditionResult:
    """One condition: proven on every box, and the confirmed counterexamples (each a dict
    with ``x``, the violated ``quantity`` and its ``value``; sampled data adds ``u``)."""
    proven: bool = False
    counterexamples: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Certificate:
    certified: bool
    claim: str
    system: str
    order: int
    dt: float
    margin: float
    conditions: dict[str, ConditionResult]
    boxes: dict[str, int]                     # proven, refuted, undecided, evaluated
    certified_coverage: float                 # sound lower bound: proven boxes with h >= 0 / vol(S & D)
    sampled_coverage: float                   # estimate: P(x in the certified set | x in S & D)
    closed_in_domain: bool                    # h < 0 proven on the domain's relevant faces
    undecided: list[dict[str, Any]]           # a few undecided boxes (lo, hi, why)
    rounding: str                             # the float32 rounding bound used
    wall_time_s: float                        # to the verdict: the problem, the falsifier, every margin's search
    versions: dict[str, str]
    model_hash: str
    margins_tried: list[dict[str, Any]] = field(default_factory=list)   # every margin tried and its outcome
    reason: str = ""                          # one line: what blocks certification
    backup_safe_coverage: float | None = None  # estimate: P(x in the certified set | the card's backup
    #                                            rollout from x keeps the constraint), seeded samples
    margin_scale: list[float] | None = None   # [bias, w_1..w_n]: the filter enforces margin * (bias + w.x)
    #                                           (training/margin.py); None: the constant margin
    coordinates: list[dict[str, Any]] = field(default_factory=list)   # per state: name, case (irrelevant,
    #                                           periodic, enforced, barrier, open), why, lo, hi (api.domain_coordinates)
    faces: dict[str, dict[str, float]] = field(default_factory=dict)  # the face rows the filter must enforce
    backup_safe_fraction: float | None = None  # estimate: P(backup-safe | S & D), the viable set's share
    sound_backup_share: float | None = None   # certified_coverage / backup_safe_fraction: the proven set's
    #                                           volume over the backup-safe (viable-set estimate) volume
    condition: str = "filter"                 # "filter" (the filter's row, margin, period) or "boundary"
    #                                           (continuous-time Nagumo on {h = 0}; api.certify)
    scope: str = "closed"                     # "closed": closure through D's open faces was asked (no claim
    #                                           needs D); "in-domain": not asked, the claim holds while in D
    problem: dict[str, Any] = field(default_factory=dict)   # a problem with no card: plant, domain, class-K,
    #                                           sets (initial_set, unsafe_set), claim scope
    command: str = ""                         # the certify command line; each counterexample's "replay" extends it
    report_time_s: float = 0.0                # after the verdict: the coverage volumes, the backup-safe share, the claim
    region_walk: dict[str, Any] | None = None  # the falsifier's walk along {h = 0} (regions.py), not a proof: pieces,
    #                                           exhausted, least_row, violations, seconds; None where it does not apply

    def to_dict(self) -> dict[str, Any]:
        return _jsonable(asdict(self))

    def to_json(self, path: str | os.PathLike | None = None) -> str:
        """JSON text; written whole to ``path`` if given (a temporary file, then renamed)."""
        text = json.dumps(self.to_dict(), indent=2, sort_keys=True, allow_nan=False) + "\n"
        if path is not None:
            path = Path(path)
            tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_text(text)
            os.replace(tmp, path)
        return text

    def summary(self) -> str:
        """A few lines for a terminal."""
        state = "CERTIFIED" if self.certified else "NOT CERTIFIED"
        scaled = "" if self.margin_scale is None else f" x ({_affine(self.margin_scale)})"
        what = ("boundary (Nagumo) condition, no margin" if self.condition == "boundary"
                else "the tube filter (rows over the period, every piece)" if self.condition == "tube"
                else f"filter margin {self.margin:g}{scaled}")
        lines = [f"{state}: {self.system}, order {self.order}, dt {self.dt:g} s, {what}"]
        for name, res in self.conditions.items():
            ce = f", {len(res.counterexamples)} counterexample(s)" if res.counterexamples else ""
            lines.append(f"  {name:<12} {'proven' if res.proven else 'not proven'}{ce}")
            for c in res.counterexamples[:3]:
                extra = (f" u={_fmt(c['u'])}" if "u" in c else "") + (f" (margin {c['margin']:g})" if "margin" in c else "")
                lines.append(f"    x={_fmt(c['x'])}{extra}: {c['quantity']} = {c['value']:.4g}")
                if c.get("replay"):
                    lines.append(f"      replay: {c['replay']}")
        b = self.boxes
        lines.append(f"  boxes: {b['proven']} proven, {b['refuted']} refuted, {b['undecided']} undecided "
                     f"({b['evaluated']} evaluated)")
        lines.append(f"  certified coverage {self.certified_coverage:.1%} (sound), "
                     f"{self.sampled_coverage:.1%} (sampled estimate)")
        if self.coordinates:
            lines.append("  closed: " + ("yes" if self.closed_in_domain else "no")
                         + (" (scope in-domain: the claim holds while in D)" if self.scope == "in-domain" else "") + " -- " +
                         ", ".join(f"{c['name']} {c['case']}" for c in self.coordinates))
        if self.backup_safe_coverage is not None and self.certified:
            lines.append(f"  backup-safe states (the viable-set estimate) in the certified set: "
                         f"{self.backup_safe_coverage:.1%} (sampled); proven volume / backup-safe volume: "
                         f"{self.sound_backup_share:.1%}")
        elif self.backup_safe_coverage is not None:
            lines.append(f"  backup-safe states inside {{h >= 0}} (not a certified set): {self.backup_safe_coverage:.1%}")
        if self.reason:
            lines.append(f"  {self.reason}")
        w = self.region_walk
        if w and not self.certified and not w["violations"]:
            reach = "every piece reachable from the sampled boundary states" if w["exhausted"] else "stopped by its time share"
            lines.append(f"  region walk (not a proof): {w['pieces']} pieces of {{h = 0}} solved in {w['seconds']:.1f} s "
                         f"({reach}), least sup_u hdot on them {w['least_row']:.4g}")
        if len(self.margins_tried) > 1:
            tries = "; ".join(f"{t['margin']:g}: " + ("certified" if t["certified"] else
                              ", ".join(f"{n} {k}" for k, n in t["counterexamples"].items()) or t["ended"])
                              for t in self.margins_tried)
            lines.append(f"  margins tried: {tries}")
        lines.append(f"  wall time {self.wall_time_s:.1f} s to the verdict, {self.report_time_s:.1f} s for this report")
        return "\n".join(lines)


def _affine(scale: list[float]) -> str:
    terms = [f"{scale[0]:g}"] if scale[0] else []
    terms += [f"{w:g} x{i}" for i, w in enumerate(scale[1:]) if w]
    return " + ".join(terms) or "0"


def _fmt(v: list[float]) -> str:
    return "[" + ", ".join(f"{x:.5g}" for x in v) + "]"


def _jsonable(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return v
