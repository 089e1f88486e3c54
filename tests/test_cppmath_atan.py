"""compiler/cppmath.py's m_atan and m_atan2 (the bicycle's and the unicycle's nominal
controllers call them; the firmware has no libm): accuracy in ulps against independent
references, C99's special values, and the same bits at -O0, -O2 and -O3 -march=x86-64-v3.

One C++ program per scalar reads (y, x) bit-pattern pairs and prints m_atan(y) and
m_atan2(y, x) as bit patterns. References: float results against float64 numpy (error
< 2^-28 float ulp), double results against long double libm (64-bit mantissa) where the
platform has it and mpmath at 113 bits on a subset (always, also as a cross-check).
"""
from __future__ import annotations

import functools

import mpmath
import numpy as np
import pytest

from compiler.cppmath import math_source
from conftest import build_and_run
from test_cppmath import _types, _ulps, _ulps_mp, _x86_64_v3

BOUND = {"float": {"atan": 1.0, "atan2": 2.0}, "double": {"atan": 1.0, "atan2": 2.0}}
NOFMA = ["-std=c++17", "-ffp-contract=off"]
BUILDS = {"O0": NOFMA + ["-O0"], "O2": NOFMA + ["-O2"], "O3v3": NOFMA + ["-O3", "-march=x86-64-v3"]}


def _program(scalar: str) -> str:
    fmt, word = ("%08x", "std::uint32_t") if scalar == "float" else ("%016llx", "std::uint64_t")
    return f"""#include <cstddef>
#include <cstdint>
#include <cstdio>
namespace cbf_test {{ namespace detail {{
{math_source(scalar, ["atan2"])}
}} }}
static {word} bits({scalar} v) {{ {word} u; __builtin_memcpy(&u, &v, sizeof u); return u; }}
static {scalar} real(unsigned long long in) {{
    const {word} w = static_cast<{word}>(in);
    {scalar} v;
    __builtin_memcpy(&v, &w, sizeof v);
    return v;
}}
int main() {{
    unsigned long long a, b;
    while (std::scanf("%llx %llx", &a, &b) == 2) {{
        const {scalar} y = real(a), x = real(b);
        std::printf("{fmt} {fmt}\\n", (unsigned long long)bits(cbf_test::detail::m_atan(y)),
                    (unsigned long long)bits(cbf_test::detail::m_atan2(y, x)));
    }}
    return 0;
}}
"""


def _specials(scalar: str) -> np.ndarray:
    ft = _types(scalar)[0]
    fi = np.finfo(ft)
    vals = [0.0, 1.0, 0.5, 1.5, 2.0, 7 / 16, 11 / 16, 19 / 16, 39 / 16, float(fi.smallest_subnormal),
            float(fi.tiny), float(fi.max), 1e-30, 1e30, 1e10, 1e-10, np.pi, np.inf, np.nan]
    x = np.array(vals, dtype=np.float64).astype(ft)
    with np.errstate(over="ignore"):
        x = np.concatenate([x, np.nextafter(x, ft(np.inf)), np.nextafter(x, ft(0))])
    return np.concatenate([x, -x])


@functools.lru_cache(maxsize=None)
def _inputs(scalar: str) -> tuple[np.ndarray, np.ndarray]:
    """(y, x) pairs: every pair of special values; random bit patterns over the whole range
    (incl. subnormals, both signs); uniform ranges around atan's reduction intervals;
    points on circles of many radii (every angle, both quotients |y/x| <= 1 and > 1); and
    nearly equal |x|, |y| (the switch between the two quotients)."""
    ft, ut, _, _ = _types(scalar)
    rng = np.random.default_rng(20261124)
    sp = _specials(scalar)
    ys, xs = [np.repeat(sp, sp.size)], [np.tile(sp, sp.size)]
    max_bits = int(np.array(np.finfo(ft).max, ft).view(ut))
    sign = ut(1) << ut(8 * np.dtype(ut).itemsize - 1)
    for _ in range(2):
        raw = rng.integers(0, max_bits, 40_000, dtype=ut, endpoint=True)
        raw = raw | (rng.integers(0, 2, raw.size).astype(ut) * sign)
        (ys if _ == 0 else xs).append(raw.view(ft))
    for lo, hi, n in [(-1, 1, 20_000), (-3, 3, 20_000), (-40, 40, 10_000), (-1e6, 1e6, 5_000)]:
        ys.append(rng.uniform(lo, hi, n).astype(ft))
        xs.append(rng.uniform(lo, hi, n).astype(ft))
    theta = rng.uniform(-np.pi, np.pi, 30_000)
    radius = np.exp2(rng.uniform(-60, 60, theta.size))
    ys.append((radius * np.sin(theta)).astype(ft))
    xs.append((radius * np.cos(theta)).astype(ft))
    near = rng.uniform(0.5, 2, 5_000).astype(ft)
    ys.append(near * rng.choice([-1, 1], near.size).astype(ft))
    xs.append(np.nextafter(near, ft(rng.choice([0, 10]))) * rng.choice([-1, 1], near.size).astype(ft))
    return np.concatenate(ys).astype(ft), np.concatenate(xs).astype(ft)


