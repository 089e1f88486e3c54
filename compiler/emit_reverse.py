"""IR -> a reverse-mode (backpropagation) baseline header, for the paper's comparison table.

The same model, weights and activation lowering as ``emit_cpp`` (column-major constexpr
``kW{i}[k*Out + j] = W[j][k]``, ``kB{i}``, ``compiler.cpp_activations``, ``compiler.cppmath``),
evaluated the way an AD runtime does it: a forward pass that caches, for every hidden layer
i, the activation Jacobian diag(sigma_i'(a_i)) (n_i scalars: the "derivative-sufficient
information" of paper Prop. 3(i)), then the backward recurrence (paper Eq. backprop)

    delta_{d-1} = W_d^T,   delta_{i-1} = W_i^T diag(sigma_i'(a_i)) delta_i,   grad h = delta_0,

and finally the inner products L_f h = grad h . f and L_G h = grad h^T G (paper Remark 5:
C_ad + (m+1)(2n-1) FLOPs).

Two styles (paper Remark "static reverse"):

* ``"heap"``  replicates AD-runtime behaviour: every gradient evaluation allocates the
  activation cache with ``new[]`` (one array per hidden layer, sum_i n_i scalars in all) and
  releases it with ``delete[]``. ``NAME::g_heap_bytes_per_call`` holds the bytes the last
  ``lie``/``lie2`` call requested (allocator bookkeeping not included), and
  ``NAME::g_heap_allocs_per_call`` the number of ``new[]`` calls.
* ``"static"`` the same caches as static arrays ``NAME::detail::g_cache{i}`` (no allocation
  call site at all; ``kWorkspaceBytes`` = sum_i n_i scalars), i.e. reverse mode compiled
  ahead of time for a fixed topology.

In both styles the transient vectors (the layer being computed in the forward pass, delta
in the backward pass) are two stack arrays of max_i n_i scalars (``kStackScalars``); a periodic
input embedding adds the embedded input and its gradient (n_0 each) and its sin/cos (2k).

Numerics: the forward pass sums each output in the order bias, k = 0..In-1, exactly as the
dual header's real path, with the same activation code, so h is bit-identical to the dual
header's h under -ffp-contract=off. The backward dot products W_i[:, k] . t use eight
partial sums (the usual hand vectorisation of a reduction; GCC vectorises it without
-ffast-math), so the derivatives agree with the dual header to float round-off, not bits.

Order 2 adds ``lie2`` (the paper's pendulum baseline "Reverse+FD"): one backpropagation
for grad h at x, then the Hessian-vector product H f by central differences of the gradient
along f,

    H f ~ (grad h(x + t f) - grad h(x - t f)) / (2 t),   t = s * max(1, |x|_inf) / |f|_inf,

(two more backpropagations), and L_f^2 h = f . H f + grad h . f'(x) f, L_G_j L_f h =
G_j . H f + grad h . f'(x) G_j (H is symmetric, so one product serves all m + 1 terms).
The default relative step s = cbrt(machine epsilon) (4.92e-3 for float, 6.06e-6 for
double) balances the O(s^2) truncation error of central differences against the O(eps / s)
rounding error; the state-space step is s * max(1, |x|_inf). ``fd_step`` overrides s. The
result carries that truncation error, which the exact hyper-dual header does not.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from . import __version__
from .cost import SINCOS_FLOPS, cost_report
from .cpp_activations import activation_body, literal
from .cpp_snippets import array_literal
from .cppmath import math_source
from .emit_cpp import input_check, kernel
from .emit_periodic import tables as periodic_tables
from .identifiers import check_identifier, include_guard, sanitize_identifier
from .ir import validate
from .passes import canonicalize, require_smooth

STYLES = ("heap", "static")
LANES = 8      # partial sums of the backward dot products


def fd_default_step(scalar: str) -> float:
    """cbrt(eps) of the scalar type: the relative central-difference step."""
    eps = float(np.finfo(np.float32 if scalar == "float" else np.float64).eps)
    return float(eps ** (1.0 / 3.0))


def reverse_flops(widths: list[int], c_sigma: list[int], m: int, order: int = 1, state_dim: int | None = None,
                  periodic: int = 0) -> int:
    """FLOPs of this header's ``lie`` (order 1: paper Remark 5, C_ad + (m+1)(2n-1)) or
    ``lie2`` (order 2, Reverse+FD): 3 C_ad (gradients at x, x + t f, x - t f)
    + (m+1)(2n-1) (L_f h, L_G h) + 4n (x +- t f) + 2n + 3 (the step t and (g+ - g-) / 2t)
    + (m+1)(4n-1) (f . Hf + g . Dff and G_j . Hf + g . DfG_j).
    A periodic embedding of ``periodic`` = k coordinates (n_0 = n + k) adds to every gradient
    k (1 + 55 + 4): w x and m_sincos forward, w (c g_sin - s g_cos) backward."""
    d = len(widths) - 1
    c_f = sum(2 * widths[i] * widths[i - 1] for i in range(1, d + 1)) + sum(widths[1:d])
    c_ad = 2 * c_f + sum(c * widths[i + 1] for i, c in enumerate(c_sigma)) - sum(widths[0:d])
    c_ad += periodic * (1 + SINCOS_FLOPS + 4)
    n = widths[0] if state_dim is None else state_dim
    if order == 1:
        return c_ad + (m + 1) * (2 * n - 1)
    return 3 * c_ad + (m + 1) * (2 * n - 1) + 4 * n + 2 * n + 3 + (m + 1) * (4 * n - 1)


_TEMPLATES = r"""
inline bool all_finite(const scalar* v, int count) noexcept {
    bool ok = true;
    for (int i = 0; i < count; ++i) ok = ok && (v[i] - v[i] == scalar(0));
    return ok;
}

