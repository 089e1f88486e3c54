"""The extern "C" shim beside each header: flat-array entry points for ctypes.

The ABI lives here whole: its version, the C entries this module emits and the ctypes
signature table ``compiler.load`` binds them with. Change one, change all three and bump
``ABI_VERSION`` (a library of another version is refused at load time).

Scratch memory. Every evaluating entry but the float64 ones takes a last argument
``void* ws``: null, or ``sizeof(NAME::Workspace)`` bytes (``kWorkspaceBytes``, at least one
scalar) of the caller's memory, aligned for the scalar, that only this call uses. With
null, a workspace of at most ``STACK_WORKSPACE_BYTES`` (64 KiB) goes on the entry's stack
frame; a larger one needs the caller's memory, and the entry returns ``NEEDS_WORKSPACE``
without computing anything (a 24.5 MB ``Workspace`` on the stack segfaulted: thread stacks
are a few MB). The float64 entries (the binding's single-state path) take no ``ws``: they
exist only when their buffers and the workspace fit the stack limit. Either way each call
has its own workspace, so the library is safe to call from several threads at once (ctypes
releases the GIL).
"""
from __future__ import annotations

import ctypes

from .cost import CostReport
from .emit_cpp import EmitOptions, check_identifier

ABI_VERSION = 3                       # 3: entries take `void* ws`; cbf_workspace_bytes returns size_t
STACK_WORKSPACE_BYTES = 64 * 1024     # the most scratch memory an entry puts on its own stack frame
NEEDS_WORKSPACE = 2                   # status: the workspace is above the stack limit and ws was null

_P, _I = ctypes.c_void_p, ctypes.c_int
# name -> (restype, argtypes). The single-state float64 entries have argtypes None: only the
# binding calls them, always with bytes objects and a c_double output array, which ctypes
# passes as pointers as they are; declared c_void_p arguments would cost 0.25 us more per
# call in conversions (6 arguments for lie2).
SIGNATURES = {
    "cbf_abi_version": (_I, []),
    "cbf_scalar_bytes": (_I, []),
    "cbf_workspace_bytes": (ctypes.c_size_t, []),
    "cbf_dims": (_I, [ctypes.POINTER(_I)] * 3),
    "cbf_lie": (_I, [_P] * 5),                 # (x, f, G, out, ws)
    "cbf_lie_f64": (_I, None),                 # (x, f, G: float64 bytes, out: c_double array)
    "cbf_lie2_f64": (_I, None),                # (x, f, G, Dff, DfG: float64 bytes, out)
    "cbf_lie_batch": (_I, [_I] + [_P] * 5),    # (N, X, F, G, out, ws)
    "cbf_lie2": (_I, [_P] * 7),
    "cbf_lie2_batch": (_I, [_I] + [_P] * 7),
}

_SIZES = {"x": "n", "f": "n", "G": "n * m", "Dff": "n", "DfG": "n * m"}


def _workspace_lines(name: str, on_stack: bool) -> list[str]:
    """Lines binding ``w`` to this call's workspace: the caller's ``ws``, or one on this frame."""
    if on_stack:
        return [f"    {name}::Workspace stack_ws;",
                f"    {name}::Workspace& w = ws ? *static_cast<{name}::Workspace*>(ws) : stack_ws;"]
    return [f"    if (ws == nullptr) return {NEEDS_WORKSPACE};   // above the stack limit: the caller's memory",
            f"    {name}::Workspace& w = *static_cast<{name}::Workspace*>(ws);"]


def _f64_entry(name: str, T: str, fn: str, outputs: str, arrays: tuple[str, ...]) -> list[str]:
    """``cbf_<fn>_f64``: the Python runtime's single-state entry. The arrays come as float64
    bytes (numpy's tobytes, cheaper from Python than taking an array's address) and are
    converted here into one buffer of the header's scalar. Emitted only when that buffer and
    the workspace fit the stack limit, so it takes no ``ws`` (one argument less from Python)."""
    offsets, at = [], "0"
    for arr in arrays:
        offsets.append(at)
        at = _SIZES[arr] if at == "0" else f"{at} + {_SIZES[arr]}"
    params = ", ".join(f"const double* {arr}" for arr in arrays)
    lines = [f"// {fn} for the Python runtime's single-state path: float64 in and out, converted here.",
             f"int cbf_{fn}_f64({params}, double* out) {{",
             f"    constexpr int n = {name}::kStateDim;",
             f"    constexpr int m = {name}::kInputDim;",
             f"    {T} in[{at}];",
             f"    {T} res[{name}::{outputs}];"]
    for arr, off in zip(arrays, offsets):
        dest = "in[i]" if off == "0" else f"in[{off} + i]"
        lines.append(f"    for (int i = 0; i < {_SIZES[arr]}; ++i) {dest} = static_cast<{T}>({arr}[i]);")
    ptrs = ", ".join("in" if off == "0" else f"in + {off}" for off in offsets)
    return lines + [f"    {name}::Workspace ws;",
                    f"    const int status = {name}::{fn}({ptrs}, res, ws);",
                    f"    for (int i = 0; i < {name}::{outputs}; ++i) out[i] = static_cast<double>(res[i]);",
                    "    return status;",
                    "}",
                    ""]


