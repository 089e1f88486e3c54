// face_filter.hpp: the exact filter for K affine rows (the barrier's row and the rows of the
// domain faces the certificate enforces, training/certify/faces.py) plus the input box. It
// solves the problem the Python CBFQP / HOCBFQP solve with faces (cbfsim/filters/cbf_qp.py),
// P_rho on rows scaled to unit gain (c_i, b_i) = (a_i, b_i) / ||b_i||:
//
//     min 1/2 ||u - u_nom||^2 + rho sum_i s_i   s.t.  c_i + b_i.u + s_i >= 0,  s >= 0,  lo <= u <= hi,
//
// exactly, by enumerating its active sets: no iteration, no allocation, no recursion, a fixed
// worst-case cost (3^K row states x 3^M input states, each a |T| x |T| solve with |T| <= M).
//
// Why enumeration: P_rho is strictly convex in u and tiny (K = 3 rows for one enforced
// coordinate, M <= 2 inputs on the shipped plants), so its KKT conditions characterise the one
// solution, and they are finitely many linear cases. With lam_i in [0, rho] the row multipliers,
//     w = u_nom + B^T lam,   u = clip(w, lo, hi),   g_i = c_i + b_i.u,
// a case fixes each row as inactive (lam_i = 0, needs g_i >= 0), tight (g_i = 0, needs
// 0 <= lam_i <= rho) or relaxed (lam_i = rho, needs g_i <= 0) and each input as free (lo <= w_j
// <= hi) or at a bound (w_j beyond it). The tight rows' multipliers solve a |T| x |T| system; the
// case whose conditions hold is the solution. In floating point each case gets its largest
// violation of those conditions (relative to the size of their terms). The first case without
// relaxed rows that is within rounding of zero is taken (its terms are of the data's size, so
// rounding cannot pass a wrong case); else, after all cases, of those within rounding the one
// nearest u_nom, or the one with the smallest violation (the relaxed rows' terms rho * b_i round
// at rho * eps: cases that tie in total violation are told apart by P_rho's quadratic term). Where clip(u_nom)
// satisfies every row it is the answer at once (the common step).
//
// Rows the box cannot change are decided first, as in Python (QPRowSolver._decided): a row with
// b_i = 0, or |c_i| > 1e6 beyond the box's reach, holds everywhere (inactive) or fails everywhere
// (relaxed). Where rows conflict (no input satisfies them all: outside the certified set) the
// answer is P_rho's, the least total violation at price rho, as in Python; there the relaxed
// rows' push rho * b_i is summed first (opposite unit gains cancel exactly), and the remaining
// difference to Python's float64 is float rounding (tests/test_face_filter.py holds float to
// 1e-5 of the Python solver on feasible and conflicting problems; measured 1.2e-6).
//
// Status (the Python FilterStatus meanings): kOk when every unit-gain row holds at the returned
// input to rounding, kSlackActive when one is violated (the P_rho answer), kFallback for
// non-finite data or an empty box (a finite in-box placeholder; the caller applies its fault
// policy), kSolverError if no case could be evaluated (clip(u_nom) returned).
#ifndef CBF_FACE_FILTER_HPP
#define CBF_FACE_FILTER_HPP

#include <cstdint>

#include "filter.hpp"
#include "filter_status.hpp"

