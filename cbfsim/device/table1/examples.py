"""Table I's examples (the paper's three barriers), its published ESP32-S3 numbers, and the
methods measured on each: dual one-sweep and min-memory, reverse heap and static, Reverse+FD."""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]          # the repository (experiments/, firmware/)

STATES = 1000
O2 = ("-std=c++17", "-O2", "-ffp-contract=off", "-fno-math-errno")
O3N = ("-std=c++17", "-O3", "-march=native")    # counted with valgrind_compatible() (AVX-512 hosts)


@dataclass(frozen=True)
class Example:
    key: str
    label: str
    system: str
    widths: tuple[int, ...]
    activation: str
    m: int
    order: int
    seed: int
    nominal: str
    paper_flops: tuple[int, int, int] | None    # C_f, (m+1) C_df, C_ad + (m+1)(2n-1) as published


EXAMPLES = (
    Example("bicycle", "Bicycle", "bicycle", (4, 32, 32, 1), "relu", 2, 1, 1, "drift", (2432, 14397, 4817)),
    Example("vdp", "VdP", "van_der_pol", (2, 64, 64, 1), "relu", 1, 1, 2, "zero", (8704, 34558, 17284)),
    Example("pendulum", "Pendulum", "inverted_pendulum", (2, 32, 32, 1), "softplus", 1, 2, 3, "zero", None),
)

# The paper's ESP32-S3 numbers (its LaTeX macros): median / max us, jitter, memory (B, kind).
PAPER = {
    "bicycle": [("Dual", 120.87, 126.92, 384, "static"), ("Reverse", 140.33, 239.27, 800, "heap")],
    "vdp": [("Dual", 327.88, 334.03, 768, "static"), ("Reverse", 280.15, 372.08, 1568, "heap")],
    "pendulum": [("Hyper-dual", 514.56, 534.93, 512, "static"), ("Reverse+FD", 983.45, 1002.19, 800, "heap")],
}


@dataclass
class Method:
    key: str               # dual, dual_min, rev_heap, rev_static
    label: str
    kind: str              # "dual" or "reverse"
    header: str | None     # None: not available (reason in `missing`)
    static_bytes: int = 0
    flops: int = 0
    flops_note: str = ""
    heap: bool = False
    missing: str = ""
    results: dict = field(default_factory=dict)


# ----------------------------------------------------------------------------- models and headers

def has_min_memory() -> bool:
    from compiler.api import compile_model
    return "layout" in inspect.signature(compile_model).parameters


def _paper_model_file(ex: Example) -> Path | None:
    """The trained model with the paper's architecture: the shipped one, or the one kept in
    models/refuted/ when the shipped model changed activation to be certified (VdP: softplus)."""
    from compiler.api import load_model
    models = ROOT / "experiments" / "models"
    for path in (models / f"{ex.key}.onnx", models / "refuted" / f"{ex.key}_{ex.activation}.onnx"):
        if path.exists() and {a.kind for a in load_model(path).hidden_activations()} == {ex.activation}:
            return path
    return None


def load_example_model(ex: Example):
    """(IR model, source description): the trained model of the paper's architecture if there
    is one (``_paper_model_file``), else seeded random weights."""
    from compiler.api import load_model
    from compiler.ir import Dense, Model
    from compiler.passes import canonicalize
    path = _paper_model_file(ex)
    if path is not None:
        model = canonicalize(load_model(path, name="barrier"))
        source = str(path.relative_to(ROOT))
        if ex.key == "pendulum" and model.input_dim == 1:
            # the paper's 1-32-32-1 net on theta: the equivalent 2-input net has a zero theta_dot column
            first = model.layers[0]
            assert isinstance(first, Dense)
            w = np.concatenate([first.weight, np.zeros((first.out_dim, 1))], axis=1)
            model = Model((replace(first, weight=w), *model.layers[1:]), 2, model.name, model.source)
            source += " (theta-only net, zero theta_dot column added)"
        return model, source
    import torch
    from training.architectures import mlp
    net = mlp(ex.widths, ex.activation, seed=ex.seed)
    if ex.key == "pendulum":
        with torch.no_grad():
            net[0].weight[:, 1] = 0.0
    model = canonicalize(load_model(net.eval(), name="barrier"))
    return model, f"seeded random weights (training.architectures.mlp, seed {ex.seed}; no trained {ex.activation} model)"


def make_methods(ex: Example, model) -> list[Method]:
    from compiler.activations import ACTIVATIONS
    from compiler.api import compile_model
    from compiler.emit_reverse import emit_reverse_header, reverse_flops
    from ..config import RunConfig, plant_math
    widths = model.widths()
    c_sigma = [ACTIVATIONS[a.kind].c_sigma for a in model.hidden_activations()]
    cache_bytes = 4 * sum(widths[1:-1])
    dual_name = "Dual" if ex.order == 1 else "Hyper-dual"
    methods = []
    math = plant_math(RunConfig(system=ex.system, order=ex.order, alpha=(1.0,) * ex.order))  # the benchmark's f, G
    src = compile_model(model, inputs=ex.m, order=ex.order, name="barrier", math=math)
    rep = src.report
    note = f"one sweep; paper (m+1) C_df = {rep.paper_dual_total:,}" if ex.order == 1 else "one sweep (compiler count)"
    methods.append(Method("dual", f"{dual_name} one-sweep", "dual", src.header, rep.workspace_bytes,
                          rep.one_sweep_total, note))
    if has_min_memory():
        src2 = compile_model(model, inputs=ex.m, order=ex.order, name="barrier", layout="min_memory", math=math)
        rep2 = src2.report
        note2 = "(m+1) C_df" if ex.order == 1 else "one direction at a time (compiler count)"
        methods.append(Method("dual_min", f"{dual_name} min-memory", "dual", src2.header, rep2.workspace_bytes,
                              rep2.one_sweep_total, note2))
    else:
        methods.append(Method("dual_min", f"{dual_name} min-memory", "dual", None,
                              missing="compile_model(layout='min_memory') not available yet"))
    rev = "Reverse" if ex.order == 1 else "Reverse+FD"
    fl = reverse_flops(widths, c_sigma, ex.m, ex.order)
    fnote = "C_ad + (m+1)(2n-1)" if ex.order == 1 else "3 C_ad + FD assembly"
    for style in ("heap", "static"):
        text = emit_reverse_header(model, ex.m, style=style, name="barrier", order=ex.order)
        methods.append(Method(f"rev_{style}", f"{rev} {style}", "reverse", text,
                              0 if style == "heap" else cache_bytes, fl, fnote, heap=style == "heap"))
    return methods


