/* The landed-stream yardstick by hand: docs/perf/2026-11-28-landed-stream.md. Usage: land MB MODE.
   Build: gcc -O2 -o land 2026-11-28-landed-stream.c */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
/* mode 0: plain (1 MiB reads). 1: 256 KiB reads, pwrite into fresh memfd pages, then read the pages
   through a mapping (one byte per cache line). 2: like 1 without the read. 3: read() straight into
   the mapped memfd (fresh pages: a fault each). 4: like 3 into pages backed before the clock starts
   (MADV_POPULATE_WRITE). 5: like 1, memcpy into pages backed before the clock starts. */
int main(int argc, char **argv) {
    long mb = atol(argv[1]), total = mb << 20, got = 0; int mode = atoi(argv[2]);
    size_t run = 256 << 10;
    static char buf[1 << 20];
    memset(buf, 7, sizeof buf);
    int l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    if (bind(l, (void *)&a, sizeof a) || listen(l, 1) || getsockname(l, (void *)&a, &al)) { perror("socket"); return 1; }
    if (fork() == 0) {
        int c = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(c, (void *)&a, sizeof a)) { perror("connect"); _exit(1); }
        for (long sent = 0; sent < total;) { ssize_t w = write(c, buf, sizeof buf); if (w <= 0) _exit(1); sent += w; }
        close(c); _exit(0);
    }
    int s = accept(l, 0, 0);
    int fd = memfd_create("land", 0); ftruncate(fd, total);
    unsigned char *view = mmap(0, total, PROT_READ|PROT_WRITE, MAP_SHARED, fd, 0);
    unsigned long sum = 0;
    if (mode >= 4) madvise(view, total, 23 /* MADV_POPULATE_WRITE */);
    struct timespec t0, t1; clock_gettime(CLOCK_MONOTONIC, &t0);
    if (mode == 0) { for (ssize_t r; (r = read(s, buf, sizeof buf)) > 0;) got += r; }
    else if (mode == 3 || mode == 4) {
        while (got < total) { ssize_t r = read(s, view + got, total - got < run ? total - got : run); if (r <= 0) break; got += r; }
        for (long i = 0; i < total; i += 64) sum += view[i];
    } else {
        while (got < total) {
            size_t have = 0;
            while (have < run) { ssize_t r = read(s, buf + have, run - have); if (r <= 0) goto done; have += r; }
            if (mode == 5) memcpy(view + got, buf, run);
            else if (pwrite(fd, buf, run, got) != (ssize_t)run) { perror("pwrite"); return 1; }
            if (mode == 1 || mode == 5) for (size_t i = 0; i < run; i += 64) sum += view[got + i];
            got += run;
        }
    }
done:
    clock_gettime(CLOCK_MONOTONIC, &t1); wait(0);
    double dt = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
    printf("mode %d: %ld MB in %.3f s: %.0f MB/s (sum %lu)\n", mode, got >> 20, dt, (got >> 20) / dt, sum);
    return got != total;
}
