"""compiler/cppmath.py: accuracy (ulp), special values, bit-identity across optimization
levels, strict-warning builds, linking two copies, vectorization, and the text itself.

One C++ program per scalar reads input bit patterns (hex, stdin) and prints every
function's result as hex bit patterns, so nothing is lost to decimal formatting. It is
built at -O0, -O2 and -O3 -march=x86-64-v3 (all -ffp-contract=off) once per session, and
once more with FMA contraction (-ffp-contract=fast), where only the accuracy must hold.
References: float results against float64 numpy/scipy (error < 2^-28 float ulp); double
results against long double libm (64-bit mantissa) where available and mpmath (113 bits)
for erf and for a cross-check subset of every function.
"""
from __future__ import annotations

import functools
import platform
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import mpmath
import numpy as np
import pytest
from scipy.special import erf as sp_erf

from compiler.cppmath import math_source
from conftest import build_and_run

FUNCS = ["exp", "expm1", "log1p", "tanh", "erf", "sin", "cos", "sqrt"]
# Asserted max ulp error (the measured maxima are in compiler/cppmath.py's docstring).
BOUND = {"float": {"exp": 1.0, "expm1": 1.0, "log1p": 1.0, "tanh": 2.0, "erf": 2.0,
                   "sin": 1.0, "cos": 1.0, "sqrt": 0.5},
         "double": {"exp": 1.0, "expm1": 1.0, "log1p": 1.0, "tanh": 2.0, "erf": 2.0,
                    "sin": 1.0, "cos": 1.0, "sqrt": 0.5}}
SIN_MAX = {"float": 12800.0, "double": 1.6e6}
NOFMA = ["-std=c++17", "-ffp-contract=off"]
BUILDS = {"O0": NOFMA + ["-O0"], "O2": NOFMA + ["-O2"], "O3v3": NOFMA + ["-O3", "-march=x86-64-v3"],
          "fma": ["-std=c++17", "-O3", "-march=x86-64-v3", "-ffp-contract=fast"]}   # accuracy only
STRICT = ["-std=c++17", "-Wall", "-Wextra", "-Wpedantic", "-Werror", "-Wdouble-promotion",
          "-Wfloat-conversion", "-Wconversion", "-fno-exceptions", "-fno-rtti"]


def _types(scalar):
    return (np.float32, np.uint32, 24, -125) if scalar == "float" else (np.float64, np.uint64, 53, -1021)


def _program(scalar: str) -> str:
    fmt, word = ("%08x", "std::uint32_t") if scalar == "float" else ("%016llx", "std::uint64_t")
    calls = "\n".join(f'        std::printf(" {fmt}", (unsigned long long)bits(cbf_test::detail::m_{f}(x)));'
                      for f in FUNCS)
    return f"""#include <cstddef>
#include <cstdint>
#include <cstdio>
namespace cbf_test {{ namespace detail {{
{math_source(scalar)}
}} }}
static {word} bits({scalar} v) {{ {word} u; __builtin_memcpy(&u, &v, sizeof u); return u; }}
int main() {{
    unsigned long long in;
    while (std::scanf("%llx", &in) == 1) {{
        const {word} w = static_cast<{word}>(in);
        {scalar} x;
        __builtin_memcpy(&x, &w, sizeof x);
{calls}
        std::printf("\\n");
    }}
    return 0;
}}
"""


def _special_inputs(scalar):
    ft, ut, _, _ = _types(scalar)
    fi = np.finfo(ft)
    vals = [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0,
            float(fi.smallest_subnormal), -float(fi.smallest_subnormal), float(fi.tiny), -float(fi.tiny),
            float(fi.max), -float(fi.max), 1e-30, -1e-30, 1e30, -1e30, 1e10, -1e10,
            0.625, -0.625, 3.92, 5.93, 10.0, 20.0, 89.0, 88.72, 88.73, -103.0, -104.0, -87.3, -88.0,
            709.78, 709.79, 710.0, -745.1, -745.2, -746.0, -708.4, -18.0, -40.0,
            SIN_MAX["float"], SIN_MAX["double"], np.pi, np.pi / 2, 252.898209]
    x = np.array(vals, dtype=np.float64).astype(ft)
    with np.errstate(over="ignore"):
        x = np.concatenate([x, np.nextafter(x, ft(np.inf)), np.nextafter(x, ft(-np.inf))])
    near_m1 = -1 + np.ldexp(ft(1), -np.arange(1, _types(scalar)[2] + 1)).astype(ft)   # log1p near -1
    return np.concatenate([x, near_m1.astype(ft), np.array([-1.0], ft)])


