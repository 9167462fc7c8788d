/* The kernels of apps/c/matmul.c, sor.c and lu.c with T pthreads in place of T nodes (the same
 * loops, the same split of rows, a pthread barrier where the DSM program has jia_barrier), for
 * ThreadSanitizer (docs/perf/2026-11-28-checker-vs-tsan-kernels.md).
 * Usage: kernels matmul|sor|lu [N] [ITERATIONS or BLOCK] [T]; prints the kernel's time. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define OMEGA 1.25

static int n = 256, arg2 = 10, T = 2, w;
static double *a, *b, *c, *g;
static pthread_barrier_t bar;

static void *matmul(void *arg)
{
    long t = (long)arg;
    for (int i = t * n / T; i < (t + 1) * n / T; i++) {
        for (int j = 0; j < n; j++) c[i * n + j] = 0.0;
        for (int k = 0; k < n; k++) {
            double aik = a[i * n + k];
            for (int j = 0; j < n; j++) c[i * n + j] += aik * b[k * n + j];
        }
    }
    return 0;
}

static void sweep(int lo, int hi, int colour)
{
    if (lo < 1) lo = 1;
    if (hi > n + 1) hi = n + 1;
    for (int i = lo; i < hi; i++)
        for (int j = 1; j <= n; j++)
            if ((i + j) % 2 == colour)
                g[i * w + j] = g[i * w + j] + OMEGA * ((g[(i - 1) * w + j] + g[(i + 1) * w + j] +
                               g[i * w + j - 1] + g[i * w + j + 1]) / 4.0 - g[i * w + j]);
}

static void *sor(void *arg)
{
    long t = (long)arg;
    int lo = w * t / T, hi = w * (t + 1) / T;
    for (int it = 0; it < arg2; it++)
        for (int col = 0; col < 2; col++) {
            sweep(lo, hi, col);
            pthread_barrier_wait(&bar);
        }
    return 0;
}

static void eliminate(int k0, int k1, int r0, int r1, int bs, int who)
{
    for (int i = r0; i < r1; i++) {
        if (who >= 0 && (i / bs) % T != who) continue;
        for (int p = k0; p < k1 && p < i; p++) {
            double l = a[i * n + p] / a[p * n + p];
            a[i * n + p] = l;
            for (int j = p + 1; j < n; j++) a[i * n + j] -= l * a[p * n + j];
        }
    }
}

static void *lu(void *arg)
{
    long t = (long)arg;
    int bs = arg2, blocks = (n + bs - 1) / bs;
    for (int k = 0; k < blocks; k++) {
        int k0 = k * bs, k1 = k0 + bs < n ? k0 + bs : n;
        eliminate(k0, k1, k0, k1, bs, (int)t); /* the owner of block row k factors it */
        pthread_barrier_wait(&bar);
        eliminate(k0, k1, k1, n, bs, (int)t);
        pthread_barrier_wait(&bar);
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *kernel = argc > 1 ? argv[1] : "matmul";
    void *(*work)(void *) = !strcmp(kernel, "sor") ? sor : !strcmp(kernel, "lu") ? lu : matmul;
    if (argc > 2) n = atoi(argv[2]);
    arg2 = argc > 3 ? atoi(argv[3]) : work == lu ? 16 : 10;
    if (argc > 4) T = atoi(argv[4]);
    w = n + 2;
    a = calloc((size_t)n * n, 8); b = calloc((size_t)n * n, 8); c = calloc((size_t)n * n, 8);
    g = calloc((size_t)w * w, 8);
    for (int i = 0; i < n * n; i++) { a[i] = (i % 7) / 7.0; b[i] = i % 5; }
    for (int i = 0; i < n; i++) a[i * n + i] += n;
    for (int i = 0; i < w; i++)
        for (int j = 0; j < w; j++)
            g[i * w + j] = (i == 0 || j == 0 || i == n + 1 || j == n + 1) ? (double)((i * 3 + j * 7) % 11) : 0.0;
    pthread_barrier_init(&bar, 0, T);
    struct timespec s, e;
    pthread_t th[64];
    clock_gettime(CLOCK_MONOTONIC, &s);
    for (long t = 0; t < T; t++) pthread_create(&th[t], 0, work, (void *)t);
    for (int t = 0; t < T; t++) pthread_join(th[t], 0);
    clock_gettime(CLOCK_MONOTONIC, &e);
    printf("%s n=%d time=%.3fs check=%g\n", kernel, n, (e.tv_sec - s.tv_sec) + (e.tv_nsec - s.tv_nsec) / 1e9,
           c[n + 1] + g[w + 1] + a[n + 1]);
    return 0;
}
