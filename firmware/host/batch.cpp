// batch.cpp: the firmware's closed loop over a batch of initial states, as a host shared
// library (cbfsim/engine.py). It runs the very step.hpp every port runs, built with the host
// twin's flags, so each trajectory is the host twin's bit for bit. The caller owns every
// array (no heap); runs are independent and simulated one after another. A run whose state is
// not finite or leaves |x_i| <= bound stops at that control instant and reports it (its fate,
// cbfsim/fate.py: "faulted"), as the numpy engine does. Only the four cbf_engine_* entries are exported: every build holds its own barrier::, so two engines
// loaded in one process never share an inline function or variable.
#include <cstdint>

#include "rng.hpp"
#include "step.hpp"

namespace {
constexpr int N = cbf_app::N;
constexpr int M = cbf_app::M;
constexpr int kMaxDelay = 64;
enum Disturbance : int { kNone = 0, kConstant = 1, kUniform = 2, kWorstCase = 3 };

// A state the run cannot go on from: some x_i not finite or |x_i| > bound (NaN fails both
// comparisons, so it is caught by the same test).
inline bool diverged(const float* x, float bound) noexcept {
    for (int i = 0; i < N; ++i) {
        if (!(x[i] <= bound && x[i] >= -bound)) return true;
    }
    return false;
}

// dh/dx_i through the barrier's own call: L_f h with f = e_i (G and the drift products zero).
inline void gradient(const float* x, float* grad) noexcept {
    float e[N], G[N * M] = {}, Dff[N] = {}, DfG[N * M] = {}, terms[cbf_app::kTerms];
    for (int i = 0; i < N; ++i) {
        for (int j = 0; j < N; ++j) e[j] = j == i ? 1.0f : 0.0f;
        cbf_config::barrier_call(x, e, G, Dff, DfG, terms);
        grad[i] = terms[1];
    }
}

// The disturbance held over period k (cbfsim/perturb.py, the same rules and draws).
inline void disturbance(int kind, const float* bound, const float* value, std::uint64_t seed, int k,
                        const float* x, float* d) noexcept {
    float grad[N];
    if (kind == kWorstCase) gradient(x, grad);
    for (int i = 0; i < N; ++i) {
        if (kind == kConstant) {
            d[i] = value[i];
        } else if (kind == kUniform) {
            d[i] = static_cast<float>(static_cast<double>(bound[i]) *
                                      cbf_rng::counter_uniform(seed, static_cast<std::uint64_t>(k),
                                                               cbf_rng::kDisturbanceLane + i));
        } else {
            d[i] = grad[i] > 0.0f ? -bound[i] : (grad[i] < 0.0f ? bound[i] : 0.0f);
        }
    }
}
}  // namespace

#define CBF_ENGINE_API __attribute__((visibility("default")))

extern "C" {

CBF_ENGINE_API int cbf_engine_abi() { return 2; }

// n, m and the barrier order of this build.
CBF_ENGINE_API int cbf_engine_dims(int* n, int* m) {
    *n = N;
    *m = M;
    return cbf_config::kOrder;
}

// B runs of T control periods from x0 (B x N). Records, like the firmware's S lines:
// xs (B x (T+1) x N), u_nom and u (B x T x M; u is the input applied), h (B x T, at the true
// state) and the filter status (B x T). Perturbations (cbfsim/perturb.py): run b draws with
// seeds[b]; noise (N) on the state the controller and filter see; a disturbance of kind
// dist_kind (0 none, 1 constant dist_value, 2 uniform in +-dist_bound, 3 worst case along
// -grad h) held over each period; the filter output applied delay periods later (0..64; the
// box point nearest 0 before). Without them this is the firmware's loop, bit for bit.
// fault_step (B): the control instant 0..T at which run b's state was not finite or beyond
// +-bound (the run stopped there: xs holds that state, later entries are left unwritten), or
// T + 1 when it ran to the end.
CBF_ENGINE_API int cbf_engine_run(int B, int T, const float* x0, const std::uint64_t* seeds, const float* noise,
                                  int dist_kind, const float* dist_bound, const float* dist_value, int delay,
                                  float bound, float* xs, float* u_nom, float* u, float* h, std::int8_t* status,
                                  std::int32_t* fault_step) {
    if (delay < 0 || delay > kMaxDelay || dist_kind < kNone || dist_kind > kWorstCase) return 1;
    bool noisy = false;
    for (int i = 0; i < N; ++i) noisy = noisy || noise[i] != 0.0f;
    const float hstep = cbf_config::kDt / static_cast<float>(cbf_config::kSubsteps);
    for (int b = 0; b < B; ++b) {
        float x[N], seen[N], last_safe[M], d[N], out[M], ring[kMaxDelay + 1][M];
        for (int i = 0; i < N; ++i) x[i] = x0[b * N + i];
        for (int j = 0; j < M; ++j) last_safe[j] = cbf_config::kSafeInput[j];
        float* xs_b = xs + static_cast<long>(b) * (T + 1) * N;
        fault_step[b] = T + 1;
        for (int k = 0; k < T; ++k) {
            const long at = static_cast<long>(b) * T + k;
            if (diverged(x, bound)) {
                for (int i = 0; i < N; ++i) xs_b[k * N + i] = x[i];
                fault_step[b] = k;
                break;
            }
            for (int i = 0; i < N; ++i) {
                xs_b[k * N + i] = x[i];
                seen[i] = noisy ? x[i] + static_cast<float>(static_cast<double>(noise[i]) *
                                      cbf_rng::counter_uniform(seeds[b], static_cast<std::uint64_t>(k),
                                                               cbf_rng::kNoiseLane + i))
                                : x[i];
            }
            float hk = 0.0f;
            status[at] = static_cast<std::int8_t>(cbf_app::control(seen, u_nom + at * M, out, hk, last_safe));
            if (noisy) {
                float terms[cbf_app::kTerms];
                cbf_app::barrier_terms(x, terms);
                hk = terms[0];                          // safety is judged at the true state
            }
            h[at] = hk;
            float* applied = u + at * M;
            for (int j = 0; j < M; ++j) ring[k % (delay + 1)][j] = out[j];
            for (int j = 0; j < M; ++j) {
                applied[j] = k >= delay ? ring[(k - delay) % (delay + 1)][j]
                                        : cbf_filter::clip(0.0f, cbf_config::plant::kUMin[j], cbf_config::plant::kUMax[j]);
            }
            if (dist_kind != kNone) disturbance(dist_kind, dist_bound, dist_value, seeds[b], k, x, d);
            for (std::uint32_t s = 0; s < cbf_config::kSubsteps; ++s)
                cbf_app::rk4_step(x, applied, hstep, dist_kind != kNone ? d : nullptr);
            cbf_app::wrap_periodic(x);
        }
        if (fault_step[b] <= T) continue;
        for (int i = 0; i < N; ++i) xs_b[T * N + i] = x[i];
        if (diverged(x, bound)) fault_step[b] = T;
    }
    return 0;
}

// The floor for the benchmarks: the barrier call alone (with f, G and the drift products
// it needs) at B states, terms out (B x kTerms).
CBF_ENGINE_API void cbf_engine_barrier_only(int B, const float* x, float* terms) {
    for (int b = 0; b < B; ++b) cbf_app::barrier_terms(x + b * N, terms + b * cbf_app::kTerms);
}

}  // extern "C"
