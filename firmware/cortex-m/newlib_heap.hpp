// newlib_heap.hpp: a heap for the Cortex-M firmware, for the reverse-mode *baseline* builds of
// experiments/table1.py only. The firmware proper has no heap (README: nm shows no malloc);
// the runtime-style reverse-mode baseline (compiler/emit_reverse.py, style "heap") calls
// new[] / delete[] on every evaluation, so its benchmark build includes this file once, at
// the end of the generated barrier header, in the one translation unit (port_mps2.cpp).
//
// operator new / delete go to newlib's malloc / free (the C library the Makefile already
// links); malloc grows its pool with _sbrk, defined here over a static arena in .bss, so
// the arena's size shows up in the RAM footprint and exhaustion is a clean failure
// (new[] traps into the fault handler, which reports and exits) instead of a silent
// overwrite of the stack.
#ifndef CBF_NEWLIB_HEAP_HPP
#define CBF_NEWLIB_HEAP_HPP

#include <cstddef>
#include <cstdint>

#ifndef CBF_HEAP_ARENA_BYTES
#define CBF_HEAP_ARENA_BYTES 16384
#endif

extern "C" void* malloc(std::size_t size);
extern "C" void free(void* ptr);

namespace cbf_heap {
alignas(8) unsigned char g_arena[CBF_HEAP_ARENA_BYTES];
std::size_t g_break = 0;
}  // namespace cbf_heap

// newlib's malloc asks for more core here; returns (void*)-1 when the arena is exhausted.
extern "C" void* _sbrk(std::ptrdiff_t increment) {
    const std::ptrdiff_t next = static_cast<std::ptrdiff_t>(cbf_heap::g_break) + increment;
    if (next < 0 || next > static_cast<std::ptrdiff_t>(CBF_HEAP_ARENA_BYTES)) {
        return reinterpret_cast<void*>(-1);
    }
    void* old = cbf_heap::g_arena + cbf_heap::g_break;
    cbf_heap::g_break = static_cast<std::size_t>(next);
    return old;
}

void* operator new(std::size_t size) {
    void* p = malloc(size == 0 ? 1 : size);
    if (p == nullptr) __builtin_trap();
    return p;
}
void* operator new[](std::size_t size) {
    void* p = malloc(size == 0 ? 1 : size);
    if (p == nullptr) __builtin_trap();
    return p;
}
void operator delete(void* p) noexcept { free(p); }
void operator delete[](void* p) noexcept { free(p); }
void operator delete(void* p, std::size_t) noexcept { free(p); }
void operator delete[](void* p, std::size_t) noexcept { free(p); }

#endif  // CBF_NEWLIB_HEAP_HPP
