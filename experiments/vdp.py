"""Van der Pol oscillator (mu = 1, one bounded input on x2dot) with a Softplus 2-64-64-1 neural
barrier, certified for this 5 ms zero-order-hold loop (experiments/models/vdp.cert.json): the
uncontrolled limit cycle leaves the disk constraint; the compiled barrier's filter keeps every
run inside and slides along the learned boundary (the paper's Fig. 3, whose network is ReLU:
a ReLU barrier is refuted for the sampled loop, see the README).

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
    dt_control=0.005,
    showcase=[[0.5, 0.5], [-0.8, 0.6], [1.0, -0.2], [0.0, -1.0], [-0.3, -0.4]],
    dims=(0, 1),
)

if __name__ == "__main__":
    sys.exit(main(SPEC))
