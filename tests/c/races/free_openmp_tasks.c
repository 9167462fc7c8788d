/* free_openmp_tasks.c (race-free): OpenMP tasks on each node's part of shared memory. The
 * single thread writes v[] and creates tasks that read it and write their own element of w[];
 * after `taskwait` it reads w[]. Then tasks in a taskgroup, read after its end; two tasks
 * ordered by a dependence; and tasks whose results are read after the team's barrier. */
#include <omp.h>
#include "jia.h"

#define N 64

static double *v, *w;

int main(int argc, char **argv)
{
    double *mv, *mw, s = 0;
    int i;

    jia_init(argc, argv);
    v = (double *)jia_alloc(jiahosts * N * sizeof(double));
    w = (double *)jia_alloc(jiahosts * N * sizeof(double));
    jia_barrier();
    mv = v + jiapid * N;
    mw = w + jiapid * N;

#pragma omp parallel num_threads(4)
    {
#pragma omp single
        {
            for (i = 0; i < N; i++)
                mv[i] = i;
            for (i = 0; i < N; i++) {
#pragma omp task firstprivate(i)
                mw[i] = mv[i] * 2;
            }
#pragma omp taskwait
            for (i = 0; i < N; i++)
                s += mw[i];
#pragma omp taskgroup
            for (i = 0; i < N; i++) {
#pragma omp task firstprivate(i)
                mw[i] += 1;
            }
            for (i = 0; i < N; i++)
                s += mw[i];
            {
                double x = 0;
#pragma omp task depend(out: x) shared(x)
                {
                    mv[0] = 5;
                    x = 1;
                }
#pragma omp task depend(in: x) shared(x)
                mw[0] = mv[0] + x;
#pragma omp taskwait
                s += mw[0];
            }
            for (i = 0; i < N; i++) {
#pragma omp task firstprivate(i)
                mv[i] = 3;
            }
        }
        /* The single's implicit barrier: every task is done. */
#pragma omp single
        for (i = 0; i < N; i++)
            s += mv[i];
    }
    if (s != N * (N - 1) + (N * (N - 1) + N) + 6 + 3 * N)
        jia_error("free_openmp_tasks: node %d summed %g", jiapid, s);

    jia_barrier();
    jia_exit();
    return 0;
}