// forward: out = sigma(W in + b) with out[j] summed as b[j], then k = 0..In-1 (the dual
// header's real-path order); cache[j] = sigma'(a_j), the activation Jacobian the backward
// pass needs.
template <int In, int Out, typename Act>
inline void forward(const scalar* __restrict in, const scalar* __restrict wt, const scalar* __restrict b,
                    scalar* __restrict out, scalar* __restrict cache) noexcept {
    for (int j = 0; j < Out; ++j) out[j] = b[j];
    for (int k = 0; k < In; ++k) {
        const scalar s = in[k];
        const scalar* __restrict w = wt + k * Out;
        for (int j = 0; j < Out; ++j) out[j] += w[j] * s;
    }
    for (int j = 0; j < Out; ++j) out[j] = Act::eval(out[j], cache[j]);
}

// dot of two contiguous vectors with L partial sums (vectorises without reassociation).
template <int N>
inline scalar dot(const scalar* __restrict a, const scalar* __restrict b) noexcept {
    constexpr int L = N >= @LANES@ ? @LANES@ : 1;
    scalar acc[L];
    for (int l = 0; l < L; ++l) acc[l] = scalar(0);
    constexpr int body = N - N % L;
    for (int j = 0; j < body; j += L)
        for (int l = 0; l < L; ++l) acc[l] += a[j + l] * b[j + l];
    for (int j = body; j < N; ++j) acc[0] += a[j] * b[j];
    for (int width = L / 2; width > 0; width /= 2)
        for (int l = 0; l < width; ++l) acc[l] += acc[l + width];
    return acc[0];
}

// backward: delta_in[k] = sum_j W[j][k] t[j] = dot(column k of W, t); the weight column is
// contiguous in the column-major kW.
template <int In, int Out>
inline void backward(const scalar* __restrict wt, const scalar* __restrict t, scalar* __restrict delta_in) noexcept {
    for (int k = 0; k < In; ++k) delta_in[k] = dot<Out>(wt + k * Out, t);
}
"""


# The periodic embedding in the baseline: forward (values) and backward (chain rule to the state).
_EMBED_REVERSE = r"""
// embed_forward: e = the embedded state (@E@ columns), sc = sin, cos of each wrapped coordinate.
inline void embed_forward(const scalar* __restrict x, scalar* __restrict sc, scalar* __restrict e) noexcept {
    embed_trig<@K@>(x, kPeriodicIndex, kFrequency, sc);
    int j = 0;
    for (int i = 0; i < @N@; ++i) {
        const int q = kPeriodicSlot[i];
        if (q < 0) {
            e[j++] = x[i];
        } else {
            e[j++] = sc[2 * q];
            e[j++] = sc[2 * q + 1];
        }
    }
}

