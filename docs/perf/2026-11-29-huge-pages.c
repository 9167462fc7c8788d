/* Landing a TCP loopback stream in fresh shared-memory pages: 4 KiB pages of a memfd against huge
   pages of a private tmpfs mounted huge=advise (the runtime's huge_pages = auto), and what a huge
   page costs to back. docs/perf/2026-11-29-huge-pages.md.
   Build: gcc -O2 -o huge-pages 2026-11-29-huge-pages.c. Run as root (the tmpfs is made with the
   mount API in the process; the runtime enters a user namespace for other users).
   Usage: huge-pages MB MODE [WARM_MB]. MODE 0: plain stream (1 MiB reads, one buffer). 1: 256 KiB
   runs, pwrite into fresh memfd pages, each page read back through a mapping (as `stream` reads).
   2: the same into the tmpfs file, each empty 2 MiB stretch backed first with one huge page
   (MADV_POPULATE_WRITE through a view marked MADV_HUGEPAGE). 3: only back MB of huge pages, and
   print the time per 2 MiB. 4: nothing but the WARM_MB step (`huge-pages 0 4 1024`). WARM_MB: first take that much anonymous huge memory and give it back,
   so the huge pages asked for next are at hand (this VM's host takes freed memory back within
   seconds, and a huge page it took costs 1.5-5 ms to get again). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define STRETCH (2L << 20)

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }

static int huge_file(long len) {
    int fs = syscall(SYS_fsopen, "tmpfs", 1);
    if (fs < 0 || syscall(SYS_fsconfig, fs, 1, "huge", "advise", 0) || syscall(SYS_fsconfig, fs, 1, "size", "0", 0) ||
        syscall(SYS_fsconfig, fs, 6, 0, 0, 0)) { perror("fsopen/fsconfig"); exit(1); }
    int mnt = syscall(SYS_fsmount, fs, 1, 0);
    int fd = openat(mnt, ".", O_TMPFILE | O_RDWR, 0600);
    if (mnt < 0 || fd < 0 || ftruncate(fd, len)) { perror("fsmount/open"); exit(1); }
    close(fs); close(mnt);
    return fd;
}

static unsigned char *huge_view(int fd, long len) {
    unsigned char *r = mmap(0, len + STRETCH, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    unsigned char *at = (unsigned char *)(((unsigned long)r + STRETCH - 1) & ~(STRETCH - 1));
    unsigned char *v = mmap(at, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
    if (v == MAP_FAILED || madvise(v, len, MADV_HUGEPAGE)) { perror("huge view"); exit(1); }
    return v;
}

static void back(unsigned char *view, long off) {
    if (madvise(view + off, STRETCH, 23 /* MADV_POPULATE_WRITE */) || madvise(view + off, STRETCH, MADV_DONTNEED)) {
        perror("populate"); exit(1);
    }
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: huge-pages MB MODE [WARM_MB]\n"); return 2; }
    long total = atol(argv[1]) << 20, got = 0; int mode = atoi(argv[2]);
    if (argc > 3) {
        long warm = atol(argv[3]) << 20;
        unsigned char *w = mmap(0, warm + STRETCH, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        w = (unsigned char *)(((unsigned long)w + STRETCH - 1) & ~(STRETCH - 1));
        madvise(w, warm, MADV_HUGEPAGE);
        madvise(w, warm, 23);
        munmap(w, warm);
    }
    if (mode == 4) return 0;
    if (mode == 3) {
        int fd = huge_file(total); unsigned char *v = huge_view(fd, total);
        double t0 = now(), worst = 0;
        for (long off = 0; off < total; off += STRETCH) { double a = now(); back(v, off); if (now() - a > worst) worst = now() - a; }
        printf("mode 3: %.0f us per 2 MiB stretch backed (worst %.0f us)\n", (now() - t0) / (total / STRETCH) * 1e6, worst * 1e6);
        return 0;
    }
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
    int fd = mode == 2 ? huge_file(total) : memfd_create("land", 0);
    if (mode != 2 && ftruncate(fd, total)) return 1;
    unsigned char *view = mmap(0, total, PROT_READ, MAP_SHARED, fd, 0);
    unsigned char *hv = mode == 2 ? huge_view(fd, total) : 0;
    unsigned long sum = 0; long backed = 0;
    double t0 = now();
    if (mode == 0) { for (ssize_t r; (r = read(s, buf, sizeof buf)) > 0;) got += r; }
    else while (got < total) {
        size_t have = 0;
        while (have < run) { ssize_t r = read(s, buf + have, run - have); if (r <= 0) goto done; have += r; }
        if (mode == 2) while (backed < got + (long)run) { back(hv, backed); backed += STRETCH; }
        if (pwrite(fd, buf, run, got) != (ssize_t)run) { perror("pwrite"); return 1; }
        for (size_t i = 0; i < run; i += 64) sum += view[got + i];
        got += run;
    }
done:;
    double dt = now() - t0; wait(0);
    printf("mode %d: %ld MB in %.3f s: %.0f MB/s (sum %lu)\n", mode, got >> 20, dt, (got >> 20) / dt, sum);
    return got != total;
}