@pytest.fixture(scope="module")
def runs(cxx, tmp_path_factory):
    """{(scalar, level): (atan bits, atan2 bits)} for each scalar and build."""
    out = {}
    for scalar in ("float", "double"):
        ft, ut, _, _ = _types(scalar)
        y, x = _inputs(scalar)
        text = "\n".join(f"{int(a):x} {int(b):x}" for a, b in zip(y.view(ut), x.view(ut))) + "\n"
        for level, flags in BUILDS.items():
            if level == "O3v3" and not _x86_64_v3():
                continue
            stdout = build_and_run(cxx, _program(scalar), tmp_path_factory.mktemp(f"atan_{scalar}_{level}"),
                                   flags, stdin=text)
            words = np.array([int(t, 16) for t in stdout.split()], dtype=np.uint64).astype(ut).reshape(-1, 2)
            out[(scalar, level)] = (words[:, 0].view(ft), words[:, 1].view(ft))
    return out


def _reference(func: str, y: np.ndarray, x: np.ndarray, scalar: str) -> np.ndarray:
    wide = np.float64 if scalar == "float" else np.longdouble
    with np.errstate(all="ignore"):
        return np.arctan(y.astype(wide)) if func == "atan" else np.arctan2(y.astype(wide), x.astype(wide))


def _mp_reference(func: str, y: np.ndarray, x: np.ndarray) -> list:
    with mpmath.workprec(113):
        if func == "atan":
            return [mpmath.atan(mpmath.mpf(float(a))) for a in y]
        return [mpmath.atan2(mpmath.mpf(float(a)), mpmath.mpf(float(b))) for a, b in zip(y, x)]


def _finite(func, y, x):
    return np.isfinite(y) if func == "atan" else np.isfinite(y) & np.isfinite(x) & ((y != 0) | (x != 0))


@pytest.mark.toolchain
@pytest.mark.parametrize("scalar", ["float", "double"])
@pytest.mark.parametrize("func", ["atan", "atan2"])
def test_atan_error_within_its_ulp_bound(runs, scalar, func):
    y, x = _inputs(scalar)
    got = runs[(scalar, "O2")][0 if func == "atan" else 1]
    ok = _finite(func, y, x)
    if scalar == "float" or np.finfo(np.longdouble).nmant >= 63:
        err = _ulps(got[ok], _reference(func, y[ok], x[ok], scalar), scalar)
        worst = int(np.argmax(err))
        assert err[worst] <= BOUND[scalar][func], \
            f"m_{func}<{scalar}>: {err[worst]:.3f} ulp at y={y[ok][worst]!r}, x={x[ok][worst]!r}"
    # mpmath on 3,000 of the points (the first ones are the special pairs), whatever the platform;
    # not y = +-0, whose sign mpmath does not carry (test_atan_special_values_follow_c99 has them)
    rng = np.random.default_rng(3)
    idx = np.flatnonzero(ok & (y != 0))
    idx = np.unique(np.concatenate([idx[:1000], rng.choice(idx, 2000, replace=False)]))
    err = _ulps_mp(got[idx], _mp_reference(func, y[idx], x[idx]), scalar)
    worst = int(np.argmax(err))
    assert err[worst] <= BOUND[scalar][func], \
        f"m_{func}<{scalar}> vs mpmath: {err[worst]:.3f} ulp at y={y[idx][worst]!r}, x={x[idx][worst]!r}"


@pytest.mark.toolchain
@pytest.mark.parametrize("scalar", ["float", "double"])
def test_atan_special_values_follow_c99(runs, scalar):
    """Zeros (signed), infinities and NaN: the values C99 (and numpy, which follows it) gives."""
    ft = _types(scalar)[0]
    y, x = _inputs(scalar)
    got_atan, got_atan2 = runs[(scalar, "O2")]
    special = ~_finite("atan2", y, x)
    with np.errstate(all="ignore"):
        want2 = np.arctan2(y[special], x[special]).astype(ft)
        want1 = np.arctan(y[~np.isfinite(y)]).astype(ft)

    def same(a, b):   # equal with the sign of zero, or both NaN
        return (np.isnan(a) & np.isnan(b)) | ((a == b) & (np.signbit(a) == np.signbit(b)))

    bad2 = ~same(got_atan2[special], want2)
    assert not bad2.any(), list(zip(y[special][bad2][:5], x[special][bad2][:5], got_atan2[special][bad2][:5]))
    bad1 = ~same(got_atan[~np.isfinite(y)], want1)
    assert not bad1.any(), list(zip(y[~np.isfinite(y)][bad1][:5], got_atan[~np.isfinite(y)][bad1][:5]))
    zeros = y == 0
    assert np.array_equal(np.signbit(got_atan[zeros]), np.signbit(y[zeros]))   # atan(-0) = -0


@pytest.mark.toolchain
@pytest.mark.parametrize("scalar", ["float", "double"])
def test_atan_bits_identical_across_optimization_levels(runs, scalar):
    ut = _types(scalar)[1]
    levels = [lv for (s, lv) in runs if s == scalar]
    base = runs[(scalar, "O2")]
    for level in levels:
        for i, name in enumerate(("atan", "atan2")):
            differs = base[i].view(ut) != runs[(scalar, level)][i].view(ut)
            assert not differs.any(), f"m_{name}<{scalar}> at {level} differs from -O2 at {differs.sum()} points"