namespace cbf_faces {

using cbf_filter::clip;
using cbf_filter::is_finite;
using cbf_filter::magnitude;

// sqrt(v) for float, IEEE correctly rounded (so the bits of an FPU's sqrt) in integer arithmetic:
// no libm call and no FPU needed (a core without one, e.g. the lx106, would call sqrtf).
// The 24-bit root comes with a round bit from the bit-by-bit integer root of the mantissa
// shifted to [2^48, 2^50), and a sticky bit from its remainder.
inline float square_root(float v) noexcept {
    std::uint32_t bits;
    __builtin_memcpy(&bits, &v, sizeof bits);
    if (v == 0.0f || !(v > 0.0f) || !(v - v == 0.0f)) return v == 0.0f ? v : (v > 0.0f ? v : (v - v) / (v - v));
    std::int32_t e = static_cast<std::int32_t>(bits >> 23);
    std::uint64_t m = bits & 0x7fffffu;
    if (e == 0) {                                   // subnormal: normalise the mantissa
        e = 1;
        while ((m & 0x800000u) == 0) {
            m <<= 1;
            --e;
        }
    } else {
        m |= 0x800000u;
    }
    const std::int32_t unbiased = e - 127;          // v = m 2^(unbiased - 23), m in [2^23, 2^24)
    const int shift = ((unbiased - 23 - 25) & 1) ? 26 : 25;
    std::uint64_t op = m << shift, root = 0, one = std::uint64_t{1} << 62;
    while (one > op) one >>= 2;
    while (one != 0) {
        if (op >= root + one) {
            op -= root + one;
            root = (root >> 1) + one;
        } else {
            root >>= 1;
        }
        one >>= 2;
    }
    std::uint64_t q = root >> 1;                    // root in [2^24, 2^25): 24 bits and a round bit
    if ((root & 1u) != 0 && (op != 0 || (q & 1u) != 0)) ++q;
    std::int32_t p = (unbiased - 23 - shift) / 2 + 1;      // sqrt(v) = q 2^p
    if (q == (std::uint64_t{1} << 24)) {
        q >>= 1;
        ++p;
    }
    const std::uint32_t out = (static_cast<std::uint32_t>(p + 23 + 127) << 23) | (static_cast<std::uint32_t>(q) & 0x7fffffu);
    float r;
    __builtin_memcpy(&r, &out, sizeof r);
    return r;
}
inline double square_root(double v) noexcept { return __builtin_sqrt(v); }   // host checks only

constexpr int pow3(int p) noexcept {
    int r = 1;
    for (int i = 0; i < p; ++i) r *= 3;
    return r;
}

enum RowState : int { kInactive = 0, kTight = 1, kRelaxed = 2 };
enum InputState : int { kFree = 0, kAtLo = 1, kAtHi = 2 };

// Solve A x = r in place (A: n x n, row stride S; r becomes x) by Gaussian elimination with
// partial pivoting. False if a pivot is 0 or not finite (that case cannot be the answer).
template <typename T, int S>
inline bool solve_small(T* A, T* r, int n) noexcept {
    for (int col = 0; col < n; ++col) {
        int piv = col;
        for (int i = col + 1; i < n; ++i)
            if (magnitude(A[i * S + col]) > magnitude(A[piv * S + col])) piv = i;
        if (!(magnitude(A[piv * S + col]) > T(0)) || !is_finite(A[piv * S + col])) return false;
        if (piv != col) {
            for (int j = 0; j < n; ++j) {
                const T t = A[col * S + j];
                A[col * S + j] = A[piv * S + j];
                A[piv * S + j] = t;
            }
            const T t = r[col];
            r[col] = r[piv];
            r[piv] = t;
        }
        for (int i = col + 1; i < n; ++i) {
            const T f = A[i * S + col] / A[col * S + col];
            for (int j = col; j < n; ++j) A[i * S + j] -= f * A[col * S + j];
            r[i] -= f * r[col];
        }
    }
    for (int i = n - 1; i >= 0; --i) {
        T s = r[i];
        for (int j = i + 1; j < n; ++j) s -= A[i * S + j] * r[j];
        r[i] = s / A[i * S + i];
    }
    return true;
}

// g_i = c_i + b_i.u, summed in the order j = 0..M-1.
template <typename T, int M>
inline T row_at(T c, const T* b, const T* u) noexcept {
    T g = c;
    for (int j = 0; j < M; ++j) g += b[j] * u[j];
    return g;
}

// One active-set case: its input (unclipped where the case is wrong) in u, and its largest
// violation of the KKT conditions, each relative to the terms it is computed from, or -1 when
// the case cannot be evaluated.
template <typename T, int K, int M>
inline T evaluate_case(const int* rs, const int* is, const T* c, const T* b, const T* u_nom, const T* lo,
                       const T* hi, T rho, T* u) noexcept {
    int tight[M] = {}, free_in[M] = {}, n_tight = 0, n_free = 0;
    for (int i = 0; i < K; ++i) {
        if (rs[i] != kTight) continue;
        if (n_tight == M) return T(-1);
        tight[n_tight++] = i;
    }
    for (int j = 0; j < M; ++j)
        if (is[j] == kFree) free_in[n_free++] = j;
    if (n_tight > n_free) return T(-1);
    // p = u_nom + rho * (sum of the relaxed rows' gains): the sum first, so opposite gains cancel
    T p[M];
    for (int j = 0; j < M; ++j) {
        T q = T(0);
        for (int i = 0; i < K; ++i)
            if (rs[i] == kRelaxed) q += b[i * M + j];
        p[j] = u_nom[j] + rho * q;
        u[j] = is[j] == kAtLo ? lo[j] : (is[j] == kAtHi ? hi[j] : p[j]);
    }
    // the tight rows' multipliers: sum_s (b_t.b_s over free inputs) lam_s = -g_t(u with free = p)
    T A[M * M] = {}, lam[M] = {};
    for (int al = 0; al < n_tight; ++al) {
        const T* bt = b + tight[al] * M;
        lam[al] = -row_at<T, M>(c[tight[al]], bt, u);
        for (int be = 0; be < n_tight; ++be) {
            T s = T(0);
            for (int f = 0; f < n_free; ++f) s += bt[free_in[f]] * b[tight[be] * M + free_in[f]];
            A[al * M + be] = s;
        }
    }
    if (n_tight > 0 && !solve_small<T, M>(A, lam, n_tight)) return T(-1);
    T w[M];
    for (int j = 0; j < M; ++j) {
        T s = p[j];
        for (int al = 0; al < n_tight; ++al) s += lam[al] * b[tight[al] * M + j];
        w[j] = s;
        if (is[j] == kFree) u[j] = s;
    }
    if (n_tight > 0 && n_tight == n_free) {
        // as many tight rows as free inputs: the free inputs solve the rows themselves (no
        // rounding of rho-sized terms in u); the multipliers above serve the conditions only
        T Bf[M * M] = {}, r[M] = {};
        for (int al = 0; al < n_tight; ++al) {
            const T* bt = b + tight[al] * M;
            T s = c[tight[al]];
            for (int j = 0; j < M; ++j)
                if (is[j] != kFree) s += bt[j] * u[j];
            r[al] = -s;
            for (int f = 0; f < n_free; ++f) Bf[al * M + f] = bt[free_in[f]];
        }
        if (!solve_small<T, M>(Bf, r, n_tight)) return T(-1);
        for (int f = 0; f < n_free; ++f) u[free_in[f]] = r[f];
    }
    // each violation relative to the size of the terms it is computed from (rounding is relative)
    T worst = T(0), size_p = T(1);
    for (int j = 0; j < M; ++j) size_p += magnitude(p[j]);
    for (int al = 0; al < n_tight; ++al) {
        const T v = lam[al] < T(0) ? -lam[al] : (lam[al] > rho ? lam[al] - rho : T(0));
        worst = v / (size_p + magnitude(lam[al])) > worst ? v / (size_p + magnitude(lam[al])) : worst;
    }
    for (int j = 0; j < M; ++j) {
        T v = T(0);
        if (is[j] == kFree) v = u[j] < lo[j] ? lo[j] - u[j] : (u[j] > hi[j] ? u[j] - hi[j] : T(0));
        if (is[j] == kAtLo) v = w[j] > lo[j] ? w[j] - lo[j] : T(0);
        if (is[j] == kAtHi) v = w[j] < hi[j] ? hi[j] - w[j] : T(0);
        v /= T(1) + magnitude(lo[j]) + magnitude(hi[j]) + magnitude(w[j]);
        worst = v > worst ? v : worst;
    }
    for (int i = 0; i < K; ++i) {
        const T g = row_at<T, M>(c[i], b + i * M, u);
        T size = T(1) + magnitude(c[i]);
        for (int j = 0; j < M; ++j) size += magnitude(b[i * M + j] * u[j]);
        const T v = rs[i] == kInactive ? (g < T(0) ? -g : T(0))
                                       : (rs[i] == kRelaxed ? (g > T(0) ? g : T(0)) : magnitude(g));
        worst = v / size > worst ? v / size : worst;
    }
    return is_finite(worst) ? worst : T(-1);
}

// Solve P_rho for rows a (K, margins already taken off: a_i + b_i.u >= 0 is wanted), b (K x M
// row-major); writes u (M) and returns a FilterStatus.
template <typename T, int K, int M>
inline int solve(const T* a, const T* b_in, const T* u_nom, const T* lo, const T* hi, T rho, T* u) noexcept {
    static_assert(K >= 1 && M >= 1 && K <= 8 && M <= 4, "a small problem: 3^K x 3^M cases");
    bool ok = is_finite(rho) && rho > T(0);
    for (int i = 0; i < K; ++i) ok = ok && is_finite(a[i]);
    for (int i = 0; i < K * M; ++i) ok = ok && is_finite(b_in[i]);
    for (int j = 0; j < M; ++j) ok = ok && is_finite(u_nom[j]) && lo[j] <= hi[j] && is_finite(lo[j]) && is_finite(hi[j]);
    if (!ok) {
        for (int j = 0; j < M; ++j) u[j] = clip(is_finite(u_nom[j]) ? u_nom[j] : T(0), lo[j], hi[j]);
        return cbf_filter::kFallback;
    }
    // unit-gain rows (scaled by max |b_ij| first: no overflow of the squares); decided rows
    T c[K], b[K * M];
    int decided[K];      // -1: free to choose, else the RowState it must take
    for (int i = 0; i < K; ++i) {
        T big = T(0);
        for (int j = 0; j < M; ++j) big = magnitude(b_in[i * M + j]) > big ? magnitude(b_in[i * M + j]) : big;
        decided[i] = -1;
        if (!(big > T(0))) {
            c[i] = a[i];
            for (int j = 0; j < M; ++j) b[i * M + j] = T(0);
            decided[i] = a[i] >= T(0) ? kInactive : kRelaxed;
            continue;
        }
        T n2 = T(0);
        for (int j = 0; j < M; ++j) {
            b[i * M + j] = b_in[i * M + j] / big;
            n2 += b[i * M + j] * b[i * M + j];
        }
        n2 = square_root(n2);
        T reach = T(0);
        for (int j = 0; j < M; ++j) {
            b[i * M + j] /= n2;
            const T extent = magnitude(lo[j]) > magnitude(hi[j]) ? magnitude(lo[j]) : magnitude(hi[j]);
            reach += magnitude(b[i * M + j]) * extent;
        }
        c[i] = (a[i] / big) / n2;
        if (!is_finite(c[i]) || (magnitude(c[i]) > T(1e6) && magnitude(c[i]) > reach * T(1.000001)))
            decided[i] = c[i] > T(0) ? kInactive : kRelaxed;
    }
    // the common step: clip(u_nom) satisfies every row
    bool holds = true;
    for (int j = 0; j < M; ++j) u[j] = clip(u_nom[j], lo[j], hi[j]);
    for (int i = 0; i < K; ++i)
        holds = holds && decided[i] != kRelaxed && (decided[i] == kInactive || row_at<T, M>(c[i], b + i * M, u) >= T(0));
    if (holds) return cbf_filter::kOk;

    const T eps = sizeof(T) == sizeof(float) ? T(1.2e-7) : T(2.3e-16);
    const T exact = T(16) * eps;       // a case within rounding of every condition (relative)
    T best = T(-1), best_dist = T(0), trial[M];
    bool done = false;
    for (int rc = 0; rc < pow3(K); ++rc) {
        int rs[K], code = rc;
        bool valid = true, relaxed = false;
        for (int i = 0; i < K; ++i, code /= 3) {
            rs[i] = code % 3;
            valid = valid && (decided[i] == -1 || decided[i] == rs[i]);
            relaxed = relaxed || rs[i] == kRelaxed;
        }
        if (!valid) continue;
        for (int ic = 0; ic < pow3(M); ++ic) {
            int is[M], icode = ic;
            for (int j = 0; j < M; ++j, icode /= 3) is[j] = icode % 3;
            const T v = evaluate_case<T, K, M>(rs, is, c, b, u_nom, lo, hi, rho, trial);
            if (v < T(0)) continue;
            // a case without relaxed rows holds no rho-sized terms: within rounding it is the answer
            done = !relaxed && v <= exact;
            T dist = T(0);
            for (int j = 0; j < M; ++j) dist += (trial[j] - u_nom[j]) * (trial[j] - u_nom[j]);
            // several relaxed cases within rounding: the total violation ties at rho * eps, and
            // the nearest input is P_rho's (its quadratic term breaks the tie)
            const bool better = best < T(0) || (v <= exact ? (best > exact || dist < best_dist) : v < best);
            if (!done && !better) continue;
            best = v;
            best_dist = dist;
            for (int j = 0; j < M; ++j) u[j] = clip(trial[j], lo[j], hi[j]);
            if (done) break;
        }
        if (done) break;
    }
    if (best < T(0)) {
        for (int j = 0; j < M; ++j) u[j] = clip(u_nom[j], lo[j], hi[j]);
        return cbf_filter::kSolverError;
    }
    for (int i = 0; i < K; ++i) {
        const T g = row_at<T, M>(c[i], b + i * M, u);
        T size = T(1) + magnitude(c[i]);
        for (int j = 0; j < M; ++j) size += magnitude(b[i * M + j] * u[j]);
        if (decided[i] == kRelaxed || g < -exact * size) return cbf_filter::kSlackActive;
    }
    return cbf_filter::kOk;
}

}  // namespace cbf_faces

#endif  // CBF_FACE_FILTER_HPP
