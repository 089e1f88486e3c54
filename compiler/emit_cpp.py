"""IR -> one self-contained C++17 header with exact Lie derivatives from static memory.

The header carries the whole method in plain loops: a dense layer on C channels
(real path + tangents) and an elementwise activation that scales the tangents by
sigma' (and forms the eps12 parts with sigma''). The weights are constexpr arrays; the
workspace is one array whose size and every offset into it are planned here, at
compile time, and printed as constants.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

import numpy as np

from . import __version__
from .cost import LAYOUTS, CostReport, channels_for, cost_report, workspace_span
from .cpp_activations import activation_body, literal
from .cppmath import math_source
from .errors import UnsupportedOpError
from .ir import Activation, Dense, Model, validate
from .passes import require_smooth

CPP_KEYWORDS = set("""alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t
char32_t class compl concept const consteval constexpr constinit const_cast continue co_await co_return co_yield
decltype default delete do double dynamic_cast else enum explicit export extern false float for friend goto if
inline int long mutable namespace new noexcept not not_eq nullptr operator or or_eq private protected public
register reinterpret_cast requires return short signed sizeof static static_assert static_cast struct switch
template this thread_local throw true try typedef typeid typename union unsigned using virtual void volatile
wchar_t while xor xor_eq std detail""".split())


def check_identifier(name: str) -> str:
    """A C++ identifier usable as a namespace (no keywords, no reserved leading underscore)."""
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", name) or "__" in name or name in CPP_KEYWORDS:
        raise ValueError(f"model name {name!r} is not a valid C++ identifier "
                         "(letters, digits and single underscores, starting with a letter, not a keyword)")
    return name


def sanitize_identifier(text: str) -> str:
    """Turn a file stem or label into a valid identifier (used when no name is given)."""
    name = re.sub(r"_+", "_", re.sub(r"[^A-Za-z0-9_]", "_", text)).strip("_") or "model"
    if not name[0].isalpha():
        name = "m_" + name
    return name + "_model" if name in CPP_KEYWORDS else name


@dataclass(frozen=True)
class EmitOptions:
    inputs: int              # m, number of control inputs (columns of G)
    order: int = 1
    scalar: str = "float"    # or "double"
    layout: str = "sweep"    # "sweep": all directions in one pass; "min_memory": one direction at a time

    def check(self) -> None:
        if self.order not in (1, 2):
            raise ValueError(f"order must be 1 or 2, got {self.order}")
        if self.scalar not in ("float", "double"):
            raise ValueError(f"dtype must be 'float' or 'double', got {self.scalar!r}")
        if self.inputs < 1:
            raise ValueError(f"the number of inputs m must be >= 1, got {self.inputs}")
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, got {self.layout!r}")


def _array(values: np.ndarray, scalar: str, per_line: int = 8) -> str:
    items = [literal(v, scalar) for v in np.asarray(values, dtype=np.float64).ravel()]
    rows = [", ".join(items[i:i + per_line]) for i in range(0, len(items), per_line)]
    return "{\n    " + ",\n    ".join(rows) + "}"


_TEMPLATES = r"""
// Targets with a vector unit (kVectorUnit, defined with the math above) get loops shaped for
// it (blocks of neurons, one operation per loop); scalar cores (Cortex-M, Xtensa) get small
// blocks and one neuron at a time, keeping the stack small. Every sum and product is the same
// in both shapes: results are bit-identical.

// all_finite: false if any entry is NaN or +-Inf (v - v is 0 only for finite v).
inline bool all_finite(const scalar* v, int count) noexcept {
    bool ok = true;
    for (int i = 0; i < count; ++i) ok = ok && (v[i] - v[i] == scalar(0));
    return ok;
}

