"""The reverse-mode baselines of compiler/emit_reverse.py (the comparison rows of
experiments/table1.py): both styles agree with torch float64 autograd on random networks
of every activation, the heap style reports the activation cache it allocates, the static
style has no allocation call, and the pendulum's Reverse+FD baseline is measurably less
accurate than the exact hyper-dual header (the point of the paper's comparison)."""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest
import torch

from compiler.api import compile_model
from compiler.emit_reverse import emit_reverse_header, fd_default_step
from compiler.errors import SmoothnessError
from conftest import build_and_run
from tests.torch_reference import lie2_autograd, lie_autograd, max_rel_error
from training.architectures import ACTIVATION_NAMES, mlp

FLOAT_TOL = 1e-5          # float32 header vs float64 autograd, relative to the output's scale
FLAGS = ["-std=c++17", "-O1", "-ffp-contract=off", "-fno-math-errno", "-Wall", "-Wextra", "-Wdouble-promotion",
         "-Werror"]
N, M = 3, 2               # first-order cases: n = 3 states, m = 2 inputs
WIDTHS = {"two": [N, 16, 12, 1], "three": [N, 12, 16, 8, 1]}   # 2 and 3 hidden layers
BATCH = 200
HEAP_SYMBOLS = ("malloc", "free", "calloc", "realloc", "_Znwm", "_Znam", "_ZdlPv", "_ZdaPv", "_ZdlPvm", "_ZdaPvm")


def _net(act: str, seed: int):
    widths = WIDTHS["three"] if act in ("tanh", "gelu", "leaky_relu") else WIDTHS["two"]
    return mlp(widths, act, seed=seed).eval()


def _pendulum_net():
    """The paper's pendulum barrier: softplus 2-32-32-1 whose theta_dot column of W1 is zero."""
    net = mlp([2, 32, 32, 1], "softplus", seed=3)
    with torch.no_grad():
        net[0].weight[:, 1] = 0.0
    return net.eval()


def _states(rng, batch, n, m, lo=-3.0, hi=3.0):
    parts = [rng.uniform(lo, hi, (batch, n)), rng.normal(size=(batch, n)), rng.normal(size=(batch, n, m)),
             rng.normal(size=(batch, n)), rng.normal(size=(batch, n, m))]
    return [p.astype(np.float32).astype(np.float64) for p in parts]


MAIN = r"""
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>
@INCLUDES@

static std::string g_dir;

static std::vector<float> load(const char* file, std::size_t count) {
    std::vector<float> v(count);
    std::FILE* fp = std::fopen((g_dir + "/" + file).c_str(), "rb");
    if (!fp || std::fread(v.data(), sizeof(float), count, fp) != count) std::exit(3);
    std::fclose(fp);
    return v;
}

// Calls `call` on every packed state [x, f, G, Dff, DfG] and prints "tag i rc out..." (hex floats).
template <int n, int m, typename Call>
static void run(const char* tag, const std::vector<float>& in, int count, int K, Call call) {
    const int S = 3 * n + 2 * n * m;
    for (int i = 0; i < count; ++i) {
        float out[32];
        const float* p = &in[static_cast<std::size_t>(i) * S];
        const int rc = call(p, p + n, p + 2 * n, p + 2 * n + n * m, p + 3 * n + n * m, out);
        std::printf("%s %d %d", tag, i, rc);
        for (int k = 0; k < K; ++k) std::printf(" %a", static_cast<double>(out[k]));
        std::printf("\n");
    }
}

int main(int argc, char** argv) {
    if (argc < 3) return 2;
    const int count = std::atoi(argv[1]);
    g_dir = argv[2];
@BODY@
    return 0;
}
"""


def _first_order_call(ns: str) -> str:
    return (f"[](const float* x, const float* f, const float* G, const float*, const float*, float* o) "
            f"{{ return {ns}::lie(x, f, G, o); }}")


def _second_order_call(ns: str) -> str:
    return (f"[](const float* x, const float* f, const float* G, const float* a, const float* b, float* o) "
            f"{{ return {ns}::lie2(x, f, G, a, b, o); }}")


