// compiler/kernels/layers.hpp: dense layers (streamed, register-blocked, fused with the output) and activate (order 1)
// Part of every generated header that needs it (compiler/emit_cpp.py inlines the text below the
// marker into namespace <model>::detail, after the math of compiler/cppmath.py). Compiled on its
// own by tests/test_kernels.py; the block before the marker supplies the context the generated
// header provides (the scalar type and the vector-unit flag) and is not inlined.
#include <cstddef>
#include <cstdint>
using scalar = float;
constexpr bool kVectorUnit = true;
// ---- kernel text: the emitter inlines everything below this line into the generated header ----
// Targets with a vector unit (kVectorUnit, defined with the math above) get loops shaped for
// it (blocks of neurons, one operation per loop); scalar cores (Cortex-M, Xtensa) get small
// blocks and one neuron at a time, keeping the stack small. Every sum and product is the same
// in both shapes: results are bit-identical.

// all_finite: false if any entry is NaN or +-Inf. On vector targets on the bits, with no branch
// and no float compare per entry (one OR over the array, which vectorizes): an entry is NaN or
// Inf exactly when its exponent field is all ones, and then adding one unit of the exponent's
// lowest bit to that field carries into the sign bit; for every finite entry it stays below it.
// Both forms give the same answer.
template <int Bytes>
struct FloatWord;
template <>
struct FloatWord<4> {
    using type = std::uint32_t;
    static constexpr type kExp = 0x7f800000u, kExpOne = 0x00800000u, kTop = 0x80000000u;
};
template <>
struct FloatWord<8> {
    using type = std::uint64_t;
    static constexpr type kExp = 0x7ff0000000000000u, kExpOne = 0x0010000000000000u, kTop = 0x8000000000000000u;
};
inline bool all_finite(const scalar* v, int count) noexcept {
    if constexpr (kVectorUnit) {
        using W = FloatWord<sizeof(scalar)>;
        typename W::type acc = 0u;
        for (int i = 0; i < count; ++i) {
            typename W::type u = 0u;
            __builtin_memcpy(&u, &v[i], sizeof u);
            acc |= (u & W::kExp) + W::kExpOne;
        }
        return (acc & W::kTop) == 0u;
    } else {   // scalar cores: one compare per entry (v - v is 0 only for finite v), stop at the first
        bool ok = true;
        for (int i = 0; i < count; ++i) ok = ok && (v[i] - v[i] == scalar(0));
        return ok;
    }
}

// dense: one affine layer on C channels. Channel 0 is the real path (gets the bias),
// channels 1..C-1 are tangents (no bias); src(c, k) reads channel c of input k (from the
// workspace, or for the first layer straight from the caller's x, f, G). Output is
// channel-major: out[c*Out + j]. Weights are column-major (wt[k*Out + j] = W[j][k]) so
// each weight column is read once for all C channels, and the loop over j is an axpy
// that vectorizes without reassociating any sum: every output is accumulated in the
// order k = 0..In-1 on every target and at every optimization level. Outputs are done
// in blocks of B whose C x B accumulators fit in vector registers.
template <int In, int Out, int C, int B, typename Src>
inline void dense_block(const Src& src, const scalar* __restrict wt, const scalar* __restrict b,
                        scalar* __restrict out) noexcept {
    static_assert(Out % B == 0, "dense_block needs whole blocks");
    for (int j0 = 0; j0 < Out; j0 += B) {
        scalar acc[C][B];
        for (int j = 0; j < B; ++j) acc[0][j] = b[j0 + j];
        for (int c = 1; c < C; ++c)
            for (int j = 0; j < B; ++j) acc[c][j] = scalar(0);
        for (int k = 0; k < In; ++k) {
            const scalar* __restrict w = wt + k * Out + j0;
            for (int c = 0; c < C; ++c) {
                const scalar s = src(c, k);
                for (int j = 0; j < B; ++j) acc[c][j] += w[j] * s;
            }
        }
        for (int c = 0; c < C; ++c)
            for (int j = 0; j < B; ++j) out[c * Out + j0 + j] = acc[c][j];
    }
}

// dense_stream: the same layer accumulating straight into out, for the first layer (its
// input is the caller's x, f, G with In = n small), and for the output of a network without
// hidden layers (otherwise the output layer is fused into dense_fused).
template <int In, int Out, int C, typename Src>
inline void dense_stream(const Src& src, const scalar* __restrict wt, const scalar* __restrict b,
                         scalar* __restrict out) noexcept {
    {   // k = 0 starts each sum, b + w s (channel 0) or 0 + w s (tangents): no zero fill, no reload
        const scalar s0 = src(0, 0);
        for (int j = 0; j < Out; ++j) out[j] = b[j] + wt[j] * s0;
        for (int c = 1; c < C; ++c) {
            const scalar s = src(c, 0);
            scalar* __restrict o = out + c * Out;
            for (int j = 0; j < Out; ++j) o[j] = scalar(0) + wt[j] * s;
        }
    }
    for (int k = 1; k < In; ++k) {
        const scalar* __restrict w = wt + k * Out;
        for (int c = 0; c < C; ++c) {
            const scalar s = src(c, k);
            scalar* __restrict o = out + c * Out;
            for (int j = 0; j < Out; ++j) o[j] += w[j] * s;
        }
    }
}

