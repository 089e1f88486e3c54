// compiler/kernels/activate2_pair.hpp: activate_pair, hyper-dual activation for the min_memory layout (order 2)
// Part of every generated header that needs it (compiler/emit_cpp.py inlines the text below the
// marker into namespace <model>::detail, after the math of compiler/cppmath.py). Compiled on its
// own by tests/test_kernels.py; the block before the marker supplies the context the generated
// header provides (the scalar type and the vector-unit flag) and is not inlined.
#include <cstddef>
using scalar = float;
constexpr bool kVectorUnit = true;
// ---- kernel text: the emitter inlines everything below this line into the generated header ----
// activate_pair: one hyper-dual number per neuron (min_memory layout), in place. Channels:
// 0 real a, 1 eps1 tangent t_f, 2 eps2 tangent w, 3 eps12 part u:
// u <- sigma''(a) t_f w + sigma'(a) u, then t_f, w <- sigma'(a) t_f, sigma'(a) w (same
// operations, in the same order, as activate2: both layouts give the same bits).
template <int N, typename Act>
inline void activate_pair(scalar* __restrict buf) noexcept {
    for (int j = 0; j < N; ++j) {
        scalar d1;
        scalar d2;
        const scalar y = Act::eval2(buf[j], d1, d2);
        const scalar d2tf = d2 * buf[N + j];
        buf[3 * N + j] = d2tf * buf[2 * N + j] + d1 * buf[3 * N + j];
        buf[N + j] *= d1;
        buf[2 * N + j] *= d1;
        buf[j] = y;
    }
}
