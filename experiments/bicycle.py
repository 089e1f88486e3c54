"""Lane keeping with the kinematic bicycle (u = [a, tan(delta)], the paper's exact input
transformation) and a Softplus 4-32-32-1 neural barrier, certified for the 1 ms hold: the
nominal controller steers toward a point outside the lane; the compiled barrier's filter,
with the certificate's speed-scaled margin, keeps |p_y| inside the lane.

    python experiments/bicycle.py
"""
import sys

from cbfsim.experiment import ExperimentSpec, main

SPEC = ExperimentSpec(
    name="bicycle",
    title="Kinematic bicycle (lane keeping)",
    controller="drift",                 # holds speed and steers toward p_y = 3 m (outside the lane)
    t_final=5.0,
    dt_control=0.001,                   # the certified period (models/bicycle.cert.json)
    showcase=[[0.0, 0.0, 0.0, 10.0], [0.0, -1.0, 0.2, 8.0], [0.0, 0.8, -0.1, 12.0]],
    dims=(0, 1),
    portrait_fixed=[0.0, 0.0, 0.0, 10.0],            # the level set drawn at psi = 0, v = 10 m/s
    portrait_limits=[[-5.0, 65.0], [-3.0, 3.5]],
)

if __name__ == "__main__":
    sys.exit(main(SPEC))
