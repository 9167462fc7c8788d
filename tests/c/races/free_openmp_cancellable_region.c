/* free_openmp_cancellable_region.c (race-free): an OpenMP region that may be cancelled (it has
 * an `omp cancel`, never taken), so gcc makes its barriers the cancellable ones
 * (GOMP_barrier_cancel, GOMP_loop_end_cancel). Each of 4 threads writes its element of the
 * node's part of shared memory, meets the others at a barrier and reads its neighbour's. */
#include <omp.h>
#include "jia.h"

static long *a;

int main(int argc, char **argv)
{
    long *m, bad = 0;

    jia_init(argc, argv);
    a = (long *)jia_alloc(jiahosts * 16 * sizeof(long));
    jia_barrier();
    m = a + jiapid * 16;

#pragma omp parallel num_threads(4) reduction(+ : bad)
    {
        int t = omp_get_thread_num(), r, i;
        for (r = 0; r < 20; r++) {
            m[t] = r * 10 + t;
#pragma omp cancel parallel if (m[t] < 0)
#pragma omp barrier
            if (m[(t + 1) % 4] != r * 10 + (t + 1) % 4)
                bad++;
#pragma omp barrier
        }
#pragma omp for
        for (i = 0; i < 4; i++)
            m[8 + i] = i;
        if (m[8 + (t + 1) % 4] != (t + 1) % 4)
            bad++;
    }
    if (bad)
        jia_error("free_openmp_cancellable_region: node %d read %ld wrong values", jiapid, bad);

    jia_barrier();
    jia_exit();
    return 0;
}
