"""The paper's operation counts (Prop. 2, Remark 5) and this compiler's workspace plan.

Counts are pure functions of the layer widths n_0..n_d, the activations' c_sigma and
the number of inputs m; ``benchmarks/lie.py`` prints them beside measurements.
"""
from __future__ import annotations

from dataclasses import dataclass

from .activations import ACTIVATIONS
from .ir import Model


@dataclass(frozen=True)
class CostReport:
    widths: tuple[int, ...]
    m: int
    order: int
    c_f: int                 # forward pass, Eq. (Cf)
    c_df: int                # one dual pass, Eq. (Cdf)
    paper_dual_total: int    # (m+1) C_df: one dual pass per direction (paper, Alg. 1)
    one_sweep_total: int     # this compiler: real path once + m+1 tangent channels
    reverse_total: int       # C_ad + (m+1)(2n-1), Remark 5
    channels: int            # scalars carried per neuron in the sweep
    workspace_scalars: int
    workspace_formula: str
    reverse_workspace_scalars: int   # sum of hidden widths, Prop. 3(i)
    scalar_bytes: int

    @property
    def workspace_bytes(self) -> int:
        return self.workspace_scalars * self.scalar_bytes

    def lines(self) -> list[str]:
        widths = "-".join(map(str, self.widths))
        out = [
            f"network {widths}, m = {self.m}, order {self.order}",
            f"FLOPs  C_f = {self.c_f}   C_df = {self.c_df}   (m+1) C_df = {self.paper_dual_total}   "
            f"reverse mode C_ad + (m+1)(2n-1) = {self.reverse_total}",
            f"FLOPs  this header, one sweep = {self.one_sweep_total}",
            f"workspace {self.workspace_bytes} bytes = {self.workspace_scalars} scalars x {self.scalar_bytes} B; "
            f"{self.workspace_formula}",
            f"reverse-mode activation cache (Prop. 3(i)) = {self.reverse_workspace_scalars} scalars",
        ]
        return out


def channels_for(m: int, order: int) -> int:
    """Scalars per neuron: real + f + G_1..G_m, and for order 2 also the eps12 parts f'f, f'G_j."""
    return m + 2 if order == 1 else 2 * m + 3


def workspace_span(widths: list[int]) -> int:
    """Neurons the sweep keeps live: layer 1's output alone (its input is the caller's x, f, G),
    then input + output of every hidden-to-hidden layer (a dense layer cannot overwrite its
    input); the last layer writes to the caller's out array."""
    hidden = widths[1:-1]
    if not hidden:
        return 0
    pairs = [hidden[i - 1] + hidden[i] for i in range(1, len(hidden))]
    return max([hidden[0], *pairs])


def cost_report(model: Model, m: int, order: int = 1, scalar_bytes: int = 4) -> CostReport:
    widths = model.widths()
    d = len(widths) - 1
    c_sigma = [ACTIVATIONS[a.kind].c_sigma for a in model.hidden_activations()]
    c_f = sum(2 * widths[i] * widths[i - 1] for i in range(1, d + 1)) + sum(widths[1:d])
    extra = sum(c * widths[i + 1] for i, c in enumerate(c_sigma))
    c_df = 2 * c_f + extra - sum(widths[1:d + 1])
    c_ad = 2 * c_f + extra - sum(widths[0:d])
    n = widths[0]
    channels = channels_for(m, order)
    span = workspace_span(widths)
    if order == 1:
        one_sweep = c_f + (m + 1) * (c_df - c_f)
    else:
        # real path + (m+1) first-order tangents as above, plus (m+1) eps12 channels: each costs a
        # tangent's affine work and, per hidden neuron, sigma''*t_f*w + sigma'*u (4 FLOPs) + sigma'' (2)
        hidden = sum(widths[1:d])
        one_sweep = c_f + 2 * (m + 1) * (c_df - c_f) + (m + 1) * 4 * hidden + 2 * hidden
    formula = (f"({'m+2' if order == 1 else '2m+3'}) channels x "
               "max(n_1, max_{2<=i<=d-1}(n_{i-1} + n_i)) = "
               f"{channels} x {span}")
    return CostReport(tuple(widths), m, order, c_f, c_df, (m + 1) * c_df, one_sweep,
                      c_ad + (m + 1) * (2 * n - 1), channels, channels * span, formula,
                      sum(widths[1:d]), scalar_bytes)
