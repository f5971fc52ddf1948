/* Writes through a wild pointer (one the optimizer cannot see is bad): SIGSEGV on the host,
 * where the fake runtime's "device" is. */
#include <cstdint>

extern "C" void matmul(const float *, const float *, float *, int, int, int)
{
    volatile std::uintptr_t address = 16;
    *(float *)address = 1.0f;
}
