// Port for QEMU's MPS2 boards (mps2-an386: Cortex-M4F, mps2-an500: Cortex-M7):
// CMSDK APB UART0 for output, SysTick as the cost counter, semihosting SYS_EXIT to leave.
//
// The cost counter: SysTick runs from the processor clock (25 MHz on MPS2). QEMU is
// started with -icount shift=0, which ties virtual time to executed instructions (1 ns
// each), so one SysTick tick is 40 executed instructions and the readings are exactly
// repeatable. These are instruction-derived counts, not the cycles of a real core.
#include "app.hpp"

#ifndef CBF_PORT_NAME
#define CBF_PORT_NAME "cortex-m"
#endif

namespace {

struct CmsdkUart {
    volatile std::uint32_t data;      // 0x00
    volatile std::uint32_t state;     // 0x04  bit 0: TX buffer full
    volatile std::uint32_t ctrl;      // 0x08  bit 0: TX enable
    volatile std::uint32_t intstatus; // 0x0c
    volatile std::uint32_t bauddiv;   // 0x10
};

CmsdkUart& uart0() { return *reinterpret_cast<CmsdkUart*>(0x40004000u); }

struct SysTick {
    volatile std::uint32_t csr;   // 0xE000E010  bit 0 enable, bit 2 processor clock
    volatile std::uint32_t rvr;   // reload value
    volatile std::uint32_t cvr;   // current value (counts down)
};

SysTick& systick() { return *reinterpret_cast<SysTick*>(0xE000E010u); }

constexpr std::uint32_t kSysTickMask = 0x00ffffffu;

// ARM semihosting: operation in r0, argument in r1, "bkpt 0xab" on M-profile.
int semihost(int op, std::uint32_t arg) {
    register int r0 __asm__("r0") = op;
    register std::uint32_t r1 __asm__("r1") = arg;
    __asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
    return r0;
}

extern "C" std::uint32_t _sstack[], _stack_top[];  // mps2.ld
constexpr std::uint32_t kStackPaint = 0x5afe57acu;  // startup.cpp paints the free stack

// Bytes of stack ever used: from the top down to the lowest overwritten painted word.
std::uint32_t stack_peak() {
    const std::uint32_t* p = _sstack;
    while (p < _stack_top && *p == kStackPaint) ++p;
    return static_cast<std::uint32_t>(reinterpret_cast<std::uintptr_t>(_stack_top) -
                                      reinterpret_cast<std::uintptr_t>(p));
}

constexpr int kSysExit = 0x18;
constexpr std::uint32_t kAdpStoppedApplicationExit = 0x20026u;  // QEMU exits with 0
constexpr std::uint32_t kAdpStoppedRunTimeError = 0x20023u;      // QEMU exits with 1

void port_init() {
    uart0().bauddiv = 16u;
    uart0().ctrl = 1u;
    systick().rvr = kSysTickMask;
    systick().cvr = 0u;
    systick().csr = (1u << 2) | 1u;  // processor clock, enabled, no interrupt
}

}  // namespace

void port_write(const char* data, std::size_t size) {
    for (std::size_t i = 0; i < size; ++i) {
        while ((uart0().state & 1u) != 0u) {
        }
        uart0().data = static_cast<unsigned char>(data[i]);
    }
}

// PRIMASK: the previous value, then all configurable-priority interrupts masked (cpsid i).
std::uint32_t port_mask_interrupts() {
    std::uint32_t primask;
    __asm volatile("mrs %0, primask\n\tcpsid i" : "=r"(primask) : : "memory");
    return primask;
}

void port_restore_interrupts(std::uint32_t saved) { __asm volatile("msr primask, %0" : : "r"(saved) : "memory"); }

std::uint32_t port_counter() { return kSysTickMask - (systick().cvr & kSysTickMask); }

const PortInfo& port_info() {
    static constexpr PortInfo info{CBF_PORT_NAME, "systick(=40 instructions under qemu -icount shift=0)",
                                   kSysTickMask};
    return info;
}

void port_exit(int code) {
    cbf_fmt::Line line;
    line.str("P stack_peak=").dec(stack_peak()).emit();
    semihost(kSysExit, code == 0 ? kAdpStoppedApplicationExit : kAdpStoppedRunTimeError);
    for (;;) {
    }
}

extern "C" void cbf_fault(std::uint32_t ipsr) {
    cbf_fmt::Line line;
    line.str("E fault ipsr=").hex(ipsr).emit();
    port_exit(3);
}

#ifndef CBF_MODES
#define CBF_MODES 3u
#endif

int main() {
    port_init();
    port_exit(cbf_app::run(CBF_MODES));
}
