// fmt.hpp: a fixed-size line buffer with integer and hex output. Floats are printed as the
// hex of their IEEE-754 bit pattern: exact, identical on every target, and it keeps printf
// (which pulls malloc into newlib builds) out of the firmware.
#ifndef CBF_FMT_HPP
#define CBF_FMT_HPP

#include <cstddef>
#include <cstdint>

#include "port.hpp"

namespace cbf_fmt {

inline std::uint32_t float_bits(float v) noexcept {
    std::uint32_t u = 0u;
    __builtin_memcpy(&u, &v, sizeof u);
    return u;
}

// One output line, written with a single port_write. Overlong input is truncated, never
// written past the buffer (the app static_asserts that its lines fit).
class Line {
public:
    static constexpr std::size_t kCapacity = 256;

    Line& ch(char c) noexcept {
        if (len_ < kCapacity) buf_[len_++] = c;
        return *this;
    }
    Line& str(const char* s) noexcept {
        while (*s != '\0') ch(*s++);
        return *this;
    }
    // Unsigned decimal.
    Line& dec(std::uint32_t v) noexcept {
        char tmp[10];
        int k = 0;
        do {
            tmp[k++] = static_cast<char>('0' + v % 10u);
            v /= 10u;
        } while (v != 0u);
        while (k > 0) ch(tmp[--k]);
        return *this;
    }
    // Eight lower-case hex digits.
    Line& hex(std::uint32_t v) noexcept {
        for (int shift = 28; shift >= 0; shift -= 4) ch("0123456789abcdef"[(v >> shift) & 0xfu]);
        return *this;
    }
    // A float as its bit pattern, preceded by a space.
    Line& f32(float v) noexcept { return ch(' ').hex(float_bits(v)); }
    // Write the line with a trailing newline and start over.
    void emit() noexcept {
        ch('\n');
        port_write(buf_, len_);
        len_ = 0;
    }

private:
    char buf_[kCapacity] = {};
    std::size_t len_ = 0;
};

}  // namespace cbf_fmt

#endif  // CBF_FMT_HPP
