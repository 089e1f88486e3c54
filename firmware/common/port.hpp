// port.hpp: the whole interface between the platform-neutral firmware (app.hpp) and a
// board. Each port (host/, cortex-m/, esp32/) defines these six functions in its own
// translation unit; nothing else in common/ touches hardware, an OS or a C library.
#ifndef CBF_PORT_HPP
#define CBF_PORT_HPP

#include <cstddef>
#include <cstdint>

// What the cost counter counts, so a log explains itself.
struct PortInfo {
    const char* name;            // target name printed in the log header, e.g. "cortex-m4f"
    const char* counter_unit;    // e.g. "cycles", "ns", "systick(40 instr; qemu -icount shift=0)"
    std::uint32_t counter_mask;  // the counter wraps at mask + 1 (0xffffffff or 0x00ffffff)
};

// Write size bytes (no terminator needed). May block; never allocates.
void port_write(const char* data, std::size_t size);
// A free-running up-counter; differences are taken modulo counter_mask + 1.
std::uint32_t port_counter();
// Static description of this port.
const PortInfo& port_info();
// Leave the program with an exit code (semihosting on Cortex-M, exit() on the host).
[[noreturn]] void port_exit(int code);
// Mask the interrupts that could preempt a timed call, returning what restores them: nothing
// on the host, PRIMASK on Cortex-M, the FreeRTOS interrupt level on the ESP32-S3 (the cycle
// counter keeps counting; the benchmark masks around each call, never around printing).
std::uint32_t port_mask_interrupts();
void port_restore_interrupts(std::uint32_t saved);

#endif  // CBF_PORT_HPP
