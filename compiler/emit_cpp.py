"""IR -> one self-contained C++17 header with exact Lie derivatives from static memory.

The header carries the whole method in plain loops: a dense layer on C channels
(real path + tangents) and an elementwise activation that scales the tangents by
sigma' (and forms the eps12 parts with sigma''). The weights are constexpr arrays; the
workspace is one array whose size and every offset into it are planned here, at
compile time, and printed as constants.
"""
from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from typing import Callable

import numpy as np

from . import __version__
from .cost import LAYOUTS, CostReport, channels_for, cost_report, embedded_span, workspace_span
from .cpp_activations import activation_body, literal, math_functions
from .cpp_snippets import array_literal
from .cppmath import MATH_FUNCTIONS, math_source
from .emit_periodic import tables as periodic_tables
from .errors import OptionError
from .identifiers import check_identifier, include_guard, sanitize_identifier
from .ir import Model, validate
from .passes import require_smooth



@dataclass(frozen=True)
class EmitOptions:
    inputs: int              # m, number of control inputs (columns of G)
    order: int = 1
    scalar: str = "float"    # or "double"
    layout: str = "sweep"    # "sweep": all directions in one pass; "min_memory": one direction at a time
    # Header math functions wanted beyond what the activations use, by name ("sin", "cos", ...),
    # e.g. for plant code compiled next to the barrier (firmware): <model>::detail::m_<name>.
    math: tuple[str, ...] = ()

    def check(self) -> None:
        """Refuse options the emitter cannot honour, in one line, before anything is compiled
        (``inputs=2.5`` once reached the header as ``kInputDim = 2.5`` and failed inside g++)."""
        if not _whole(self.order) or self.order not in (1, 2):
            raise OptionError(f"order must be 1 or 2, got {self.order!r}")
        if self.scalar not in ("float", "double"):
            raise OptionError(f"dtype must be 'float' or 'double', got {self.scalar!r}")
        if not _whole(self.inputs):
            raise OptionError(f"inputs (m, the number of control inputs) must be a whole number, got {self.inputs!r} "
                              f"({type(self.inputs).__name__})")
        if not 0 <= self.inputs <= MAX_INPUTS:    # 0: an autonomous plant (no G columns)
            raise OptionError(f"inputs (m, the number of control inputs) must be between 0 and {MAX_INPUTS:,}, "
                              f"got {self.inputs:,}")
        if self.layout not in LAYOUTS:
            raise OptionError(f"layout must be one of {', '.join(LAYOUTS)}, got {self.layout!r}")
        unknown = sorted(set(self.math) - set(MATH_FUNCTIONS))
        if unknown:
            raise OptionError(f"unknown math functions {unknown}; the header offers {', '.join(MATH_FUNCTIONS)}")

    def check_sizes(self, model: Model) -> None:
        """The generated C++ sizes and indexes its arrays with ``int``: G (n x m) and the widest
        layer's m + 3 channels must stay far below INT_MAX."""
        n, widest = model.input_dim, max(model.widths())
        for what, count in (("G (n x m)", n * self.inputs), ("the widest layer's m + 3 channels",
                                                              widest * (self.inputs + 3))):
            if count > MAX_ARRAY_ELEMENTS:
                raise OptionError(f"inputs={self.inputs:,} with {model.name!r} (n={n}, widest layer {widest}) makes "
                                  f"{what} {count:,} scalars; the generated C++ indexes arrays with int (at most "
                                  f"{MAX_ARRAY_ELEMENTS:,} here)")


MAX_INPUTS = 1 << 16            # control inputs m: far beyond any plant, and int arithmetic stays exact
MAX_ARRAY_ELEMENTS = 1 << 30    # scalars in one generated array (int indices with room for sums)


def _whole(value: object) -> bool:
    """An integer that is not a bool (True would become m = 1 without a word)."""
    import numbers
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


KERNEL_MARKER = "// ---- kernel text: the emitter inlines everything below this line into the generated header ----\n"