@functools.lru_cache(maxsize=None)
def _inputs(scalar: str) -> np.ndarray:
    """~200k deterministic points: specials, random bit patterns (log-uniform over the
    whole range incl. subnormals), uniform ranges around the interesting intervals, and
    the nearest representable numbers to multiples of pi/2 (sin/cos worst cases)."""
    ft, ut, p, _ = _types(scalar)
    rng = np.random.default_rng(20240611)
    max_bits = int(np.array(np.finfo(ft).max, ft).view(ut))
    sign = ut(1) << ut(8 * np.dtype(ut).itemsize - 1)
    raw = rng.integers(0, max_bits, 70_000, dtype=ut, endpoint=True)
    raw = raw | (rng.integers(0, 2, raw.size).astype(ut) * sign)
    parts = [_special_inputs(scalar), raw.view(ft)]
    for lo, hi, n in [(-1, 1, 20_000), (-2.5, 2.5, 15_000), (-12, 12, 15_000), (-40, 40, 10_000),
                      (-110, 100, 10_000), (-750, 720, 5_000), (-1, -0.999, 2_000),
                      (-SIN_MAX[scalar], SIN_MAX[scalar], 20_000), (-30, 30, 5_000)]:
        parts.append(rng.uniform(lo, hi, n).astype(ft))
    parts.append((rng.uniform(-1, 1, 8_000) * np.exp2(rng.uniform(-30, 0, 8_000))).astype(ft))
    kmax = 8000 if scalar == "float" else 1_000_000
    k = np.concatenate([np.arange(1, 2000), rng.integers(2000, kmax, 4000)]).astype(np.longdouble)
    near = (k * (np.longdouble(np.pi) + np.longdouble(1.2246467991473531772e-16)) / 2).astype(ft)
    for extra in (near, np.nextafter(near, ft(0)), np.nextafter(near, ft(np.inf))):
        parts += [extra, -extra]
    return np.concatenate(parts).astype(ft)


def _parse(out: str, scalar: str) -> dict[str, np.ndarray]:
    ft, ut, _, _ = _types(scalar)
    toks = out.split()
    words = np.fromiter((int(t, 16) for t in toks), dtype=ut, count=len(toks)).reshape(-1, len(FUNCS))
    return {f: words[:, i].view(ft) for i, f in enumerate(FUNCS)}


def _hex_input(x: np.ndarray, scalar: str) -> str:
    ut = _types(scalar)[1]
    return "\n".join(format(int(v), "x") for v in x.view(ut)) + "\n"


def _x86_64_v3() -> bool:
    if platform.machine() not in ("x86_64", "AMD64"):
        return False
    try:
        flags = set(re.search(r"^flags\s*:(.*)$", Path("/proc/cpuinfo").read_text(), re.M).group(1).split())
    except (OSError, AttributeError):
        return False
    return {"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "movbe", "xsave"} <= flags and ("abm" in flags or "lzcnt" in flags)


@pytest.fixture(scope="session")
def runs(cxx, tmp_path_factory):
    """{(scalar, level): stdout} for every scalar and optimization level (built two at a time)."""
    levels = [lv for lv in BUILDS if lv not in ("O3v3", "fma") or _x86_64_v3()]
    jobs = [(s, lv) for s in ("float", "double") for lv in levels]
    inputs = {s: _hex_input(_inputs(s), s) for s in ("float", "double")}

    def one(job):
        s, lv = job
        work = tmp_path_factory.mktemp(f"cppmath_{s}_{lv}")
        return job, build_and_run(cxx, _program(s), work, BUILDS[lv], stdin=inputs[s])

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(one, jobs))


@pytest.fixture(scope="session")
def results(runs):
    return {s: (_inputs(s), _parse(runs[(s, "O2")], s)) for s in ("float", "double")}


# ---------------------------------------------------------------- references and ulps
_NP = {"exp": np.exp, "expm1": np.expm1, "log1p": np.log1p, "tanh": np.tanh, "sin": np.sin,
       "cos": np.cos, "sqrt": np.sqrt}
_MP = {"exp": mpmath.exp, "expm1": mpmath.expm1, "log1p": mpmath.log1p, "tanh": mpmath.tanh,
       "erf": mpmath.erf, "sin": mpmath.sin, "cos": mpmath.cos, "sqrt": mpmath.sqrt}


def _domain(f, x, scalar):
    ok = np.isfinite(x)
    if f == "log1p":
        ok &= x > -1
    if f == "sqrt":
        ok &= x >= 0
    if f in ("sin", "cos"):
        ok &= np.abs(x) <= SIN_MAX[scalar]
    return ok


