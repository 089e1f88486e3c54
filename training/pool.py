"""Training states with their plant terms and labels, stored once as tensors.

f, G (and f'f, f'G for order 2) are evaluated once per state from the system's numpy model,
so a training step only differentiates the network.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .losses import Batch
from .samplers import system_terms


@dataclass
class Pool:
    x: torch.Tensor
    f: torch.Tensor
    G: torch.Tensor
    Dff: torch.Tensor | None
    DfG: torch.Tensor | None
    pos: torch.Tensor
    neg: torch.Tensor
    lost: torch.Tensor

    @classmethod
    def build(cls, system, x: np.ndarray, order: int, pos: np.ndarray, neg: np.ndarray, lost: np.ndarray,
              dtype: torch.dtype = torch.float32) -> "Pool":
        terms = system_terms(system, x, order)

        def t(a: np.ndarray | None) -> torch.Tensor | None:
            return None if a is None else torch.as_tensor(a, dtype=dtype)

        return cls(t(x), t(terms["f"]), t(terms["G"]), t(terms.get("Dff")), t(terms.get("DfG")),
                   torch.as_tensor(pos, dtype=torch.bool), torch.as_tensor(neg, dtype=torch.bool),
                   torch.as_tensor(lost, dtype=torch.bool))

    def __len__(self) -> int:
        return int(self.x.shape[0])

    def extend(self, other: "Pool", cap: int) -> "Pool":
        """Concatenate, keeping at most the newest ``cap`` states."""
        def cat(a, b):
            return None if a is None else torch.cat([a, b])[-cap:]
        return Pool(*(cat(getattr(self, k), getattr(other, k)) for k in self.__dataclass_fields__))

    def batch(self, idx: torch.Tensor) -> Batch:
        def pick(a):
            return None if a is None else a[idx]
        return Batch(*(pick(getattr(self, k)) for k in self.__dataclass_fields__))


def merge_batches(a: Batch, b: Batch) -> Batch:
    def cat(u, v):
        return None if u is None else torch.cat([u, v])
    return Batch(*(cat(getattr(a, k), getattr(b, k)) for k in a.__dataclass_fields__))