def f64_entry_fits(report: CostReport, fn: str) -> bool:
    """Whether ``cbf_<fn>_f64``'s workspace, converted inputs and outputs fit the stack limit (else
    it is not emitted, and the binding sends single states through the batch entry)."""
    if report.workspace_bytes > STACK_WORKSPACE_BYTES:
        return False
    n, m = report.state_dim or report.widths[0], report.m     # the state, not the embedded width
    scalars = 2 * n + n * m + 2 + m if fn == "lie" else 3 * n + 2 * n * m + 3 + 2 * m   # inputs + outputs
    return scalars * report.scalar_bytes <= STACK_WORKSPACE_BYTES


def emit_abi(name: str, options: EmitOptions, report: CostReport) -> str:
    """NAME_abi.cpp for the header ``emit_header`` wrote with these options and this report."""
    check_identifier(name)
    T = options.scalar
    on_stack = report.workspace_bytes <= STACK_WORKSPACE_BYTES
    ws = _workspace_lines(name, on_stack)
    where = (f"on the entry's stack unless ws is given (at most {STACK_WORKSPACE_BYTES} bytes)" if on_stack else
             f"above the {STACK_WORKSPACE_BYTES}-byte stack limit, so ws is required (else status {NEEDS_WORKSPACE})")
    lines = [
        f"// {name}_abi.cpp: extern \"C\" entry points for {name}.hpp (generated by cbfsim; do not edit).",
        "// Arrays are row-major; G is n x m. Every entry returns 0 on success.",
        f"// ws: null, or sizeof({name}::Workspace) bytes of scratch memory (scalar-aligned) for this call only.",
        f"// This workspace is {report.workspace_bytes} bytes: {where}.",
        f'#include "{name}.hpp"',
        "",
    ]
    if on_stack:
        lines += [f"static_assert({name}::kWorkspaceBytes <= {STACK_WORKSPACE_BYTES}, "
                  '"workspace above the stack limit: regenerate this shim with the header");', ""]
    lines += [
        'extern "C" {',
        "",
        f"int cbf_abi_version(void) {{ return {ABI_VERSION}; }}",
        f"int cbf_scalar_bytes(void) {{ return static_cast<int>(sizeof({name}::scalar)); }}",
        f"std::size_t cbf_workspace_bytes(void) {{ return {name}::kWorkspaceBytes; }}",
        "",
        "int cbf_dims(int* n, int* m, int* order) {",
        f"    *n = {name}::kStateDim;",
        f"    *m = {name}::kInputDim;",
        f"    *order = {name}::kOrder;",
        "    return 0;",
        "}",
        "",
        f"int cbf_lie(const {T}* x, const {T}* f, const {T}* G, {T}* out, void* ws) {{",
        *ws,
        f"    return {name}::lie(x, f, G, out, w);",
        "}",
        "",
        *(_f64_entry(name, T, "lie", "kLieOutputs", ("x", "f", "G")) if f64_entry_fits(report, "lie") else []),
        "// Returns 0, or 1 if any state had NaN/Inf inputs (its outputs are NaN; the others are computed).",
        f"int cbf_lie_batch(int N, const {T}* X, const {T}* F, const {T}* G, {T}* out, void* ws) {{",
        f"    constexpr int n = {name}::kStateDim;",
        f"    constexpr int m = {name}::kInputDim;",
        f"    constexpr int k = {name}::kLieOutputs;",
        *ws,
        "    int status = 0;",
        "    for (int i = 0; i < N; ++i)",
        f"        status |= {name}::lie(X + i * n, F + i * n, G + i * n * m, out + i * k, w);",
        "    return status;",
        "}",
    ]
    if options.order == 2:
        lines += [
            "",
            *(_f64_entry(name, T, "lie2", "kLie2Outputs", ("x", "f", "G", "Dff", "DfG"))
              if f64_entry_fits(report, "lie2") else []),
            f"int cbf_lie2(const {T}* x, const {T}* f, const {T}* G, const {T}* Dff, const {T}* DfG, {T}* out, "
            "void* ws) {",
            *ws,
            f"    return {name}::lie2(x, f, G, Dff, DfG, out, w);",
            "}",
            "",
            f"int cbf_lie2_batch(int N, const {T}* X, const {T}* F, const {T}* G, const {T}* Dff, const {T}* DfG, "
            f"{T}* out, void* ws) {{",
            f"    constexpr int n = {name}::kStateDim;",
            f"    constexpr int m = {name}::kInputDim;",
            f"    constexpr int k = {name}::kLie2Outputs;",
            *ws,
            "    int status = 0;",
            "    for (int i = 0; i < N; ++i)",
            f"        status |= {name}::lie2(X + i * n, F + i * n, G + i * n * m, Dff + i * n, DfG + i * n * m, "
            "out + i * k, w);",
            "    return status;",
            "}",
        ]
    lines += ["", '}  // extern "C"', ""]
    return "\n".join(lines)
