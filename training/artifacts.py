"""Output directory: model.onnx, state_dict.pt, model.json -- all or nothing.

Files are written into a temporary sibling directory which is renamed onto the target only
after everything (including verification) succeeded, so a crash or an exception never
leaves a half-written model directory that a later run could mistake for a real one.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator

import torch

from .model_card import ModelCard
from .network import MaskedBarrier, export_onnx, full_widths, to_sequential

ONNX_NAME = "model.onnx"
STATE_NAME = "state_dict.pt"
CARD_NAME = "model.json"
CERT_NAME = "model.cert.json"           # the certifier's certificate (training against the certifier)
CURVES_NAME = "training_curves.png"


@contextlib.contextmanager
def atomic_directory(target: str | os.PathLike, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temp directory next to ``target``; on success it replaces ``target``, on any
    exception it is removed and ``target`` is left as it was."""
    target = Path(target)
    if target.exists() and not overwrite:
        raise FileExistsError(f"output directory {target} exists; pass overwrite=True (CLI: --force) to replace it")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp"))
    try:
        yield tmp
        old = None
        if target.exists():
            old = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.", suffix=".old"))
            os.replace(target, old / "previous")
        os.replace(tmp, target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_model_files(directory: Path, barrier: MaskedBarrier) -> Path:
    """state_dict.pt (trained module's state dict only) and model.onnx (full-width float32)."""
    torch.save(barrier.state_dict(), directory / STATE_NAME)
    return export_onnx(to_sequential(barrier, torch.float32), directory / ONNX_NAME, barrier.n)


def expression_text(expr) -> str:
    """A sympy expression as text with every float printed as the shortest repr that round-trips
    the double (sympy's default prints 15 digits, which is not the constraint that was trained)."""
    from sympy.printing.str import StrPrinter

    class _Exact(StrPrinter):
        def _print_Float(self, e):
            return repr(float(e))

    return _Exact().doprint(expr)


def _periodic_entry(system) -> dict[str, Any]:
    """The card's record of the periodic embedding the network starts with: {"periodic": {"i": P},
    "embedded_width": n + k} (JSON keys are strings), nothing for a plant without angles."""
    periods = getattr(system, "periodic", {})
    if not periods:
        return {}
    return {"periodic": {str(i): float(p) for i, p in sorted(periods.items())},
            "embedded_width": int(system.n) + len(periods)}


def _trained_inputs(system, mask) -> int:
    """The trained network's input width: the selected states, two features for a periodic one."""
    periods = getattr(system, "periodic", {})
    return sum(2 if i in periods else 1 for i in mask)


def build_card(cfg, system, resolved, training: dict[str, Any],
               verification: dict[str, Any] | None = None) -> ModelCard:
    """The model card for a run (see model_card.ModelCard for the fields)."""
    if cfg.order == 1:
        class_k = {"kind": "linear", "gamma": float(cfg.gamma)}
    else:
        class_k = {"kind": "linear", "alpha1": float(cfg.alpha1), "alpha2": float(cfg.alpha2)}
    params = {f.name: float(getattr(system.params, f.name)) for f in dataclasses.fields(system.params)}
    from systems import system_origin
    return ModelCard(
        system=cfg.system,
        system_origin=system_origin(cfg.system),
        system_params=params,
        state_names=list(system.state_names),
        input_names=list(system.input_names),
        u_min=[float(v) for v in resolved.u_min],
        u_max=[float(v) for v in resolved.u_max],
        constraint={"system": cfg.system, "expression": expression_text(system.constraint_expr),
                    "symbolic": str(system.symbolic.constraint), "safe_when": "constraint(x) >= 0"},
        order=int(cfg.order),
        class_k=class_k,
        domain_lo=[float(v) for v in resolved.lo],
        domain_hi=[float(v) for v in resolved.hi],
        network={"widths": full_widths(system.n, cfg.hidden), "trained_widths": [_trained_inputs(system, resolved.mask), *cfg.hidden, 1],
                 "activation": cfg.activation, "input_mask": None if cfg.input_mask is None else list(resolved.mask),
                 "onnx": ONNX_NAME, "state_dict": STATE_NAME, "input_name": "x", "output_name": "h",
                 "dtype": "float32", **_periodic_entry(system)},
        seed=int(cfg.seed),
        config=cfg.to_dict(),
        training=training,
        verification=verification,
    )