@pytest.fixture(scope="module")
def results(cxx, tmp_path_factory):
    """Build one program with every baseline header, run it, and return the parsed outputs,
    the heap counters and the float64 references."""
    work = tmp_path_factory.mktemp("reverse")
    rng = np.random.default_rng(11)
    first = _states(rng, BATCH, N, M)
    pend = _states(np.random.default_rng(12), BATCH, 2, 1, lo=-1.5, hi=1.5)
    for parts, fname in ((first, "first.bin"), (pend, "pend.bin")):
        np.concatenate([p.reshape(BATCH, -1) for p in parts], 1).astype(np.float32).tofile(work / fname)

    includes, body, nets = [], [], {}
    body.append('    const auto first = load("first.bin", static_cast<std::size_t>(count) * (3 * 3 + 2 * 3 * 2));')
    body.append('    const auto pend = load("pend.bin", static_cast<std::size_t>(count) * (3 * 2 + 2 * 2 * 1));')
    for a, act in enumerate(ACTIVATION_NAMES):
        net = _net(act, seed=100 + a)
        nets[act] = net
        for style in ("heap", "static"):
            ns = f"r_{act}_{style}"
            (work / f"{ns}.hpp").write_text(emit_reverse_header(net, M, style=style, name=ns))
            includes.append(f'#include "{ns}.hpp"')
            body.append(f'    run<{N}, {M}>("{ns}", first, count, {2 + M}, {_first_order_call(ns)});')
            if style == "heap":
                body.append(f'    std::printf("HEAP {ns} %zu %zu\\n", {ns}::g_heap_bytes_per_call, '
                            f'{ns}::g_heap_allocs_per_call);')
    # the dual header of one network: h must be the same bits (same forward order and activation code)
    (work / "d_softplus.hpp").write_text(compile_model(nets["softplus"], inputs=M, name="d_softplus").header)
    includes.append('#include "d_softplus.hpp"')
    body.append(f'    run<{N}, {M}>("d_softplus", first, count, {2 + M}, {_first_order_call("d_softplus")});')
    # pendulum: Reverse+FD (both styles) against the hyper-dual header
    pnet = _pendulum_net()
    for style in ("heap", "static"):
        ns = f"p_rev_{style}"
        (work / f"{ns}.hpp").write_text(emit_reverse_header(pnet, 1, style=style, name=ns, order=2))
        includes.append(f'#include "{ns}.hpp"')
        body.append(f'    run<2, 1>("{ns}", pend, count, 5, {_second_order_call(ns)});')
        if style == "heap":
            body.append(f'    std::printf("HEAP {ns} %zu %zu\\n", {ns}::g_heap_bytes_per_call, '
                        f'{ns}::g_heap_allocs_per_call);')
    (work / "p_dual.hpp").write_text(compile_model(pnet, inputs=1, order=2, name="p_dual").header)
    includes.append('#include "p_dual.hpp"')
    body.append(f'    run<2, 1>("p_dual", pend, count, 5, {_second_order_call("p_dual")});')

    source = MAIN.replace("@INCLUDES@", "\n".join(includes)).replace("@BODY@", "\n".join(body))
    text = build_and_run(cxx, source, work, FLAGS, [str(BATCH), str(work)])
    outputs: dict[str, np.ndarray] = {}
    codes: dict[str, list[int]] = {}
    heap: dict[str, tuple[int, int]] = {}
    rows: dict[str, list[list[float]]] = {}
    for line in text.splitlines():
        words = line.split()
        if words[0] == "HEAP":
            heap[words[1]] = (int(words[2]), int(words[3]))
            continue
        rows.setdefault(words[0], []).append([float.fromhex(w) for w in words[3:]])
        codes.setdefault(words[0], []).append(int(words[2]))
    outputs = {k: np.array(v) for k, v in rows.items()}
    refs = {act: lie_autograd(net, *first[:3]) for act, net in nets.items()}
    pref = lie2_autograd(pnet, *pend)
    return {"out": outputs, "codes": codes, "heap": heap, "refs": refs, "pend_ref": pref, "nets": nets,
            "work": work}


def _split_first(out: np.ndarray):
    return out[:, 0], out[:, 1], out[:, 2:2 + M]


@pytest.mark.toolchain
@pytest.mark.parametrize("style", ["heap", "static"])
@pytest.mark.parametrize("act", ACTIVATION_NAMES)
def test_reverse_matches_autograd(results, act, style):
    ns = f"r_{act}_{style}"
    assert results["codes"][ns] == [0] * BATCH
    got = _split_first(results["out"][ns])
    for what, a, b in zip(("h", "L_f h", "L_G h"), got, results["refs"][act]):
        err = max_rel_error(a, b)
        assert err < FLOAT_TOL, f"{ns} {what}: rel err {err:.3g}"


@pytest.mark.toolchain
def test_styles_agree_bitwise_and_h_matches_dual(results):
    out = results["out"]
    for act in ACTIVATION_NAMES:     # the same arithmetic in the same order; only the cache's storage differs
        assert np.array_equal(out[f"r_{act}_heap"], out[f"r_{act}_static"]), act
    # forward pass in the dual header's real-path order with its activation code: h is the same float
    assert np.array_equal(out["r_softplus_static"][:, 0], out["d_softplus"][:, 0])
    assert max_rel_error(out["r_softplus_static"][:, 1:], out["d_softplus"][:, 1:]) < FLOAT_TOL