def kernel(file: str) -> str:
    """The C++ of compiler/kernels/<file> below its marker (the part a generated header inlines)."""
    text = (resources.files("compiler") / "kernels" / file).read_text(encoding="utf-8")
    head, marker, body = text.partition(KERNEL_MARKER)
    if not marker:
        raise RuntimeError(f"compiler/kernels/{file} lacks its kernel marker line")
    return body


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
                target: str, embed: Callable[[str], str] | None = None) -> Plan:
    """Alternate stored layer outputs between the front and the back of one buffer of size
    channels * workspace_span(widths): a layer's input and output never overlap. The last
    hidden layer is fused with the output layer (dense_fused) and stores nothing.
    ``activation(layer, width, pointer)`` gives the activation call of hidden layer ``layer``.
    ``embed(pointer)``: the call that forms the periodic embedding's seed there (channels x n_0,
    beside layer 1's output: cost.embedded_span), which layer 1 then reads instead of the seed."""
    d = len(widths) - 1
    span = channels * (embedded_span(widths) if embed else workspace_span(widths))
    steps: list[str] = []
    in_offset = None
    if embed is not None:
        e_offset = channels * widths[1] if d >= 3 else 0
        steps.append(embed(f"w + {e_offset}"))
        seed_expr = f"detail::Channels<{widths[0]}>{{w + {e_offset}}}"

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


def _entry_steps(widths: list[int], m: int, order: int, layout: str, n: int = 0, k: int = 0
                 ) -> tuple[list[str], int]:
    """The body of lie() (order 1) or lie2() (order 2) after the input check, and its workspace.
    k > 0: the model starts with a periodic embedding of k of the n state coordinates; its sin
    and cos are computed once per state into the last 2k workspace scalars (before any
    direction loop), and each sweep forms the embedded seed from them."""
    channels = channels_for(m, order, layout)
    embed = None
    if k:
        kernel_call = (f"embed1<{n}, {widths[0]}, {channels}>" if order == 1 else
                       f"embed2<{n}, {widths[0]}, {m}>" if layout == "sweep" else f"embed_pair<{n}, {widths[0]}>")
        # J's offset is known once the plan is: the placeholder is filled in below
        embed = lambda dest: (f"detail::{kernel_call}(seed, detail::kPeriodicSlot, detail::kFrequency, "  # noqa: E731
                              f"w + @J@, {dest});")
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
        plan = _plan_sweep(widths, channels, act, "seed", "out", embed)
        trig, total = _trig(plan, k)
        return ["scalar* const w = ws.data;", "(void)w;", *trig, *seed, *_fill(plan.steps, plan, k)], total
    plan = _plan_sweep(widths, channels, act, "seed", "res", embed)
    trig, total = _trig(plan, k)
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
    body = head + ["    " + line for line in _fill(plan.steps, plan, k)] + tail
    return ["scalar* const w = ws.data;", "(void)w;", *trig, *body], total


def _trig(plan: Plan, k: int) -> tuple[list[str], int]:
    """The once-per-state sin/cos of the periodic embedding (after the plan's buffer) and the
    total workspace."""
    if not k:
        return [], plan.workspace_scalars
    return ([f"detail::embed_trig<{k}>(x, detail::kPeriodicIndex, detail::kFrequency, w + {plan.workspace_scalars});"],
            plan.workspace_scalars + 2 * k)


def _fill(steps: list[str], plan: Plan, k: int) -> list[str]:
    return [line.replace("@J@", str(plan.workspace_scalars)) for line in steps] if k else steps


def _activation_structs(model: Model, options: EmitOptions) -> list[str]:
    """One struct per hidden layer with eval (and eval2 for order 2) from the activation table."""
    code = []
    for i, act in enumerate(model.hidden_activations(), start=1):
        lines = [f"// hidden layer {i}: {act.kind}{dict(act.params) if act.params else ''}",
                 f"struct Act{i} {{",
                 "    static inline scalar eval(scalar a, scalar& d1) noexcept {",
                 _indent(activation_body(act.kind, dict(act.params), options.scalar, 1), 8), "    }"]
        if options.order == 2:
            lines += ["    static inline scalar eval2(scalar a, scalar& d1, scalar& d2) noexcept {",
                      _indent(activation_body(act.kind, dict(act.params), options.scalar, 2), 8), "    }"]
        lines.append("};")
        code.append("\n".join(lines))
    return code


def _indent(lines: list[str], spaces: int) -> str:
    return "\n".join(" " * spaces + line for line in lines)


def header_math(model: Model, options: EmitOptions) -> list[str]:
    """The math functions the header carries: those its activation bodies call, plus options.math."""
    acts = [(a.kind, dict(a.params)) for a in model.hidden_activations()]
    embedding = {"sincos"} if model.embedding is not None else set()
    return sorted(math_functions(acts, options.order) | embedding | set(options.math))


