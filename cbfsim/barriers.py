"""One barrier interface, batched over states, with three implementations.

A barrier returns h and its Lie derivatives along a control-affine system
x' = f(x) + G(x) u (G is n x m, row-major, batched as (B, n, m)):

* first order  ``lie(x, F, G)``            -> h, L_f h, L_G h
* second order ``lie2(x, F, G, Dff, DfG)`` -> additionally L_f^2 h, L_G L_f h, where
  Dff = f'(x) f and DfG = f'(x) G come from the system (the barrier never differentiates f).

With H the Hessian of h:  L_f^2 h = f'H f + grad(h).Dff  and
L_G L_f h = f'H G + grad(h).DfG  (the hyper-dual identity the compiler implements).

``CompiledBarrier`` wraps the C++ runtime, ``TorchBarrier`` is the float64 autograd
reference, ``AnalyticBarrier`` takes user-written numpy functions. ``barrier_terms``
evaluates f, G (and f' products) from a system and calls the barrier once for the batch.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Callable, Protocol, runtime_checkable

import numpy as np

from compiler.errors import ShapeError  # one exception hierarchy for the whole project
from compiler.periodic import is_periodic_embedding


_F64 = np.dtype(np.float64)


def as_batch(x: Any, n: int, what: str = "x") -> np.ndarray:
    """``x`` as a float64 (B, n) array; a single (n,) state becomes a batch of one."""
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[1] != n:
        raise ShapeError(f"{what}: expected shape (B, {n}) or ({n},), got {np.shape(x)}")
    return arr


def check_shape(arr: Any, shape: tuple[int, ...], what: str) -> np.ndarray:
    """``arr`` as float64 with exactly ``shape``, else ShapeError naming both shapes."""
    out = np.asarray(arr, dtype=np.float64)
    if out.shape != tuple(shape):
        raise ShapeError(f"{what}: expected shape {tuple(shape)}, got {out.shape}")
    return out


@dataclass(frozen=True)
class LieTerms:
    """First-order barrier terms for a batch: h (B,), Lf (B,), Lg (B, m)."""

    h: np.ndarray
    Lf: np.ndarray
    Lg: np.ndarray

    @property
    def batch_size(self) -> int:
        return int(self.h.shape[0])

    @property
    def m(self) -> int:
        return int(self.Lg.shape[1])


@dataclass(frozen=True)
class LieTerms2(LieTerms):
    """Second-order terms: also Lf2 = L_f^2 h (B,) and LgLf = L_G L_f h (B, m)."""

    Lf2: np.ndarray = None  # type: ignore[assignment]
    LgLf: np.ndarray = None  # type: ignore[assignment]


@runtime_checkable
class Barrier(Protocol):
    """What the simulator and filters need from a barrier (all methods batched)."""

    n: int
    m: int
    order: int

    def value(self, x: np.ndarray) -> np.ndarray: ...

    def lie(self, x: np.ndarray, F: np.ndarray, G: np.ndarray) -> LieTerms: ...

    def lie2(self, x: np.ndarray, F: np.ndarray, G: np.ndarray, Dff: np.ndarray,
             DfG: np.ndarray) -> LieTerms2: ...


class _Checked:
    """Shared input/output validation so each implementation only does the math."""

    n: int
    m: int
    order: int

    def _inputs(self, x: Any, F: Any, G: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        X = as_batch(x, self.n, "x")
        B = X.shape[0]
        F = np.asarray(F, dtype=np.float64)
        G = np.asarray(G, dtype=np.float64)
        if F.ndim == 1:
            F = F[None, :]
        if G.ndim == 2:
            G = G[None, :, :]
        return X, check_shape(F, (B, self.n), "f(x)"), check_shape(G, (B, self.n, self.m), "G(x)")

    def _inputs2(self, x: Any, F: Any, G: Any, Dff: Any, DfG: Any):
        if self.order < 2:
            raise ValueError(f"{type(self).__name__} supports order {self.order}; lie2 needs order 2")
        X, F, G = self._inputs(x, F, G)
        B = X.shape[0]
        Dff = np.asarray(Dff, dtype=np.float64)
        DfG = np.asarray(DfG, dtype=np.float64)
        if Dff.ndim == 1:
            Dff = Dff[None, :]
        if DfG.ndim == 2:
            DfG = DfG[None, :, :]
        Dff = check_shape(Dff, (B, self.n), "f'(x) f")
        DfG = check_shape(DfG, (B, self.n, self.m), "f'(x) G")
        return X, F, G, Dff, DfG

    def _terms(self, h: Any, Lf: Any, Lg: Any, B: int) -> LieTerms:
        return LieTerms(check_shape(h, (B,), "h"), check_shape(Lf, (B,), "L_f h"),
                        check_shape(Lg, (B, self.m), "L_G h"))

    def _terms2(self, h: Any, Lf: Any, Lg: Any, Lf2: Any, LgLf: Any, B: int) -> LieTerms2:
        first = self._terms(h, Lf, Lg, B)
        return LieTerms2(first.h, first.Lf, first.Lg, check_shape(Lf2, (B,), "L_f^2 h"),
                         check_shape(LgLf, (B, self.m), "L_G L_f h"))


class AnalyticBarrier(_Checked):
    """User-written barrier: ``h(X)->(B,)``, ``grad(X)->(B,n)``, optional ``hess(X)->(B,n,n)``.

    Order is 2 when a Hessian is given, else 1. Functions receive float64 (B, n) arrays.
    """

    def __init__(self, h: Callable[[np.ndarray], np.ndarray], grad: Callable[[np.ndarray], np.ndarray],
                 hess: Callable[[np.ndarray], np.ndarray] | None = None, *, n: int, m: int):
        self._h, self._grad, self._hess = h, grad, hess
        self.n, self.m = int(n), int(m)
        self.order = 2 if hess is not None else 1

    def value(self, x: np.ndarray) -> np.ndarray:
        X = as_batch(x, self.n)
        return check_shape(self._h(X), (X.shape[0],), "h")

    def lie(self, x: np.ndarray, F: np.ndarray, G: np.ndarray) -> LieTerms:
        X, F, G = self._inputs(x, F, G)
        B = X.shape[0]
        dh = check_shape(self._grad(X), (B, self.n), "grad h")
        return self._terms(self._h(X), np.einsum("bi,bi->b", dh, F), np.einsum("bi,bij->bj", dh, G), B)

    def lie2(self, x: np.ndarray, F: np.ndarray, G: np.ndarray, Dff: np.ndarray,
             DfG: np.ndarray) -> LieTerms2:
        X, F, G, Dff, DfG = self._inputs2(x, F, G, Dff, DfG)
        B = X.shape[0]
        dh = check_shape(self._grad(X), (B, self.n), "grad h")
        Hf = np.einsum("bij,bj->bi", check_shape(self._hess(X), (B, self.n, self.n), "Hessian of h"), F)
        return self._terms2(self._h(X), np.einsum("bi,bi->b", dh, F), np.einsum("bi,bij->bj", dh, G),
                            np.einsum("bi,bi->b", Hf, F) + np.einsum("bi,bi->b", dh, Dff),
                            np.einsum("bi,bij->bj", Hf, G) + np.einsum("bi,bij->bj", dh, DfG), B)


class TorchBarrier(_Checked):
    """Float64 autograd reference for a torch module mapping (B, n) -> (B,) or (B, 1).

    First order uses one backward pass; second order one extra (double) backward for the
    Hessian-vector product H f, since f'H G_j = (H f).G_j. The module is deep-copied and
    converted to float64, so the caller's module is untouched. Rows must be independent
    (no batch-coupling layers), which holds for eval-mode MLPs. For the small batches of a
    closed loop, ``torch.set_num_threads(1)`` is much faster (the intra-op pool only adds
    overhead, ~50x on a busy machine); that global setting is left to the caller.
    """

    def __init__(self, module: Any, m: int, n: int | None = None):
        import torch

        self._torch = torch
        self.module = copy.deepcopy(module).to(torch.float64).eval()
        for p in self.module.parameters():
            p.requires_grad_(False)
        embedded = [mod for mod in self.module.modules() if is_periodic_embedding(mod)]
        if n is None and embedded:            # the state enters the periodic embedding, not the first Linear
            n = embedded[0].n
        if n is None:
            linears = [mod for mod in self.module.modules() if isinstance(mod, torch.nn.Linear)]
            if not linears:
                raise ValueError("TorchBarrier: cannot infer n (no nn.Linear); pass n=")
            n = linears[0].in_features
        self.n, self.m, self.order = int(n), int(m), 2

    def _forward(self, X: Any) -> Any:
        out = self.module(X)
        if out.numel() != X.shape[0]:
            raise ShapeError(f"barrier module output: expected shape ({X.shape[0]},) or "
                             f"({X.shape[0]}, 1), got {tuple(out.shape)}")
        return out.reshape(X.shape[0])

    def value(self, x: np.ndarray) -> np.ndarray:
        torch = self._torch
        X = as_batch(x, self.n)
        with torch.no_grad():
            return self._forward(torch.from_numpy(X)).numpy().copy()

    def _grad(self, X: np.ndarray, create_graph: bool):
        torch = self._torch
        Xt = torch.from_numpy(X.copy()).requires_grad_(True)
        with torch.enable_grad():
            h = self._forward(Xt)
            (dh,) = torch.autograd.grad(h.sum(), Xt, create_graph=create_graph)
        return Xt, h, dh

    def lie(self, x: np.ndarray, F: np.ndarray, G: np.ndarray) -> LieTerms:
        X, F, G = self._inputs(x, F, G)
        _, h, dh = self._grad(X, create_graph=False)
        dh = dh.detach().numpy()
        return self._terms(h.detach().numpy(), np.einsum("bi,bi->b", dh, F),
                           np.einsum("bi,bij->bj", dh, G), X.shape[0])

    def lie2(self, x: np.ndarray, F: np.ndarray, G: np.ndarray, Dff: np.ndarray,
             DfG: np.ndarray) -> LieTerms2:
        torch = self._torch
        X, F, G, Dff, DfG = self._inputs2(x, F, G, Dff, DfG)
        Xt, h, dh_t = self._grad(X, create_graph=True)
        Ft = torch.from_numpy(F)
        with torch.enable_grad():
            Hf = None
            if dh_t.requires_grad:
                (Hf,) = torch.autograd.grad((dh_t * Ft).sum(), Xt, allow_unused=True)
            if Hf is None:  # h affine in x: nothing left to differentiate, the Hessian is zero
                Hf = torch.zeros_like(Xt)
        dh, Hf = dh_t.detach().numpy(), Hf.detach().numpy()
        return self._terms2(h.detach().numpy(), np.einsum("bi,bi->b", dh, F), np.einsum("bi,bij->bj", dh, G),
                            np.einsum("bi,bi->b", Hf, F) + np.einsum("bi,bi->b", dh, Dff),
                            np.einsum("bi,bij->bj", Hf, G) + np.einsum("bi,bij->bj", dh, DfG), X.shape[0])


class CompiledBarrier(_Checked):
    """Adapter for ``cbfsim.runtime.compile_barrier`` objects (``lib.lie`` / ``lib.lie2``)."""

    def __init__(self, lib: Any):
        self.lib = lib
        self.n, self.m, self.order = int(lib.n), int(lib.m), int(lib.order)

    def value(self, x: np.ndarray) -> np.ndarray:
        X = as_batch(x, self.n)
        B = X.shape[0]
        h, _, _ = self.lib.lie(X, np.zeros((B, self.n)), np.zeros((B, self.n, self.m)))
        return check_shape(h, (B,), "h")

    def lie(self, x: np.ndarray, F: np.ndarray, G: np.ndarray) -> LieTerms:
        n, m = self.n, self.m
        if type(x) is type(F) is type(G) is np.ndarray and x.shape == F.shape == (1, n) and G.shape == (1, n, m) \
                and x.dtype == F.dtype == G.dtype == _F64:
            # one state: the library's single-state entry (float64 packed, converted to the
            # header's scalar in C -- the conversion numpy does for the batch entry -- then
            # the same C function, so the same bits) costs a few us instead of ~20 us; it is
            # thread safe (no output buffer shared between calls), like the batch entry.
            h, Lf, Lg = self.lib.lie(x[0], F[0], G[0])
            Lg1 = np.array([Lg], dtype=np.float64)
            if Lg1.shape == (1, m):
                return LieTerms(np.array([h], dtype=np.float64), np.array([Lf], dtype=np.float64), Lg1)
            return self._terms(h, Lf, Lg, 1)
        X, F, G = self._inputs(x, F, G)
        h, Lf, Lg = self.lib.lie(X, F, G)
        return self._terms(h, Lf, Lg, X.shape[0])

    def lie2(self, x: np.ndarray, F: np.ndarray, G: np.ndarray, Dff: np.ndarray,
             DfG: np.ndarray) -> LieTerms2:
        n, m = self.n, self.m
        if type(x) is type(F) is type(G) is type(Dff) is type(DfG) is np.ndarray and self.order == 2 \
                and x.shape == F.shape == Dff.shape == (1, n) and G.shape == DfG.shape == (1, n, m) \
                and x.dtype == F.dtype == G.dtype == Dff.dtype == DfG.dtype == _F64:
            # one state: the single-state entry, as in ``lie`` (same C function, same bits)
            h, Lf, Lg, Lf2, LgLf = self.lib.lie2(x[0], F[0], G[0], Dff[0], DfG[0])
            Lg1, LgLf1 = np.array([Lg], dtype=np.float64), np.array([LgLf], dtype=np.float64)
            if Lg1.shape == LgLf1.shape == (1, m):
                return LieTerms2(np.array([h], dtype=np.float64), np.array([Lf], dtype=np.float64), Lg1,
                                 np.array([Lf2], dtype=np.float64), LgLf1)
            return self._terms2(h, Lf, Lg, Lf2, LgLf, 1)
        X, F, G, Dff, DfG = self._inputs2(x, F, G, Dff, DfG)
        h, Lf, Lg, Lf2, LgLf = self.lib.lie2(X, F, G, Dff, DfG)
        return self._terms2(h, Lf, Lg, Lf2, LgLf, X.shape[0])


def check_terms_call(barrier: Barrier, system: Any, order: int) -> None:
    """The checks of ``barrier_terms`` that depend on neither the state nor the step (the
    simulator makes them once per run): the order exists and the barrier has it, the shapes match."""
    if order not in (1, 2):
        raise ValueError(f"order must be 1 or 2, got {order!r}")
    if order > barrier.order:
        raise ValueError(f"order {order} requested but {type(barrier).__name__} supports order {barrier.order}")
    if (barrier.n, barrier.m) != (system.n, system.m):
        raise ShapeError(f"barrier has (n, m) = ({barrier.n}, {barrier.m}) but system "
                         f"{getattr(system, 'name', '?')!r} has ({system.n}, {system.m})")


def barrier_terms(barrier: Barrier, system: Any, x: Any, order: int = 1) -> LieTerms | LieTerms2:
    """Evaluate f, G (and f'(x) f, f'(x) G for order 2) from ``system`` at the batch ``x``
    and call the barrier once. Returns LieTerms (order 1) or LieTerms2 (order 2)."""
    check_terms_call(barrier, system, order)
    X = as_batch(x, system.n, "x")
    F = system.f(X)
    G = system.G(X)
    if order == 1:
        return barrier.lie(X, F, G)
    F = np.asarray(F, dtype=np.float64)
    return barrier.lie2(X, F, G, system.df(X, F), system.df(X, np.asarray(G, dtype=np.float64)))


class TermStack(list):
    """The LieTerms (or LieTerms2) of several barriers at the same states, in row order: a
    list, which is how the multi-row filters take them (CBFQP(n_barriers=k)). It also answers
    ``h``, ``Lf``, ``Lg`` (``Lf2``, ``LgLf``) as the binding barrier's (the smallest h per
    state, the value of the intersection of the safe sets), which is what the simulator records."""

    def _binding(self, name: str) -> np.ndarray:
        h = np.stack([np.asarray(t.h, dtype=np.float64) for t in self])
        values = np.stack([np.asarray(getattr(t, name), dtype=np.float64) for t in self])
        return values[h.argmin(axis=0), np.arange(h.shape[1])]

    h = property(lambda self: self._binding("h"))
    Lf = property(lambda self: self._binding("Lf"))
    Lg = property(lambda self: self._binding("Lg"))
    Lf2 = property(lambda self: self._binding("Lf2"))
    LgLf = property(lambda self: self._binding("LgLf"))


class BarrierStack:
    """Several barriers of one plant as one ``Barrier`` for the simulator: ``value`` is the
    smallest h (the intersection of the safe sets), ``lie``/``lie2`` return a TermStack, one
    row per barrier, for a filter built with ``n_barriers=len(barriers)``."""

    def __init__(self, barriers: Any):
        self.barriers = list(barriers)
        if len(self.barriers) < 2:
            raise ValueError(f"a BarrierStack needs at least two barriers, got {len(self.barriers)}")
        dims = {(int(b.n), int(b.m)) for b in self.barriers}
        if len(dims) != 1:
            raise ShapeError(f"the stacked barriers have different (n, m): {sorted(dims)}")
        (self.n, self.m), = dims
        self.order = min(int(b.order) for b in self.barriers)

    def value(self, x: np.ndarray) -> np.ndarray:
        return np.min(np.stack([np.asarray(b.value(x), dtype=np.float64) for b in self.barriers]), axis=0)

    def lie(self, x: np.ndarray, F: np.ndarray, G: np.ndarray) -> TermStack:
        return TermStack(b.lie(x, F, G) for b in self.barriers)

    def lie2(self, x: np.ndarray, F: np.ndarray, G: np.ndarray, Dff: np.ndarray, DfG: np.ndarray) -> TermStack:
        return TermStack(b.lie2(x, F, G, Dff, DfG) for b in self.barriers)
