/* free_openmp_critical.c (race-free): OpenMP threads of each node add to their node's counter in
 * shared memory inside `omp critical`, meet in `omp barrier`, and read the counter after it;
 * the thread that opened the region reads it again after the region. */
#include <omp.h>
#include "jia.h"

#define ROUNDS 100

static long *counters;

int main(int argc, char **argv)
{
    long seen[2] = {0, 0};

    jia_init(argc, argv);
    counters = (long *)jia_alloc(jiahosts * 8 * sizeof(long));
    jia_barrier();

#pragma omp parallel num_threads(2)
    {
        int i;
        for (i = 0; i < ROUNDS; i++) {
#pragma omp critical
            counters[jiapid * 8] += 1;
        }
#pragma omp barrier
        seen[omp_get_thread_num()] = counters[jiapid * 8];
    }
    if (counters[jiapid * 8] != 2 * ROUNDS || seen[0] != 2 * ROUNDS || seen[1] != 2 * ROUNDS)
        jia_error("free_openmp_critical: node %d counted %ld, saw %ld and %ld", jiapid,
                  counters[jiapid * 8], seen[0], seen[1]);

    jia_barrier();
    jia_exit();
    return 0;
}