// Register blocking pays where C x 32 float accumulators fit in vector registers (x86 with
// AVX: sixteen 8-float registers); on cores without SIMD (Cortex-M, Xtensa) they would only
// spill to the stack, so those stream. Either kernel gives the same bits.
#if defined(__AVX__)
constexpr bool kRegisterBlocking = sizeof(scalar) == 4;
#else
constexpr bool kRegisterBlocking = false;
#endif

// dense_fused: the last hidden layer and the scalar output layer in one pass, so the last
// hidden layer needs no workspace. Its outputs are made B at a time in a local block
// (channel-major, blk[c*B + j]), activated in place by act(Int<B>{}, blk), and each is added
// into out[c] = b_out + sum_j w_out[j] a_c[j] at once. Every sum runs in the same order as
// in an unfused layer-by-layer pass (k = 0..In-1 inside a neuron, j = 0..Mid-1 into out), so
// B never changes a bit; B is the block that fits the target's vector registers.
template <int N>
struct Int {
    static constexpr int value = N;
};

// Block size, measured: on x86-64 (callgrind and wall time, g++ 12, -O2 and -O3 -march=native,
// with and without AVX-512) 32-wide blocks beat 16, 8, 4 and 1 for every channel count. On
// Cortex-M4F (QEMU instruction counts, -O2) pairs of neurons with the channel loops unrolled
// cost 19,000 / 46,520 instructions for the bicycle / Van der Pol sweeps against 23,520 /
// 58,920 one at a time and 18,200 / 41,600 four at a time, whose blocks need twice the stack.
template <int Mid>
constexpr int fused_block() noexcept {
    if (kVectorUnit)
        for (int b = 32; b > 1; b /= 2)
            if (Mid % b == 0) return b;
    return Mid % 2 == 0 ? 2 : 1;
}

template <int In, int Mid, int C, typename Src, typename Act>
inline void dense_fused(const Src& src, const scalar* __restrict wt, const scalar* __restrict b,
                        const scalar* __restrict w_out, const scalar* __restrict b_out,
                        scalar* __restrict out, const Act& act) noexcept {
    constexpr int B = fused_block<Mid>();
    static_assert(Mid % B == 0, "dense_fused needs whole blocks");
    scalar sum[C];
    sum[0] = b_out[0];
    for (int c = 1; c < C; ++c) sum[c] = scalar(0);
    for (int j0 = 0; j0 < Mid; j0 += B) {
        scalar blk[C * B];
        for (int j = 0; j < B; ++j) blk[j] = b[j0 + j];
        for (int j = B; j < C * B; ++j) blk[j] = scalar(0);
        for (int k = 0; k < In; ++k) {
            const scalar* __restrict w = wt + k * Mid + j0;
#pragma GCC unroll 16
            for (int c = 0; c < C; ++c) {
                const scalar s = src(c, k);
#pragma GCC unroll 16
                for (int j = 0; j < B; ++j) blk[c * B + j] += w[j] * s;
            }
        }
        act(Int<B>{}, blk);
        for (int j = 0; j < B; ++j)
#pragma GCC unroll 16
            for (int c = 0; c < C; ++c) sum[c] += w_out[j0 + j] * blk[c * B + j];
    }
    for (int c = 0; c < C; ++c) out[c] = sum[c];
}

// Channels<In>: reads a layer input held channel-major in the workspace.
template <int In>
struct Channels {
    const scalar* p;
    scalar operator()(int c, int k) const noexcept { return p[c * In + k]; }
};

// activate: dual numbers through sigma, in place: a <- sigma(a), t <- sigma'(a) t.
// On vector targets sigma' goes through a local array so both loops run over j and
// vectorize; scalar cores do one neuron at a time and need no such array on the stack.
template <int N, int C, typename Act>
inline void activate(scalar* __restrict buf) noexcept {
    if constexpr (kVectorUnit) {
        scalar d1[N];
        for (int j = 0; j < N; ++j) buf[j] = Act::eval(buf[j], d1[j]);
        for (int c = 1; c < C; ++c)
            for (int j = 0; j < N; ++j) buf[c * N + j] *= d1[j];
    } else {
        for (int j = 0; j < N; ++j) {
            scalar d1;
            buf[j] = Act::eval(buf[j], d1);
            for (int c = 1; c < C; ++c) buf[c * N + j] *= d1;
        }
    }
}
