/* pi_openmp.c: pi by the midpoint rule with OpenMP threads in every node: each thread adds its
 * partial sums to a shared total under a lock taken by threads of every node, and the threads
 * meet in a barrier of every thread of every node (jia_barrier_threads) before node 0 checks.
 * Usage: pi_openmp [INTERVALS] (OMP_NUM_THREADS threads per node). */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include "jia.h"

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    double *total;
    int chunks = 16, ok = 1;
    jia_init(argc, argv);
    if (n < 1)
        jia_error("usage: pi_openmp [INTERVALS >= 1]");
    total = (double *)jia_alloc2p(sizeof(double), 0);
    if (jiapid == 0)
        *total = 0.0;
    jia_barrier();
#pragma omp parallel
    {
        int threads = omp_get_num_threads(), t = omp_get_thread_num(), c;
        double h = 1.0 / (double)n;
        for (c = t; c < chunks; c += threads) {
            long k = (long)jiapid * chunks + c, i;
            long from = n * k / ((long)jiahosts * chunks), to = n * (k + 1) / ((long)jiahosts * chunks);
            double sum = 0.0;
            for (i = from; i < to; i++) {
                double x = h * ((double)i + 0.5);
                sum += 4.0 / (1.0 + x * x);
            }
            jia_lock(0);
            *total += sum * h;
            jia_unlock(0);
        }
        jia_barrier_threads(threads);
    }
    if (jiapid == 0) {
        ok = fabs(*total - M_PI) < 1e-9;
        printf("c-pi-openmp %s nodes=%d threads=%d pi=%.12f\n", ok ? "OK" : "FAILED", jiahosts,
               omp_get_max_threads(), *total);
    }
    jia_exit();
    return ok ? 0 : 1;
}