// dense: one affine layer on C channels. Channel 0 is the real path (gets the bias),
// channels 1..C-1 are tangents (no bias); src(c, k) reads channel c of input k (from the
// workspace, or for the first layer straight from the caller's x, f, G). Output is
// channel-major: out[c*Out + j]. Weights are column-major (wt[k*Out + j] = W[j][k]) so
// each weight column is read once for all C channels, and the loop over j is an axpy
// that vectorizes without reassociating any sum: every output is accumulated in the
// order k = 0..In-1 on every target and at every optimization level. Outputs are done
// in blocks of B whose C x B accumulators fit in vector registers.
template <int In, int Out, int C, int B, typename Src>
inline void dense_block(const Src& src, const scalar* __restrict wt, const scalar* __restrict b,
                        scalar* __restrict out) noexcept {
    static_assert(Out % B == 0, "dense_block needs whole blocks");
    for (int j0 = 0; j0 < Out; j0 += B) {
        scalar acc[C][B];
        for (int j = 0; j < B; ++j) acc[0][j] = b[j0 + j];
        for (int c = 1; c < C; ++c)
            for (int j = 0; j < B; ++j) acc[c][j] = scalar(0);
        for (int k = 0; k < In; ++k) {
            const scalar* __restrict w = wt + k * Out + j0;
            for (int c = 0; c < C; ++c) {
                const scalar s = src(c, k);
                for (int j = 0; j < B; ++j) acc[c][j] += w[j] * s;
            }
        }
        for (int c = 0; c < C; ++c)
            for (int j = 0; j < B; ++j) out[c * Out + j0 + j] = acc[c][j];
    }
}

// dense_stream: the same layer accumulating straight into out, for the first layer (its
// input is the caller's x, f, G with In = n small), and for the output of a network without
// hidden layers (otherwise the output layer is fused into dense_fused).
template <int In, int Out, int C, typename Src>
inline void dense_stream(const Src& src, const scalar* __restrict wt, const scalar* __restrict b,
                         scalar* __restrict out) noexcept {
    for (int j = 0; j < Out; ++j) out[j] = b[j];
    for (int j = Out; j < C * Out; ++j) out[j] = scalar(0);
    for (int k = 0; k < In; ++k) {
        const scalar* __restrict w = wt + k * Out;
        for (int c = 0; c < C; ++c) {
            const scalar s = src(c, k);
            scalar* __restrict o = out + c * Out;
            for (int j = 0; j < Out; ++j) o[j] += w[j] * s;
        }
    }
}

// Register blocking pays where C x 32 float accumulators fit in vector registers (x86 with
// AVX: sixteen 8-float registers); on cores without SIMD (Cortex-M, Xtensa) they would only
// spill to the stack, so those stream. Either kernel gives the same bits.
#if defined(__AVX__)
constexpr bool kRegisterBlocking = sizeof(scalar) == 4;
#else
constexpr bool kRegisterBlocking = false;
#endif

// dense_fused: the last hidden layer and the scalar output layer in one pass, so the last
// hidden layer needs no workspace. Its outputs are made B at a time in a local block
// (channel-major, blk[c*B + j]), activated in place by act(Int<B>{}, blk), and each is added
// into out[c] = b_out + sum_j w_out[j] a_c[j] at once. Every sum runs in the same order as
// in an unfused layer-by-layer pass (k = 0..In-1 inside a neuron, j = 0..Mid-1 into out), so
// B never changes a bit; B is the block that fits the target's vector registers.
template <int N>
struct Int {
    static constexpr int value = N;
};

// Block size, measured: on x86-64 (callgrind and wall time, g++ 12, -O2 and -O3 -march=native,
// with and without AVX-512) 32-wide blocks beat 16, 8, 4 and 1 for every channel count. On
// Cortex-M4F (QEMU instruction counts, -O2) pairs of neurons with the channel loops unrolled
// cost 19,000 / 46,520 instructions for the bicycle / Van der Pol sweeps against 23,520 /
// 58,920 one at a time and 18,200 / 41,600 four at a time, whose blocks need twice the stack.
template <int Mid>
constexpr int fused_block() noexcept {
    if (kVectorUnit)
        for (int b = 32; b > 1; b /= 2)
            if (Mid % b == 0) return b;
    return Mid % 2 == 0 ? 2 : 1;
}