def _ulps(y, ref, scalar):
    """|y - ref| in ulps of the exact value ref (subnormal ulp below the normal range); a
    reference that rounds to +-inf requires y to be that inf exactly."""
    ft, _, p, emin = _types(scalar)
    ref = np.asarray(ref)
    rounded = ref.astype(ft)
    over = np.isinf(rounded)
    _, e = np.frexp(np.abs(ref))
    ulp = np.ldexp(np.ones_like(ref), np.maximum(e, emin) - p)
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.abs(y.astype(ref.dtype) - ref) / ulp
    err = np.where(over, np.where(y == rounded, 0.0, np.inf), err)
    return np.where(np.isfinite(y) | over, err, np.inf)


def _ref_mp(f, xs, prec=113):
    with mpmath.workprec(prec):
        return [f(mpmath.mpf(float(v))) for v in xs]


def _ulps_mp(y, refs, scalar):
    ft, _, p, emin = _types(scalar)
    out = []
    for yi, r in zip(y, refs):
        if r == 0:
            out.append(0.0 if yi == 0 else np.inf)
            continue
        e = max(int(mpmath.frexp(r)[1]), emin)          # r = m 2^e, 1/2 <= |m| < 1
        with np.errstate(over="ignore"):
            rounded = ft(float(r))
        if np.isinf(rounded):
            out.append(0.0 if yi == rounded else np.inf)
        else:
            out.append(float(abs(mpmath.mpf(float(yi)) - r) / mpmath.ldexp(1, e - p)) if np.isfinite(yi) else np.inf)
    return np.array(out)


def _max_err(f, x, y, scalar):
    """(max ulp error, worst x) of y = f(x) over the in-domain points."""
    ok = _domain(f, x, scalar)
    xs, ys = x[ok], y[ok]
    with np.errstate(all="ignore"):
        return _worst(f, xs, ys, scalar)


def _worst(f, xs, ys, scalar):
    if scalar == "float":
        xd = xs.astype(np.float64)
        ref = sp_erf(xd) if f == "erf" else _NP[f](xd)
        err = _ulps(ys, ref, scalar)
    elif f != "erf" and np.finfo(np.longdouble).nmant >= 63:
        err = _ulps(ys, _NP[f](xs.astype(np.longdouble)), scalar)
    else:   # mpmath on a 20k subset: the specials, 14k of the points in the function's
        # interesting range |x| in [1e-3, 8] and 6k of the rest (deterministic)
        rng = np.random.default_rng(1)
        mid = np.flatnonzero((np.abs(xs) >= 1e-3) & (np.abs(xs) <= 8))
        rest = np.setdiff1d(np.arange(xs.size), mid)
        idx = np.unique(np.concatenate([np.arange(min(500, xs.size)),
                                        rng.choice(mid, min(14_000, mid.size), replace=False),
                                        rng.choice(rest, min(6_000, rest.size), replace=False)]))
        xs, ys = xs[idx], ys[idx]
        err = _ulps_mp(ys, _ref_mp(_MP[f], xs), scalar)
    i = int(np.argmax(err))
    return float(err[i]), float(xs[i])


# ---------------------------------------------------------------- tests
@pytest.mark.toolchain
@pytest.mark.parametrize("scalar", ["float", "double"])
@pytest.mark.parametrize("func", FUNCS)
def test_ulp_error(results, scalar, func):
    x, y = results[scalar]
    worst, at = _max_err(func, x, y[func], scalar)
    assert worst <= BOUND[scalar][func], f"m_{func}<{scalar}>: {worst:.3f} ulp at x={at!r}"


@pytest.mark.toolchain
@pytest.mark.parametrize("scalar", ["float", "double"])
def test_ulp_error_with_fma_contraction(runs, scalar):
    """-ffp-contract=fast (FMA) changes bits but must keep every bound."""
    if (scalar, "fma") not in runs:
        pytest.skip("host cannot run -march=x86-64-v3")
    x, y = _inputs(scalar), _parse(runs[(scalar, "fma")], scalar)
    worst = {f: _max_err(f, x, y[f], scalar) for f in FUNCS}
    bad = {f: w for f, w in worst.items() if w[0] > BOUND[scalar][f]}
    assert not bad, bad


@pytest.mark.toolchain
@pytest.mark.parametrize("scalar", ["float", "double"])
def test_reference_cross_check_mpmath(results, scalar):
    """The numpy/long-double references agree with mpmath: the same bounds hold on a small
    mpmath-referenced sample of every function."""
    x, y = results[scalar]
    rng = np.random.default_rng(7)
    for f in FUNCS:
        ok = np.flatnonzero(_domain(f, x, scalar))
        idx = np.concatenate([ok[:300], rng.choice(ok, 700, replace=False)])
        err = _ulps_mp(y[f][idx], _ref_mp(_MP[f], x[idx]), scalar)
        assert err.max() <= BOUND[scalar][f], f"m_{f}<{scalar}> vs mpmath: {err.max():.3f} ulp at {x[idx][np.argmax(err)]!r}"


