/* free_openmp_worksharing.c (race-free): OpenMP work-sharing on shared memory in each node:
 * a dynamic `omp for` fills a vector, `omp single` reads both ends of it after the loop's
 * implicit barrier, `omp sections` copy that total after the single's barrier, and a
 * `parallel for` (a region of its own) doubles the vector, read after it by the thread that
 * opened it. */
#include <omp.h>
#include "jia.h"

#define N 512

static double *v, *w;

int main(int argc, char **argv)
{
    double *mine, *out;
    int i;

    jia_init(argc, argv);
    v = (double *)jia_alloc(jiahosts * N * sizeof(double));
    w = (double *)jia_alloc(jiahosts * 8 * sizeof(double));
    jia_barrier();
    mine = v + jiapid * N;
    out = w + jiapid * 8;

#pragma omp parallel num_threads(2)
    {
#pragma omp for schedule(dynamic, 4)
        for (i = 0; i < N; i++)
            mine[i] = i;
#pragma omp single
        out[0] = mine[0] + mine[N - 1];
#pragma omp sections
        {
#pragma omp section
            out[1] = out[0];
#pragma omp section
            out[2] = out[0] + 1;
        }
    }
#pragma omp parallel for num_threads(2) schedule(dynamic)
    for (i = 0; i < N; i++)
        mine[i] *= 2;
    if (out[1] != N - 1 || out[2] != N || mine[N - 1] != 2 * (N - 1))
        jia_error("free_openmp_worksharing: node %d got %g %g %g", jiapid, out[1], out[2],
                  mine[N - 1]);

    jia_barrier();
    jia_exit();
    return 0;
}
