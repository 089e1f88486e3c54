// rng.hpp: the counter-based generator of cbfsim/rng.py, the same bits: a draw in [-1, 1) is
// a pure function of (run seed, control period, lane), so a run replays alone anywhere.
//   mix = SplitMix64 finaliser, G = 0x9E3779B97F4A7C15,
//   u = 2 ((mix(mix(seed + G) ^ (256 step + lane)) >> 11) 2^-53) - 1   (exact in double)
#ifndef CBF_RNG_HPP
#define CBF_RNG_HPP

#include <cstdint>

namespace cbf_rng {

constexpr std::uint64_t kGolden = 0x9E3779B97F4A7C15ull;
constexpr std::uint64_t kNoiseLane = 0;
constexpr std::uint64_t kDisturbanceLane = 64;

inline std::uint64_t mix(std::uint64_t z) noexcept {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

inline double counter_uniform(std::uint64_t seed, std::uint64_t step, std::uint64_t lane) noexcept {
    const std::uint64_t z = mix(mix(seed + kGolden) ^ (step * 256u + lane));
    return 2.0 * (static_cast<double>(z >> 11) * (1.0 / 9007199254740992.0)) - 1.0;
}

}  // namespace cbf_rng

#endif  // CBF_RNG_HPP