@pytest.mark.toolchain
@pytest.mark.parametrize("scalar", ["float", "double"])
def test_special_values(results, scalar):
    x, y = results[scalar]
    ft = _types(scalar)[0]
    inf, nan = np.inf, np.nan

    def at(f, v):
        i = np.flatnonzero(x.view(_types(scalar)[1]) == np.array(v, ft).view(_types(scalar)[1]))
        assert i.size, v
        return y[f][i[0]]

    big = ft(np.finfo(ft).max)
    table = [("exp", inf, inf), ("exp", -inf, 0.0), ("exp", big, inf), ("exp", -big, 0.0),
             ("exp", 1e30, inf), ("exp", -1e30, 0.0), ("exp", 0.0, 1.0), ("exp", -0.0, 1.0),
             ("expm1", -inf, -1.0), ("expm1", inf, inf), ("expm1", -1e30, -1.0), ("expm1", 1e30, inf),
             ("expm1", 0.0, 0.0), ("log1p", inf, inf), ("log1p", -1.0, -inf), ("log1p", -2.0, nan),
             ("log1p", -inf, nan), ("log1p", 0.0, 0.0),
             ("tanh", inf, 1.0), ("tanh", -inf, -1.0), ("tanh", 1e30, 1.0), ("tanh", -1e30, -1.0),
             ("erf", inf, 1.0), ("erf", -inf, -1.0), ("erf", 1e30, 1.0), ("erf", -1e30, -1.0),
             ("sin", inf, nan), ("sin", -inf, nan), ("cos", inf, nan), ("cos", -inf, nan),
             ("sin", 1e30, nan), ("cos", -1e30, nan), ("sin", 0.0, 0.0), ("cos", 0.0, 1.0),
             ("sqrt", inf, inf), ("sqrt", -1.0, nan), ("sqrt", 0.0, 0.0), ("sqrt", 2.0, float(np.sqrt(ft(2))))]
    if scalar == "float":   # overflow / underflow / smallest subnormal around the thresholds
        table += [("exp", 88.73, inf), ("exp", -104.0, 0.0), ("exp", -103.0, float(ft(np.exp(-103.0))))]
    else:
        table += [("exp", 709.79, inf), ("exp", -745.2, 0.0), ("exp", -745.1, 5e-324)]
    bad = []
    for f, v, want in table:
        got = at(f, v)
        if not (np.isnan(got) if np.isnan(want) else got == ft(want)):
            bad.append(f"m_{f}({v}) = {got!r}, want {want!r}")
    nans = np.isnan(x)                                # NaN in -> NaN out (both signs)
    for f in FUNCS:
        if not np.all(np.isnan(y[f][nans])):
            bad.append(f"m_{f}(NaN) is not NaN")
    for f in ("expm1", "log1p", "tanh", "erf", "sin", "sqrt"):   # odd / sign-preserving at 0
        if not np.signbit(at(f, -0.0)):
            bad.append(f"m_{f}(-0) lost its sign")
    # huge magnitudes: never finite garbage (correct value, or NaN for sin/cos out of range)
    huge = np.isfinite(x) & (np.abs(x) >= 1e10)
    for f in ("sin", "cos"):
        if not np.all(np.isnan(y[f][np.abs(x) > SIN_MAX[scalar]])):
            bad.append(f"m_{f} beyond {SIN_MAX[scalar]} is not NaN")
    for f in ("exp", "expm1", "tanh", "erf", "log1p", "sqrt"):
        with np.errstate(over="ignore", invalid="ignore"):
            xs = x[huge].astype(np.float64 if scalar == "float" or f == "erf" else np.longdouble)
            ref = (sp_erf if f == "erf" else _NP[f])(xs)
            err = _ulps(y[f][huge], ref, scalar)
        ok = np.where(np.isnan(ref), np.isnan(y[f][huge]), err <= BOUND[scalar][f])
        if not np.all(ok):
            bad.append(f"m_{f} wrong at huge x={x[huge][~ok][:3]!r}: {y[f][huge][~ok][:3]!r}")
    assert not bad, "\n".join(bad)