def _banner(name: str, model: Model, options: EmitOptions, report: CostReport, guard: str) -> list[str]:
    out = [f"// {name}.hpp: generated by cbfsim compiler {__version__} (model sha256 {model.fingerprint()[:16]}, "
           f"order {options.order}, {options.scalar}, {options.layout} layout). Do not edit.",
           "//",
           "// Returns a neural barrier h(x) with its exact Lie derivatives by forward-mode dual numbers:",
           "// the state enters as x + f(x) eps + G(x) eps' (one tangent channel per vector field), every",
           "// layer maps the real part and all tangents in one sweep, and the tangents leave as",
           "// L_f h = dh(x) f(x) and L_G h = dh(x) G(x) with no truncation error. Order 2 adds the",
           "// hyper-dual eps12 channels seeded with f'(x) f and f'(x) G_j, giving L_f^2 h and L_G L_f h.",
           *(["// The network reads wrapped coordinates through a periodic embedding (sin, cos of each),",
              "// evaluated once per state and carried through all channels by the chain rule."]
             if model.embedding is not None else []),
           "// No heap, no recursion, no exceptions, no standard library beyond <cstddef>/<cstdint>.",
           "//"]
    out += ["// " + line for line in report.lines()]
    return out + ["", f"#ifndef {guard}", f"#define {guard}", "", "#include <cstddef>", "#include <cstdint>", ""]


def _constants(model: Model, options: EmitOptions, report: CostReport, workspace: int) -> list[str]:
    m = options.inputs
    out = [f"using scalar = {options.scalar};",
           f"constexpr int kStateDim = {model.input_dim};          // n: length of x and f",
           f"constexpr int kInputDim = {m};          // m: columns of G (n x m, row-major)",
           f"constexpr int kOrder = {options.order};",
           f"constexpr int kLieOutputs = {2 + m};       // lie():  h, L_f h, L_G h[m]"]
    if options.order == 2:
        out.append(f"constexpr int kLie2Outputs = {3 + 2 * m};      // lie2(): h, L_f h, L_G h[m], L_f^2 h, L_G L_f h[m]")
    if model.embedding is not None:
        out.append(f"constexpr int kEmbeddedDim = {model.embedded_dim};     // n_0: the periodic embedding's output")
    return out + [f"// workspace: {report.workspace_formula} scalars",
                  f"constexpr std::size_t kWorkspaceScalars = {workspace};",
                  "constexpr std::size_t kWorkspaceBytes = kWorkspaceScalars * sizeof(scalar);",
                  "",
                  "// Scratch memory for one evaluation. Pass your own for reentrancy (threads, interrupts).",
                  f"struct Workspace {{ scalar data[{max(workspace, 1)}]; }};",
                  "// The workspace used by the convenience entries without a Workspace argument (not reentrant).",
                  "inline Workspace g_workspace;"]


def _detail(model: Model, options: EmitOptions) -> list[str]:
    """namespace detail: the math the model uses, the layer kernels, the activations, the weights."""
    out = ["namespace detail {", "", math_source(options.scalar, header_math(model, options)).strip("\n"),
           "\n" + kernel("layers.hpp").rstrip()]
    if options.order == 2:
        out.append("\n" + kernel("activate2_sweep.hpp" if options.layout == "sweep" else "activate2_pair.hpp").rstrip())
    if model.embedding is not None:
        out += ["\n" + kernel("periodic.hpp").rstrip(), "", *periodic_tables(model, options.scalar)]
    out += ["", *_activation_structs(model, options), "", *_weights(model, options.scalar), "",
            "}  // namespace detail"]
    return out


def _weights(model: Model, scalar: str) -> list[str]:
    out = []
    for i, layer in enumerate(model.dense_layers(), start=1):
        out.append(f"// layer {i}: {layer.out_dim} x {layer.in_dim}, stored column-major (kW{i}[k*{layer.out_dim} + j] = W[j][k])")
        weights, biases = array_literal(layer.weight.T, scalar), array_literal(layer.bias, scalar)
        out.append(f"constexpr scalar kW{i}[{layer.in_dim * layer.out_dim}] = {weights};")
        out.append(f"constexpr scalar kB{i}[{layer.out_dim}] = {biases};")
    return out


