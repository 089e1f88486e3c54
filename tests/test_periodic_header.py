"""The periodic input embedding in the generated C++: the compiled float32 and float64 headers
(both layouts, orders 1 and 2) against torch float64 autograd and double backward, at large
|theta| and at the seam; its argument range; its workspace (exactly enough, under ASan); the
cost report; byte-identical, strict-warning headers; the reverse-mode baseline; and m_sincos."""
from __future__ import annotations

import math
import subprocess

import numpy as np
import pytest

from compiler.api import compile_barrier, compile_model
from compiler.cost import SINCOS_FLOPS
from compiler.cppmath import math_source
from compiler.emit_periodic import argument_limit
from compiler.emit_reverse import emit_reverse_header
from conftest import build_and_run
from test_periodic_embedding import TWO_PI, barrier, fields, states
from torch_reference import lie2_autograd, lie_autograd, max_rel_error

pytestmark = pytest.mark.toolchain
FLOAT_TOL = 2e-6       # float32 header vs float64 autograd, relative to the output's scale
DOUBLE_TOL = 1e-12
STRICT = ["-std=c++17", "-Wall", "-Wextra", "-Wpedantic", "-Werror", "-Wdouble-promotion", "-fsyntax-only"]
PERIODS = {0: 360.0, 3: TWO_PI}      # degrees and radians, two wrapped coordinates of four


def _f32(*arrays):
    """Inputs the float32 header sees exactly (so both sides evaluate the same state)."""
    return [np.asarray(a, dtype=np.float32).astype(np.float64) for a in arrays]


@pytest.mark.parametrize("layout", ["sweep", "min_memory"])
@pytest.mark.parametrize("act, hidden", [("softplus", (16, 16)), ("tanh", (8, 8, 8)), ("relu", (16,)),
                                         ("tanh", ())])
def test_compiled_lie_terms_equal_torch_autograd_with_an_embedding(act, hidden, layout):
    net = barrier(4, PERIODS, act=act, hidden=hidden, seed=len(hidden))
    x, f, G, Dff, DfG = _f32(states(4, [0, 3]), *fields(states(4, [0, 3]), 2))
    order = 1 if act == "relu" else 2
    ref1 = lie_autograd(net, x, f, G)
    ref2 = lie2_autograd(net, x, f, G, Dff, DfG) if order == 2 else None
    for dtype, tol in (("float", FLOAT_TOL), ("double", DOUBLE_TOL)):
        lib = compile_barrier(net, inputs=2, order=order, dtype=dtype, layout=layout)
        for what, got, want in zip(("h", "L_f h", "L_G h"), lib.lie(x, f, G), ref1):
            assert max_rel_error(got, want) < tol, (dtype, what, max_rel_error(got, want))
        if order == 2:
            names = ("h", "L_f h", "L_G h", "L_f^2 h", "L_G L_f h")
            for what, got, want in zip(names, lib.lie2(x, f, G, Dff, DfG), ref2):
                assert max_rel_error(got, want) < tol, (dtype, what, max_rel_error(got, want))


def test_a_wrong_sign_in_the_second_order_embedding_is_caught():
    """The test above can fail: a header whose eps12 term drops the w^2 part is refused."""
    net = barrier(3, {2: TWO_PI}, act="tanh", hidden=(8,))
    x, f, G, Dff, DfG = _f32(states(3, [2], count=16), *fields(states(3, [2], count=16), 1))
    source = compile_model(net, inputs=1, order=2, dtype="double", name="mut")
    good = source.header
    bad = good.replace("out[(M + 2 + p) * E + j] = d2s * tf * t2 + d1s * u;", "out[(M + 2 + p) * E + j] = d1s * u;")
    assert bad != good
    from compiler.build import build_library
    from compiler.load import CompiledLie
    ref = lie2_autograd(net, x, f, G, Dff, DfG)
    for text, ok in ((good, True), (bad, False)):
        lib = CompiledLie(build_library("mut", text, source.abi, ()), "double")
        err = max_rel_error(lib.lie2(x, f, G, Dff, DfG)[3], ref[3])
        assert (err < DOUBLE_TOL) is ok, err


