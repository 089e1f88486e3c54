"""Properties of the generated C++ itself: clean warnings-as-errors builds, determinism,
no heap or standard containers, the declared workspace is exactly the one used, two
models in one program, bit-identical results across optimization levels, thread safety."""
from __future__ import annotations

import re
import subprocess
import threading

import numpy as np
import pytest
import torch

from compiler.api import compile_model
from training.architectures import mlp
from tests.conftest import all_activations_net, build_and_run

pytestmark = pytest.mark.toolchain
STRICT = ["-std=c++17", "-Wall", "-Wextra", "-Wpedantic", "-Werror", "-Wdouble-promotion", "-Wfloat-conversion",
          "-Wshadow", "-fno-exceptions", "-fno-rtti"]


def _all_activations_net(order: int):
    return all_activations_net(order, inputs=3)


@pytest.mark.parametrize("layout", ["sweep", "min_memory"])
@pytest.mark.parametrize("order", [1, 2])
@pytest.mark.parametrize("dtype", ["float", "double"])
def test_header_and_shim_compile_warning_free(cxx, tmp_path, order, dtype, layout):
    src = compile_model(_all_activations_net(order), inputs=2, order=order, dtype=dtype, name="strict", layout=layout)
    src.write(tmp_path)
    # the shim's first line includes the header, so compiling the shim compiles the header as a
    # translation unit's first include too: self-contained, and every warning of its own shows
    first = next(line for line in (tmp_path / "strict_abi.cpp").read_text().splitlines()
                 if line.strip() and not line.lstrip().startswith("//"))
    assert first == '#include "strict.hpp"', first
    for flags in (STRICT + ["-O0"], STRICT + ["-O3"]):
        cmd = [cxx, *flags, "-x", "c++", "-c", str(tmp_path / "strict_abi.cpp"), "-o", str(tmp_path / "unit.o")]
        result = subprocess.run(cmd, capture_output=True, text=True)
        assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("order", [1, 2])
def test_every_activation_loop_vectorizes(cxx, tmp_path, order):
    """The activation bodies are branch-free (mask selects), so GCC vectorizes each activation
    loop on x86-64-v3; a floating-point ?: would make it scalar (5,696 instead of 610
    instructions per Softplus layer of the pendulum). Checked with GCC's vectorizer report."""
    import platform
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout
    if platform.machine() != "x86_64" or "clang" in version.lower():
        pytest.skip("checks GCC's vectorizer report on x86-64")
    compile_model(_all_activations_net(order), inputs=2, order=order, name="vec").write(tmp_path)
    header = (tmp_path / "vec.hpp").read_text().splitlines()
    eval_lines = {i + 1 for i, line in enumerate(header) if "Act::eval" in line and "for (int j" in line}
    assert eval_lines, "no activation loop found in the header"
    report = subprocess.run([cxx, "-std=c++17", "-O3", "-march=x86-64-v3", "-fopt-info-vec-all", "-c",
                             str(tmp_path / "vec_abi.cpp"), "-o", str(tmp_path / "vec.o")],
                            capture_output=True, text=True, check=True).stderr
    at = lambda line: [r for r in report.splitlines() if f"vec.hpp:{line}:" in r]  # noqa: E731
    reached = [line for line in eval_lines if at(line)]
    assert reached, "the vectorizer reported nothing on the activation loops"
    for line in reached:
        assert any("loop vectorized" in r for r in at(line)), at(line)
        assert not any("control flow" in r for r in at(line)), at(line)


def test_generated_code_is_auditable():
    src = compile_model(_all_activations_net(2), inputs=2, order=2, name="audit")
    code = src.header + src.abi
    for banned in (r"\bmalloc\b", r"\bcalloc\b", r"\bfree\(", r"\bnew\b", r"\bdelete\b", r"std::(?!size_t\b|u?int(8|16|32|64)_t\b)", r"\bthrow\b",
                   r"#include <(?!cstddef>|cstdint>)", r"typeid", r"dynamic_cast"):
        assert not re.search(banned, code), banned
    # no recursion: no generated function calls itself (the entry points only call templates below them)
    assert "__DATE__" not in code and "__TIME__" not in code


def test_no_heap_symbols_in_object(cxx, tmp_path):
    compile_model(mlp([4, 32, 32, 1], "softplus", seed=1), inputs=2, order=2, name="heapless").write(tmp_path)
    obj = tmp_path / "h.o"
    subprocess.run([cxx, "-std=c++17", "-O2", "-c", str(tmp_path / "heapless_abi.cpp"), "-o", str(obj)], check=True)
    symbols = subprocess.run(["nm", "-u", str(obj)], capture_output=True, text=True).stdout
    for banned in ("malloc", "free", "calloc", "realloc", "_Znwm", "_Znam", "_ZdlPv", "sbrk", "expf", "logf",
                   "tanhf", "erff", "exp", "log1p"):
        assert not re.search(rf"\b{banned}\b", symbols), f"{banned} is linked: {symbols}"


