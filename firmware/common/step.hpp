// step.hpp: one control step of the closed loop, written once for every port and for the
// host's compiled batch engine: barrier terms, the filter row, the fault policy, the plant's
// xdot and classical RK4 with the input held. Includes only cbf_config.hpp (the generated
// barrier, plant and run constants) and filter.hpp (plus qp_filter.hpp when cbf_config.hpp
// defines CBF_ROWS > 1, face_filter.hpp when it defines CBF_FACES > 0): no port, no printing,
// no heap, no libm.
#ifndef CBF_STEP_HPP
#define CBF_STEP_HPP

#include <cstddef>
#include <cstdint>

#include "cbf_config.hpp"
#include "filter.hpp"
#if defined(CBF_ROWS) && CBF_ROWS > 1
#include "qp_filter.hpp"
#endif
#if defined(CBF_FACES) && CBF_FACES > 0
#include "face_filter.hpp"
#endif

namespace cbf_app {

namespace cfg = ::cbf_config;
namespace plant = ::cbf_config::plant;

constexpr int N = plant::kStateDim;
constexpr int M = plant::kInputDim;
constexpr int kTerms = cfg::kOrder == 1 ? 2 + M : 3 + 2 * M;
static_assert(N == cfg::barrier::kStateDim && M == cfg::barrier::kInputDim,
              "barrier and plant dimensions differ");
static_assert(sizeof(cfg::barrier::scalar) == sizeof(float), "the firmware runs float32 barriers");

// f'(x) f and f'(x) G (column by column), the extra seeds of the second-order sweep.
inline void drift_products(const float* x, const float* f, const float* G, float* Dff, float* DfG) noexcept {
    plant::df(x, f, Dff);
    for (int j = 0; j < M; ++j) {
        float col[N], dcol[N];
        for (int i = 0; i < N; ++i) col[i] = G[i * M + j];
        plant::df(x, col, dcol);
        for (int i = 0; i < N; ++i) DfG[i * M + j] = dcol[i];
    }
}

// Barrier terms at x: [h, L_f h, L_G h (m)] and, for order 2, [L_f^2 h, L_G L_f h (m)].
inline int barrier_terms(const float* x, float* terms) noexcept {
    float f[N], G[N * M], Dff[N] = {}, DfG[N * M] = {};
    plant::f(x, f);
    plant::G(x, G);
    if (cfg::kOrder == 2) drift_products(x, f, G, Dff, DfG);
    return cfg::barrier_call(x, f, G, Dff, DfG, terms);
}

// The filter's row a + b.u >= 0 with linear class-K functions:
//   order 1: a = L_f h + alpha1 h,  b = L_G h
//   order 2: a = L_f^2 h + alpha1'(h) L_f h + alpha2 (L_f h + alpha1 h),  b = L_G L_f h
inline float cbf_row(const float* t, float* b) noexcept {
    const float h = t[0];
    const float lf = t[1];
    if (cfg::kOrder == 1) {
        for (int j = 0; j < M; ++j) b[j] = t[2 + j];
        return lf + cfg::kAlpha1 * h;
    }
    for (int j = 0; j < M; ++j) b[j] = t[3 + M + j];
    const float lf2 = t[2 + M];
    return lf2 + cfg::kAlpha1 * lf + cfg::kAlpha2 * (lf + cfg::kAlpha1 * h);
}

// The fault policy's input (cbfsim/filters/fallback.py, the same rules): hold the last
// input returned with kOk (kSafeInput before the first), the backup controller clipped to
// the box (kSafeInput where it is not finite), or kSafeInput.
inline void fallback_input(const float* x, const float* last_safe, float* u) noexcept {
    if (cfg::kFallbackKind == cbf_filter::kHold) {
        for (int j = 0; j < M; ++j) u[j] = last_safe[j];
        return;
    }
    if (cfg::kFallbackKind != cbf_filter::kController) {
        for (int j = 0; j < M; ++j) u[j] = cfg::kSafeInput[j];
        return;
    }
    cfg::fallback_controller(x, u);
    bool finite = true;
    for (int j = 0; j < M; ++j) finite = finite && cbf_filter::is_finite(u[j]);
    for (int j = 0; j < M; ++j) u[j] = finite ? cbf_filter::clip(u[j], plant::kUMin[j], plant::kUMax[j]) : cfg::kSafeInput[j];
}

// The fault policy on a filter status: the policy's input on kFallback, and the input of every
// kOk step remembered in last_safe. Returns the status.
inline int apply_policy(const float* x, int status, float* u, float* last_safe) noexcept {
    if (status == cbf_filter::kFallback) {
        fallback_input(x, last_safe, u);
    } else if (status == cbf_filter::kOk) {
        for (int j = 0; j < M; ++j) last_safe[j] = u[j];
    }
    return status;
}

#if (!defined(CBF_ROWS) || CBF_ROWS == 1) && !(defined(CBF_FACES) && CBF_FACES > 0)
// One control step: nominal input, barrier, filter (row with margin margin_at(x)), fault policy.
// last_safe holds the input of the last kOk step. Returns the filter status.
inline int control(const float* x, float* u_nom, float* u, float& h, float* last_safe) noexcept {
    float terms[kTerms], b[M];
    cfg::nominal(x, u_nom);
    const int err = barrier_terms(x, terms);
    h = terms[0];
    const float a = cbf_row(terms, b);
    int status = cbf_filter::project<float, M>(a, b, u_nom, plant::kUMin, plant::kUMax, cfg::margin_at(x), u);
    if (err != 0) status = cbf_filter::kFallback;   // (the barrier's outputs are NaN then anyway)
    return apply_policy(x, status, u, last_safe);
}
#elif defined(CBF_FACES) && CBF_FACES > 0
// The barrier's row and the rows of the domain faces the certificate enforces (cbf_config.hpp:
// kFaceCoord ..., from training/certify/faces.py), filtered exactly (face_filter.hpp).
constexpr int kFaceRows = cfg::kFaceRows;

// Face r's row a + b.u >= 0 with its margin taken off, as faces.py's Face.row computes it:
//   c(x) = s (bound - x_i),   a = -s f_i(x) + gamma c(x) - margin,   b = -s G_i(x)
inline void face_rows(const float* x, float* a, float* b) noexcept {
    float f[N], G[N * M];
    plant::f(x, f);
    plant::G(x, G);
    for (int r = 0; r < kFaceRows; ++r) {
        const int i = cfg::kFaceCoord[r];
        const float s = cfg::kFaceSide[r];
        a[r] = -s * f[i] + cfg::kFaceGamma[r] * (s * (cfg::kFaceBound[r] - x[i])) - cfg::kFaceMargin[r];
        for (int j = 0; j < M; ++j) b[r * M + j] = -s * G[i * M + j];
    }
}

// One control step: nominal input, barrier row (margin margin_at(x)) and face rows, the exact
// filter, the fault policy. Returns the filter status.
inline int control(const float* x, float* u_nom, float* u, float& h, float* last_safe) noexcept {
    float terms[kTerms], a[1 + kFaceRows], b[(1 + kFaceRows) * M];
    cfg::nominal(x, u_nom);
    const int err = barrier_terms(x, terms);
    h = terms[0];
    const float margin = cfg::margin_at(x);
    a[0] = cbf_row(terms, b) - margin;
    face_rows(x, a + 1, b + M);
    int status = cbf_faces::solve<float, 1 + kFaceRows, M>(a, b, u_nom, plant::kUMin, plant::kUMax,
                                                           cfg::kFaceSlackPenalty, u);
    if (err != 0 || !(margin >= 0.0f)) status = cbf_filter::kFallback;
    return apply_policy(x, status, u, last_safe);
}
#else
// k = CBF_ROWS > 1 barriers (cbf_config.hpp: barrier_call_row), one row each, filtered by the
// generated OSQP solver (qp_filter.hpp); the one-row path above is unchanged.
constexpr int K = cfg::kRows;
static_assert(K == cbf_qp::K && M == cbf_qp::M, "the generated QP is for another problem size");

// The rows a (K), b (K x M) at x and h = min_i h_i (the intersection's barrier value).
// Returns nonzero if a barrier reported an error.
inline int barrier_rows(const float* x, float* a, float* b, float& h) noexcept {
    float f[N], G[N * M], Dff[N] = {}, DfG[N * M] = {}, terms[kTerms], row_b[M];
    plant::f(x, f);
    plant::G(x, G);
    if (cfg::kOrder == 2) drift_products(x, f, G, Dff, DfG);
    int err = 0;
    for (int i = 0; i < K; ++i) {
        err |= cfg::barrier_call_row(i, x, f, G, Dff, DfG, terms);
        h = i == 0 || terms[0] < h ? terms[0] : h;
        a[i] = cbf_row(terms, row_b);
        for (int j = 0; j < M; ++j) b[i * M + j] = row_b[j];
    }
    return err;
}

// The filter and the fault policy on the rows (the part the closed loop times per step).
inline int filter_rows(const float* x, const float* a, const float* b, const float* u_nom, int err, float* u,
                       float* last_safe) noexcept {
    int status = cbf_qp::solve<float>(a, b, u_nom, plant::kUMin, plant::kUMax, cfg::margin_at(x), u);
    if (err != 0) status = cbf_filter::kFallback;
    return apply_policy(x, status, u, last_safe);
}

// One control step: nominal input, the K barriers, the QP filter, the fault policy.
inline int control(const float* x, float* u_nom, float* u, float& h, float* last_safe) noexcept {
    float a[K], b[K * M];
    cfg::nominal(x, u_nom);
    const int err = barrier_rows(x, a, b, h);
    return filter_rows(x, a, b, u_nom, err, u, last_safe);
}
#endif

// xdot = f(x) + G(x) u (+ d, a disturbance held over the period, when given), summed in the
// order j = 0..m-1 (the Python reference does the same); without d the bits are unchanged.
inline void xdot(const float* x, const float* u, float* out, const float* d = nullptr) noexcept {
    float f[N], G[N * M];
    plant::f(x, f);
    plant::G(x, G);
    for (int i = 0; i < N; ++i) {
        float s = f[i];
        for (int j = 0; j < M; ++j) s += G[i * M + j] * u[j];
        if (d != nullptr) s += d[i];
        out[i] = s;
    }
}

// Classical RK4 over one step of length hstep with u (and d, if given) held constant.
inline void rk4_step(float* x, const float* u, float hstep, const float* d = nullptr) noexcept {
    float k1[N], k2[N], k3[N], k4[N], tmp[N];
    const float half = 0.5f * hstep;
    xdot(x, u, k1, d);
    for (int i = 0; i < N; ++i) tmp[i] = x[i] + half * k1[i];
    xdot(tmp, u, k2, d);
    for (int i = 0; i < N; ++i) tmp[i] = x[i] + half * k2[i];
    xdot(tmp, u, k3, d);
    for (int i = 0; i < N; ++i) tmp[i] = x[i] + hstep * k3[i];
    xdot(tmp, u, k4, d);
    const float sixth = hstep / 6.0f;
    for (int i = 0; i < N; ++i) x[i] = x[i] + sixth * (k1[i] + 2.0f * k2[i] + 2.0f * k3[i] + k4[i]);
}

// The plant's periodic coordinates (an angle) back into [kWrapLo, kWrapLo + kPeriod), once per
// control period after the RK4 steps, as the Python simulator does (systems' ControlAffineSystem.wrap):
// only an entry outside that interval changes, to x - k P with k = floor((x - lo) / P); one that
// rounding leaves on the far side of the seam becomes lo. Non-finite entries are left to the fault
// policy, and so is an entry more than 2^23 periods away (no exact integer k in float).
inline void wrap_periodic(float* x) noexcept {
    for (int i = 0; i < N; ++i) {
        const float period = cfg::kPeriod[i];
        const float lo = cfg::kWrapLo[i];
        const float top = lo + period;
        if (!(period > 0.0f) || !cbf_filter::is_finite(x[i]) || (x[i] >= lo && x[i] < top)) continue;
        const float q = (x[i] - lo) / period;
        if (!(q > -8388608.0f && q < 8388608.0f)) continue;
        float k = static_cast<float>(static_cast<std::int32_t>(q));   // toward zero ...
        if (k > q) k -= 1.0f;                                           // ... then down: floor(q)
        const float w = x[i] - k * period;
        x[i] = (w < lo || w >= top) ? lo : w;
    }
}

}  // namespace cbf_app

#endif  // CBF_STEP_HPP
