/* free_printf_scanf_between_barriers.c (race-free): node 0 formats a line into shared memory
 * with sprintf; after a barrier, node 1 parses it with sscanf, the values and a word into shared
 * memory, and checks them; after another, node 0 formats that word (a %s argument) and the
 * values (%.*s, %n into shared memory). */
#include <stdio.h>
#include <string.h>
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
        int *vals = (int *)(buf + 512);
        if (sscanf("9 word 2.5", "%d %31s %lf", &vals[0], buf + 256, (double *)(buf + 520)) != 3)
            jia_error("free_printf_scanf_between_barriers: no number, word and double");
    }
    jia_barrier();
    if (jiapid == 0) {
        char line[128];
        int *vals = (int *)(buf + 512);
        int at = 0;
        snprintf(line, sizeof line, "%d %s %.3s%n %g", vals[0], buf + 256, buf + 256,
                 (int *)(buf + 600), *(double *)(buf + 520));
        sscanf(line, "%*d %*s%n", &at);
        if (strncmp(line, "9 word wor", 10) != 0 || *(int *)(buf + 600) != 10 || at != 6)
            jia_error("free_printf_scanf_between_barriers: formatted '%s', %d, %d", line,
                      *(int *)(buf + 600), at);
    }

    jia_barrier();
    jia_exit();
    return 0;
}