def test_states_beyond_the_sincos_range_answer_like_nan_input():
    net = barrier(3, {2: TWO_PI}, hidden=(8,))
    lib = compile_barrier(net, inputs=1, order=2)
    limit = argument_limit(1.0, "float")
    assert limit == 12800.0
    f, G = np.ones(3), np.ones((3, 1))
    inside = lib.lie(np.array([0.1, 0.2, limit]), f, G)
    beyond = lib.lie(np.array([0.1, 0.2, float(np.nextafter(np.float32(limit), np.float32(np.inf)))]), f, G)
    assert np.all(np.isfinite(np.hstack([inside[0], inside[1], inside[2]])))
    assert np.all(np.isnan(np.hstack([beyond[0], beyond[1], beyond[2]])))
    # degrees: w = 2 pi / 360, so |x| may reach 12800 / w (rounded down to where fl(w x) <= 12800)
    lim = argument_limit(2 * math.pi / 360.0, "float")
    w = np.float32(2 * math.pi / 360.0)
    assert np.float32(w * np.float32(lim)) <= 12800.0 < np.float32(w * np.nextafter(np.float32(lim), np.float32(1e9)))


def test_header_is_byte_identical_and_compiles_with_strict_warnings(cxx, tmp_path):
    for order, layout, dtype in ((1, "sweep", "float"), (2, "sweep", "float"), (2, "min_memory", "double")):
        a = compile_model(barrier(4, PERIODS, hidden=(8, 8)), inputs=2, order=order, layout=layout, dtype=dtype,
                          name="pe")
        b = compile_model(barrier(4, PERIODS, hidden=(8, 8)), inputs=2, order=order, layout=layout, dtype=dtype,
                          name="pe")
        assert a.header == b.header and a.abi == b.abi
        (tmp_path / "pe.hpp").write_text(a.header)
        (tmp_path / "pe_abi.cpp").write_text(a.abi)
        run = subprocess.run([cxx, *STRICT, str(tmp_path / "pe_abi.cpp")], capture_output=True, text=True)
        assert run.returncode == 0, run.stderr


ASAN_MAIN = r"""
#include <cstdio>
#include "@NS@.hpp"
int main() {
    // the Workspace on the heap, exactly kWorkspaceScalars: ASan reports any access beyond it
    auto* ws = new @NS@::Workspace;
    float x[4] = {1000.5f, -0.25f, 0.75f, -3.14159274f}, f[4] = {1, 2, 3, 4}, G[8] = {1, 0, 0, 1, 1, 1, 2, 2};
    float out[16];
    int rc = @NS@::lie(x, f, G, out, *ws);
    @LIE2@
    std::printf("%d %zu\n", rc, sizeof(@NS@::Workspace) / sizeof(float));
    delete ws;
    return 0;
}
"""


@pytest.mark.parametrize("order, layout, hidden", [(1, "sweep", (8, 8, 8)), (2, "sweep", (8, 4, 8)),
                                                   (2, "min_memory", (8, 8)), (1, "min_memory", ()),
                                                   (2, "sweep", (8,))])
def test_workspace_is_what_the_report_says_and_enough(cxx, tmp_path, order, layout, hidden):
    src = compile_model(barrier(4, PERIODS, act="tanh", hidden=hidden), inputs=2, order=order, layout=layout,
                        name="ws")
    rep = src.report
    widths = rep.widths
    assert rep.state_dim == 4 and rep.periodic == 2 and widths[0] == 6
    lie2 = "rc |= ws::lie2(x, f, G, f, G, out, *ws);" if order == 2 else ""
    (tmp_path / "ws.hpp").write_text(src.header)
    text = build_and_run(cxx, ASAN_MAIN.replace("@NS@", "ws").replace("@LIE2@", lie2), tmp_path,
                         ["-std=c++17", "-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all"])
    rc, scalars = map(int, text.split())
    assert rc == 0 and scalars == max(rep.workspace_scalars, 1)
    assert f"workspace {rep.workspace_bytes} bytes = {rep.workspace_scalars} scalars x 4 B" in src.header
    assert f"= {rep.channels} x " in rep.workspace_formula and rep.workspace_formula.endswith("+ 4")


def test_cost_report_counts_the_embedding():
    plain = compile_model(barrier(4, {}, hidden=(16, 16)), inputs=2, name="p").report
    emb = compile_model(barrier(4, PERIODS, hidden=(16, 16)), inputs=2, name="e").report
    k, m = 2, 2
    assert plain.periodic == 0 and plain.embedding_flops == 0 and plain.widths == (4, 16, 16, 1)
    assert emb.embedding_flops == k * (1 + SINCOS_FLOPS + 2 + 2 * (m + 1))
    # the dense part is counted on n_0 = 6 inputs, plus the embedding
    dense = emb.c_f + (m + 1) * (emb.c_df - emb.c_f)
    assert emb.one_sweep_total == dense + emb.embedding_flops
    assert any("periodic embedding" in line and "k (1 + 55 + 2 + 2(m+1))" in line for line in emb.lines())
    assert emb.lines()[0].startswith("network 4>6-16-16-1")


