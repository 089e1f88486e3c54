"""The sound coverage's two bounds are sound and tight, against references they do not use.

``constraint_volume`` (upper bound of vol(S & D) / vol(D)) is compared with the exact areas of
the shipped plants' constraint sets (a disk, and bands whose edges the grid need not meet);
``refine_inside`` (lower bound of vol({h >= 0}) / vol(D)) with a seeded uniform estimate through
onnxruntime's float32 evaluation of the same network.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from training.certify.coverage import constraint_volume, refine_inside
from training.certify.problem import load_problem

MODELS = Path(__file__).resolve().parent.parent / "experiments" / "models"


def _problem(name: str):
    return load_problem(MODELS / f"{name}.onnx", MODELS / f"{name}.json")


def _exact_share(name: str, p) -> float:
    """vol(S & D) / vol(D) in the coordinates the constraint reads, from the plant's geometry."""
    params = p.system.params
    if name == "vdp":                       # the disk of radius r inside the box D
        return math.pi * params.r ** 2 / float(np.prod(p.hi - p.lo))
    if name == "pendulum":                  # |theta| <= theta_max inside [lo, hi]
        return 2 * params.theta_max / float(p.hi[0] - p.lo[0])
    # bicycle: |p_y| <= w, the lane's half-width, inside [lo, hi]
    return 2 * params.w / float(p.hi[1] - p.lo[1])


@pytest.mark.parametrize("name", ["vdp", "pendulum", "bicycle"])
def test_constraint_volume_is_a_tight_upper_bound(name):
    p = _problem(name)
    exact = _exact_share(name, p)
    upper = constraint_volume(p)
    assert upper >= exact * (1 - 1e-6)
    assert upper <= exact * 1.002, f"{name}: upper bound {upper} is loose against the exact {exact}"


def test_refine_inside_is_a_tight_lower_bound():
    ort = pytest.importorskip("onnxruntime")
    p = _problem("vdp")
    lower = refine_inside(p, p.lo[None, :].copy(), p.hi[None, :].copy(), budget=10_000)
    sess = ort.InferenceSession(str(MODELS / "vdp.onnx"))
    x = np.random.default_rng(7).uniform(p.lo, p.hi, size=(200_000, p.n))
    h = sess.run(None, {sess.get_inputs()[0].name: x.astype(np.float32)})[0].ravel()
    share = float(np.mean(h >= 0))
    sigma = math.sqrt(share * (1 - share) / len(x))
    assert lower <= share + 4 * sigma
    assert lower >= 0.98 * share, f"lower bound {lower} is loose against the sampled {share}"
