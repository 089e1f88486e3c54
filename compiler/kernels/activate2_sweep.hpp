// compiler/kernels/activate2_sweep.hpp: activate2, hyper-dual activation for the sweep layout (order 2)
// Part of every generated header that needs it (compiler/emit_cpp.py inlines the text below the
// marker into namespace <model>::detail, after the math of compiler/cppmath.py). Compiled on its
// own by tests/test_kernels.py; the block before the marker supplies the context the generated
// header provides (the scalar type and the vector-unit flag) and is not inlined.
#include <cstddef>
using scalar = float;
constexpr bool kVectorUnit = true;
// ---- kernel text: the emitter inlines everything below this line into the generated header ----
// activate2: hyper-dual numbers through sigma, in place. Channels: 0 real a, 1 the shared
// eps1 tangent t_f, 2..M+1 the eps2 tangents of G_1..G_M, M+2 the eps12 part of the
// (f, f) seed, M+3.. those of the (f, G_j) seeds. Paper Lemma 3(ii):
// u <- sigma''(a) t_f w + sigma'(a) u (with w = t_f for the (f, f) seed), then t <- sigma'(a) t.
// Vector targets: one loop per operation over the neurons (sigma', sigma'' t_f in local
// arrays), so they vectorize; scalar cores: one neuron at a time. Same operations, same bits.
template <int N, int M, typename Act>
inline void activate2(scalar* __restrict buf) noexcept {
    if constexpr (kVectorUnit) {
        scalar d1[N];
        scalar d2tf[N];
        for (int j = 0; j < N; ++j) buf[j] = Act::eval2(buf[j], d1[j], d2tf[j]);
        for (int j = 0; j < N; ++j) d2tf[j] *= buf[N + j];
        for (int j = 0; j < N; ++j) buf[(M + 2) * N + j] = d2tf[j] * buf[N + j] + d1[j] * buf[(M + 2) * N + j];
        for (int q = 1; q <= M; ++q)
            for (int j = 0; j < N; ++j)
                buf[(M + 2 + q) * N + j] = d2tf[j] * buf[(1 + q) * N + j] + d1[j] * buf[(M + 2 + q) * N + j];
        for (int c = 1; c <= M + 1; ++c)
            for (int j = 0; j < N; ++j) buf[c * N + j] *= d1[j];
    } else {
        for (int j = 0; j < N; ++j) {
            scalar d1;
            scalar d2;
            buf[j] = Act::eval2(buf[j], d1, d2);
            const scalar d2tf = d2 * buf[N + j];
            buf[(M + 2) * N + j] = d2tf * buf[N + j] + d1 * buf[(M + 2) * N + j];
            for (int q = 1; q <= M; ++q)
                buf[(M + 2 + q) * N + j] = d2tf * buf[(1 + q) * N + j] + d1 * buf[(M + 2 + q) * N + j];
            for (int c = 1; c <= M + 1; ++c) buf[c * N + j] *= d1;
        }
    }
}
