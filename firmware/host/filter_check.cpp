// Test driver for common/filter.hpp in double precision: reads problems from stdin and
// prints each solution as exact bit patterns, so tests/test_firmware.py can compare the
// C++ projection with the numpy reference on random (also infeasible) problems.
//
// Input:  first line "count m", then per problem one line of 1 + 4m numbers:
//         a  b[m]  u_nom[m]  u_min[m]  u_max[m]
// Output: per problem "status u_hex[m]" (16 hex digits per double).
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "filter.hpp"

namespace {

constexpr int kMaxM = 4;

template <int M>
int solve_all(long count) {
    for (long p = 0; p < count; ++p) {
        double a = 0.0, b[M], un[M], lo[M], hi[M], u[M];
        if (std::scanf("%lf", &a) != 1) return 1;
        double* const arrays[4] = {b, un, lo, hi};
        for (double* arr : arrays)
            for (int j = 0; j < M; ++j)
                if (std::scanf("%lf", &arr[j]) != 1) return 1;
        const int status = cbf_filter::project<double, M>(a, b, un, lo, hi, u);
        std::printf("%d", status);
        for (int j = 0; j < M; ++j) {
            std::uint64_t bits = 0;
            std::memcpy(&bits, &u[j], sizeof bits);
            std::printf(" %016" PRIx64, bits);
        }
        std::printf("\n");
    }
    return 0;
}

}  // namespace

int main() {
    long count = 0;
    int m = 0;
    if (std::scanf("%ld %d", &count, &m) != 2 || m < 1 || m > kMaxM) return 2;
    switch (m) {
        case 1: return solve_all<1>(count);
        case 2: return solve_all<2>(count);
        case 3: return solve_all<3>(count);
        default: return solve_all<4>(count);
    }
}
