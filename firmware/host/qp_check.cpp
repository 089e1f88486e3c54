// Test driver for common/qp_filter.hpp on the solver generated into GEN (cbfsim/device/qp.py):
// reads problems from stdin and prints each answer with exact bit patterns, so
// tests/test_firmware_multirow.py can compare it with the Python CBFQP and an exact KKT check.
//
// Usage:  qp_check [warm|cold]        (cold: forget warm starts between problems; default warm)
// Input:  first line "count", then per problem one line of 1 + K + K*M + M numbers:
//         margin  a[K]  b[K*M] (row-major)  u_nom[M]       (read as double, rounded to float)
//         The box is the one the solver was generated for (cbf_qp_config::kUMin/kUMax).
// Output: per problem "status iterations u_hex[M]" (16 hex digits of each u_j as a double).
#include <cstdio>

#include "print_bits.hpp"
#include "qp_filter.hpp"

namespace {

using cbf_qp::K;
using cbf_qp::M;

int solve_all(long count, bool cold) {
    for (long p = 0; p < count; ++p) {
        double in[1 + K + K * M + M];
        for (double& v : in)
            if (std::scanf("%lf", &v) != 1) return 1;
        float margin = static_cast<float>(in[0]), a[K], b[K * M], un[M], u[M];
        for (int i = 0; i < K; ++i) a[i] = static_cast<float>(in[1 + i]);
        for (int c = 0; c < K * M; ++c) b[c] = static_cast<float>(in[1 + K + c]);
        for (int j = 0; j < M; ++j) un[j] = static_cast<float>(in[1 + K + K * M + j]);
        if (cold) cbf_qp::forget();
        const int status = cbf_qp::solve<float>(a, b, un, cbf_qp_config::kUMin, cbf_qp_config::kUMax, margin, u);
        std::printf("%d %d", status, static_cast<int>(cbfqp_solver.info->iter));
        print_bits(u, M);
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    const bool cold = argc > 1 && std::strcmp(argv[1], "cold") == 0;
    if (argc > 1 && !cold && std::strcmp(argv[1], "warm") != 0) {
        std::fprintf(stderr, "usage: %s [warm|cold]\n", argv[0]);
        return 2;
    }
    long count = 0;
    if (std::scanf("%ld", &count) != 1 || count < 0) return 2;
    return solve_all(count, cold);
}
