/* sor_pthreads.c: red-black SOR on JIAJIA's interface with T POSIX threads in every node: each
 * node's band of rows is split among its threads, and every half-sweep ends with a barrier of
 * every thread of every node (jia_barrier_threads). Node 0 recomputes sequentially and compares
 * bit for bit. Usage: sor_pthreads [N] [ITERATIONS] [THREADS] (THREADS: else DSM_THREADS, else 2).
 * C programs share cells across threads as C does: rows next to another thread's share are read
 * by it, cell by cell, while this thread writes the other colour's cells. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include "jia.h"

#define OMEGA 1.25

static double initial(int i, int j, int n)
{
    return (i == 0 || j == 0 || i == n + 1 || j == n + 1) ? (double)((i * 3 + j * 7) % 11) : 0.0;
}

static void sweep(double *g, int w, int n, int lo, int hi, int colour)
{
    int i, j;
    if (lo < 1) lo = 1;
    if (hi > n + 1) hi = n + 1;
    for (i = lo; i < hi; i++)
        for (j = 1; j <= n; j++)
            if ((i + j) % 2 == colour)
                g[i * w + j] = g[i * w + j] + OMEGA * ((g[(i - 1) * w + j] + g[(i + 1) * w + j] +
                               g[i * w + j - 1] + g[i * w + j + 1]) / 4.0 - g[i * w + j]);
}

struct work {
    double *g;
    int w, n, lo, hi, iters, threads;
};

static void *run(void *arg)
{
    struct work *k = arg;
    int it, colour;
    for (it = 0; it < k->iters; it++)
        for (colour = 0; colour < 2; colour++) {
            sweep(k->g, k->w, k->n, k->lo, k->hi, colour);
            jia_barrier_threads(k->threads);
        }
    return NULL;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 256;
    int iters = argc > 2 ? atoi(argv[2]) : 10;
    /* Threads: the third argument, else dsmrun --threads (DSM_THREADS), else 2. */
    const char *env_threads = getenv("DSM_THREADS");
    int threads = argc > 3 ? atoi(argv[3]) : env_threads ? atoi(env_threads) : 2;
    int w, i, j, t, lo, hi, ok = 1;
    double *g;
    pthread_t tid[64];
    struct work work[64];
    jia_init(argc, argv);
    if (n < 1 || iters < 0 || threads < 1 || threads > 64) {
        jia_error("usage: sor_pthreads [N >= 1] [ITERATIONS >= 0] [1 <= THREADS <= 64]");
    }
    w = n + 2;
    g = (double *)jia_alloc3(w * w * (int)sizeof(double), (w * w * (int)sizeof(double)) / jiahosts + 1, 0);
    lo = w * jiapid / jiahosts;
    hi = w * (jiapid + 1) / jiahosts;
    for (i = lo; i < hi; i++)
        for (j = 0; j < w; j++)
            g[i * w + j] = initial(i, j, n);
    jia_barrier();
    for (t = 0; t < threads; t++) {
        work[t] = (struct work){g, w, n, lo + (hi - lo) * t / threads,
                                lo + (hi - lo) * (t + 1) / threads, iters, threads};
        if (pthread_create(&tid[t], NULL, run, &work[t]) != 0)
            jia_error("pthread_create failed");
    }
    for (t = 0; t < threads; t++)
        pthread_join(tid[t], NULL);
    if (jiapid == 0) {
        double *s = malloc(sizeof(double) * w * w);
        int it, colour;
        for (i = 0; i < w; i++)
            for (j = 0; j < w; j++)
                s[i * w + j] = initial(i, j, n);
        for (it = 0; it < iters; it++)
            for (colour = 0; colour < 2; colour++)
                sweep(s, w, n, 0, w, colour);
        for (i = 0; i < w * w; i++)
            if (s[i] != g[i])
                ok = 0;
        printf("c-sor-pthreads %s nodes=%d threads=%d n=%d\n", ok ? "OK" : "FAILED", jiahosts,
               threads, n);
        free(s);
    }
    jia_exit();
    return ok ? 0 : 1;
}
