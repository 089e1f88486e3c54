"""A random agent on the Van der Pol plant, with the compiled neural CBF filtering its actions.

    pip install -e '.[gym]' && python examples/gym_random_agent.py

The agent learns nothing; the point is the wrapper: every action passes the safety filter, and
info["cbf"] says when the filter changed it. Without the filter the random inputs push the
oscillator out of the disk; with it, the episode runs to its end inside.
"""
from __future__ import annotations

import sys
from pathlib import Path

from cbfsim import CBFProjection, CompiledBarrier, Linear, compile_barrier
from cbfsim.gym import SafetyFilterWrapper, make

MODEL = Path(__file__).resolve().parent.parent / "experiments" / "models" / "vdp.onnx"


def run(filtered: bool, steps: int = 2000, seed: int = 0) -> tuple[int, int, bool]:
    env = make("van_der_pol", dt=0.01, max_steps=steps)
    if filtered:
        barrier = CompiledBarrier(compile_barrier(MODEL, inputs=1))
        env = SafetyFilterWrapper(env, barrier, CBFProjection(env.unwrapped.system, Linear(1.0)))
    env.reset(seed=seed, options={"x0": [0.5, 0.5]})
    env.action_space.seed(seed)
    interventions = 0
    for k in range(1, steps + 1):
        _, _, terminated, truncated, info = env.step(env.action_space.sample())
        interventions += bool(info.get("cbf", {}).get("intervened"))
        if terminated or truncated:
            return k, interventions, terminated
    return steps, interventions, False


def main() -> int:
    for filtered in (False, True):
        k, interventions, left = run(filtered)
        label = "with the CBF filter" if filtered else "no filter        "
        print(f"{label}: {k:5d} steps, {'LEFT the safe set' if left else 'stayed safe'}"
              + (f", filter intervened on {interventions} steps" if filtered else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
