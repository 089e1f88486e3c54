"""Resource limits checked before anything is allocated, so a hostile file is refused in
milliseconds instead of exhausting memory: a 1 KB chain of self-Concats folds to 2^28
elements, a 480 KB Mul broadcast asks for 13.4 GiB, two thin Linear layers merge into an
outer product. Every limit has a default, a keyword (``Limits(...)``) and a cbfc flag."""
from __future__ import annotations

import argparse
from dataclasses import dataclass, fields
from typing import Iterable

from .errors import LimitExceededError


@dataclass(frozen=True)
class Limits:
    """Upper bounds on what a compile may allocate (defaults fit any real barrier network)."""
    max_folded_elements: int = 1 << 24     # elements of one constant the frontend computes (128 MiB in float64)
    max_weights: int = 1 << 22             # weights + biases of the whole network (a ~60 MB header)
    max_workspace_bytes: int = 1 << 26     # the header's Workspace, from the layer widths (64 MiB)

    def check(self, limit: str, amount: int, what: str) -> None:
        """Refuse ``amount`` > the limit named ``limit`` (a field name), in one line naming ``what``."""
        bound = getattr(self, limit)
        if amount > bound:
            flag = "--" + limit.replace("_", "-")
            raise LimitExceededError(f"{what} needs {amount:,} {_UNITS[limit]}, over the {limit} limit of {bound:,} "
                                     f"(raise it with {flag} or Limits({limit}=...))")


_UNITS = {"max_folded_elements": "elements", "max_weights": "weights", "max_workspace_bytes": "bytes"}
_HELP = {"max_folded_elements": "elements of constants computed by folding, in total; raise it only for a "
                                "trusted model that needs more",
         "max_weights": "weights and biases of the network (also per merged or block-diagonal layer); raise it "
                        "only for a trusted model that needs more",
         "max_workspace_bytes": "bytes of the header's Workspace; lower it to refuse networks too big for "
                                "your device's RAM"}
DEFAULT_LIMITS = Limits()


def elements(shape: Iterable[int]) -> int:
    """Number of elements of a shape, in Python integers (no overflow, nothing allocated)."""
    count = 1
    for d in shape:
        count *= int(d)
    return count


def add_limit_arguments(parser: argparse.ArgumentParser) -> None:
    """The --max-... flags of cbfc / cbfsim compile, one per Limits field."""
    for f in fields(Limits):
        parser.add_argument("--" + f.name.replace("_", "-"), type=int, default=f.default, metavar="N",
                            help=f"at most N {_HELP[f.name]} (default {f.default:,})")


def limits_from_args(args: argparse.Namespace) -> Limits:
    return Limits(**{f.name: getattr(args, f.name) for f in fields(Limits)})
