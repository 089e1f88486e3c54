"""Exhaustive accuracy of the header's float32 m_sincos (compiler/cppmath.py) over a range.

Every float x in [-R, R] (R = 64 pi by default: 2.26e9 floats) goes through m_sincos, m_sin
and m_cos; the program checks that m_sincos gives the bits of m_sin and m_cos, and measures
the error of each against glibc's double sin / cos (accurate to < 1 double ulp, i.e. 2^-29 of
a float ulp), in ulps of the exact result (float ulp of the reference; subnormal ulp below
the normal range). Prints the maximum ulp error of sin and cos and where it occurs.
Single-threaded C++, a few minutes:

    nice python benchmarks/trig_ulps.py [--range 201.06193]
"""
from __future__ import annotations

import argparse
import math
import subprocess
import tempfile
from pathlib import Path

from compiler.cppmath import math_source

PROGRAM = r"""
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
namespace t { namespace detail {
@MATH@
} }
static float real(std::uint32_t u) { float x; std::memcpy(&x, &u, 4); return x; }
static std::uint32_t bits(float x) { std::uint32_t u; std::memcpy(&u, &x, 4); return u; }
static double ulps(float y, double ref) {
    int e = 0;
    std::frexp(ref, &e);
    if (e < -125) e = -125;
    return std::fabs(static_cast<double>(y) - ref) / std::ldexp(1.0, e - 24);
}
int main(int argc, char** argv) {
    const float R = std::strtof(argv[1], nullptr);
    const std::uint32_t top = bits(R);
    double ms = 0, mc = 0; float xs = 0, xc = 0; unsigned long long mismatch = 0, count = 0;
    for (std::uint32_t sign = 0; sign < 2; ++sign) {
        for (std::uint32_t u = 0; u <= top; ++u) {
            const float x = real(u | (sign << 31));
            float s, c;
            t::detail::m_sincos(x, s, c);
            if (bits(s) != bits(t::detail::m_sin(x)) || bits(c) != bits(t::detail::m_cos(x))) ++mismatch;
            const double es = ulps(s, std::sin(static_cast<double>(x)));
            const double ec = ulps(c, std::cos(static_cast<double>(x)));
            if (es > ms) { ms = es; xs = x; }
            if (ec > mc) { mc = ec; xc = x; }
            ++count;
        }
    }
    std::printf("%llu %.6f %.9g %.6f %.9g %llu\n", count, ms, static_cast<double>(xs), mc,
                static_cast<double>(xc), mismatch);
    return 0;
}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--range", type=float, default=64 * math.pi, help="R: every float in [-R, R] (<= 12800)")
    args = parser.parse_args()
    source = PROGRAM.replace("@MATH@", math_source("float", ["sin", "cos", "sincos"]))
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = Path(tmp) / "trig.cpp", Path(tmp) / "trig"
        src.write_text(source)
        subprocess.run(["g++", "-std=c++17", "-O2", "-ffp-contract=off", str(src), "-o", str(exe)], check=True)
        out = subprocess.run([str(exe), repr(args.range)], capture_output=True, text=True, check=True).stdout
    count, es, xs, ec, xc, mismatch = out.split()
    print(f"floats in [-{args.range:.9g}, {args.range:.9g}]: {int(count):,}")
    print(f"m_sin  max error {float(es):.4f} ulp at x = {xs}")
    print(f"m_cos  max error {float(ec):.4f} ulp at x = {xc}")
    print(f"m_sincos differs from (m_sin, m_cos) at {int(mismatch)} inputs")


if __name__ == "__main__":
    main()
