"""Lie derivatives by autograd and the exact CBF / HOCBF conditions under box input bounds.

The condition functions take plain arrays (numpy or torch, same code) so the trainer's
float64 autograd check and the verifier's compiled float32 numbers go through one formula.

Box supremum: for u in [u_min, u_max] (componentwise), a + b.u is maximised by each u_j at
the bound matching the sign of b_j, so  sup_u (a + b.u) = a + sum_j max(b_j u_min_j, b_j u_max_j).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch


def _is_torch(x: Any) -> bool:
    return isinstance(x, torch.Tensor)


def box_sup(a: Any, b: Any, u_min: Any, u_max: Any) -> Any:
    """sup over the box of a + b.u: a (B,), b (B, m), bounds (m,) -> (B,)."""
    if _is_torch(b):
        lo = torch.as_tensor(u_min, dtype=b.dtype)
        hi = torch.as_tensor(u_max, dtype=b.dtype)
        return a + torch.maximum(b * lo, b * hi).sum(-1)
    b = np.asarray(b, dtype=np.float64)
    return np.asarray(a, dtype=np.float64) + np.maximum(b * np.asarray(u_min), b * np.asarray(u_max)).sum(-1)


@dataclass
class Terms:
    """h and its Lie derivatives for a batch (order-2 fields None for order 1)."""

    h: Any
    Lf: Any
    LG: Any
    Lf2: Any = None
    LGLf: Any = None

    def detach(self) -> "Terms":
        return Terms(*(None if v is None else v.detach() for v in (self.h, self.Lf, self.LG, self.Lf2, self.LGLf)))


def lie_terms(barrier: torch.nn.Module, x: torch.Tensor, f: torch.Tensor, G: torch.Tensor, order: int,
              Dff: torch.Tensor | None = None, DfG: torch.Tensor | None = None,
              create_graph: bool = True) -> Terms:
    """Exact Lie derivatives of ``barrier`` (x -> (B, 1)) at x, given f(x), G(x) and for order 2
    Dff = f'(x) f, DfG = f'(x) G (precomputed from the system: the network is the only thing
    autograd differentiates).  L_f^2 h = f'Hf + grad h . Dff, L_G L_f h = (Hf)'G + grad h . DfG."""
    x = x.detach().requires_grad_(True)
    with torch.enable_grad():
        h = barrier(x).squeeze(-1)
        (grad,) = torch.autograd.grad(h.sum(), x, create_graph=create_graph or order == 2)
        Lf = (grad * f).sum(-1)
        LG = torch.einsum("bn,bnm->bm", grad, G)
        if order == 1:
            return Terms(h, Lf, LG)
        if Dff is None or DfG is None:
            raise ValueError("order 2 needs Dff = f'(x) f and DfG = f'(x) G")
        (Hf,) = torch.autograd.grad((grad * f).sum(), x, create_graph=create_graph)
        Lf2 = (Hf * f).sum(-1) + (grad * Dff).sum(-1)
        LGLf = torch.einsum("bn,bnm->bm", Hf, G) + torch.einsum("bn,bnm->bm", grad, DfG)
    return Terms(h, Lf, LG, Lf2, LGLf)


def residual(t: Terms, order: int, u_min: Any, u_max: Any, gamma: float = 1.0, alpha1: float = 1.0,
             alpha2: float = 1.0) -> tuple[Any, Any, Any]:
    """(residual, region, scale): the condition holds where residual >= 0; it is required on
    ``region`` (h >= 0, and psi1 = L_f h + alpha1 h >= 0 for order 2); ``scale`` is the sum of
    the terms' magnitudes (for a relative round-off tolerance).

    order 1:  sup_u [L_f h + L_G h u] + gamma h
    order 2:  sup_u [L_f^2 h + L_G L_f h u] + alpha1 L_f h + alpha2 (L_f h + alpha1 h)
              (psi1' with L_G h == 0 and linear alpha1, so alpha1'(h) = alpha1)
    """
    lib = torch if _is_torch(t.h) else np
    absmax = _bound_magnitude(u_min, u_max, t.h)
    if order == 1:
        res = box_sup(t.Lf, t.LG, u_min, u_max) + gamma * t.h
        scale = lib.abs(t.Lf) + (lib.abs(t.LG) * absmax).sum(-1) + gamma * lib.abs(t.h)
        return res, t.h >= 0, scale
    psi1 = t.Lf + alpha1 * t.h
    res = box_sup(t.Lf2, t.LGLf, u_min, u_max) + alpha1 * t.Lf + alpha2 * psi1
    scale = (lib.abs(t.Lf2) + (lib.abs(t.LGLf) * absmax).sum(-1) + (alpha1 + alpha2) * lib.abs(t.Lf)
             + alpha1 * alpha2 * lib.abs(t.h))
    return res, (t.h >= 0) & (psi1 >= 0), scale


def psi1(t: Terms, alpha1: float) -> Any:
    """The HOCBF's first-level barrier psi1 = L_f h + alpha1 h."""
    return t.Lf + alpha1 * t.h


def _bound_magnitude(u_min: Any, u_max: Any, like: Any) -> Any:
    mag = np.maximum(np.abs(np.asarray(u_min, dtype=np.float64)), np.abs(np.asarray(u_max, dtype=np.float64)))
    return torch.as_tensor(mag, dtype=like.dtype) if _is_torch(like) else mag