template <int In, int Mid, int C, typename Src, typename Act>
inline void dense_fused(const Src& src, const scalar* __restrict wt, const scalar* __restrict b,
                        const scalar* __restrict w_out, const scalar* __restrict b_out,
                        scalar* __restrict out, const Act& act) noexcept {
    constexpr int B = fused_block<Mid>();
    static_assert(Mid % B == 0, "dense_fused needs whole blocks");
    scalar sum[C];
    sum[0] = b_out[0];
    for (int c = 1; c < C; ++c) sum[c] = scalar(0);
    for (int j0 = 0; j0 < Mid; j0 += B) {
        scalar blk[C * B];
        for (int j = 0; j < B; ++j) blk[j] = b[j0 + j];
        for (int j = B; j < C * B; ++j) blk[j] = scalar(0);
        for (int k = 0; k < In; ++k) {
            const scalar* __restrict w = wt + k * Mid + j0;
#pragma GCC unroll 16
            for (int c = 0; c < C; ++c) {
                const scalar s = src(c, k);
#pragma GCC unroll 16
                for (int j = 0; j < B; ++j) blk[c * B + j] += w[j] * s;
            }
        }
        act(Int<B>{}, blk);
        for (int j = 0; j < B; ++j)
#pragma GCC unroll 16
            for (int c = 0; c < C; ++c) sum[c] += w_out[j0 + j] * blk[c * B + j];
    }
    for (int c = 0; c < C; ++c) out[c] = sum[c];
}

// Channels<In>: reads a layer input held channel-major in the workspace.
template <int In>
struct Channels {
    const scalar* p;
    scalar operator()(int c, int k) const noexcept { return p[c * In + k]; }
};

// activate: dual numbers through sigma, in place: a <- sigma(a), t <- sigma'(a) t.
// On vector targets sigma' goes through a local array so both loops run over j and
// vectorize; scalar cores do one neuron at a time and need no such array on the stack.
template <int N, int C, typename Act>
inline void activate(scalar* __restrict buf) noexcept {
    if constexpr (kVectorUnit) {
        scalar d1[N];
        for (int j = 0; j < N; ++j) buf[j] = Act::eval(buf[j], d1[j]);
        for (int c = 1; c < C; ++c)
            for (int j = 0; j < N; ++j) buf[c * N + j] *= d1[j];
    } else {
        for (int j = 0; j < N; ++j) {
            scalar d1;
            buf[j] = Act::eval(buf[j], d1);
            for (int c = 1; c < C; ++c) buf[c * N + j] *= d1;
        }
    }
}
"""

_TEMPLATES_2 = r"""
// activate2: hyper-dual numbers through sigma, in place. Channels: 0 real a, 1 the shared
// eps1 tangent t_f, 2..M+1 the eps2 tangents of G_1..G_M, M+2 the eps12 part of the
// (f, f) seed, M+3.. those of the (f, G_j) seeds. Paper Lemma 3(ii):
// u <- sigma''(a) t_f w + sigma'(a) u (with w = t_f for the (f, f) seed), then t <- sigma'(a) t.
// Vector targets: one loop per operation over the neurons (sigma', sigma'' t_f in local
// arrays), so they vectorize; scalar cores: one neuron at a time. Same operations, same bits.
template <int N, int M, typename Act>
inline void activate2(scalar* __restrict buf) noexcept {
    if constexpr (kVectorUnit) {
        scalar d1[N];
        scalar d2tf[N];
        for (int j = 0; j < N; ++j) buf[j] = Act::eval2(buf[j], d1[j], d2tf[j]);
        for (int j = 0; j < N; ++j) d2tf[j] *= buf[N + j];
        for (int j = 0; j < N; ++j) buf[(M + 2) * N + j] = d2tf[j] * buf[N + j] + d1[j] * buf[(M + 2) * N + j];
        for (int q = 1; q <= M; ++q)
            for (int j = 0; j < N; ++j)
                buf[(M + 2 + q) * N + j] = d2tf[j] * buf[(1 + q) * N + j] + d1[j] * buf[(M + 2 + q) * N + j];
        for (int c = 1; c <= M + 1; ++c)
            for (int j = 0; j < N; ++j) buf[c * N + j] *= d1[j];
    } else {
        for (int j = 0; j < N; ++j) {
            scalar d1;
            scalar d2;
            buf[j] = Act::eval2(buf[j], d1, d2);
            const scalar d2tf = d2 * buf[N + j];
            buf[(M + 2) * N + j] = d2tf * buf[N + j] + d1 * buf[(M + 2) * N + j];
            for (int q = 1; q <= M; ++q)
                buf[(M + 2 + q) * N + j] = d2tf * buf[(1 + q) * N + j] + d1 * buf[(M + 2 + q) * N + j];
            for (int c = 1; c <= M + 1; ++c) buf[c * N + j] *= d1;
        }
    }
}
"""

_TEMPLATES_PAIR = r"""
// activate_pair: one hyper-dual number per neuron (min_memory layout), in place. Channels:
// 0 real a, 1 eps1 tangent t_f, 2 eps2 tangent w, 3 eps12 part u:
// u <- sigma''(a) t_f w + sigma'(a) u, then t_f, w <- sigma'(a) t_f, sigma'(a) w (same
// operations, in the same order, as activate2: both layouts give the same bits).
template <int N, typename Act>
inline void activate_pair(scalar* __restrict buf) noexcept {
    for (int j = 0; j < N; ++j) {
        scalar d1;
        scalar d2;
        const scalar y = Act::eval2(buf[j], d1, d2);
        const scalar d2tf = d2 * buf[N + j];
        buf[3 * N + j] = d2tf * buf[2 * N + j] + d1 * buf[3 * N + j];
        buf[N + j] *= d1;
        buf[2 * N + j] *= d1;
        buf[j] = y;
    }
}
"""


# Register blocking of hidden layers: 32 outputs x C channels of accumulators stay in
# registers across the k loop. Measured with callgrind on g++ 12 -O3 -march=native (AVX2):
# it pays only when C * 32 accumulators fit (C <= 3, twelve ymm registers); 8-, 16- and
# 24-wide blocks compiled worse than the streaming kernel, so every other layer streams, and
# the header streams everywhere on targets without AVX (kRegisterBlocking).
# The choice never changes a result: each output is summed in the same order either way.
BLOCK = 32
MAX_BLOCKED_CHANNELS = 3


def use_blocked(width: int, channels: int) -> bool:
    return channels <= MAX_BLOCKED_CHANNELS and width % BLOCK == 0


@dataclass(frozen=True)
class Plan:
    """Where each layer reads and writes: offsets into the workspace, or the caller's arrays."""
    steps: list[str]
    workspace_scalars: int


