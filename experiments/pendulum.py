"""Inverted pendulum with a Softplus 1-32-32-1 barrier on theta alone (relative degree 2):
the HOCBF filter, fed by the compiled second-order header (h, L_f h, L_G h, L_f^2 h and
L_G L_f h in one hyper-dual sweep), keeps |theta| <= theta_max while a PD controller aims
beyond it. The paper left this closed loop out.

    python experiments/pendulum.py
"""
import sys

from cbfsim.experiment import ExperimentSpec, main

SPEC = ExperimentSpec(
    name="pendulum",
    title="Inverted pendulum",
    controller="pd",                    # gravity compensation + PD toward pi/3, beyond theta_max = pi/4
    t_final=5.0,
    dt_control=0.005,
    showcase=[[0.0, 0.0], [0.3, 0.5], [-0.2, -1.0], [0.5, 0.0]],
    dims=(0, 1),
)

if __name__ == "__main__":
    sys.exit(main(SPEC))
