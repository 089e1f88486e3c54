"""What to change when a training run fails: which condition, where, and the knobs that help.

The advice is a table of symptoms to TrainConfig fields (each one a ``cbfsim train`` flag),
written from what moved these failures on the shipped plants; it names the knobs and the
direction to turn them, never a number that only worked once.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

KNOBS = {
    "condition": [
        "--w-condition (raise, e.g. x10): weigh the CBF condition more against the labels",
        "--condition-margin (raise): train the condition with more slack than the check needs",
        "--rounds / --max-time (raise): more counterexample rounds",
        "--activation softplus or tanh: a ReLU barrier's gradient jumps at ridges between samples",
        "--gamma (raise; order 2: --alpha1/--alpha2): a steeper class-K function asks less of the input",
        "--safe-fraction (raise): claim fewer states as safe, so the set shrinks to what the input can hold",
    ],
    "containment": [
        "--w-unsafe (raise): push h below 0 harder outside the constraint set",
        "--unsafe-margin (raise): ask for h <= -margin outside, not just h < 0",
        "--label-lost: label states whose backup rollout leaves the set as unsafe",
    ],
    "empty": [
        "--safe-fraction (lower): label more states as safe",
        "--w-safe (raise), --warm-start-steps (raise): start from the scaled constraint",
        "check --domain-lo/--domain-hi: the box must contain the constraint set",
    ],
    "sampled_data": [
        "--activation softplus (or tanh): a ReLU gradient jumps across ridges, so no margin covers a held input",
        "--dt (lower): a shorter control period needs a smaller margin",
        "--condition-margin (raise): the filter margin eps the certifier needs is a condition margin",
        "--gamma (raise): a steeper class-K function leaves more slack over one period",
    ],
    "feasibility": [
        "--condition-margin (raise): the certifier needs Phi >= eps > 0 on the whole set, not Phi >= 0",
        "--w-condition (raise), --safe-fraction (raise): a smaller set the input can hold",
    ],
    "undecided": [
        "--certify-time-limit (raise): the certifier ran out of time or boxes before deciding every box",
        "--certify-rounds (raise): more rounds feed the undecided boxes' centres and corners back",
        "--activation softplus (or tanh): smooth barriers need fewer, larger boxes",
    ],
    "relative_degree": [
        "--input-mask: feed the network only states the input does not act on directly (order 2 needs L_G h = 0)",
    ],
}


def _region(examples: Sequence[Mapping[str, Any]], names: Sequence[str]) -> str:
    xs = np.array([ex["x"] for ex in examples if "x" in ex], dtype=float)
    if xs.size == 0:
        return "no example states recorded"
    lo, hi = xs.min(axis=0), xs.max(axis=0)
    return ", ".join(f"{n} in [{a:.3g}, {b:.3g}]" for n, a, b in zip(names, lo, hi))


def diagnose(final_check: Mapping[str, Any], verification: Mapping[str, Any] | None,
             state_names: Sequence[str]) -> list[str]:
    """Lines for a failed run: each failing condition with its count, where it fails (the box
    around the recorded failing states) and the knobs that usually help. Empty when it passed."""
    lines: list[str] = []
    v = verification or {}
    condition = max(int(final_check.get("condition_failures") or 0), int(v.get("condition_failures") or 0))
    containment = max(int(final_check.get("containment_failures") or 0), int(v.get("containment_failures") or 0))
    if condition:
        lines.append(f"the CBF condition fails at {condition} checked states"
                     + (f"; recorded examples: {_region(v.get('condition_examples', []), state_names)}" if v else ""))
        lines += [f"  try {k}" for k in KNOBS["condition"]]
    if containment:
        lines.append(f"containment fails (h >= 0 outside the constraint set) at {containment} states"
                     + (f"; recorded examples: {_region(v.get('containment_examples', []), state_names)}" if v else ""))
        lines += [f"  try {k}" for k in KNOBS["containment"]]
    if not (final_check.get("coverage") or 0) > 0 or (v and not v.get("n_region")):
        lines.append("the learned set {h >= 0} is empty: it certifies nothing")
        lines += [f"  try {k}" for k in KNOBS["empty"]]
    if v.get("max_abs_LGh"):
        lines.append(f"order 2 needs L_G h = 0, but |L_G h| reaches {v['max_abs_LGh']:.3g}")
        lines += [f"  try {k}" for k in KNOBS["relative_degree"]]
    return lines


def diagnose_certificate(cert: Any, state_names: Sequence[str]) -> list[str]:
    """Lines for an uncertified barrier: the certifier's reason, each refuted condition with
    where its counterexamples lie, the undecided boxes, and the knobs that usually help."""
    lines = [f"the certifier did not certify it (dt {cert.dt:g} s): {cert.reason}"]
    failed = [name for name, res in cert.conditions.items() if res.counterexamples]
    for name in failed:
        examples = cert.conditions[name].counterexamples
        lines.append(f"{name} refuted at {len(examples)} state(s): {_region(examples, state_names)}")
        lines += [f"  try {k}" for k in KNOBS.get(name, KNOBS["condition"] if name != "containment"
                                                 else KNOBS["containment"])]
    if cert.boxes.get("undecided"):
        boxes = [{"x": b["lo"]} for b in cert.undecided] + [{"x": b["hi"]} for b in cert.undecided]
        lines.append(f"{cert.boxes['undecided']} boxes undecided"
                     + (f", e.g. {_region(boxes, state_names)}" if cert.undecided else ""))
        lines += [f"  try {k}" for k in KNOBS["undecided"]]
    return lines
