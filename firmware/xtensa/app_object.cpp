// Portability check: the whole firmware (barrier header, plant header, filter, closed
// loop and benchmark) compiled for an Xtensa core with xtensa-lx106-elf-g++ -c. Object
// only: the ESP8266's lx106 has no FPU and Debian's libgcc for it lacks the soft-float
// helpers its ROM provides, so this proves the code compiles for Xtensa, not that it runs
// (the ESP32-S3 project in esp32/ is the runnable Xtensa port). The port functions stay
// undefined symbols here.
#include "app.hpp"

extern "C" int cbf_app_entry(unsigned modes) { return cbf_app::run(modes); }
