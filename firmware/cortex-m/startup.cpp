// Startup for the MPS2 Cortex-M4F / M7 boards (and any ARMv7-M with an FPU): vector
// table, Reset_Handler, fault handler. No libc start files, no libstdc++.
//
// Order matters: the firmware is built with -mfloat-abi=hard, so any compiled function
// may use VFP registers; the FPU must be enabled (CPACR CP10/CP11 full access) before the
// first one runs. Reset_Handler is therefore naked assembly that enables the FPU and only
// then branches to C++ (reset_c), which copies .data, zeroes .bss and runs constructors.
#include <cstdint>

extern "C" {
// Linker-script symbols (mps2.ld). _estack is declared as a function so that its address
// can sit in the constant vector table (a linker symbol gets no Thumb bit).
void _estack();
extern std::uint32_t _sidata[], _sdata[], _edata[], _sbss[], _ebss[], _sstack[];
extern void (*__init_array_start[])();
extern void (*__init_array_end[])();

int main();
void Reset_Handler();
void Fault_Handler();
void cbf_fault(std::uint32_t ipsr);  // port_mps2.cpp: report and exit
}

// Painted into the unused stack at reset; port_exit reports how much of it was overwritten
// (the measured peak, a cross-check of the static -fstack-usage worst case).
constexpr std::uint32_t kStackPaint = 0x5afe57acu;

extern "C" __attribute__((naked, noreturn)) void Reset_Handler() {
    __asm__ volatile(
        "ldr r0, =0xE000ED88      \n"  // SCB->CPACR
        "ldr r1, [r0]             \n"
        "orr r1, r1, #(0xF << 20) \n"  // CP10, CP11: full access
        "str r1, [r0]             \n"
        "dsb                      \n"
        "isb                      \n"
        "b reset_c                \n");
}

extern "C" __attribute__((used, noreturn)) void reset_c() {
    std::uint32_t* sp = nullptr;
    __asm__ volatile("mov %0, sp" : "=r"(sp));
    for (std::uint32_t* p = _sstack; p < sp - 16; ++p) *p = kStackPaint;  // 64 B margin below this frame
    for (std::uint32_t *src = _sidata, *dst = _sdata; dst < _edata;) *dst++ = *src++;
    for (std::uint32_t* dst = _sbss; dst < _ebss;) *dst++ = 0u;
    for (void (**ctor)() = __init_array_start; ctor < __init_array_end; ++ctor) (*ctor)();
    main();
    for (;;) {
    }
}

extern "C" void Fault_Handler() {
    std::uint32_t ipsr = 0;
    __asm__ volatile("mrs %0, ipsr" : "=r"(ipsr));
    cbf_fault(ipsr);
}

// Cortex-M system exceptions 0..15; no peripheral interrupt is used.
__attribute__((section(".isr_vector"), used)) void (*const g_vectors[16])() = {
    _estack,        Reset_Handler, Fault_Handler, Fault_Handler,  // SP, Reset, NMI, HardFault
    Fault_Handler,  Fault_Handler, Fault_Handler, nullptr,        // MemManage, BusFault, UsageFault
    nullptr,        nullptr,       nullptr,       Fault_Handler,  // reserved x3, SVCall
    Fault_Handler,  nullptr,       Fault_Handler, Fault_Handler,  // DebugMon, reserved, PendSV, SysTick
};
