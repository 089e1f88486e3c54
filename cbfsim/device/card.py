"""A model card -> the device run it describes: cbfsim/card_run.py (the compiled engine runs
cards on the host too, so it lives below both)."""
from __future__ import annotations

from ..card_run import (CARD_KEYS, MODELS_DIR, SHIPPED_RUNS, CardRun, card_gains, card_path_of, card_run,
                        check_card_matches_plant, shipped_card_run)

__all__ = ["CARD_KEYS", "MODELS_DIR", "SHIPPED_RUNS", "CardRun", "card_gains", "card_path_of", "card_run",
           "check_card_matches_plant", "shipped_card_run"]
