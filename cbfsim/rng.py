"""A counter-based random number generator: any draw is a pure function of (seed, step, lane).

Monte Carlo runs must replay alone: run i of a batch of 10,000 must give the same noise and
disturbances when it is simulated by itself, in another shard, or in the compiled engine. A
counter-based generator gives that for free: the value for run seed s, control period k and
lane j (lane i: measurement noise on state i, lane 64 + i: disturbance on state i) is

    mix(mix(s + G) ^ (256 k + j)),   mix = the SplitMix64 finaliser, G = 0x9E3779B97F4A7C15,

mapped to [-1, 1) by its top 53 bits: every step is exact in uint64 and float64, so C++ gives
the same bits.
"""
from __future__ import annotations

import numpy as np

GOLDEN = np.uint64(0x9E3779B97F4A7C15)
NOISE_LANE = 0
DISTURBANCE_LANE = 64


def _mix(z: np.ndarray) -> np.ndarray:
    """The SplitMix64 finaliser on uint64 (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def counter_uniform(seed, step, lane) -> np.ndarray:
    """Uniform draws in [-1, 1) for broadcastable uint64 ``seed``, ``step`` and ``lane`` (< 256)."""
    seed = np.asarray(seed, dtype=np.uint64)
    step = np.asarray(step, dtype=np.uint64)
    lane = np.asarray(lane, dtype=np.uint64)
    if np.any(lane >= 256):
        raise ValueError("lane must be < 256")
    with np.errstate(over="ignore"):
        key = _mix(seed + GOLDEN)
        z = _mix(key ^ (step * np.uint64(256) + lane))
    return 2.0 * ((z >> np.uint64(11)).astype(np.float64) * 2.0 ** -53) - 1.0