def _plan_sweep(widths: list[int], channels: int, activation: Callable[[int, str, str], str], seed_expr: str,
                target: str) -> Plan:
    """Alternate stored layer outputs between the front and the back of one buffer of size
    channels * workspace_span(widths): a layer's input and output never overlap. The last
    hidden layer is fused with the output layer (dense_fused) and stores nothing.
    ``activation(layer, width, pointer)`` gives the activation call of hidden layer ``layer``."""
    span = channels * workspace_span(widths)
    d = len(widths) - 1
    steps: list[str] = []
    in_offset = None

    def source(i: int) -> str:
        return seed_expr if i == 1 else f"detail::Channels<{widths[i - 1]}>{{w + {in_offset}}}"

    for i in range(1, d - 1):
        n_in, n_out = widths[i - 1], widths[i]
        out_offset = 0 if in_offset is None or in_offset != 0 else span - channels * n_out
        dest = f"w + {out_offset}"
        stream = f"detail::dense_stream<{n_in}, {n_out}, {channels}>({source(i)}, detail::kW{i}, detail::kB{i}, {dest});"
        if i == 1 or not use_blocked(n_out, channels):
            steps.append(stream)
        else:
            block = (f"detail::dense_block<{n_in}, {n_out}, {channels}, {BLOCK}>({source(i)}, detail::kW{i}, "
                     f"detail::kB{i}, {dest});")
            steps += ["if constexpr (detail::kRegisterBlocking) {", "    " + block, "} else {", "    " + stream, "}"]
        steps.append(activation(i, str(n_out), dest))
        in_offset = out_offset
    i = d - 1
    if i == 0:      # no hidden layer: an affine barrier
        steps.append(f"detail::dense_stream<{widths[0]}, 1, {channels}>({seed_expr}, detail::kW1, detail::kB1, {target});")
        return Plan(steps, span)
    act = activation(i, "decltype(nb)::value", "blk")
    steps += [f"detail::dense_fused<{widths[i - 1]}, {widths[i]}, {channels}>(",
              f"    {source(i)}, detail::kW{i}, detail::kB{i}, detail::kW{d}, detail::kB{d}, {target},",
              f"    [](auto nb, scalar* blk) noexcept {{ {act} }});"]
    return Plan(steps, span)


