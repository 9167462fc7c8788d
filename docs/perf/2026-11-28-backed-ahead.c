/* Pages backed ahead by a helper thread while the stream lands: docs/perf/2026-11-28-landed-stream.md.
   Usage: backed-ahead MB MODE HELPER_CPU (-1: either CPU). Build: gcc -O2 -pthread -o backed-ahead 2026-11-28-backed-ahead.c */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
/* receiver: main thread reads 256K runs and memcpy's into the mapping if backed, else pwrite; a helper
   populates ahead (window W bytes ahead). mode 0: no helper (pwrite). 1: helper populates. */
static unsigned char *view; static long total; static atomic_long backed, need;
static void pin(int cpu) { cpu_set_t s; CPU_ZERO(&s); CPU_SET(cpu, &s); sched_setaffinity(0, sizeof s, &s); }
static void *helper(void *arg) {
    long step = 1 << 20;
    for (long at = 0; at < total; at += step) {
        while (atomic_load(&need) + (long)(4 << 20) < at) sched_yield();
        madvise(view + at, step, 23);
        atomic_store(&backed, at + step);
    }
    return 0;
}
int main(int argc, char **argv) {
    long mb = atol(argv[1]), got = 0; total = mb << 20; int mode = atoi(argv[2]); int hcpu = atoi(argv[3]);
    size_t run = 256 << 10;
    static char buf[1 << 20];
    memset(buf, 7, sizeof buf);
    int l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    if (bind(l, (void *)&a, sizeof a) || listen(l, 1) || getsockname(l, (void *)&a, &al)) { perror("socket"); return 1; }
    if (fork() == 0) {
        pin(0);
        int c = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(c, (void *)&a, sizeof a)) { perror("connect"); _exit(1); }
        for (long sent = 0; sent < total;) { ssize_t w = write(c, buf, sizeof buf); if (w <= 0) _exit(1); sent += w; }
        close(c); _exit(0);
    }
    pin(1);
    int s = accept(l, 0, 0);
    int fd = memfd_create("land", 0); ftruncate(fd, total);
    view = mmap(0, total, PROT_READ|PROT_WRITE, MAP_SHARED, fd, 0);
    unsigned long sum = 0; long copied = 0;
    pthread_t h;
    if (mode) { pthread_create(&h, 0, helper, 0); if (hcpu >= 0) { cpu_set_t cs; CPU_ZERO(&cs); CPU_SET(hcpu, &cs); pthread_setaffinity_np(h, sizeof cs, &cs);} else { cpu_set_t cs; CPU_ZERO(&cs); CPU_SET(0,&cs); CPU_SET(1,&cs); pthread_setaffinity_np(h, sizeof cs, &cs);} }
    struct timespec t0, t1; clock_gettime(CLOCK_MONOTONIC, &t0);
    while (got < total) {
        size_t have = 0;
        while (have < run) { ssize_t r = read(s, buf + have, run - have); if (r <= 0) goto done; have += r; }
        atomic_store(&need, got);
        if (mode && atomic_load(&backed) >= got + (long)run) { memcpy(view + got, buf, run); copied++; }
        else if (pwrite(fd, buf, run, got) != (ssize_t)run) { perror("pwrite"); return 1; }
        unsigned long *w = (unsigned long *)(view + got);
        for (size_t i = 0; i < run / 8; i++) sum += w[i];
        got += run;
    }
done:
    clock_gettime(CLOCK_MONOTONIC, &t1); wait(0);
    if (mode) pthread_join(h, 0);
    double dt = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
    printf("mode %d hcpu %d: %ld MB in %.3f s: %.0f MB/s (memcpy runs %ld of %ld)\n", mode, hcpu, got >> 20, dt, (got >> 20) / dt, copied, total/run);
    return 0;
}
