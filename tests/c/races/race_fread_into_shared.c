/* race_fread_into_shared.c: node 0 reads a file into shared memory with fread(3) while node 1
 * reads one of the words it fills, with no barrier between (write-read). */
#include <stdio.h>
#include <stdlib.h>
#include "jia.h"

#define N 8192

static char *block;

int main(int argc, char **argv)
{
    jia_init(argc, argv);
    block = (char *)jia_alloc1(N);
    jia_barrier();

    int seen = 0;
    if (jiapid == 0) {
        FILE *f = fopen("/dev/zero", "r");
        if (!f || fread(block, 1, N, f) != N) /* race */
            exit(1);
        fclose(f);
    } else {
        seen = block[5000]; /* race */
    }

    jia_barrier();
    jia_exit();
    return seen == 99;
}