def _entry_steps(widths: list[int], m: int, order: int, layout: str) -> tuple[list[str], int]:
    """The body of lie() (order 1) or lie2() (order 2) after the input check, and its workspace."""
    channels = channels_for(m, order, layout)
    if order == 1:
        act = lambda i, n, ptr: f"detail::activate<{n}, {channels}, detail::Act{i}>({ptr});"  # noqa: E731
    elif layout == "sweep":
        act = lambda i, n, ptr: f"detail::activate2<{n}, {m}, detail::Act{i}>({ptr});"  # noqa: E731
    else:
        act = lambda i, n, ptr: f"detail::activate_pair<{n}, detail::Act{i}>({ptr});"  # noqa: E731
    if layout == "sweep":
        seed = ("const auto seed = [x, f, G](int c, int k) noexcept -> scalar {",
                "    return c == 0 ? x[k] : (c == 1 ? f[k] : G[k * kInputDim + (c - 2)]);",
                "};") if order == 1 else (
                "const auto seed = [x, f, G, Dff, DfG](int c, int k) noexcept -> scalar {",
                "    return c == 0 ? x[k] : c == 1 ? f[k] : c < kInputDim + 2 ? G[k * kInputDim + (c - 2)]",
                "         : c == kInputDim + 2 ? Dff[k] : DfG[k * kInputDim + (c - kInputDim - 3)];",
                "};")
        plan = _plan_sweep(widths, channels, act, "seed", "out")
        return ["scalar* const w = ws.data;", "(void)w;", *seed, *plan.steps], plan.workspace_scalars
    plan = _plan_sweep(widths, channels, act, "seed", "res")
    if order == 1:
        # direction d = 0 is f, d = j + 1 is column j of G; the real path is recomputed each time
        head = ["for (int d = 0; d <= kInputDim; ++d) {",
                "    const auto seed = [x, f, G, d](int c, int k) noexcept -> scalar {",
                "        return c == 0 ? x[k] : (d == 0 ? f[k] : G[k * kInputDim + (d - 1)]);",
                "    };",
                "    scalar res[2];"]
        tail = ["    if (d == 0) out[0] = res[0];", "    out[1 + d] = res[1];", "}"]
    else:
        # seed p = 0 is (f, f'(x) f), p = j + 1 is (G_j, f'(x) G_j); eps1 always carries f
        head = ["for (int p = 0; p <= kInputDim; ++p) {",
                "    const auto seed = [x, f, G, Dff, DfG, p](int c, int k) noexcept -> scalar {",
                "        return c == 0 ? x[k] : c == 1 ? f[k]",
                "             : c == 2 ? (p == 0 ? f[k] : G[k * kInputDim + (p - 1)])",
                "             : (p == 0 ? Dff[k] : DfG[k * kInputDim + (p - 1)]);",
                "    };",
                "    scalar res[4];"]
        tail = ["    if (p == 0) {", "        out[0] = res[0];", "        out[1] = res[1];",
                "        out[kInputDim + 2] = res[3];", "    } else {", "        out[1 + p] = res[2];",
                "        out[kInputDim + 2 + p] = res[3];", "    }", "}"]
    body = head + ["    " + line for line in plan.steps] + tail
    return ["scalar* const w = ws.data;", "(void)w;", *body], plan.workspace_scalars


