/* matmul.c's kernel with 2 pthreads instead of 2 nodes, for ThreadSanitizer (docs/perf/2026-11-28-checker-vs-tsan.md). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static int n = 256, T = 2; static double *a, *b, *c;
static void *work(void *arg) { long t = (long)arg; for (int i = t * n / T; i < (t + 1) * n / T; i++) for (int k = 0; k < n; k++) { double x = a[i * n + k]; for (int j = 0; j < n; j++) c[i * n + j] += x * b[k * n + j]; } return 0; }
int main(int argc, char **argv) { if (argc > 1) n = atoi(argv[1]); a = calloc(n * n, 8); b = calloc(n * n, 8); c = calloc(n * n, 8); for (int i = 0; i < n * n; i++) { a[i] = i % 7; b[i] = i % 5; }
 struct timespec s, e; clock_gettime(CLOCK_MONOTONIC, &s); pthread_t th[8]; for (long t = 0; t < T; t++) pthread_create(&th[t], 0, work, (void *)t); for (int t = 0; t < T; t++) pthread_join(th[t], 0); clock_gettime(CLOCK_MONOTONIC, &e);
 printf("time=%.3f c=%g\n", (e.tv_sec - s.tv_sec) + (e.tv_nsec - s.tv_nsec) / 1e9, c[n + 1]); return 0; }
