/* race_snprintf_into_shared.c: node 0 formats a number into shared memory with snprintf while
 * node 1 reads the first byte there, with nothing between them. Built with dsmcc --check-races,
 * jia.h's snprintf records the bytes written at the caller's line. */
#include <stdio.h>
#include "jia.h"

#define N 1024

static char *buf;

int main(int argc, char **argv)
{
    jia_init(argc, argv);
    buf = (char *)jia_alloc1(N);
    jia_barrier();

    if (jiapid == 0) {
        snprintf(buf + 64, 32, "%d-%s", argc * 42, argv[0]); /* race */
    } else {
        volatile char c = buf[64]; /* race */
        (void)c;
    }

    jia_barrier();
    jia_exit();
    return 0;
}