// embed_backward: grad_i = ge_j (passed through) or w (c ge_sin - s ge_cos) (wrapped).
inline void embed_backward(const scalar* __restrict sc, const scalar* __restrict ge, scalar* __restrict grad) noexcept {
    int j = 0;
    for (int i = 0; i < @N@; ++i) {
        const int q = kPeriodicSlot[i];
        if (q < 0) {
            grad[i] = ge[j++];
        } else {
            grad[i] = kFrequency[q] * (sc[2 * q + 1] * ge[j] - sc[2 * q] * ge[j + 1]);
            j += 2;
        }
    }
}
"""


def emit_reverse_header(model, inputs: int, style: str = "heap", scalar: str = "float", name: str | None = None,
                        order: int = 1, fd_step: float | None = None) -> str:
    """Header text of the reverse-mode baseline ``NAME::lie`` (and, for order 2, the
    Reverse+FD ``NAME::lie2``) for ``model`` (an IR model, or any source ``compiler.api.load_model``
    reads). Deterministic: same inputs, same bytes."""
    from .api import load_model
    if style not in STYLES:
        raise ValueError(f"style must be one of {', '.join(STYLES)}, got {style!r}")
    if scalar not in ("float", "double"):
        raise ValueError(f"scalar must be 'float' or 'double', got {scalar!r}")
    if order not in (1, 2):
        raise ValueError(f"order must be 1 or 2, got {order}")
    if inputs < 1:
        raise ValueError(f"the number of inputs m must be >= 1, got {inputs}")
    model = load_model(model)
    model = canonicalize(replace(model, name=check_identifier(name) if name else sanitize_identifier(model.name)))
    validate(model, canonical=True)
    if order == 2:
        require_smooth(model)
    name = model.name
    m, n = inputs, model.input_dim
    widths = model.widths()
    d = len(widths) - 1
    hidden = widths[1:d]
    acts = model.hidden_activations()
    dense = model.dense_layers()
    step = fd_default_step(scalar) if fd_step is None else float(fd_step)
    if not step > 0:
        raise ValueError(f"fd_step must be > 0, got {fd_step}")
    L = lambda v: literal(v, scalar)  # noqa: E731
    cache = sum(hidden)
    max_hidden = max(hidden, default=1)
    heap = style == "heap"
    report = cost_report(model, m, 1, 4 if scalar == "float" else 8)
    from .activations import ACTIVATIONS
    c_sigma = [ACTIVATIONS[a.kind].c_sigma for a in acts]
    emb = model.embedding
    k = len(emb.periods) if emb is not None else 0
    flops1 = reverse_flops(widths, c_sigma, m, 1, n, k)
    flops2 = reverse_flops(widths, c_sigma, m, 2, n, k) if order == 2 else None

    out: list[str] = []
    guard = include_guard(name, prefix="CBFSIM_REVERSE_")
    out += [f"// {name}.hpp: reverse-mode baseline ({style}) generated by cbfsim compiler {__version__} "
            f"(model sha256 {model.fingerprint()[:16]}, order {order}, {scalar}). Do not edit.",
            "//",
            "// h, L_f h, L_G h by backpropagation: a forward pass caching sigma'(a_i) for every hidden",
            "// layer, the backward recurrence delta_{i-1} = W_i^T diag(sigma_i'(a_i)) delta_i, then",
            "// grad h . f and grad h^T G. A BASELINE for comparison with the dual-number header:",
            ("// the activation cache is allocated with new[] / freed with delete[] in every gradient"
             if heap else "// the activation cache is static arrays (reverse mode compiled ahead of time);"),
            ("// evaluation, like an AD runtime (g_heap_bytes_per_call counts the bytes)."
             if heap else "// no allocation call site."),
            "//",
            f"// network {model.describe_widths()}, m = {m}; activation cache sum_i n_i = {cache} scalars "
            f"(Prop. 3(i)); transient stack 2 x {max_hidden}"
            + (f" + 2 x {widths[0]} + {2 * k} (embedding)" if k else "") + " scalars",
            f"// FLOPs  lie: C_ad + (m+1)(2n-1) = {flops1}"
            + (f"   lie2 (Reverse+FD): 3 C_ad + ... = {flops2}" if order == 2 else ""),
            f"// (dual header for comparison: (m+1) C_df = {report.paper_dual_total})"]
    if order == 2:
        out += [f"// lie2: H f by central differences of the gradient, relative step {step!r}"
                + (" = cbrt(eps)" if fd_step is None else ""),
                "// (state-space step s * max(1, |x|_inf)); truncation error O(s^2), rounding O(eps / s)."]
    out += ["", f"#ifndef {guard}", f"#define {guard}", "", "#include <cstddef>", "#include <cstdint>", "",
            f"namespace {name} {{", "", f"using scalar = {scalar};",
            f"constexpr int kStateDim = {n};          // n: length of x and f",
            f"constexpr int kInputDim = {m};          // m: columns of G (n x m, row-major)",
            f"constexpr int kOrder = {order};",
            f"constexpr int kLieOutputs = {2 + m};       // lie():  h, L_f h, L_G h[m]"]
    if order == 2:
        out.append(f"constexpr int kLie2Outputs = {3 + 2 * m};      // lie2(): h, L_f h, L_G h[m], L_f^2 h, L_G L_f h[m]")
    out += [f'constexpr const char* kStyle = "{style}";',
            f"constexpr std::size_t kCacheScalars = {cache};   // activation cache, sum of hidden widths",
            "constexpr std::size_t kCacheBytes = kCacheScalars * sizeof(scalar);",
            f"constexpr std::size_t kStackScalars = {2 * max_hidden + (2 * widths[0] + 2 * k if k else 0)};"
            "   // transient layer / delta vectors (stack)",
            "// static scratch memory (the dual header's kWorkspaceBytes counterpart)",
            f"constexpr std::size_t kWorkspaceScalars = {0 if heap else cache};",
            "constexpr std::size_t kWorkspaceBytes = kWorkspaceScalars * sizeof(scalar);",
            f"constexpr bool kUsesHeap = {'true' if heap else 'false'};"]
    if order == 2:
        out.append(f"constexpr scalar kFdStep = {L(step)};   // relative central-difference step")
    if heap:
        out += ["// bytes requested with new[] (and the number of new[] calls) by the last lie / lie2 call",
                "inline std::size_t g_heap_bytes_per_call = 0;",
                "inline std::size_t g_heap_allocs_per_call = 0;"]
    out += ["", "namespace detail {", "", math_source(scalar).strip("\n"),
            _TEMPLATES.replace("@LANES@", str(LANES)).rstrip(), ""]
    if k:
        out += [kernel("periodic.hpp").rstrip(), "", *periodic_tables(model, scalar), "",
                _EMBED_REVERSE.replace("@N@", str(n)).replace("@E@", str(widths[0])).replace("@K@", str(k)).rstrip(),
                ""]
    for i, act in enumerate(acts, start=1):
        body = "\n".join("        " + s for s in activation_body(act.kind, dict(act.params), scalar, 1))
        out += [f"// hidden layer {i}: {act.kind}{dict(act.params) if act.params else ''}",
                f"struct Act{i} {{", "    static inline scalar eval(scalar a, scalar& d1) noexcept {", body, "    }",
                "};"]
    out.append("")
    for i, layer in enumerate(dense, start=1):
        out.append(f"// layer {i}: {layer.out_dim} x {layer.in_dim}, stored column-major "
                   f"(kW{i}[k*{layer.out_dim} + j] = W[j][k])")
        weights, biases = array_literal(layer.weight.T, scalar), array_literal(layer.bias, scalar)
        out.append(f"constexpr scalar kW{i}[{layer.in_dim * layer.out_dim}] = {weights};")
        out.append(f"constexpr scalar kB{i}[{layer.out_dim}] = {biases};")
    if not heap and hidden:
        out.append("")
        out.append("// the activation cache: sigma'(a_i) of every hidden layer, live from the forward to the backward pass")
        for i, w in enumerate(hidden, start=1):
            out.append(f"inline scalar g_cache{i}[{w}];")
    out.append("")

    # the gradient: forward with caches, backward, returns h
    g: list[str] = ["// h(x) and grad h(x) (n) by one forward and one backward pass.",
                    "inline scalar gradient(const scalar* __restrict x, scalar* __restrict grad) noexcept {"]
    for i, w in enumerate(hidden, start=1):
        if heap:
            g += [f"    scalar* const c{i} = new scalar[{w}];",
                  f"    g_heap_bytes_per_call += {w} * sizeof(scalar);",
                  "    g_heap_allocs_per_call += 1;"]
        else:
            g.append(f"    scalar* const c{i} = g_cache{i};")
    if hidden:
        g += [f"    scalar u[{max_hidden}];", f"    scalar v[{max_hidden}];"]
    src = "x"
    if k:        # the periodic embedding: e = (x with each wrapped x_i -> sin, cos), its sin/cos kept in sc
        g += [f"    scalar sc[{2 * k}];", f"    scalar e[{widths[0]}];", "    embed_forward(x, sc, e);"]
        src = "e"
    # forward through the hidden layers, alternating u / v
    bufs = ["u", "v"]
    for i in range(1, d):
        dst = bufs[(i - 1) % 2]
        g.append(f"    forward<{widths[i - 1]}, {widths[i]}, Act{i}>({src}, kW{i}, kB{i}, {dst}, c{i});")
        src = dst
    # last layer (one output): h = b + sum_k w_k in_k, in the dual header's order
    g += [f"    scalar h = kB{d}[0];", f"    for (int k = 0; k < {widths[d - 1]}; ++k) h += kW{d}[k] * {src}[k];"]
    grad_e = "grad"
    if k:
        g.append(f"    scalar ge[{widths[0]}];")
        grad_e = "ge"
    if d == 1:
        g.append(f"    for (int k = 0; k < {widths[0]}; ++k) {grad_e}[k] = kW1[k];")
    else:
        # t_{d-1} = diag(sigma') W_d^T (delta_d = 1); then delta_{i-1} = W_i^T t_i, t_{i-1} = sigma' * delta_{i-1}
        t = bufs[(d - 1) % 2]           # the buffer not holding the last hidden output
        g.append(f"    for (int k = 0; k < {widths[d - 1]}; ++k) {t}[k] = kW{d}[k] * c{d - 1}[k];")
        for i in range(d - 1, 1, -1):
            other = "v" if t == "u" else "u"
            g += [f"    backward<{widths[i - 1]}, {widths[i]}>(kW{i}, {t}, {other});",
                  f"    for (int k = 0; k < {widths[i - 1]}; ++k) {other}[k] *= c{i - 1}[k];"]
            t = other
        g.append(f"    backward<{widths[0]}, {widths[1]}>(kW1, {t}, {grad_e});")
    if k:
        g.append("    embed_backward(sc, ge, grad);")
    if heap:
        for i in range(len(hidden), 0, -1):
            g.append(f"    delete[] c{i};")
    g += ["    return h;", "}"]
    out += g
    out += ["", "}  // namespace detail", ""]

    reset = ["    g_heap_bytes_per_call = 0;", "    g_heap_allocs_per_call = 0;"] if heap else []
    out += ["// h, L_f h, L_G h at x, given f = f(x) (n) and G = G(x) (n x m, row-major).",
            "// out = [h, L_f h, L_G h_1..m]. Returns 0, or 1 with out all NaN if any input is NaN/Inf.",
            "inline int lie(const scalar* x, const scalar* f, const scalar* G, scalar* out) noexcept {",
            *reset,
            *input_check(1, scalar, bool(k)),
            "    scalar grad[kStateDim];",
            "    out[0] = detail::gradient(x, grad);",
            f"    scalar lf = {L(0)};",
            "    for (int k = 0; k < kStateDim; ++k) lf += grad[k] * f[k];",
            "    out[1] = lf;",
            "    for (int j = 0; j < kInputDim; ++j) {",
            f"        scalar s = {L(0)};",
            "        for (int k = 0; k < kStateDim; ++k) s += grad[k] * G[k * kInputDim + j];",
            "        out[2 + j] = s;",
            "    }",
            "    return 0;",
            "}"]
    if order == 2:
        out += ["",
                "// Reverse+FD: everything lie2 of the hyper-dual header returns, given also Dff = f'(x) f(x) (n)",
                "// and DfG = f'(x) G(x) (n x m, row-major); the second-order terms carry the central-difference",
                "// truncation error (see kFdStep). out = [h, L_f h, L_G h_1..m, L_f^2 h, L_G L_f h_1..m].",
                "// Returns 0, or 1 (out all NaN) on NaN/Inf input.",
                "inline int lie2(const scalar* x, const scalar* f, const scalar* G, const scalar* Dff, const scalar* DfG,",
                "                scalar* out) noexcept {",
                *reset,
                *input_check(2, scalar, bool(k)),
                "    scalar grad[kStateDim], hf[kStateDim];",
                "    out[0] = detail::gradient(x, grad);",
                f"    scalar xs = {L(1)}, fs = {L(0)};",
                "    for (int k = 0; k < kStateDim; ++k) {",
                f"        const scalar ax = x[k] < {L(0)} ? -x[k] : x[k];",
                f"        const scalar af = f[k] < {L(0)} ? -f[k] : f[k];",
                "        xs = ax > xs ? ax : xs;",
                "        fs = af > fs ? af : fs;",
                "    }",
                f"    if (fs > {L(0)}) {{",
                "        const scalar t = kFdStep * xs / fs;",
                "        scalar xp[kStateDim], gp[kStateDim], gm[kStateDim];",
                "        for (int k = 0; k < kStateDim; ++k) xp[k] = x[k] + t * f[k];",
                "        detail::gradient(xp, gp);",
                "        for (int k = 0; k < kStateDim; ++k) xp[k] = x[k] - t * f[k];",
                "        detail::gradient(xp, gm);",
                f"        const scalar inv = {L(0.5)} / t;",
                "        for (int k = 0; k < kStateDim; ++k) hf[k] = (gp[k] - gm[k]) * inv;",
                "    } else {",
                f"        for (int k = 0; k < kStateDim; ++k) hf[k] = {L(0)};   // f = 0: H f = 0 exactly",
                "    }",
                f"    scalar lf = {L(0)}, lf2 = {L(0)}, gdff = {L(0)};",
                "    for (int k = 0; k < kStateDim; ++k) {",
                "        lf += grad[k] * f[k];",
                "        lf2 += f[k] * hf[k];",
                "        gdff += grad[k] * Dff[k];",
                "    }",
                "    out[1] = lf;",
                "    out[2 + kInputDim] = lf2 + gdff;",
                "    for (int j = 0; j < kInputDim; ++j) {",
                f"        scalar lg = {L(0)}, lglf = {L(0)}, gdfg = {L(0)};",
                "        for (int k = 0; k < kStateDim; ++k) {",
                "            lg += grad[k] * G[k * kInputDim + j];",
                "            lglf += G[k * kInputDim + j] * hf[k];",
                "            gdfg += grad[k] * DfG[k * kInputDim + j];",
                "        }",
                "        out[2 + j] = lg;",
                "        out[3 + kInputDim + j] = lglf + gdfg;",
                "    }",
                "    return 0;",
                "}"]
    out += ["", f"}}  // namespace {name}", "", f"#endif  // {guard}", ""]
    return "\n".join(out)
