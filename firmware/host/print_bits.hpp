// print_bits.hpp: the host test drivers' output, each value as the 16 hex digits of its
// double bits (exact: the Python side reads the floats back bit for bit).
#ifndef CBF_PRINT_BITS_HPP
#define CBF_PRINT_BITS_HPP

#include <cinttypes>
#include <cstdio>
#include <cstring>

template <typename T>
inline void print_bits(const T* u, int count) {
    for (int j = 0; j < count; ++j) {
        const double value = static_cast<double>(u[j]);
        std::uint64_t bits = 0;
        std::memcpy(&bits, &value, sizeof bits);
        std::printf(" %016" PRIx64, bits);
    }
    std::printf("\n");
}

#endif  // CBF_PRINT_BITS_HPP
