"""Van der Pol oscillator (mu = 1, one bounded input on x2dot) with a ReLU 2-64-64-1 neural
barrier: the uncontrolled limit cycle leaves the disk constraint; the compiled barrier's
filter keeps every run inside and slides along the learned boundary (the paper's Fig. 3).

    python experiments/vdp.py            # shipped model; results/vdp/
    python experiments/vdp.py --retrain  # train the barrier anew first (about 2 minutes)
"""
import sys

from cbfsim.experiment import ExperimentSpec, main

SPEC = ExperimentSpec(
    name="vdp",
    title="Van der Pol",
    controller="zero",                  # u = 0: the oscillator follows its limit cycle
    t_final=10.0,
    dt_control=0.01,
    showcase=[[0.5, 0.5], [-0.8, 0.6], [1.0, -0.2], [0.0, -1.0], [-0.3, -0.4]],
    dims=(0, 1),
)

if __name__ == "__main__":
    sys.exit(main(SPEC))
