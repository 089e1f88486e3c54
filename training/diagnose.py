"""What to change when a training run fails: which condition, where, and the knobs that help.

The advice is a table of symptoms to TrainConfig fields (each one a ``cbfsim train`` flag),
written from what moved these failures on the shipped plants.  It reads the run's own config:
a knob already turned (``--label-lost`` on, a smooth activation) is not suggested again, and a
knob to raise or lower is given with a next value and the current one ("--w-condition 100 (now
10)"), a step to try, not a number that only worked once.  docs/training.md has a worked example.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np



def smooth(activation: str) -> bool:
    """Twice continuously differentiable (no ridges where the gradient jumps)."""
    from compiler.activations import preset
    try:
        return bool(preset(activation)[0].smooth)
    except (KeyError, ValueError):
        return False


@dataclass(frozen=True)
class Knob:
    """One piece of advice: turn TrainConfig ``field`` (flag ``flag``) ``turn`` because ``why``.

    turn: "raise" / "lower" (a next value from ``step``), "on" (a switch), "smooth" (the
    activation), "check" (not a setting: something to look at)."""

    flag: str
    field: str
    turn: str
    why: str
    step: Callable[[float], float | None] | None = None      # next value; None: no further to go
    order: int | None = None                                 # only for this barrier order

    def advice(self, config: Mapping[str, Any] | None) -> str | None:
        """The advice line for ``config``, or None when the knob is already turned (or n/a)."""
        cfg = config or {}
        if self.order is not None and cfg and int(cfg.get("order", 1)) != self.order:
            return None
        current = cfg.get(self.field)
        if self.turn == "check":
            return f"{self.flag}: {self.why}"
        if self.turn == "on":
            return None if current else f"{self.flag}: {self.why}"
        if self.turn == "smooth":
            if current is not None and smooth(str(current)):
                return None
            now = f"; now {current}" if current is not None else ""
            return f"{self.flag} softplus (or tanh{now}): {self.why}"
        if current is None:                     # no config to read: the direction only
            return f"{self.flag} ({self.turn}): {self.why}"
        nxt = self.step(float(current)) if self.step else None
        if nxt is None or nxt == float(current):
            return None
        return f"{self.flag} {nxt:g} (now {float(current):g}): {self.why}"


def _times(k: float, start: float) -> Callable[[float], float]:
    return lambda v: round(v * k, 6) if v > 0 else start


def _halved(v: float) -> float | None:
    return round(v / 2, 6) if v > 0 else None


def _raise_fraction(v: float) -> float | None:
    """0.1 -> 0.3 -> 0.5 -> 0.7 -> 0.9, and no further: positives need some gap to the top."""
    return None if v >= 0.9 else round(min(v + 0.2, 0.9), 2)


ROUNDS = Knob("--rounds", "rounds", "raise", "more counterexample rounds (raise --max-time with it)", _times(2, 20))
SMOOTH_ACTIVATION = Knob("--activation", "activation", "smooth",
                         "a ReLU barrier's gradient jumps at the ridges between samples, which no margin covers "
                         "(to keep ReLU for an exact verifier: --teacher-activation softplus distils it from a "
                         "smooth one)")
SAFE_FRACTION_UP = Knob("--safe-fraction", "safe_fraction", "raise",
                        "label FEWER states safe: only those whose backup rollout keeps the constraint above this "
                        "fraction of its maximum, so the set shrinks to what the input can hold", _raise_fraction)
CONDITION_MARGIN = Knob("--condition-margin", "condition_margin", "raise",
                        "train the condition with more slack than the check needs", _times(2.5, 0.02))

KNOBS: dict[str, list[Knob]] = {
    "condition": [
        Knob("--w-condition", "w_condition", "raise", "weigh the CBF condition more against the labels",
             _times(10, 1)),
        CONDITION_MARGIN,
        ROUNDS,
        SMOOTH_ACTIVATION,
        Knob("--gamma", "gamma", "raise", "a steeper class-K function lets h fall faster, so it asks less of the "
                                          "input", _times(2, 1), order=1),
        Knob("--alpha2", "alpha2", "raise", "a steeper outer class-K function lets psi1 = hdot + alpha1 h fall "
                                            "faster inside the set, so it asks less of the input", _times(2, 1),
             order=2),
        Knob("--alpha1", "alpha1", "lower", "the set's edge is hdot = -alpha1 h: a smaller alpha1 leaves out the "
                                            "states that approach the edge faster than the input can brake "
                                            "(a larger one asks MORE of the input there)",
             _halved, order=2),
        SAFE_FRACTION_UP,
        Knob("--label-lost", "label_lost", "on", "label states the backup cannot keep in the set as unsafe, so "
                                                 "the barrier stops trying to hold them (plants that cannot stop)"),
    ],
    "containment": [
        Knob("--w-unsafe", "w_unsafe", "raise", "push h below 0 harder outside the constraint set", _times(4, 1)),
        Knob("--unsafe-margin", "unsafe_margin", "raise", "ask for h <= -margin outside, not just h < 0",
             _times(2, 0.05)),
        Knob("--label-lost", "label_lost", "on", "label states whose backup rollout leaves the set as unsafe"),
    ],
    "empty": [
        Knob("--safe-fraction", "safe_fraction", "lower", "label MORE states safe (a lower threshold on the "
                                                          "backup rollout's constraint)", lambda v: round(v / 2, 4) if v > 0.001 else None),
        Knob("--w-safe", "w_safe", "raise", "pull h above 0 harder on the safe-labelled states", _times(4, 1)),
        Knob("--warm-start-steps", "warm_start_steps", "raise", "start from a longer fit to the scaled constraint",
             _times(2, 300)),
        Knob("--domain-lo/--domain-hi", "domain_lo", "check", "the box must contain the constraint set, with room "
                                                              "around it"),
    ],
    "sampled_data": [
        SMOOTH_ACTIVATION,
        Knob("--dt", "dt_control", "lower", "a shorter control period needs a smaller margin (if the loop can "
                                            "run that fast)", _halved),
        Knob("--condition-margin", "condition_margin", "raise", "the filter margin eps the certifier needs is a "
                                                                "condition margin", _times(2.5, 0.02)),
        Knob("--gamma", "gamma", "raise", "a steeper class-K function leaves more slack over one period",
             _times(2, 1), order=1),
    ],
    "feasibility": [
        Knob("--condition-margin", "condition_margin", "raise", "the certifier needs Phi >= eps > 0 on the whole "
                                                                "set, not Phi >= 0", _times(2.5, 0.02)),
        Knob("--w-condition", "w_condition", "raise", "weigh the condition more against the labels",
             _times(10, 1)),
        SAFE_FRACTION_UP,
    ],
    "undecided": [
        Knob("--certify-time-limit", "certify_time_limit", "raise", "the certifier ran out of time or boxes "
                                                                    "before deciding every box", _times(2, 120)),
        Knob("--certify-rounds", "certify_rounds", "raise", "more rounds feed the undecided boxes' centres and "
                                                            "corners back", _times(2, 3)),
        SMOOTH_ACTIVATION,
    ],
    "relative_degree": [
        Knob("--input-mask", "input_mask", "check", "feed the network only states the input does not act on "
                                                    "directly (order 2 needs L_G h = 0)"),
    ],
}


def advice(kind: str, config: Mapping[str, Any] | None, skip: Sequence[Knob] = ()) -> list[str]:
    """The ``try ...`` lines for a symptom, minus the knobs ``config`` has already turned (and ``skip``)."""
    lines, seen = [], {knob.flag for knob in skip}
    for knob in KNOBS[kind]:
        line = knob.advice(config)
        if line is not None and knob.flag not in seen:
            seen.add(knob.flag)
            lines.append(f"  try {line}")
    return lines


def _region(examples: Sequence[Mapping[str, Any]], names: Sequence[str]) -> str:
    xs = np.array([ex["x"] for ex in examples if "x" in ex], dtype=float)
    if xs.size == 0:
        return "no example states recorded"
    lo, hi = xs.min(axis=0), xs.max(axis=0)
    return ", ".join(f"{n} in [{a:.3g}, {b:.3g}]" for n, a, b in zip(names, lo, hi))


def diagnose(final_check: Mapping[str, Any], verification: Mapping[str, Any] | None,
             state_names: Sequence[str], config: Mapping[str, Any] | None = None) -> list[str]:
    """Lines for a failed run: each failing condition with its count, where it fails (the box
    around the recorded failing states) and the knobs that usually help, given the run's
    ``config`` (the card's ``config``: knobs already turned are left out). Empty when it passed."""
    lines: list[str] = []
    v = verification or {}
    condition = max(int(final_check.get("condition_failures") or 0), int(v.get("condition_failures") or 0))
    containment = max(int(final_check.get("containment_failures") or 0), int(v.get("containment_failures") or 0))
    empty = not (final_check.get("coverage") or 0) > 0 or bool(v and not v.get("n_region"))
    if condition:
        lines.append(f"the CBF condition fails at {condition} checked states"
                     + (f"; recorded examples: {_region(v.get('condition_examples', []), state_names)}" if v else ""))
        lines += advice("condition", config, skip=[SAFE_FRACTION_UP] if empty else [])   # not with an empty set
    if containment:
        lines.append(f"containment fails (h >= 0 outside the constraint set) at {containment} states"
                     + (f"; recorded examples: {_region(v.get('containment_examples', []), state_names)}" if v else ""))
        lines += advice("containment", config)
    if empty:
        lines.append("the learned set {h >= 0} is empty: it certifies nothing")
        lines += advice("empty", config)
    if v.get("max_abs_LGh"):
        lines.append(f"order 2 needs L_G h = 0, but |L_G h| reaches {v['max_abs_LGh']:.3g}")
        lines += advice("relative_degree", config)
    return lines


def diagnose_certificate(cert: Any, state_names: Sequence[str], config: Mapping[str, Any] | None = None) -> list[str]:
    """Lines for an uncertified barrier: the certifier's reason, each refuted condition with
    where its counterexamples lie, the undecided boxes, and the knobs that usually help (minus
    those ``config`` has already turned)."""
    lines = [f"the certifier did not certify it (dt {cert.dt:g} s): {cert.reason}"]
    failed = [name for name, res in cert.conditions.items() if res.counterexamples]
    for name in failed:
        examples = cert.conditions[name].counterexamples
        lines.append(f"{name} refuted at {len(examples)} state(s): {_region(examples, state_names)}")
        kind = name if name in KNOBS else "containment" if name == "containment" else "condition"
        lines += advice(kind, config)
    if cert.boxes.get("undecided"):
        boxes = [{"x": b["lo"]} for b in cert.undecided] + [{"x": b["hi"]} for b in cert.undecided]
        lines.append(f"{cert.boxes['undecided']} boxes undecided"
                     + (f", e.g. {_region(boxes, state_names)}" if cert.undecided else ""))
        lines += advice("undecided", config)
    return lines
