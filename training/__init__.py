"""Neural CBF training and verification for the plants in ``systems``.

    from training import TrainConfig, train_barrier, ModelCard
    from training.verify import verify
    result = train_barrier(TrainConfig(system="van_der_pol", hidden=[64, 64]), "runs/vdp")
    report = verify("runs/vdp/model.onnx", "runs/vdp/model.json")

Modules: config (TrainConfig), samplers (states, backup-rollout labels), lie (Lie
derivatives, exact box-bound conditions), losses, pool, check (the trainer's float64
counterexample search), network (masked barrier, full-width export), trainer, artifacts
(atomic outputs), verify (compiled-model verifier), model_card, presets, cli.
Only ``verify`` imports cbfsim/compiler.  Names below are imported lazily (torch is heavy).
"""
from __future__ import annotations

_EXPORTS = {
    "TrainConfig": ".config", "ConfigError": ".config",
    "train_barrier": ".trainer", "TrainResult": ".trainer",
    "VerifyReport": ".verify",
    "ModelCard": ".model_card", "CardError": ".model_card", "load_card": ".model_card",
    "PRESETS": ".presets", "preset": ".presets", "ship": ".presets",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        import importlib
        return getattr(importlib.import_module(_EXPORTS[name], __name__), name)
    raise AttributeError(f"module 'training' has no attribute {name!r}")