def input_check(order: int, scalar: str, periodic: bool = False) -> list[str]:
    """The start of an entry's body: all outputs NaN and status 1 if any input is NaN or Inf,
    or (``periodic``) a wrapped coordinate is beyond m_sincos' exact range (shared with
    compiler/emit_reverse.py's baselines)."""
    nan = '__builtin_nanf("")' if scalar == "float" else '__builtin_nan("")'
    x_ok = "detail::all_finite(x, kStateDim) && detail::periodic_in_range(x)" if periodic else \
        "detail::all_finite(x, kStateDim)"
    if order == 1:
        return [f"    if (!({x_ok} && detail::all_finite(f, kStateDim) &&",
                "          detail::all_finite(G, kStateDim * kInputDim))) {",
                f"        for (int i = 0; i < kLieOutputs; ++i) out[i] = {nan};",
                "        return 1;",
                "    }"]
    return [f"    if (!({x_ok} && detail::all_finite(f, kStateDim) &&",
            "          detail::all_finite(G, kStateDim * kInputDim) && detail::all_finite(Dff, kStateDim) &&",
            "          detail::all_finite(DfG, kStateDim * kInputDim))) {",
            f"        for (int i = 0; i < kLie2Outputs; ++i) out[i] = {nan};",
            "        return 1;",
            "    }"]


def _entries(options: EmitOptions, steps1: list[str], steps2: list[str], periodic: bool = False) -> list[str]:
    """lie() (and lie2() for order 2), each with and without a caller-provided Workspace."""
    beyond = " or a periodic coordinate is beyond detail::periodic_in_range" if periodic else ""
    out = ["// h, L_f h, L_G h at x, given f = f(x) (n) and G = G(x) (n x m, row-major).",
           f"// out = [h, L_f h, L_G h_1..m]. Returns 0, or 1 with out all NaN if any input is NaN/Inf{beyond}.",
           "inline int lie(const scalar* x, const scalar* f, const scalar* G, scalar* out, Workspace& ws) noexcept {",
           *input_check(1, options.scalar, periodic),
           *("    " + line for line in steps1),
           "    return 0;",
           "}",
           "",
           "inline int lie(const scalar* x, const scalar* f, const scalar* G, scalar* out) noexcept {",
           "    return lie(x, f, G, out, g_workspace);",
           "}"]
    if options.order == 2:
        out += ["",
                "// Everything for a relative-degree-2 barrier in one hyper-dual sweep, given also",
                "// Dff = f'(x) f(x) (n) and DfG = f'(x) G(x) (n x m, row-major).",
                "// out = [h, L_f h, L_G h_1..m, L_f^2 h, L_G L_f h_1..m]. Returns 0, or 1 (out all NaN) on NaN/Inf input"
                f"{beyond}.",
                "inline int lie2(const scalar* x, const scalar* f, const scalar* G, const scalar* Dff, const scalar* DfG,",
                "                scalar* out, Workspace& ws) noexcept {",
                *input_check(2, options.scalar, periodic),
                *("    " + line for line in steps2),
                "    return 0;",
                "}",
                "",
                "inline int lie2(const scalar* x, const scalar* f, const scalar* G, const scalar* Dff, const scalar* DfG,",
                "                scalar* out) noexcept {",
                "    return lie2(x, f, G, Dff, DfG, out, g_workspace);",
                "}"]
    return out


def emit_header(model: Model, options: EmitOptions) -> tuple[str, CostReport]:
    """The header text and its cost/workspace report. Deterministic: same inputs, same bytes."""
    options.check()
    validate(model, canonical=True)
    if options.order == 2:
        require_smooth(model)
    name = check_identifier(model.name)
    report = cost_report(model, options.inputs, options.order, 4 if options.scalar == "float" else 8, options.layout)
    widths = model.widths()
    n, k = model.input_dim, len(model.embedding.periods) if model.embedding is not None else 0
    steps1, ws1 = _entry_steps(widths, options.inputs, 1, options.layout, n, k)
    steps2, ws2 = _entry_steps(widths, options.inputs, 2, options.layout, n, k) if options.order == 2 else ([], 0)
    workspace = max(ws1, ws2)
    if workspace != report.workspace_scalars:   # the plan and the reported formula must agree
        raise AssertionError(f"workspace plan {workspace} != reported {report.workspace_scalars}")
    guard = include_guard(name)
    out = [*_banner(name, model, options, report, guard),
           f"namespace {name} {{", "", *_constants(model, options, report, workspace), "",
           *_detail(model, options), "",
           *_entries(options, steps1, steps2, model.embedding is not None), "",
           f"}}  // namespace {name}", "", f"#endif  // {guard}", ""]
    return "\n".join(out), report


__all__ = ["EmitOptions", "check_identifier", "emit_header", "header_math", "kernel",
           "sanitize_identifier"]
