"""The paper's operation counts (Prop. 2, Remark 5) and this compiler's workspace plan.

Counts are pure functions of the layer widths n_0..n_d, the activations' c_sigma and
the number of inputs m; ``benchmarks/lie.py`` prints them beside measurements.

A periodic input embedding (k wrapped coordinates of an n-state) makes n_0 = n + k, the width
the first Dense reads; the paper's counts (C_f, C_df, ...) are of the dense network on n_0
inputs, and the embedding's own FLOPs are counted apart (``embedding_flops``, formula in
``embedding_cost``) and added to this header's total.
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
    one_sweep_total: int     # this header: "sweep" layout = real path once + all channels together;
                             # "min_memory" = one dual (hyper-dual) pass per direction, as the paper
    reverse_total: int       # C_ad + (m+1)(2n-1), Remark 5
    channels: int            # scalars carried per neuron in the sweep
    workspace_scalars: int
    workspace_formula: str
    reverse_workspace_scalars: int   # sum of hidden widths, Prop. 3(i)
    scalar_bytes: int
    layout: str = "sweep"
    state_dim: int = 0               # n: the state's length (n_0 - k with a periodic embedding)
    periodic: int = 0                # k: coordinates the periodic embedding wraps
    embedding_flops: int = 0         # included in one_sweep_total
    embedding_formula: str = ""

    @property
    def workspace_bytes(self) -> int:
        return self.workspace_scalars * self.scalar_bytes

    def lines(self) -> list[str]:
        widths = "-".join(map(str, self.widths))
        if self.periodic:
            widths = (f"{self.state_dim}>{widths} (periodic embedding: {self.periodic} coordinate"
                      f"{'s' if self.periodic > 1 else ''} -> (sin, cos))")
        out = [
            f"network {widths}, m = {self.m}, order {self.order}",
            f"FLOPs  C_f = {self.c_f}   C_df = {self.c_df}   (m+1) C_df = {self.paper_dual_total}   "
            f"reverse mode C_ad + {'60k + ' if self.periodic else ''}(m+1)(2n-1) = {self.reverse_total}",
            f"FLOPs  this header ({self.layout} layout) = {self.one_sweep_total}",
            f"workspace {self.workspace_bytes} bytes = {self.workspace_scalars} scalars x {self.scalar_bytes} B; "
            f"{self.workspace_formula}",
            f"reverse-mode activation cache (Prop. 3(i)) = {self.reverse_workspace_scalars} scalars",
        ]
        if self.periodic:
            out.insert(3, f"FLOPs  of which the periodic embedding = {self.embedding_flops} = {self.embedding_formula}")
        return out


LAYOUTS = ("sweep", "min_memory")


def channels_for(m: int, order: int, layout: str = "sweep") -> int:
    """Scalars per neuron. sweep: real + f + G_1..G_m, and for order 2 also the eps12 parts
    f'f, f'G_j. min_memory: one direction at a time: real + tangent (order 1), or the
    hyper-dual real, eps1, eps2, eps12 parts (order 2)."""
    if layout == "min_memory":
        return 2 if order == 1 else 4
    return m + 2 if order == 1 else 2 * m + 3


def workspace_span(widths: list[int]) -> int:
    """Neurons the sweep keeps live: layer 1's output alone (its input is the caller's x, f, G),
    then input + output of every later stored layer (a dense layer cannot overwrite its
    input). The last hidden layer is never stored: it is fused with the scalar output layer,
    each neuron added into the outputs as soon as it is activated."""
    stored = widths[1:-2]
    if not stored:
        return 0
    pairs = [stored[i - 1] + stored[i] for i in range(1, len(stored))]
    return max([stored[0], *pairs])


# Float operations of one m_sincos (compiler/cppmath.py, counted in its text: the Cody-Waite
# reduction 24, sin 13, cos 12, the rest 6; compares, selects and sign flips not counted).
SINCOS_FLOPS = 55


def embedded_span(widths: list[int]) -> int:
    """Neurons the sweep keeps live with a periodic embedding: the embedded seed (n_0 columns)
    is formed in the workspace beside layer 1's output (stored only when d >= 3, at offset 0),
    and is dead once layer 1 has read it."""
    d = len(widths) - 1
    return max(workspace_span(widths), widths[1] + widths[0]) if d >= 3 else widths[0]


def embedding_cost(k: int, m: int, order: int, layout: str) -> tuple[int, str]:
    """FLOPs of the periodic embedding of k coordinates (kernels/periodic.hpp): w x and m_sincos
    once per state, then per coordinate w c, w s (and w^2, w^2 s, w^2 c for order 2) and the
    products that form each tangent channel of the two columns (per (eps2, eps12) pair:
    d2 t1 t2 + d1 u, 4 FLOPs a column). min_memory forms the channels once per direction."""
    once = k * (1 + SINCOS_FLOPS)
    if order == 1 and layout == "sweep":
        per, text = 2 + 2 * (m + 1), "k (1 + 55 + 2 + 2(m+1))"
    elif order == 1:
        per, text = (m + 1) * 4, "k (1 + 55 + 4(m+1))"
    elif layout == "sweep":
        per, text = 5 + 10 * (m + 1), "k (1 + 55 + 5 + 10(m+1))"
    else:
        per, text = (m + 1) * 17, "k (1 + 55 + 17(m+1))"
    return once + k * per, text


def cost_report(model: Model, m: int, order: int = 1, scalar_bytes: int = 4, layout: str = "sweep") -> CostReport:
    widths = model.widths()
    emb = model.embedding
    k = len(emb.periods) if emb is not None else 0
    d = len(widths) - 1
    c_sigma = [ACTIVATIONS[a.kind].c_sigma for a in model.hidden_activations()]
    c_f = sum(2 * widths[i] * widths[i - 1] for i in range(1, d + 1)) + sum(widths[1:d])
    extra = sum(c * widths[i + 1] for i, c in enumerate(c_sigma))
    c_df = 2 * c_f + extra - sum(widths[1:d + 1])
    c_ad = 2 * c_f + extra - sum(widths[0:d])
    n = widths[0]
    channels = channels_for(m, order, layout)
    span = embedded_span(widths) if k else workspace_span(widths)
    hidden = sum(widths[1:d])
    # A tangent channel costs C_df - C_f; an eps12 channel costs the same plus, per hidden
    # neuron, sigma'' t_f w + sigma' u (4 FLOPs); sigma'' itself costs 2 per neuron per pass.
    if order == 1 and layout == "sweep":
        one_sweep = c_f + (m + 1) * (c_df - c_f)
    elif order == 1:
        one_sweep = (m + 1) * c_df
    elif layout == "sweep":
        one_sweep = c_f + 2 * (m + 1) * (c_df - c_f) + (m + 1) * 4 * hidden + 2 * hidden
    else:
        one_sweep = (m + 1) * (c_f + 3 * (c_df - c_f) + 6 * hidden)
    channel_text = {("sweep", 1): "(m+2)", ("sweep", 2): "(2m+3)", ("min_memory", 1): "2",
                    ("min_memory", 2): "4"}[(layout, order)]
    emb_flops, emb_text = embedding_cost(k, m, order, layout) if k else (0, "")
    if k:
        formula = (f"{channel_text} channels x "
                   "max(n_1 + n_0, max_{2<=i<=d-2}(n_{i-1} + n_i)), n_0 if d <= 2 (the embedded seed "
                   f"beside layer 1's output), + 2k sin/cos = {channels} x {span} + {2 * k}")
        # reverse mode: the dense network's gradient on n_0 inputs, the chain rule through
        # the embedding (w c g_sin - w s g_cos: 4 FLOPs a coordinate, sin/cos and w x as forward)
        reverse = c_ad + k * (SINCOS_FLOPS + 1 + 4) + (m + 1) * (2 * model.input_dim - 1)
    else:
        formula = (f"{channel_text} channels x "
                   "max(n_1, max_{2<=i<=d-2}(n_{i-1} + n_i)), 0 if d <= 2 = "
                   f"{channels} x {span}")
        reverse = c_ad + (m + 1) * (2 * n - 1)
    return CostReport(tuple(widths), m, order, c_f, c_df, (m + 1) * c_df, one_sweep + emb_flops,
                      reverse, channels, channels * span + 2 * k, formula,
                      sum(widths[1:d]), scalar_bytes, layout, model.input_dim, k, emb_flops, emb_text)
