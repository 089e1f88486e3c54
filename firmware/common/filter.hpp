// filter.hpp: the exact safety filter for one affine constraint with a margin plus box bounds,
//
//     min 1/2 ||u - u_nom||^2   s.t.   a + b.u >= eps,   u_min <= u <= u_max,
//
// solved in closed form with no iteration, no allocation and a fixed worst-case cost.
//
// Why this is exact: the problem is a strictly convex projection, so the KKT conditions
// characterise the solution. With c = a - eps and lambda >= 0 the multiplier of the row,
//     u(lambda) = clip(u_nom + lambda b, u_min, u_max),
//     g(lambda) = c + b.u(lambda)
// is continuous, nondecreasing and piecewise linear in lambda: coordinate j moves (slope
// b_j^2) between the two breakpoints where it leaves and reaches a bound. Hence
//   * g(0) >= 0:        lambda = 0, u = clip(u_nom)                                 -> kOk
//   * sup g < 0:        no box point satisfies the row; return the least-violation point
//                       (u_j = u_max_j if b_j > 0, u_min_j if b_j < 0, clip(u_nom_j) if b_j = 0)
//                                                                                   -> kSlackActive
//   * otherwise:        walk the at most 2m sorted positive breakpoints to the segment
//                       where g changes sign and solve the linear piece             -> kOk
//
// The row is first normalised by s = max_j |b_j| (any positive scale gives the same
// solution): then |b_j / s| <= 1, so b_j^2 cannot overflow and a gain of 1e20 in float (or
// 1e308 in double) is handled exactly instead of losing the row. (The Python filters divide
// by ||b||_2, which matters for their finite slack penalty; this filter has none, and the
// max needs no sqrt.) c / s may overflow to +-inf: that row holds (or fails) on the whole
// box, which the branches above then report exactly. Coordinates with b_j = 0 never move.
//
// Faults: non-finite data (a NaN from the barrier, a NaN nominal input), an empty box or
// a margin that is not finite and >= 0 give kFallback and a finite in-box placeholder
// (clip of u_nom, non-finite entries taken as 0); the caller applies its fault policy
// (app.hpp). So neither a NaN nor a silently wrong input ever leaves this function.
//
// The status codes are generated from the Python enum (filter_status.hpp). The same
// arithmetic runs in float on the device and in double for the test that checks it
// against the numpy reference (cbfsim/filters/projection.py).
#ifndef CBF_FILTER_HPP
#define CBF_FILTER_HPP

#include "filter_status.hpp"