@pytest.mark.toolchain
@pytest.mark.parametrize("scalar", ["float", "double"])
def test_bit_identical_across_optimization_levels(runs, scalar):
    outs = {lv: out for (s, lv), out in runs.items() if s == scalar and lv != "fma"}
    assert len(outs) >= 2
    if "O3v3" not in outs:
        pytest.skip("host cannot run -march=x86-64-v3; compared -O0 and -O2 only")  # pragma: no cover
    base = outs["O2"]
    for lv, out in outs.items():
        if out != base:
            a, b = _parse(base, scalar), _parse(out, scalar)
            x = _inputs(scalar)
            diffs = {f: x[a[f].view(_types(scalar)[1]) != b[f].view(_types(scalar)[1])][:3] for f in FUNCS}
            pytest.fail(f"{lv} differs from O2: { {f: d for f, d in diffs.items() if d.size} }")


@pytest.mark.toolchain
@pytest.mark.parametrize("scalar", ["float", "double"])
def test_strict_warnings_build_and_two_copies_link(cxx, tmp_path, scalar):
    """-Werror with the product's warning set, and two models' copies (two namespaces, one
    of them in two translation units) linked into one program."""
    text = math_source(scalar)
    call = "m_exp(x) + m_expm1(x) + m_log1p(x) + m_tanh(x) + m_erf(x) + m_sin(x) + m_cos(x) + m_sqrt(x)"

    def tu(ns, fn):
        return (f"#include <cstddef>\n#include <cstdint>\nnamespace {ns} {{ namespace detail {{\n{text}\n}} }}\n"
                f"{scalar} {fn}({scalar} x) {{ using namespace {ns}::detail; return {call}; }}\n")

    (tmp_path / "b.cpp").write_text(tu("model_b", "fb"))
    (tmp_path / "a2.cpp").write_text(tu("model_a", "fa2"))
    main = (tu("model_a", "fa") + f"{scalar} fb({scalar});\n{scalar} fa2({scalar});\n"
            f"int main() {{ return (fa({scalar}(0.5)) == fb({scalar}(0.5)) && fa2({scalar}(0.5)) == fa({scalar}(0.5))) ? 0 : 1; }}\n")
    build_and_run(cxx, main, tmp_path, STRICT + ["-O2", str(tmp_path / "b.cpp"), str(tmp_path / "a2.cpp")])


@pytest.mark.toolchain
@pytest.mark.parametrize("scalar", ["float", "double"])
def test_loops_vectorize(cxx, tmp_path, scalar):
    """GCC -O3 -march=x86-64-v3 vectorizes an elementwise loop over each function
    (-fno-math-errno, without which m_sqrt keeps a libm errno call)."""
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout
    if "Free Software Foundation" not in version:
        pytest.skip("vectorization report is GCC-specific")
    loops = "\n".join(f"void v_{f}(const {scalar}* __restrict a, {scalar}* __restrict b, int n) "
                      f"{{ for (int i = 0; i < n; ++i) b[i] = vm::detail::m_{f}(a[i]); }}" for f in FUNCS)
    src = f"#include <cstddef>\n#include <cstdint>\nnamespace vm {{ namespace detail {{\n{math_source(scalar)}\n}} }}\n"
    first = src.count("\n") + 1
    (tmp_path / "v.cpp").write_text(src + loops + "\n")
    res = subprocess.run([cxx, "-std=c++17", "-O3", "-march=x86-64-v3", "-ffp-contract=off", "-fno-math-errno",
                          "-fopt-info-vec-optimized", "-c", str(tmp_path / "v.cpp"), "-o", str(tmp_path / "v.o")],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    vectorized = {int(m) for m in re.findall(r"v\.cpp:(\d+):\d+: optimized: loop vectorized", res.stderr)}
    missing = [f for i, f in enumerate(FUNCS) if first + i not in vectorized]
    assert not missing, f"not vectorized: {missing}\n{res.stderr}"


def test_text_is_deterministic_and_self_contained():
    for scalar in ("float", "double"):
        text = math_source(scalar)
        assert text == math_source(scalar)
        for banned in ("#include", "malloc", "new ", "namespace", "static ", "#pragma", "#define",
                       "for (", "while (", "__builtin_exp", "__builtin_sin", "__builtin_log"):
            assert banned not in text, banned
        # the only std:: names are the fixed-width words from <cstdint>
        assert "std::" not in text.replace("std::uint32_t", "").replace("std::uint64_t", "")
        for name in ("exp", "expm1", "log1p", "tanh", "erf", "sin", "cos", "sqrt"):
            assert f"inline {scalar} m_{name}({scalar} x) noexcept" in text
    assert "double" not in math_source("float")
    with pytest.raises(ValueError):
        math_source("half")
