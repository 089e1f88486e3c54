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