def emit_header(model: Model, options: EmitOptions) -> tuple[str, CostReport]:
    """The header text and its cost/workspace report. Deterministic: same inputs, same bytes."""
    options.check()
    validate(model, canonical=True)
    if options.order == 2:
        require_smooth(model)
    name = check_identifier(model.name)
    scalar, m, n = options.scalar, options.inputs, model.input_dim
    scalar_bytes = 4 if scalar == "float" else 8
    report = cost_report(model, m, options.order, scalar_bytes, options.layout)
    widths = model.widths()
    dense = model.dense_layers()
    acts = model.hidden_activations()

    act_structs = []
    act_code = []
    for i, act in enumerate(acts, start=1):
        struct = f"Act{i}"
        act_structs.append(struct)
        body1 = "\n".join("        " + s for s in activation_body(act.kind, dict(act.params), scalar, 1))
        code = [f"// hidden layer {i}: {act.kind}{dict(act.params) if act.params else ''}",
                f"struct {struct} {{",
                "    static inline scalar eval(scalar a, scalar& d1) noexcept {",
                body1, "    }"]
        if options.order == 2:
            body2 = "\n".join("        " + s for s in activation_body(act.kind, dict(act.params), scalar, 2))
            code += ["    static inline scalar eval2(scalar a, scalar& d1, scalar& d2) noexcept {", body2, "    }"]
        code.append("};")
        act_code.append("\n".join(code))

    weights = []
    for i, layer in enumerate(dense, start=1):
        weights.append(f"// layer {i}: {layer.out_dim} x {layer.in_dim}, stored column-major (kW{i}[k*{layer.out_dim} + j] = W[j][k])")
        weights.append(f"constexpr scalar kW{i}[{layer.in_dim * layer.out_dim}] = {_array(layer.weight.T, scalar)};")
        weights.append(f"constexpr scalar kB{i}[{layer.out_dim}] = {_array(layer.bias, scalar)};")

    steps1, ws1 = _entry_steps(widths, m, 1, options.layout)
    steps2, ws2 = _entry_steps(widths, m, 2, options.layout) if options.order == 2 else ([], 0)
    workspace = max(ws1, ws2)
    if workspace != report.workspace_scalars:   # the plan and the reported formula must agree
        raise AssertionError(f"workspace plan {workspace} != reported {report.workspace_scalars}")
    nan = '__builtin_nanf("")' if scalar == "float" else '__builtin_nan("")'
    guard = f"CBFSIM_{name.upper()}_HPP"
    digest = model.fingerprint()[:16]

    out: list[str] = []
    out.append(f"// {name}.hpp: generated by cbfsim compiler {__version__} (model sha256 {digest}, "
               f"order {options.order}, {scalar}, {options.layout} layout). Do not edit.")
    out.append("//")
    out.append("// Returns a neural barrier h(x) with its exact Lie derivatives by forward-mode dual numbers:")
    out.append("// the state enters as x + f(x) eps + G(x) eps' (one tangent channel per vector field), every")
    out.append("// layer maps the real part and all tangents in one sweep, and the tangents leave as")
    out.append("// L_f h = dh(x) f(x) and L_G h = dh(x) G(x) with no truncation error. Order 2 adds the")
    out.append("// hyper-dual eps12 channels seeded with f'(x) f and f'(x) G_j, giving L_f^2 h and L_G L_f h.")
    out.append("// No heap, no recursion, no exceptions, no standard library beyond <cstddef>/<cstdint>.")
    out.append("//")
    for line in report.lines():
        out.append("// " + line)
    out.append("")
    out.append(f"#ifndef {guard}")
    out.append(f"#define {guard}")
    out.append("")
    out.append("#include <cstddef>")
    out.append("#include <cstdint>")
    out.append("")
    out.append(f"namespace {name} {{")
    out.append("")
    out.append(f"using scalar = {scalar};")
    out.append(f"constexpr int kStateDim = {n};          // n: length of x and f")
    out.append(f"constexpr int kInputDim = {m};          // m: columns of G (n x m, row-major)")
    out.append(f"constexpr int kOrder = {options.order};")
    out.append(f"constexpr int kLieOutputs = {2 + m};       // lie():  h, L_f h, L_G h[m]")
    if options.order == 2:
        out.append(f"constexpr int kLie2Outputs = {3 + 2 * m};      // lie2(): h, L_f h, L_G h[m], L_f^2 h, L_G L_f h[m]")
    out.append(f"// workspace: {report.workspace_formula} scalars")
    out.append(f"constexpr std::size_t kWorkspaceScalars = {workspace};")
    out.append("constexpr std::size_t kWorkspaceBytes = kWorkspaceScalars * sizeof(scalar);")
    out.append("")
    out.append("// Scratch memory for one evaluation. Pass your own for reentrancy (threads, interrupts).")
    out.append(f"struct Workspace {{ scalar data[{max(workspace, 1)}]; }};")
    out.append("// The workspace used by the convenience entries without a Workspace argument (not reentrant).")
    out.append("inline Workspace g_workspace;")
    out.append("")
    out.append("namespace detail {")
    out.append("")
    out.append(math_source(scalar).strip("\n"))
    out.append(_TEMPLATES.rstrip())
    if options.order == 2:
        out.append((_TEMPLATES_2 if options.layout == "sweep" else _TEMPLATES_PAIR).rstrip())
    out.append("")
    out.extend(act_code)
    out.append("")
    out.extend(weights)
    out.append("")
    out.append("}  // namespace detail")
    out.append("")

    out.append("// h, L_f h, L_G h at x, given f = f(x) (n) and G = G(x) (n x m, row-major).")
    out.append("// out = [h, L_f h, L_G h_1..m]. Returns 0, or 1 with out all NaN if any input is NaN/Inf.")
    out.append("inline int lie(const scalar* x, const scalar* f, const scalar* G, scalar* out, Workspace& ws) noexcept {")
    out.append("    if (!(detail::all_finite(x, kStateDim) && detail::all_finite(f, kStateDim) &&")
    out.append("          detail::all_finite(G, kStateDim * kInputDim))) {")
    out.append(f"        for (int i = 0; i < kLieOutputs; ++i) out[i] = {nan};")
    out.append("        return 1;")
    out.append("    }")
    out.extend("    " + line for line in steps1)
    out.append("    return 0;")
    out.append("}")
    out.append("")
    out.append("inline int lie(const scalar* x, const scalar* f, const scalar* G, scalar* out) noexcept {")
    out.append("    return lie(x, f, G, out, g_workspace);")
    out.append("}")
    if options.order == 2:
        out.append("")
        out.append("// Everything for a relative-degree-2 barrier in one hyper-dual sweep, given also")
        out.append("// Dff = f'(x) f(x) (n) and DfG = f'(x) G(x) (n x m, row-major).")
        out.append("// out = [h, L_f h, L_G h_1..m, L_f^2 h, L_G L_f h_1..m]. Returns 0, or 1 (out all NaN) on NaN/Inf input.")
        out.append("inline int lie2(const scalar* x, const scalar* f, const scalar* G, const scalar* Dff, const scalar* DfG,")
        out.append("                scalar* out, Workspace& ws) noexcept {")
        out.append("    if (!(detail::all_finite(x, kStateDim) && detail::all_finite(f, kStateDim) &&")
        out.append("          detail::all_finite(G, kStateDim * kInputDim) && detail::all_finite(Dff, kStateDim) &&")
        out.append("          detail::all_finite(DfG, kStateDim * kInputDim))) {")
        out.append(f"        for (int i = 0; i < kLie2Outputs; ++i) out[i] = {nan};")
        out.append("        return 1;")
        out.append("    }")
        out.extend("    " + line for line in steps2)
        out.append("    return 0;")
        out.append("}")
        out.append("")
        out.append("inline int lie2(const scalar* x, const scalar* f, const scalar* G, const scalar* Dff, const scalar* DfG,")
        out.append("                scalar* out) noexcept {")
        out.append("    return lie2(x, f, G, Dff, DfG, out, g_workspace);")
        out.append("}")
    out.append("")
    out.append(f"}}  // namespace {name}")
    out.append("")
    out.append(f"#endif  // {guard}")
    out.append("")
    return "\n".join(out), report