def test_same_model_gives_byte_identical_header():
    net = mlp([4, 16, 16, 1], "gelu", seed=3)
    a = compile_model(net, inputs=2, order=2, name="det")
    b = compile_model(net, inputs=2, order=2, name="det")
    assert a.header == b.header and a.abi == b.abi
    clone = mlp([4, 16, 16, 1], "gelu", seed=3)
    assert compile_model(clone, inputs=2, order=2, name="det").header == a.header
    with torch.no_grad():
        clone[0].weight[0, 0] += 1e-6
    assert compile_model(clone, inputs=2, order=2, name="det").header != a.header


WORKSPACE_PROBE = r"""
#include "probe.hpp"
#include <cstdio>
#include <cstring>
using namespace probe;
struct Guarded { scalar before[64]; Workspace ws; scalar after[64]; };
int main() {
    static Guarded g;
    scalar x[kStateDim], f[kStateDim], G[kStateDim * kInputDim], out[3 + 2 * kInputDim];
    for (int i = 0; i < kStateDim; ++i) { x[i] = scalar(0.3) * scalar(i + 1); f[i] = scalar(1) - x[i]; }
    for (int i = 0; i < kStateDim * kInputDim; ++i) G[i] = scalar(0.1) * scalar(i);
    const unsigned char canary = 0xA5;
    std::memset(&g, canary, sizeof g);
#if ORDER == 2
    int status = lie2(x, f, G, f, G, out, g.ws);
#else
    int status = lie(x, f, G, out, g.ws);
#endif
    const unsigned char* bytes = reinterpret_cast<const unsigned char*>(&g);
    std::size_t first = sizeof g, last = 0, guard_hits = 0, touched = 0;
    for (std::size_t i = 0; i < sizeof g; ++i) {
        if (bytes[i] == canary) continue;
        ++touched;
        if (i < offsetof(Guarded, ws) || i >= offsetof(Guarded, ws) + sizeof(Workspace)) ++guard_hits;
        if (i < first) first = i;
        if (i > last) last = i;
    }
    if (touched == 0) first = last = offsetof(Guarded, ws);   // report an empty range [0, 0)
    else ++last;
    std::printf("%d %zu %zu %zu %zu %zu\n", status, guard_hits, first - offsetof(Guarded, ws),
                last - offsetof(Guarded, ws), sizeof(Workspace), (std::size_t)kWorkspaceBytes);
}
"""


@pytest.mark.parametrize("layout", ["sweep", "min_memory"])
@pytest.mark.parametrize("widths,m,order,act", [
    ([4, 32, 32, 1], 2, 1, "relu"), ([2, 64, 64, 1], 1, 1, "relu"), ([2, 32, 32, 1], 1, 2, "softplus"),
    ([3, 7, 40, 5, 1], 3, 2, "tanh"), ([5, 9, 1], 4, 1, "elu")])
def test_declared_workspace_is_exactly_the_workspace_used(cxx, tmp_path, widths, m, order, act, layout):
    src = compile_model(mlp(widths, act, seed=4), inputs=m, order=order, name="probe", layout=layout)
    src.write(tmp_path)
    out = build_and_run(cxx, WORKSPACE_PROBE, tmp_path, ["-std=c++17", "-O2", f"-DORDER={order}", f"-I{tmp_path}"])
    status, guard_hits, first, end, size, declared = map(int, out.split())
    assert status == 0 and guard_hits == 0
    if src.report.workspace_bytes == 0:     # one hidden layer: fused into the output, nothing stored
        assert end == declared == 0 and size == src.report.scalar_bytes     # Workspace holds a 1-scalar placeholder
    else:
        assert first == 0 and end == size == declared == src.report.workspace_bytes
    assert f"kWorkspaceBytes" in src.header and str(src.report.workspace_scalars) in src.header


TWO_MODELS = r"""
#include "alpha.hpp"
#include "beta.hpp"
#include <cstdio>
int main() {
    float x[3] = {0.5f, -1.0f, 2.0f}, f[3] = {1.0f, 0.5f, -0.25f}, G[6] = {1, 0, 0, 1, 0.5f, 0.5f};
    float a[4], b[4];
    alpha::lie(x, f, G, a);
    beta::lie(x, f, G, b);
    for (float v : a) std::printf("%.9g ", (double)v);
    for (float v : b) std::printf("%.9g ", (double)v);
    std::printf("\n");
}
"""