def test_sincos_text_has_the_counted_flops():
    import re
    body = math_source("float", ["sincos"]).split("inline void m_sincos")[1]
    ops = [op for line in body.splitlines() for op in re.findall(r"(?<![<>&|^=!])\s([-+*/])\s", line.split("//")[0])]
    integer_ops = 2            # the quadrant word q = bits(t) - bits(MAGIC) and (q + 1u)
    assert len(ops) - integer_ops == SINCOS_FLOPS


REVERSE_MAIN = r"""
#include <cstdio>
#include "rv.hpp"
#include "dv.hpp"
int main() {
    float in[@COUNT@ * 16];
    for (int i = 0; i < @COUNT@ * 16; ++i) if (std::scanf("%a", &in[i]) != 1) return 3;
    for (int i = 0; i < @COUNT@; ++i) {
        const float* p = in + 16 * i;    // x[3], f[3], G[3], Dff[3], DfG[3], pad
        float r[5], d[5];
        rv::lie2(p, p + 3, p + 6, p + 9, p + 12, r);
        dv::lie2(p, p + 3, p + 6, p + 9, p + 12, d);
        for (int k = 0; k < 5; ++k) std::printf("%a ", static_cast<double>(r[k]));
        for (int k = 0; k < 5; ++k) std::printf("%a ", static_cast<double>(d[k]));
        std::printf("\n");
    }
    return 0;
}
"""


def test_reverse_baseline_with_an_embedding_matches_autograd_and_the_dual_h(cxx, tmp_path):
    net = barrier(3, {2: TWO_PI}, act="softplus", hidden=(16, 16), seed=4)
    rng = np.random.default_rng(5)
    count = 40
    x = rng.uniform(-3, 3, (count, 3))
    x[:10, 2] = rng.uniform(-100, 100, 10)
    f, G, Dff, DfG = fields(x, 1)
    x, f, G, Dff, DfG = _f32(x, f, G, Dff, DfG)
    (tmp_path / "rv.hpp").write_text(emit_reverse_header(net, 1, style="static", name="rv", order=2))
    (tmp_path / "dv.hpp").write_text(compile_model(net, inputs=1, order=2, name="dv").header)
    packed = np.concatenate([x, f, G[:, :, 0], Dff, DfG[:, :, 0], np.zeros((count, 1))], 1)
    text = build_and_run(cxx, REVERSE_MAIN.replace("@COUNT@", str(count)), tmp_path,
                         ["-std=c++17", "-O1", "-ffp-contract=off", "-Wall", "-Wextra", "-Werror"],
                         stdin=" ".join(float(v).hex() for v in packed.ravel()))
    out = np.array([[float.fromhex(w) for w in line.split()] for line in text.splitlines()])
    rev, dual = out[:, :5], out[:, 5:]
    ref = lie2_autograd(net, x, f, G, Dff, DfG)
    assert np.array_equal(rev[:, 0], dual[:, 0])                         # same forward pass, same bits
    for k in (0, 1, 2):
        assert max_rel_error(rev[:, k], ref[k].reshape(count)) < FLOAT_TOL
    for k in (3, 4):    # central differences, step s max(1, |x|_inf): O(s^2) where |x| <= 3
        assert max_rel_error(rev[10:, k], ref[k].reshape(count)[10:]) < 2e-3


SINCOS_MAIN = r"""
#include <cstdio>
#include <cstdint>
#include <cstring>
namespace t { namespace detail {
@MATH@
} }
static std::uint32_t bits(float x) { std::uint32_t u; std::memcpy(&u, &x, 4); return u; }
int main() {
    unsigned int u;
    while (std::scanf("%x", &u) == 1) {
        float x; std::memcpy(&x, &u, 4);
        float s, c;
        t::detail::m_sincos(x, s, c);
        std::printf("%08x %08x %d\n", bits(s), bits(c),
                    bits(s) == bits(t::detail::m_sin(x)) && bits(c) == bits(t::detail::m_cos(x)));
    }
    return 0;
}
"""