namespace cbf_filter {

template <typename T>
inline T clip(T v, T lo, T hi) noexcept {
    return v < lo ? lo : (v > hi ? hi : v);
}

template <typename T>
inline bool is_finite(T v) noexcept {
    return v - v == T(0);  // false for NaN and +-inf
}

template <typename T>
inline T magnitude(T v) noexcept {
    return v < T(0) ? -v : v;
}

// In-place insertion sort of a small fixed-size array (ascending). No allocation, and for
// the <= 2m breakpoints of the filter it is also the fastest choice.
template <typename T>
inline void insertion_sort(T* v, int count) noexcept {
    for (int i = 1; i < count; ++i) {
        const T key = v[i];
        int j = i - 1;
        while (j >= 0 && key < v[j]) {
            v[j + 1] = v[j];
            --j;
        }
        v[j + 1] = key;
    }
}

// u_j(lambda) = clip(u_nom_j + lambda b_j); a coordinate with b_j = 0 stays at clip(u_nom_j)
// (also for lambda = inf, where lambda * 0 would be NaN).
template <typename T>
inline T moved(T b, T u_nom, T lo, T hi, T lambda) noexcept {
    return b == T(0) ? clip(u_nom, lo, hi) : clip(u_nom + lambda * b, lo, hi);
}

// g(lambda) = c + b.u(lambda), summed in the order j = 0..M-1.
template <typename T, int M>
inline T row_value(T c, const T* b, const T* u_nom, const T* lo, const T* hi, T lambda) noexcept {
    T g = c;
    for (int j = 0; j < M; ++j) g += b[j] * moved(b[j], u_nom[j], lo[j], hi[j], lambda);
    return g;
}

// Solve the problem above; writes u (M entries) and returns a FilterStatus.
template <typename T, int M>
inline int project(T a, const T* b_in, const T* u_nom, const T* lo, const T* hi, T margin, T* u) noexcept {
    static_assert(M >= 1, "at least one input");
    bool ok = is_finite(a) && is_finite(margin) && margin >= T(0);
    for (int j = 0; j < M; ++j) ok = ok && is_finite(b_in[j]) && is_finite(u_nom[j]) && lo[j] <= hi[j];
    if (!ok) {
        for (int j = 0; j < M; ++j) u[j] = clip(is_finite(u_nom[j]) ? u_nom[j] : T(0), lo[j], hi[j]);
        return kFallback;
    }

    // The normalised row c + b.u >= 0 (c = (a - eps) / s, b = b_in / s).
    T scale = T(0);
    for (int j = 0; j < M; ++j) scale = magnitude(b_in[j]) > scale ? magnitude(b_in[j]) : scale;
    if (!(scale > T(0))) scale = T(1);
    T b[M];
    for (int j = 0; j < M; ++j) b[j] = b_in[j] / scale;
    const T c = (a - margin) / scale;

    const T g0 = row_value<T, M>(c, b, u_nom, lo, hi, T(0));
    if (g0 >= T(0)) {
        for (int j = 0; j < M; ++j) u[j] = clip(u_nom[j], lo[j], hi[j]);
        return kOk;
    }

    // The best the box can do for the row, and the point that achieves it.
    T best[M];
    T g_sup = c;
    for (int j = 0; j < M; ++j) {
        best[j] = b[j] > T(0) ? hi[j] : (b[j] < T(0) ? lo[j] : clip(u_nom[j], lo[j], hi[j]));
        if (b[j] != T(0)) g_sup += b[j] * best[j];
    }
    if (!(g_sup >= T(0))) {
        for (int j = 0; j < M; ++j) u[j] = best[j];
        return kSlackActive;
    }

    // Coordinate j moves with lambda on (enter_j, leave_j); both clamped at >= 0 (+inf
    // when b_j is so small that the bound is out of reach of any finite lambda).
    T enter[M], leave[M], breaks[2 * M];
    int count = 0;
    for (int j = 0; j < M; ++j) {
        enter[j] = T(0);
        leave[j] = T(0);
        if (b[j] == T(0)) continue;
        const T t_lo = (lo[j] - u_nom[j]) / b[j];
        const T t_hi = (hi[j] - u_nom[j]) / b[j];
        const T t1 = b[j] > T(0) ? t_lo : t_hi;
        const T t2 = b[j] > T(0) ? t_hi : t_lo;
        enter[j] = t1 > T(0) ? t1 : T(0);
        leave[j] = t2 > T(0) ? t2 : T(0);
        if (enter[j] > T(0)) breaks[count++] = enter[j];
        if (leave[j] > T(0)) breaks[count++] = leave[j];
    }
    insertion_sort(breaks, count);

    T start = T(0);
    T g_start = g0;
    for (int k = 0; k < count; ++k) {
        const T end = breaks[k];
        if (!(end > start)) continue;  // a repeated breakpoint
        // at lambda = +inf every moving coordinate sits on its bound: g = sup g >= 0
        const T g_end = is_finite(end) ? row_value<T, M>(c, b, u_nom, lo, hi, end) : g_sup;
        if (g_end >= T(0)) {
            T slope = T(0);
            for (int j = 0; j < M; ++j)
                if (b[j] != T(0) && enter[j] <= start && start < leave[j]) slope += b[j] * b[j];
            T lambda = slope > T(0) ? start - g_start / slope : end;
            lambda = clip(lambda, start, end);
            if (!is_finite(lambda)) break;  // the root lies at +inf: the corner below
            for (int j = 0; j < M; ++j) u[j] = moved(b[j], u_nom[j], lo[j], hi[j], lambda);
            return kOk;
        }
        start = end;
        g_start = g_end;
    }
    // Past the last breakpoint every moving coordinate sits on its bound, so g equals
    // sup g >= 0 there; rounding hid that sign. The root is that corner.
    for (int j = 0; j < M; ++j) u[j] = best[j];
    return kOk;
}

}  // namespace cbf_filter

#endif  // CBF_FILTER_HPP
