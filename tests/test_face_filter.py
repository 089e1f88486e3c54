"""firmware/common/face_filter.hpp, the exact filter for the barrier row plus face rows, against
the Python filters' solver of the same P_rho (cbfsim/filters/cbf_qp.py: OSQP + exact KKT
refinement), in double and in the device's float, on random problems that are feasible and
that conflict; and its integer sqrt against the FPU's, bit for bit."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cbfsim.face_rows import FACE_SLACK_PENALTY
from cbfsim.filters.cbf_qp import QPRowSolver
from conftest import build_and_run

pytestmark = pytest.mark.toolchain

COMMON = Path(__file__).resolve().parent.parent / "firmware" / "common"
FLAGS = ["-std=c++17", "-O2", "-ffp-contract=off", "-fno-math-errno", "-Wall", "-Wextra", "-Wpedantic",
         "-Wdouble-promotion", "-Werror", f"-I{COMMON}"]
DRIVER = """#include <cstdio>
#include "face_filter.hpp"
template <typename T> int run() {
  constexpr int K = %(K)d, M = %(M)d;
  double d[K + K * M + 3 * M];
  while (true) {
    for (double& v : d) if (std::scanf("%%lf", &v) != 1) return 0;
    T a[K], b[K * M], un[M], lo[M], hi[M], u[M];
    int o = 0;
    for (T& v : a) v = T(d[o++]);
    for (T& v : b) v = T(d[o++]);
    for (T& v : un) v = T(d[o++]);
    for (T& v : lo) v = T(d[o++]);
    for (T& v : hi) v = T(d[o++]);
    std::printf("%%d", cbf_faces::solve<T, K, M>(a, b, un, lo, hi, T(%(rho)r), u));
    for (T v : u) std::printf(" %%.17g", static_cast<double>(v));
    std::printf("\\n");
  }
}
int main(int argc, char**) { return argc > 1 ? run<float>() : run<double>(); }
"""


def problems(K: int, M: int, count: int, seed: int) -> np.ndarray:
    """Random rows: half of them a barrier row plus face-like rows (opposite axis gains, as the
    faces of one coordinate give), some with a tiny barrier gain; many conflict on the box."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        a, b = rng.normal(0, 2, K), rng.normal(0, 1, (K, M))
        if rng.random() < 0.5:
            a[1:] = np.abs(a[1:]) + 0.5
            b[1:] = 0.0
            b[1, 0], b[-1, 0] = -1.0, 1.0
        if rng.random() < 0.2:
            b[0] *= 1e-3
        out.append(np.concatenate([a, b.ravel(), rng.normal(0, 3, M), -rng.uniform(0.5, 2, M), rng.uniform(0.5, 2, M)]))
    return np.array(out)


@pytest.mark.parametrize("K,M", [(3, 1), (3, 2), (2, 2)])
def test_face_filter_solves_the_python_filters_problem(cxx, tmp_path, K, M):
    P = problems(K, M, 400, 10 * K + M)
    text = "\n".join(" ".join(repr(float(v)) for v in p) for p in P)
    source = DRIVER % {"K": K, "M": M, "rho": FACE_SLACK_PENALTY}
    for precision, tol in (("double", 1e-7), ("float", 1e-5)):
        out = build_and_run(cxx, source, tmp_path, FLAGS, ["f"] if precision == "float" else [], stdin=text)
        got = np.array([[float(v) for v in line.split()] for line in out.splitlines()])
        cast = (lambda v: v.astype(np.float32).astype(np.float64)) if precision == "float" else (lambda v: v)
        checked = conflicts = 0
        for p, row in zip(P, got):
            p = cast(p)
            a, b, un = p[:K], p[K:K + K * M].reshape(K, M), p[K + K * M:K + K * M + M]
            lo, hi = p[K + K * M + M:K + K * M + 2 * M], p[K + K * M + 2 * M:]
            ref = QPRowSolver(lo, hi, K, slack_penalty=FACE_SLACK_PENALTY).solve(a[None], b[None], un[None])
            if ref.status[0] == 2:               # the reference could not verify its own answer
                continue
            checked += 1
            conflicts += ref.status[0] == 1
            assert int(row[0]) == ref.status[0], (precision, p)
            assert np.max(np.abs(row[1:] - ref.u[0])) < tol, (precision, p, row, ref.u[0])
        assert checked > 390 and conflicts > 50


def test_integer_sqrt_gives_the_fpu_bits(cxx, tmp_path):
    source = """#include <cstdio>
#include <cstring>
#include "face_filter.hpp"
int main() {
  unsigned long bad = 0;
  for (unsigned long long b = 1; b < 0x7f800000ull; b += 9973) {
    const std::uint32_t bits = static_cast<std::uint32_t>(b);
    float v, ours, fpu = 0.0f;
    std::memcpy(&v, &bits, 4);
    ours = cbf_faces::square_root(v);
    fpu = __builtin_sqrtf(v);
    bad += std::memcmp(&ours, &fpu, 4) != 0;
  }
  std::printf("%lu\\n", bad);
}
"""
    assert build_and_run(cxx, source, tmp_path, FLAGS).strip() == "0"
