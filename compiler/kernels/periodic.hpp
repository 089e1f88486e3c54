// compiler/kernels/periodic.hpp: the periodic input embedding (sin, cos of wrapped coordinates) on dual numbers
// Part of every generated header whose model starts with a periodic embedding (compiler/emit_cpp.py
// inlines the text below the marker into namespace <model>::detail, after the math of
// compiler/cppmath.py). Compiled on its own by tests/test_kernels.py; the block before the marker
// supplies the context the generated header provides (the scalar type and m_sincos) and is not inlined.
#include <cstddef>
using scalar = float;
inline void m_sincos(scalar x, scalar& s, scalar& c) noexcept;
// ---- kernel text: the emitter inlines everything below this line into the generated header ----
// The embedding replaces state coordinate i of period P by the pair (sin w x_i, cos w x_i),
// w = 2 pi / P, in place; the other coordinates pass through, so the first dense layer reads
// E = N + K columns. On a seed x + t eps (order 1), with s = sin w x, c = cos w x:
//     sin -> s + (w c) t eps,      cos -> c - (w s) t eps,
// and on a hyper-dual seed x + t1 eps1 + t2 eps2 + u eps12 (order 2; u carries f'(x) f or
// f'(x) G_j) the eps12 parts are phi''(x) t1 t2 + phi'(x) u:
//     sin: -w^2 s t1 t2 + w c u,   cos: -w^2 c t1 t2 - w s u.
// sin and cos are evaluated once per state (embed_trig, one m_sincos per periodic coordinate)
// and shared by every tangent direction; the embed* kernels then only multiply. Which
// coordinate is periodic is fixed at compile time (slot[i] >= 0), so no branch depends on data.

// embed_trig: J[2q], J[2q + 1] = sin, cos(freq[q] * x[index[q]]) for the K periodic coordinates.
template <int K>
inline void embed_trig(const scalar* __restrict x, const int* __restrict index, const scalar* __restrict freq,
                       scalar* __restrict J) noexcept {
    for (int q = 0; q < K; ++q) m_sincos(freq[q] * x[index[q]], J[2 * q], J[2 * q + 1]);
}

// embed1 (order 1): the embedded seed, C channels x E columns channel-major (out[c*E + j]),
// from src(c, i): channel 0 the state, channels 1..C-1 its tangents. slot[i] = q >= 0 makes
// coordinate i the columns (sin, cos) from J[2q], J[2q + 1] and frequency freq[q]; slot[i] = -1
// copies it.
template <int N, int E, int C, typename Src>
inline void embed1(const Src& src, const int* __restrict slot, const scalar* __restrict freq,
                   const scalar* __restrict J, scalar* __restrict out) noexcept {
    int j = 0;
    for (int i = 0; i < N; ++i) {
        const int q = slot[i];
        if (q < 0) {
            for (int c = 0; c < C; ++c) out[c * E + j] = src(c, i);
            j += 1;
            continue;
        }
        const scalar s = J[2 * q];
        const scalar co = J[2 * q + 1];
        const scalar ds = freq[q] * co;
        const scalar dc = -(freq[q] * s);
        out[j] = s;
        out[j + 1] = co;
        for (int c = 1; c < C; ++c) {
            const scalar t = src(c, i);
            out[c * E + j] = ds * t;
            out[c * E + j + 1] = dc * t;
        }
        j += 2;
    }
}

// embed2 (order 2, sweep layout, M inputs): channels as activate2's (0 real, 1 the shared eps1
// tangent t_f, 2..M+1 the eps2 tangents of G_1..G_M, M+2 the eps12 part of the (f, f) seed,
// M+3.. those of the (f, G_j) seeds). Pair p (0: f, j + 1: G_j) has eps2 tangent t_f (p = 0)
// or channel 1 + p, and eps12 channel M + 2 + p.
template <int N, int E, int M, typename Src>
inline void embed2(const Src& src, const int* __restrict slot, const scalar* __restrict freq,
                   const scalar* __restrict J, scalar* __restrict out) noexcept {
    constexpr int C = 2 * M + 3;
    int j = 0;
    for (int i = 0; i < N; ++i) {
        const int q = slot[i];
        if (q < 0) {
            for (int c = 0; c < C; ++c) out[c * E + j] = src(c, i);
            j += 1;
            continue;
        }
        const scalar s = J[2 * q];
        const scalar co = J[2 * q + 1];
        const scalar w = freq[q];
        const scalar ww = w * w;
        const scalar d1s = w * co;
        const scalar d1c = -(w * s);
        const scalar d2s = -(ww * s);
        const scalar d2c = -(ww * co);
        const scalar tf = src(1, i);
        out[j] = s;
        out[j + 1] = co;
        for (int p = 0; p <= M; ++p) {
            const scalar t2 = p == 0 ? tf : src(1 + p, i);
            const scalar u = src(M + 2 + p, i);
            out[(M + 2 + p) * E + j] = d2s * tf * t2 + d1s * u;
            out[(M + 2 + p) * E + j + 1] = d2c * tf * t2 + d1c * u;
        }
        for (int c = 1; c <= M + 1; ++c) {
            const scalar t = src(c, i);
            out[c * E + j] = d1s * t;
            out[c * E + j + 1] = d1c * t;
        }
        j += 2;
    }
}

// embed_pair (order 2, min_memory layout): one hyper-dual number per column, channels 0 real,
// 1 eps1 (t1 = f), 2 eps2 (t2), 3 eps12 (u), as activate_pair's.
template <int N, int E, typename Src>
inline void embed_pair(const Src& src, const int* __restrict slot, const scalar* __restrict freq,
                       const scalar* __restrict J, scalar* __restrict out) noexcept {
    int j = 0;
    for (int i = 0; i < N; ++i) {
        const int q = slot[i];
        if (q < 0) {
            for (int c = 0; c < 4; ++c) out[c * E + j] = src(c, i);
            j += 1;
            continue;
        }
        const scalar s = J[2 * q];
        const scalar co = J[2 * q + 1];
        const scalar w = freq[q];
        const scalar ww = w * w;
        const scalar d1s = w * co;
        const scalar d1c = -(w * s);
        const scalar d2s = -(ww * s);
        const scalar d2c = -(ww * co);
        const scalar t1 = src(1, i);
        const scalar t2 = src(2, i);
        const scalar u = src(3, i);
        out[j] = s;
        out[j + 1] = co;
        out[E + j] = d1s * t1;
        out[E + j + 1] = d1c * t1;
        out[2 * E + j] = d1s * t2;
        out[2 * E + j + 1] = d1c * t2;
        out[3 * E + j] = d2s * t1 * t2 + d1s * u;
        out[3 * E + j + 1] = d2c * t1 * t2 + d1c * u;
        j += 2;
    }
}
