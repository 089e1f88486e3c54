// Host twin: the same common/app.hpp built natively with g++ (used by the tests and by
// experiments/device.py as the reference the microcontroller runs are compared with bit
// for bit). Usage: fw_host [loop|bench|all]   (default: all)
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "app.hpp"

void port_write(const char* data, std::size_t size) { std::fwrite(data, 1, size, stdout); }

// Wall-clock nanoseconds (truncated to 32 bits; differences are taken modulo 2^32). On a
// shared machine these are noisy; callgrind gives repeatable host instruction counts.
std::uint32_t port_counter() {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<std::uint32_t>(static_cast<unsigned long long>(ts.tv_sec) * 1000000000ull +
                                      static_cast<unsigned long long>(ts.tv_nsec));
}

const PortInfo& port_info() {
    static constexpr PortInfo info{"host", "ns", 0xffffffffu};
    return info;
}

// A process cannot mask interrupts; the host's numbers are wall-clock and noisy anyway.
std::uint32_t port_mask_interrupts() { return 0; }
void port_restore_interrupts(std::uint32_t) {}

void port_exit(int code) {
    std::fflush(stdout);
    std::exit(code);
}

int main(int argc, char** argv) {
    unsigned modes = cbf_app::kModeLoop | cbf_app::kModeBench;
    if (argc > 1) {
        if (std::strcmp(argv[1], "loop") == 0) {
            modes = cbf_app::kModeLoop;
        } else if (std::strcmp(argv[1], "bench") == 0) {
            modes = cbf_app::kModeBench;
        } else if (std::strcmp(argv[1], "all") != 0) {
            std::fprintf(stderr, "usage: %s [loop|bench|all]\n", argv[0]);
            return 2;
        }
    }
    port_exit(cbf_app::run(modes));
}
