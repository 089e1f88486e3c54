// Test driver for common/filter.hpp in float or double: reads problems from stdin and prints
// each solution as exact bit patterns, so tests/test_firmware*.py can compare the C++
// projection with the numpy reference on random, infeasible and extreme problems.
//
// Usage:  filter_check [double|float]        (default double)
// Input:  first line "count m", then per problem one line of 2 + 4m numbers:
//         a  margin  b[m]  u_nom[m]  u_min[m]  u_max[m]     (read as double, then rounded to T)
// Output: per problem "status u_hex[m]" (16 hex digits of the double value of each u_j).
#include <cstdio>

#include "filter.hpp"
#include "print_bits.hpp"

namespace {

constexpr int kMaxM = 4;

template <typename T, int M>
int solve_all(long count) {
    for (long p = 0; p < count; ++p) {
        double in[2 + 4 * M];
        for (double& v : in)
            if (std::scanf("%lf", &v) != 1) return 1;
        T a = static_cast<T>(in[0]), margin = static_cast<T>(in[1]), b[M], un[M], lo[M], hi[M], u[M];
        for (int j = 0; j < M; ++j) {
            b[j] = static_cast<T>(in[2 + j]);
            un[j] = static_cast<T>(in[2 + M + j]);
            lo[j] = static_cast<T>(in[2 + 2 * M + j]);
            hi[j] = static_cast<T>(in[2 + 3 * M + j]);
        }
        const int status = cbf_filter::project<T, M>(a, b, un, lo, hi, margin, u);
        std::printf("%d", status);
        print_bits(u, M);
    }
    return 0;
}

template <typename T>
int run(long count, int m) {
    switch (m) {
        case 1: return solve_all<T, 1>(count);
        case 2: return solve_all<T, 2>(count);
        case 3: return solve_all<T, 3>(count);
        default: return solve_all<T, 4>(count);
    }
}

}  // namespace

int main(int argc, char** argv) {
    const bool single = argc > 1 && std::strcmp(argv[1], "float") == 0;
    if (argc > 1 && !single && std::strcmp(argv[1], "double") != 0) {
        std::fprintf(stderr, "usage: %s [double|float]\n", argv[0]);
        return 2;
    }
    long count = 0;
    int m = 0;
    if (std::scanf("%ld %d", &count, &m) != 2 || m < 1 || m > kMaxM) return 2;
    return single ? run<float>(count, m) : run<double>(count, m);
}
