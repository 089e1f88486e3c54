// ESP-IDF port of the firmware: console output through putchar (UART0 or USB-Serial-JTAG,
// whatever the project's console is), the Xtensa CCOUNT cycle counter as the cost counter.
// The app itself is firmware/common/app.hpp, shared with the host and Cortex-M builds.
#include <cstdio>

#include "esp_cpu.h"
#include "freertos/FreeRTOS.h"
#include "freertos/task.h"
#include "sdkconfig.h"

#include "app.hpp"

#ifndef CBF_MODES
#define CBF_MODES (cbf_app::kModeLoop | cbf_app::kModeBench)
#endif

namespace {
unsigned g_lines = 0;
}

void port_write(const char* data, std::size_t size) {
    for (std::size_t i = 0; i < size; ++i) {
        std::putchar(data[i]);
        // The closed loop prints for about a minute at 115200 baud without blocking on the
        // scheduler: let the idle task run now and then so the task watchdog stays quiet.
        // Only the untimed output path yields; the benchmark prints after its timing.
        if (data[i] == '\n' && ++g_lines % 64u == 0u) vTaskDelay(1);
    }
}

// CPU cycles at CONFIG_ESP_DEFAULT_CPU_FREQ_MHZ (240 MHz); wraps every ~17.9 s.
std::uint32_t port_counter() { return static_cast<std::uint32_t>(esp_cpu_get_cycle_count()); }

// The FreeRTOS port's interrupt mask on this core (XTOS_SET_INTLEVEL(XCHAL_EXCM_LEVEL)):
// the tick and every level-1..3 interrupt wait until the timed call is done.
std::uint32_t port_mask_interrupts() { return static_cast<std::uint32_t>(portSET_INTERRUPT_MASK_FROM_ISR()); }
void port_restore_interrupts(std::uint32_t saved) {
    portCLEAR_INTERRUPT_MASK_FROM_ISR(static_cast<UBaseType_t>(saved));
}

const PortInfo& port_info() {
    static constexpr PortInfo info{CONFIG_IDF_TARGET, "cycles", 0xffffffffu};
    return info;
}

void port_exit(int code) {
    std::fflush(stdout);
    (void)code;
    vTaskDelete(nullptr);  // end the main task; the board idles
    for (;;) {
    }
}

extern "C" void app_main(void) {
    vTaskDelay(pdMS_TO_TICKS(200));  // boot messages first, then our log
    port_exit(cbf_app::run(CBF_MODES));
}
