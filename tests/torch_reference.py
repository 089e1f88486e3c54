"""Independent references for the compiled outputs: PyTorch float64 autograd (first order)
and double backward (second order), batched over states."""
from __future__ import annotations

import numpy as np
import torch


def lie_autograd(net, x, f, G):
    """h, L_f h, L_G h by torch.autograd in float64."""
    net = net.double()
    X = torch.as_tensor(x, dtype=torch.float64).clone().requires_grad_(True)
    h = net(X)[:, 0]
    (grad,) = torch.autograd.grad(h.sum(), X)
    F = torch.as_tensor(f, dtype=torch.float64)
    Gt = torch.as_tensor(G, dtype=torch.float64)
    return (h.detach().numpy(), (grad * F).sum(1).numpy(), torch.einsum("bi,bij->bj", grad, Gt).numpy())


def lie2_autograd(net, x, f, G, Dff, DfG):
    """h, L_f h, L_G h, L_f^2 h, L_G L_f h by double backward in float64:
    L_v L_f h = f^T (d^2 h) v + dh . (f'(x) v) with f'(x) v given as Dff / DfG."""
    net = net.double()
    X = torch.as_tensor(x, dtype=torch.float64).clone().requires_grad_(True)
    F = torch.as_tensor(f, dtype=torch.float64)
    Gt = torch.as_tensor(G, dtype=torch.float64)
    h = net(X)[:, 0]
    (grad,) = torch.autograd.grad(h.sum(), X, create_graph=True)
    (hess_f,) = torch.autograd.grad((grad * F).sum(), X, retain_graph=True, allow_unused=True)   # H f
    if hess_f is None:          # a purely affine network: the Hessian is zero
        hess_f = torch.zeros_like(X)
    lf = (grad * F).sum(1)
    lg = torch.einsum("bi,bij->bj", grad, Gt)
    dff = torch.as_tensor(Dff, dtype=torch.float64)
    dfg = torch.as_tensor(DfG, dtype=torch.float64)
    lf2 = (hess_f * F).sum(1) + (grad * dff).sum(1)
    lglf = torch.einsum("bi,bij->bj", hess_f, Gt) + torch.einsum("bi,bij->bj", grad, dfg)
    return tuple(t.detach().numpy() for t in (h, lf, lg, lf2, lglf))


def max_rel_error(got, ref) -> float:
    """max |got - ref| relative to the output's scale (max |ref| over the batch, at least 1e-30)."""
    got, ref = np.asarray(got, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    scale = max(float(np.max(np.abs(ref))), 1e-30)
    return float(np.max(np.abs(got - ref)) / scale)
