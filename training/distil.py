"""A ReLU barrier distilled from a smooth one, to be proven piece by piece.

The exact verifiers of the literature prove ReLU networks, and cbfsim's certifier decides a
ReLU network's boundary condition pattern by pattern (``training/certify/patterns.py``).  The
trainer fits Softplus barriers well; its ReLU fits leave pieces whose gradient breaks the
condition (the obstacle-avoidance ReLU presets are refuted).  So a ReLU barrier is made from a
Softplus one trained with room to spare (a large condition margin):

1. a Sobolev fit: the student ReLU network matches the teacher's values and gradients on
   uniform states of the domain D;
2. a tune on the conditions the certifier asks: a hinge on the boundary (Nagumo) row
   sup_u L_f h + L_G h . u >= ``slack`` at the states near the student's zero level, and on
   h <= -``clearance`` where the plant's constraint fails, with the teacher's values kept.

Only the certifier says whether the result is a barrier (``benchmarks/certify_suite.py`` row
``oa_relu_64``).  Seeded; one thread's torch is deterministic run to run.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from compiler.activations import ACTIVATIONS
from compiler.api import load_model
from compiler.ir import Activation, Dense
from compiler.passes import canonicalize
from training.architectures import mlp


def teacher_module(onnx_path: str | os.PathLike) -> nn.Sequential:
    """The teacher's network, from its ONNX file, as a float64 torch module on raw states (its
    activations from the compiler's table: ``ActivationSpec.torch_module``)."""
    layers: list[nn.Module] = []
    for layer in canonicalize(load_model(onnx_path)).layers:
        if isinstance(layer, Dense):
            linear = nn.Linear(layer.in_dim, layer.out_dim)
            with torch.no_grad():
                linear.weight.copy_(torch.as_tensor(layer.weight))
                linear.bias.copy_(torch.as_tensor(layer.bias))
            layers.append(linear)
        elif isinstance(layer, Activation):
            layers.append(ACTIVATIONS[layer.kind].torch_module(dict(layer.params)))
        else:
            raise ValueError(f"teacher layer {layer!r}: only Dense layers and activations are distilled")
    return nn.Sequential(*layers).double().eval()


def _student(n: int, hidden: list[int], lo: np.ndarray, hi: np.ndarray, seed: int) -> nn.Sequential:
    """A ReLU ``architectures.mlp``, its first layer scaled so that D maps to [-1, 1] at the start."""
    net = mlp([n, *hidden, 1], "relu", seed=seed, dtype=torch.float64)
    centre, half = torch.as_tensor((lo + hi) / 2), torch.as_tensor((hi - lo) / 2)
    with torch.no_grad():
        W = net[0].weight / half
        net[0].bias.sub_(W @ centre)
        net[0].weight.copy_(W)
    return net


def _value_and_grad(net: nn.Module, x: torch.Tensor, graph: bool) -> tuple[torch.Tensor, torch.Tensor]:
    x = x.detach().requires_grad_(True)
    h = net(x)[:, 0]
    return h, torch.autograd.grad(h.sum(), x, create_graph=graph)[0]


def boundary_row(system: Any, x: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """sup over the input box of L_f h + L_G h . u at states x (B,) from grad h (B, n)."""
    row = (grad * system.f_torch(x)).sum(-1)
    if system.m:
        a = (grad.unsqueeze(-1) * system.G_torch(x)).sum(-2)                    # (B, m)
        lo = torch.as_tensor(system.u_min, dtype=x.dtype)
        hi = torch.as_tensor(system.u_max, dtype=x.dtype)
        row = row + torch.maximum(a * lo, a * hi).sum(-1)
    return row


def distil_relu(teacher_onnx: str | os.PathLike, system: Any, out_dir: str | os.PathLike, hidden: list[int], *,
                fit_steps: int = 6000, tune_steps: int = 2000, slack: float = 0.1, band: float = 0.05,
                clearance: float = 0.02, batch: int = 8192, seed: int = 0) -> Path:
    """Distil the teacher into a ReLU network of widths ``hidden`` on the plant's domain and write
    ``out_dir/model.onnx`` (module docstring); returns its path."""
    from training.network import export_onnx
    lo, hi = (np.asarray(v, dtype=float) for v in system.domain)
    teacher = teacher_module(teacher_onnx)
    student = _student(system.n, list(hidden), lo, hi, seed)
    generator = torch.Generator().manual_seed(seed)
    span, low = torch.as_tensor(hi - lo), torch.as_tensor(lo)

    def states() -> torch.Tensor:
        return low + span * torch.rand(batch, system.n, dtype=torch.float64, generator=generator)

    fit = torch.optim.Adam(student.parameters(), lr=3e-3)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(fit, max(fit_steps, 1))
    for _ in range(fit_steps):
        x = states()
        h_t, g_t = _value_and_grad(teacher, x, graph=False)
        h_s, g_s = _value_and_grad(student, x, graph=True)
        loss = ((h_s - h_t.detach()) ** 2).mean() + 0.3 * ((g_s - g_t.detach()) ** 2).mean()
        fit.zero_grad()
        loss.backward()
        fit.step()
        schedule.step()
    tune = torch.optim.Adam(student.parameters(), lr=3e-4)
    for _ in range(tune_steps):
        x = states()
        with torch.no_grad():
            h_t = teacher(x)[:, 0]
        h_s, g_s = _value_and_grad(student, x, graph=True)
        near = (h_s.detach().abs() < band).double()
        rate = boundary_row(system, x, g_s)
        condition = (torch.relu(slack - rate) * near).sum() / near.sum().clamp(min=1.0)
        unsafe = (system.constraint_torch(x) < 0).double()
        containment = (torch.relu(h_s + clearance) * unsafe).sum() / unsafe.sum().clamp(min=1.0)
        loss = ((h_s - h_t) ** 2).mean() + 10.0 * condition + 10.0 * containment
        tune.zero_grad()
        loss.backward()
        tune.step()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    return export_onnx(student.float().eval(), out / "model.onnx", system.n)