def test_sincos_equals_sin_and_cos_and_is_within_one_ulp_on_a_dense_sample(cxx, tmp_path):
    """Dense sample of [-64 pi, 64 pi] plus the floats nearest multiples of pi/2 and the range
    edge; benchmarks/trig_ulps.py measures every float there (see compiler/cppmath.py)."""
    rng = np.random.default_rng(7)
    r = np.float32(64 * math.pi)
    k = np.arange(-128, 129, dtype=np.float64)
    near = (k * (np.longdouble(math.pi) + np.longdouble(1.2246467991473532e-16)) / 2).astype(np.float32)
    x = np.concatenate([rng.uniform(-r, r, 200_000).astype(np.float32), near, np.nextafter(near, np.float32(0)),
                        np.nextafter(near, np.float32(1e9)),
                        np.float32([0.0, -0.0, 1e-30, -1e-30, 1e-45, 12800.0, -12800.0, np.pi, -np.pi, 252.898209]),
                        np.float32([np.nextafter(np.float32(12800), np.float32(1e9)), np.inf, -np.inf, np.nan])])
    words = x.view(np.uint32)
    text = build_and_run(cxx, SINCOS_MAIN.replace("@MATH@", math_source("float", ["sin", "cos", "sincos"])), tmp_path,
                         ["-std=c++17", "-O2", "-ffp-contract=off"], stdin="\n".join(format(int(w), "x") for w in words))
    rows = [line.split() for line in text.splitlines()]
    s = np.array([int(a, 16) for a, _, _ in rows], dtype=np.uint32).view(np.float32)
    c = np.array([int(b, 16) for _, b, _ in rows], dtype=np.uint32).view(np.float32)
    assert all(same == "1" for _, _, same in rows)
    ok = np.abs(x) <= 12800
    assert np.all(np.isnan(s[~ok])) and np.all(np.isnan(c[~ok]))
    xd = x[ok].astype(np.float64)
    for got, ref in ((s[ok], np.sin(xd)), (c[ok], np.cos(xd))):
        _, e = np.frexp(np.abs(ref))
        ulp = np.ldexp(1.0, np.maximum(e, -125) - 24)
        assert np.max(np.abs(got.astype(np.float64) - ref) / ulp) <= 1.0


@pytest.mark.parametrize("act, hidden", [("softplus", (16, 16)), ("tanh", (8, 8, 8))])
def test_float32_header_lies_in_the_float32_enclosure(act, hidden):
    """enclose(float32=True) on point boxes contains what the float32 header computes: h, the
    gradient (L_G h with G = I) and the Hessian (L_G L_f h with f = e_p, G = I, f' = 0), also
    at |theta| ~ 1e3 where the argument's rounding dominates. The networks and the 2-input float32
    libraries of test_compiled_lie_terms_equal_torch_autograd_with_an_embedding (from the build
    cache): G = I is passed as its two 4 x 2 column blocks."""
    from compiler.bounds import enclose
    from compiler.interval import Interval
    from compiler.passes import canonicalize
    from compiler.frontend_torch import load_torch
    n, m = 4, 2
    net = barrier(n, PERIODS, act=act, hidden=hidden, seed=len(hidden))
    model = canonicalize(load_torch(net))
    x = _f32(states(n, [0, 3], count=48, seed=9))[0]
    jets = enclose(model, Interval(x, x), order=2, float32=True)
    lib = compile_barrier(net, inputs=m, order=2, dtype="float")
    eye = np.eye(n)
    zero = np.zeros((len(x), n))
    for p in range(n):
        fp = np.zeros((len(x), n))
        fp[:, p] = 1.0
        for cols in (slice(0, m), slice(m, n)):
            G = np.broadcast_to(eye[:, cols], (len(x), n, m))
            h, lf, grad, _, hrow = lib.lie2(x, fp, G, zero, np.zeros((len(x), n, m)))
            assert np.all((jets.h.lo <= h) & (h <= jets.h.hi))
            assert np.all((jets.grad.lo[:, cols] <= grad) & (grad <= jets.grad.hi[:, cols]))
            assert np.all((jets.hess.lo[:, p, cols] <= hrow) & (hrow <= jets.hess.hi[:, p, cols]))
    small = np.all(np.abs(x) <= 10, axis=1)      # the bound is not vacuous where a wrapped state lives
    assert small.sum() > 10 and np.max(jets.rounding.h[small]) < 2e-5
