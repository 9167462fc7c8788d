/* race_openmp_no_critical.c: two OpenMP threads of node 0 add to one shared counter without
 * `omp critical` (read-write and write-write on one line). */
#include <omp.h>
#include "jia.h"

static long *counter;

int main(int argc, char **argv)
{
    jia_init(argc, argv);
    counter = (long *)jia_alloc1(Pagesize);
    jia_barrier();

    if (jiapid == 0) {
#pragma omp parallel num_threads(2)
        counter[5] += 1; /* race */
    }

    jia_barrier();
    jia_exit();
    return 0;
}
