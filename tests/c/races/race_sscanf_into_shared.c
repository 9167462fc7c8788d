/* race_sscanf_into_shared.c: node 0 parses two numbers straight into shared memory with sscanf
 * while node 1 stores the second one, with nothing between them (write-write). Built with dsmcc
 * --check-races, jia.h's sscanf records what its conversions stored. */
#include <stdio.h>
#include "jia.h"

static int *vals;

int main(int argc, char **argv)
{
    jia_init(argc, argv);
    vals = (int *)jia_alloc1(1024);
    jia_barrier();

    if (jiapid == 0) {
        if (sscanf("42 17", "%d %d", &vals[0], &vals[200]) != 2) /* race */
            jia_error("race_sscanf_into_shared: no two numbers");
    } else {
        vals[200] = 5; /* race */
    }

    jia_barrier();
    jia_exit();
    return 0;
}
