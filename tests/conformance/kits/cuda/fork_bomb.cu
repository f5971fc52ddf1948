/* Forks in a loop on the host; every child lingers. Growth is linear, not exponential, so a
 * runner that fails to contain it still cannot take the machine down before its wall-clock
 * kill. */
#include <unistd.h>

extern "C" void matmul(const float *, const float *, float *, int, int, int)
{
    for (;;) {
        if (fork() == 0)
            for (;;)
                pause();
    }
}
