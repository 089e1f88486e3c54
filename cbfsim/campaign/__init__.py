"""Monte Carlo campaigns on Dask: ``cbfsim campaign SPEC.json`` and ``cbfsim.campaign.run(spec)``.

spec.py: the spec and its settings; shards.py: one shard as a pure function; run.py: the
driver (Dask, resume, atomic shard files, replay); report.py: merging and the figure.
"""
from .run import pending, replay, run
from .spec import Spec, SpecError, load_spec

__all__ = ["Spec", "SpecError", "load_spec", "pending", "replay", "run"]