def test_two_models_in_one_program(cxx, tmp_path):
    nets = {"alpha": mlp([3, 8, 8, 1], "tanh", seed=5), "beta": mlp([3, 8, 8, 1], "tanh", seed=6)}
    for name, net in nets.items():
        compile_model(net, inputs=2, name=name).write(tmp_path)
    values = np.array(build_and_run(cxx, TWO_MODELS, tmp_path, ["-std=c++17", "-O2", f"-I{tmp_path}"]).split(),
                      dtype=float).reshape(2, 4)
    from tests.torch_reference import lie_autograd
    x = np.array([[0.5, -1.0, 2.0]])
    f = np.array([[1.0, 0.5, -0.25]])
    G = np.array([[[1, 0], [0, 1], [0.5, 0.5]]], dtype=float)
    for row, net in zip(values, nets.values()):
        h, lf, lg = lie_autograd(net, x, f, G)
        np.testing.assert_allclose(row, np.concatenate([h, lf, lg[0]]), rtol=1e-5, atol=1e-6)
    assert not np.allclose(values[0], values[1])


BITS = r"""
#include "bits.hpp"
#include <cstdio>
#include <cstring>
#include <cstdint>
using namespace bits;
int main() {
    scalar x[kStateDim], f[kStateDim], G[kStateDim * kInputDim], out[3 + 2 * kInputDim];
    unsigned s = 7;
    auto rnd = [&s]() { s = s * 1103515245u + 12345u; return scalar(int((s >> 8) % 20001) - 10000) / scalar(1000); };
    for (int it = 0; it < 300; ++it) {
        for (auto& v : x) v = rnd();
        for (auto& v : f) v = rnd();
        for (auto& v : G) v = rnd();
        lie2(x, f, G, f, G, out);
        for (int i = 0; i < 3 + 2 * kInputDim; ++i) { std::uint32_t u; std::memcpy(&u, &out[i], 4); std::printf("%08x", u); }
        std::printf("\n");
    }
}
"""


def test_results_are_bit_identical_across_optimization_levels(cxx, tmp_path):
    """-O0 against the runtime's own flags (-O3 -march=native, vectorized), both without FMA
    contraction: every output bit equal, for every smooth activation and the header's own math."""
    from compiler.build import CXXFLAGS
    compile_model(_all_activations_net(2), inputs=2, order=2, name="bits").write(tmp_path)
    runtime_flags = [f for f in CXXFLAGS if f not in ("-fPIC", "-shared")]
    outputs = []
    for flags in (["-std=c++17", "-O0", "-ffp-contract=off"], runtime_flags,
                  ["-std=c++17", "-O2", "-ffp-contract=off", "-march=x86-64-v3"]):
        outputs.append(build_and_run(cxx, BITS, tmp_path, [*flags, f"-I{tmp_path}"]))
    assert outputs[0] == outputs[1] == outputs[2]


def test_library_is_thread_safe():
    """ctypes releases the GIL: concurrent batch calls must equal sequential ones."""
    from cbfsim.runtime import compile_barrier
    lib = compile_barrier(mlp([4, 32, 32, 1], "silu", seed=8), inputs=2, order=2)
    rng = np.random.default_rng(9)
    batches = [tuple(rng.normal(size=shape) for shape in ((2000, 4), (2000, 4), (2000, 4, 2), (2000, 4), (2000, 4, 2)))
               for _ in range(4)]
    expected = [lib.lie2(*b) for b in batches]
    results = [None] * 4

    def work(i):
        for _ in range(5):
            results[i] = lib.lie2(*batches[i])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for got, want in zip(results, expected):
        for a, b in zip(got, want):
            assert np.array_equal(a, b)


@pytest.mark.parametrize("widths,act,m,order", [([4, 32, 32, 1], "relu", 2, 1), ([3, 20, 7, 1], "gelu", 3, 2),
                                                ([2, 32, 32, 1], "softplus", 1, 2)])
def test_min_memory_layout_gives_the_same_bits_in_less_memory(widths, act, m, order):
    """One direction at a time over a recomputed real path performs the same operations per
    direction in the same order as the one sweep: identical bits, smaller workspace."""
    from cbfsim.runtime import compile_barrier
    net = mlp(widths, act, seed=11)
    sweep = compile_barrier(net, inputs=m, order=order)
    small = compile_barrier(net, inputs=m, order=order, layout="min_memory")
    rng = np.random.default_rng(12)
    n = widths[0]
    args = [rng.normal(size=shape) for shape in ((300, n), (300, n), (300, n, m), (300, n), (300, n, m))]
    pairs = [(sweep.lie(*args[:3]), small.lie(*args[:3]))]
    if order == 2:
        pairs.append((sweep.lie2(*args), small.lie2(*args)))
    for a, b in pairs:
        assert all(np.array_equal(u, v) for u, v in zip(a, b))
    assert small.workspace_bytes < sweep.workspace_bytes
    report = compile_model(net, inputs=m, order=order, layout="min_memory").report
    assert report.workspace_bytes == small.workspace_bytes
    if order == 1:
        assert report.one_sweep_total == report.paper_dual_total       # (m+1) C_df, the paper's count
