// batch.cpp: the firmware's closed loop over a batch of initial states, as a host shared
// library (cbfsim/engine.py). It runs the very step.hpp every port runs, built with the host
// twin's flags, so each trajectory is the host twin's bit for bit. The caller owns every
// array (no heap); runs are independent and simulated one after another. Only the four
// cbf_engine_* entries are exported: every build holds its own barrier::, so two engines
// loaded in one process never share an inline function or variable.
#include <cstdint>

#include "step.hpp"

namespace {
constexpr int N = cbf_app::N;
constexpr int M = cbf_app::M;
}

#define CBF_ENGINE_API __attribute__((visibility("default")))

extern "C" {

CBF_ENGINE_API int cbf_engine_abi() { return 1; }

// n, m and the barrier order of this build.
CBF_ENGINE_API int cbf_engine_dims(int* n, int* m) {
    *n = N;
    *m = M;
    return cbf_config::kOrder;
}

// B runs of T control periods from x0 (B x N). Records, like the firmware's S lines:
// xs (B x (T+1) x N), u_nom and u (B x T x M), h (B x T) and the filter status (B x T).
CBF_ENGINE_API void cbf_engine_run(int B, int T, const float* x0, float* xs, float* u_nom, float* u, float* h,
                    std::int8_t* status) {
    const float hstep = cbf_config::kDt / static_cast<float>(cbf_config::kSubsteps);
    for (int b = 0; b < B; ++b) {
        float x[N], last_safe[M];
        for (int i = 0; i < N; ++i) x[i] = x0[b * N + i];
        for (int j = 0; j < M; ++j) last_safe[j] = cbf_config::kSafeInput[j];
        float* xs_b = xs + static_cast<long>(b) * (T + 1) * N;
        for (int k = 0; k < T; ++k) {
            const long at = static_cast<long>(b) * T + k;
            for (int i = 0; i < N; ++i) xs_b[k * N + i] = x[i];
            float hk = 0.0f;
            status[at] = static_cast<std::int8_t>(cbf_app::control(x, u_nom + at * M, u + at * M, hk, last_safe));
            h[at] = hk;
            for (std::uint32_t s = 0; s < cbf_config::kSubsteps; ++s) cbf_app::rk4_step(x, u + at * M, hstep);
        }
        for (int i = 0; i < N; ++i) xs_b[T * N + i] = x[i];
    }
}

// The floor for the benchmarks: the barrier call alone (with f, G and the drift products
// it needs) at B states, terms out (B x kTerms).
CBF_ENGINE_API void cbf_engine_barrier_only(int B, const float* x, float* terms) {
    for (int b = 0; b < B; ++b) cbf_app::barrier_terms(x + b * N, terms + b * cbf_app::kTerms);
}

}  // extern "C"
