"""Monte Carlo campaigns on Dask: ``cbfsim campaign SPEC.json`` and ``cbfsim.campaign.run(spec)``.

spec.py: the spec, its schema (schema.py) and its settings; shards.py: one shard as a pure
function; store.py: the folder (lock, spec-hash stamp, checked shard files); run.py: the driver
(Dask, resume, replay); report.py: merging (fates, violations) and the figures.
"""
from .run import pending, replay, run
from .spec import Spec, SpecError, load_spec
from .store import CampaignBusyError, DamagedShardError, ForeignShardError

__all__ = ["CampaignBusyError", "DamagedShardError", "ForeignShardError", "Spec", "SpecError", "load_spec",
           "pending", "replay", "run"]
