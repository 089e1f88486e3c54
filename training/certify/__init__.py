"""A sound certifier for neural CBFs and HOCBFs, for the sampled-data loop the filter runs in.

    from training.certify import certify
    cert = certify("vdp.onnx", "vdp.json", dt=0.01)      # -> Certificate
    cert = certify_module(torch_net, "darboux", condition="boundary", initial_set=["plant"])   # no card

Modules: ``problem`` (loading, refusals), ``terms`` (interval Lie terms), ``patterns`` (a ReLU
network's boundary row, activation pattern by pattern), ``sampled`` (the
zero-order-hold condition), ``conditions`` (all conditions on a batch of boxes), ``branch``
(branch and bound), ``queue`` (its open boxes, spilled to disk when large), ``shards`` (where
its chunks of boxes are evaluated: this process, worker processes, Dask), ``counterexamples``
(float64 rechecks), ``falsify`` (the search for a real violation that runs first), ``faces``
(domain faces the filter enforces as rows), ``certificate`` (the result), ``build`` (the
problem, from a card or a plant), ``plant_problem`` (a problem with no card), ``sets`` (initial
and unsafe sets), ``replay`` (a counterexample's one-line command and its float64 re-evaluation).
"""
from .api import DEFAULT_MAX_BOXES, DEFAULT_TIME_LIMIT, certify, certify_module
from .build import build_problem
from .certificate import Certificate, ConditionResult
from .problem import CertifyError

__all__ = ["DEFAULT_MAX_BOXES", "DEFAULT_TIME_LIMIT", "Certificate", "CertifyError", "ConditionResult", "build_problem",
           "certify", "certify_module"]
