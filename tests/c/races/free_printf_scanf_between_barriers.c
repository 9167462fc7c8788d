/* free_printf_scanf_between_barriers.c (race-free): node 0 formats a line into shared memory
 * with sprintf; after a barrier, node 1 parses it with sscanf and checks the values. */
#include <stdio.h>
#include "jia.h"

#define N 1024

static char *buf;

int main(int argc, char **argv)
{
    jia_init(argc, argv);
    buf = (char *)jia_alloc1(N);
    jia_barrier();

    if (jiapid == 0)
        sprintf(buf + 128, "%d %d", 6, 7);
    jia_barrier();
    if (jiapid == 1) {
        int x = 0, y = 0;
        if (sscanf(buf + 128, "%d %d", &x, &y) != 2 || x * y != 42)
            jia_error("free_printf_scanf_between_barriers: read %d and %d", x, y);
    }

    jia_barrier();
    jia_exit();
    return 0;
}
