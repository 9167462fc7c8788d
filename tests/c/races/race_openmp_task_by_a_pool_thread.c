/* race_openmp_task_by_a_pool_thread.c: node 0 writes a[3]; node 1's master thread creates
 * tasks that write a[3] and stays busy, so the team's other thread runs them (and is idle in
 * the pool at jia_exit). Nothing orders the two nodes' writes before the last barrier. */
#include <omp.h>
#include <unistd.h>
#include "jia.h"

static long *a;

int main(int argc, char **argv)
{
    int i;

    jia_init(argc, argv);
    a = (long *)jia_alloc(4096);
    jia_barrier();

    if (jiapid == 0) {
        a[3] = 1; /* race */
    } else if (jiapid == 1) {
#pragma omp parallel num_threads(2)
        if (omp_get_thread_num() == 0) {
            for (i = 0; i < 20; i++) {
#pragma omp task
                a[3] = 7; /* race */
            }
            usleep(200000);
        }
    }

    jia_barrier();
    jia_exit();
    return 0;
}
