"""The skeleton every safety filter shares: barrier terms -> affine rows a + b.u >= eps ->
a row solver -> the fault policy. The single-state fast path is dispatched here, once.

The margin eps >= 0 (default 0: the plain condition, the same bits as without it) makes the
filter enforce  a_i + b_i.u >= eps  on every row. The sampled-data certifier needs it: the
row is enforced at the sampling instants only, and eps pays for how much the condition can
degrade until the next sample (training/certify/ proves safety only for eps > 0 chosen
from its bounds). It is applied as  a_i - eps  before normalisation, so slack and status
refer to the row with its margin. A ``training.margin.Margin`` scales it with the state,
a_i - eps sigma(x) (sigma affine, >= 0 on the domain: see training/margin.py for why).

``issf`` (epsilon > 0; order-1 filters) adds the input-to-state-safe term of Kolathaya and
Ames (IEEE L-CSS 2019): the filter enforces  a_i + b_i.u >= eps + ||b_i||^2 / issf,  i.e.
L_f h + L_G h u + alpha(h) >= ||L_G h||^2 / issf. For a disturbance entering through the
inputs (xdot = f + G (u + d)), d/dt h >= -alpha(h) + ||L_G h||^2 / issf - ||L_G h|| ||d||
>= -alpha(h) - issf ||d||^2 / 4, so the set {h >= -alpha^-1(issf ||d||^2 / 4)} stays
invariant: safety degrades gracefully with the disturbance instead of failing.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from training.margin import Margin

from . import _fast
from .base import FilterResult, RowSolver, check_margin, nominal_batch
from .fallback import Fallback, FaultPolicy


class RowFilter:
    """Base of CBFQP, CBFProjection and HOCBFQP: subclasses set ``order`` and ``rows``."""

    order: int

    def __init__(self, system_or_bounds: Any, solver: RowSolver, margin: float | Margin = 0.0,
                 fallback: Fallback | None = None, issf: float | None = None, faces: Sequence[Any] = ()):
        self.solver = solver
        self.faces = tuple(faces)
        if self.faces and not hasattr(system_or_bounds, "f"):
            raise ValueError("face rows need the plant (its f and G), not only input bounds")
        self._plant = system_or_bounds
        self.m = solver.m
        self.margin = check_margin(margin)
        if issf is not None and not (float(issf) > 0 and np.isfinite(issf)):
            raise ValueError(f"issf must be a finite number > 0, got {issf!r}")
        self.issf = None if issf is None else float(issf)
        system = system_or_bounds if hasattr(system_or_bounds, "nominal") else None
        self.faults = FaultPolicy(fallback or Fallback(), solver.u_min, solver.u_max, system)

    def _with_face_rows(self, x: np.ndarray, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The barrier rows followed by the enforced faces' rows (training/certify/faces.py), each
        with its own margin: the rows the certificate's closed claim was proven for."""
        x = np.atleast_2d(np.asarray(x, dtype=np.float64))
        f, G = self._plant.f(x), self._plant.G(x)
        extra_a, extra_b = [], []
        for face in self.faces:
            offset, gain = face.row(f, G, x)
            extra_a.append(offset - face.margin)
            extra_b.append(gain)
        return np.concatenate([a, np.stack(extra_a, axis=1)], axis=1), np.concatenate([b, np.stack(extra_b, axis=1)], axis=1)

    def margin_at(self, x: np.ndarray) -> float | np.ndarray:
        """eps (constant margin) or eps sigma(x) as a (B, 1) column for the rows."""
        if self.margin.constant:
            return self.margin.eps
        return np.asarray(self.margin.at(np.atleast_2d(x)))[:, None]

    def rows(self, terms: Any, u_nom: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The rows (a (B, k), b (B, k, m)) of the filter condition, before the margin."""
        raise NotImplementedError

    def reset(self) -> None:
        """Forget warm starts and held inputs (call between independent simulations)."""
        self.solver.reset()
        self.faults.reset()

    def filter(self, x: np.ndarray, u_nom: np.ndarray, terms: Any) -> FilterResult:
        u_nom = nominal_batch(u_nom, self.m)
        single = u_nom.shape == (1, 1) and self.issf is None and not self.faces
        result = _fast.filter_single(self, x, u_nom, terms) if single else None
        if result is None:
            a, b = self.rows(terms, u_nom)
            a = a - self.margin_at(x)
            if self.issf is not None:
                a = a - np.einsum("bkm,bkm->bk", b, b) / self.issf
            if self.faces:
                a, b = self._with_face_rows(x, a, b)
            result = self.solver.solve(a, b, u_nom)
        return self.faults.apply(x, result)
