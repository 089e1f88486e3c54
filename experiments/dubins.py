"""A plant that cannot stop: the Dubins car (constant speed 1 m/s, turn rate |omega| <= 2 rad/s,
heading periodic) in a circular arena of radius 3 m with a disk obstacle of radius 0.5 m at its
centre, and a Softplus 3-64-64-1 neural barrier that reads the heading as (sin, cos) (the
exported network starts with the periodic embedding): the float64 fit of a set the input holds
with slack (systems.dubins:left_circling_margin). It is certified closed for a 2 ms hold with
filter margin 0.02 (experiments/models/dubins.cert.json: p_x and p_y bounded by the barrier, the
heading periodic), so no state of the certified set ever leaves it. The nominal controller
steers straight at the obstacle, and every start faces it; the filter must turn the car away in
time, and keep it turning inside the arena.

    python experiments/dubins.py            # shipped model; results/dubins/
    python experiments/dubins.py --retrain  # train the barrier anew first (about 5 minutes idle)
"""
import sys

import numpy as np

from cbfsim.experiment import ExperimentSpec, main


def facing_the_obstacle(x: np.ndarray) -> np.ndarray:
    """Each drawn position with its heading turned at the obstacle's centre (the origin), give or
    take 0.05 rad (the obstacle subtends at least +-0.17 rad from anywhere in the arena)."""
    out = np.array(x, dtype=np.float64)
    wobble = np.random.default_rng(len(out)).uniform(-0.05, 0.05, len(out))
    out[:, 2] = np.mod(np.arctan2(-out[:, 1], -out[:, 0]) + wobble + np.pi, 2 * np.pi) - np.pi
    return out


SPEC = ExperimentSpec(
    name="dubins",
    title="Dubins car (obstacle and arena)",
    controller="aim",                   # steers at the obstacle's centre
    t_final=10.0,
    dt_control=0.002,                   # the certificate's hold period (the claim's, when one holds)
    showcase=[[-2.0, 0.0, 0.0], [0.0, 2.2, -1.5707963267948966], [1.6, 1.6, -2.356194490192345],
              [2.0, -0.5, 2.9], [0.0, -2.0, 1.5707963267948966]],     # each facing the obstacle
    dims=(0, 1),
    portrait_fixed=[0.0, 0.0, 0.0],     # the learned h = 0 drawn at theta = 0 (heading +p_x)
    starts=facing_the_obstacle,
)

if __name__ == "__main__":
    sys.exit(main(SPEC))