@pytest.mark.toolchain
def test_heap_style_reports_activation_cache_bytes(results):
    for act, net in results["nets"].items():
        widths = [layer.out_features for layer in net if isinstance(layer, torch.nn.Linear)][:-1]
        bytes_, allocs = results["heap"][f"r_{act}_heap"]
        assert bytes_ == sum(widths) * 4, act          # sum of hidden widths x sizeof(float), Prop. 3(i)
        assert allocs == len(widths), act             # one array per hidden layer
    # Reverse+FD: three gradient evaluations (x, x + t f, x - t f), each allocating its own cache
    assert results["heap"]["p_rev_heap"] == (3 * 64 * 4, 3 * 2)


@pytest.mark.toolchain
def test_static_style_links_no_allocator(cxx, tmp_path):
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm not found; install it with: apt-get install -y binutils")
    net = _net("softplus", seed=5)
    undefined = {}
    for style in ("static", "heap"):
        header = emit_reverse_header(net, M, style=style, name="rb", order=2)
        if style == "static":
            assert "new " not in header and "delete" not in header and "malloc" not in header
        (tmp_path / "rb.hpp").write_text(header)
        src = tmp_path / f"{style}.cpp"
        src.write_text('#include "rb.hpp"\n'
                       "int call1(const float* x, const float* f, const float* G, float* o) { return rb::lie(x, f, G, o); }\n"
                       "int call2(const float* x, const float* f, const float* G, const float* a, const float* b, float* o)"
                       " { return rb::lie2(x, f, G, a, b, o); }\n")
        obj = tmp_path / f"{style}.o"
        subprocess.run([cxx, *FLAGS[:4], "-O2", "-c", str(src), "-o", str(obj)], check=True, capture_output=True)
        syms = subprocess.run([nm, "-u", str(obj)], check=True, capture_output=True, text=True).stdout.split()
        undefined[style] = set(syms) & set(HEAP_SYMBOLS)
    assert undefined["static"] == set(), undefined["static"]
    assert {"_Znam", "_ZdaPv"} <= undefined["heap"], undefined["heap"]      # the check does see allocation


@pytest.mark.toolchain
def test_reverse_fd_is_less_accurate_than_hyper_dual(results, record_property, capsys):
    out, ref = results["out"], results["pend_ref"]
    assert results["codes"]["p_rev_heap"] == [0] * BATCH
    assert np.array_equal(out["p_rev_heap"], out["p_rev_static"])
    names = ("h", "L_f h", "L_G h", "L_f^2 h", "L_G L_f h")
    errors = {}
    for ns in ("p_rev_static", "p_dual"):
        o = out[ns]
        got = (o[:, 0], o[:, 1], o[:, 2:3], o[:, 3], o[:, 4:5])
        errors[ns] = {w: max_rel_error(a, b) for w, a, b in zip(names, got, ref)}
    fd, exact = errors["p_rev_static"], errors["p_dual"]
    with capsys.disabled():
        print(f"\n[Reverse+FD, step {fd_default_step('float'):.3g}] max rel err L_f^2 h = {fd['L_f^2 h']:.2e}, "
              f"L_G L_f h = {fd['L_G L_f h']:.2e}; hyper-dual: {exact['L_f^2 h']:.2e}, {exact['L_G L_f h']:.2e}")
    record_property("fd_lf2_rel_err", fd["L_f^2 h"])
    record_property("hyperdual_lf2_rel_err", exact["L_f^2 h"])
    for w in names[:3]:                        # first-order terms come from the exact backpropagation
        assert fd[w] < FLOAT_TOL and exact[w] < FLOAT_TOL, (w, fd[w], exact[w])
    assert exact["L_f^2 h"] < FLOAT_TOL and exact["L_G L_f h"] < FLOAT_TOL
    # the truncation + rounding error of central differences: visible, but a usable approximation
    assert fd["L_f^2 h"] > 3 * exact["L_f^2 h"]
    assert fd["L_f^2 h"] < 1e-2 and fd["L_G L_f h"] < 1e-2


def test_reverse_header_refusals():
    with pytest.raises(ValueError, match="style"):
        emit_reverse_header(_net("relu", 1), M, style="tape")
    with pytest.raises(SmoothnessError):          # FD Hessians of a piecewise-linear net: refused like the dual order 2
        emit_reverse_header(_net("relu", 1), M, order=2)
    text = emit_reverse_header(_net("tanh", 1), M, style="static", name="same")
    assert text == emit_reverse_header(_net("tanh", 1), M, style="static", name="same")   # deterministic
