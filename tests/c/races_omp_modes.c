/* races_omp_modes.c MODE (race-free in every mode; from a review): OpenMP constructs gcc lowers
 * to libgomp calls. Each node works on its own part of shared memory. The task modes are
 * reported: tasks are not seen yet.
 *   ordered  : `omp for ordered` whose ordered part adds to one shared counter (GOMP_ordered_*)
 *   lock     : omp_set_lock/omp_unset_lock around a shared counter
 *   task     : tasks created in `omp single` write elements; read after the single's barrier
 *              (tasks may run on any thread of the team, inside the barrier)
 *   taskwait : one task writes, its creator reads after `omp taskwait`
 *   copyprivate : `omp single copyprivate(x)` where x was read from shared memory written by
 *              the single thread before; all read the element after
 *   loopnowait : `omp for nowait` then `omp barrier` (renamed) -- control
 */
#include <omp.h>
#include <string.h>
#include <stdio.h>
#include "jia.h"

#define N 64
static long *v;

int main(int argc, char **argv)
{
    const char *mode;
    long *mine;
    int i;
    long sum = 0;
    omp_lock_t lk;

    jia_init(argc, argv);
    mode = argc > 1 ? argv[1] : "ordered";
    v = (long *)jia_alloc(jiahosts * N * sizeof(long));
    jia_barrier();
    mine = v + jiapid * N;
    omp_init_lock(&lk);

    if (!strcmp(mode, "ordered")) {
#pragma omp parallel for ordered schedule(dynamic) num_threads(2)
        for (i = 0; i < N; i++) {
#pragma omp ordered
            mine[0] += i;
        }
        sum = mine[0];
    } else if (!strcmp(mode, "lock")) {
#pragma omp parallel num_threads(2)
        for (i = 0; i < 50; i++) {
            omp_set_lock(&lk);
            mine[0] += 1;
            omp_unset_lock(&lk);
        }
        sum = mine[0];
    } else if (!strcmp(mode, "task")) {
#pragma omp parallel num_threads(2)
        {
#pragma omp single
            for (i = 1; i < N; i++) {
#pragma omp task firstprivate(i)
                mine[i] = i;
            }
            /* implicit barrier of single: every task is done */
#pragma omp master
            {
                int k;
                for (k = 1; k < N; k++)
                    sum += mine[k];
            }
        }
    } else if (!strcmp(mode, "taskwait")) {
#pragma omp parallel num_threads(2)
#pragma omp single
        {
            int k;
            for (k = 1; k < N; k++) {
#pragma omp task firstprivate(k)
                mine[k] = k;
            }
#pragma omp taskwait
            for (k = 1; k < N; k++)
                sum += mine[k];
        }
    } else if (!strcmp(mode, "copyprivate")) {
        long x = 0;
#pragma omp parallel num_threads(2) firstprivate(x)
        {
#pragma omp single copyprivate(x)
            {
                mine[1] = 7;
                x = 1;
            }
            /* copyprivate: the single thread's writes are seen by all after it */
            if (x)
                mine[2 + omp_get_thread_num()] = mine[1];
        }
        sum = mine[2] + mine[3];
    } else if (!strcmp(mode, "loopnowait")) {
#pragma omp parallel num_threads(2)
        {
#pragma omp for nowait schedule(dynamic)
            for (i = 1; i < N; i++)
                mine[i] = i;
#pragma omp barrier
#pragma omp master
            {
                int k;
                for (k = 1; k < N; k++)
                    sum += mine[k];
            }
        }
    }
    printf("node %d %s: %ld\n", jiapid, mode, sum);
    jia_barrier();
    jia_exit();
    return 0;
}
