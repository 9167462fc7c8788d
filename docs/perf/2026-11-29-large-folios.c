/* Landing 256 MB of fetched runs in fresh pages of a memory file, by the kind of page the kernel
   gives the writes: 4 KiB pages of a memfd, large folios of a private tmpfs mounted
   huge=within_size, or huge pages. docs/perf/2026-11-29-large-folios.md.
   Build: gcc -O2 -o large-folios 2026-11-29-large-folios.c. Run as root (the tmpfs is made with the
   mount API in the process; the runtime enters a user namespace for other users).
   Usage: large-folios MB MODE [RUN_KIB]: pwrite MB in runs of RUN_KIB (256) into a fresh file, then
   read it back through a mapping; prints MB/s landing, reading, both, and how many folios of each
   size the kernel made for shared memory meanwhile (system-wide counters).
   MODE 0: a memfd (4 KiB pages). 1: the tmpfs file, its size following the writes (each run gets a
   folio of its own size). 2: the tmpfs file sized first (huge pages: the first write into an empty
   2 MiB stretch gets one). 4: sized first, and the last page of each 512 KiB backed with 4 KiB
   before its runs land (a page in memory keeps larger folios out around it). 5: as 4, mounted
   huge=always. 6: sized first, the first and last page of each run backed with 4 KiB first. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
static int tmpfs_file(const char *huge) {
    int fs = syscall(SYS_fsopen, "tmpfs", 1);
    if (fs < 0 || syscall(SYS_fsconfig, fs, 1, "huge", huge, 0) || syscall(SYS_fsconfig, fs, 1, "size", "0", 0) ||
        syscall(SYS_fsconfig, fs, 6, 0, 0, 0)) { perror("fsopen/fsconfig"); exit(1); }
    int mnt = syscall(SYS_fsmount, fs, 1, 0);
    int fd = openat(mnt, ".", O_TMPFILE | O_RDWR, 0600);
    if (mnt < 0 || fd < 0) { perror("fsmount/open"); exit(1); }
    close(fs); close(mnt);
    return fd;
}
static long stat_of(const char *size) {
    char p[200]; snprintf(p, sizeof p, "/sys/kernel/mm/transparent_hugepage/hugepages-%s/stats/shmem_alloc", size);
    FILE *f = fopen(p, "r"); long v = -1; if (f) { fscanf(f, "%ld", &v); fclose(f); } return v;
}
int main(int argc, char **argv) {
    long mb = atol(argv[1]); int mode = atoi(argv[2]); long run = (argc > 3 ? atol(argv[3]) : 256) << 10;
    long total = mb << 20;
    const char *sizes[] = {"16kB","32kB","64kB","128kB","256kB","512kB","1024kB","2048kB"};
    long before[8]; for (int i = 0; i < 8; i++) before[i] = stat_of(sizes[i]);
    int fd;
    if (mode == 0) { fd = memfd_create("m", 0); if (ftruncate(fd, total)) return 1; }
    else if (mode == 1) { fd = tmpfs_file("within_size"); }           /* i_size grows with the writes */
    else if (mode == 2) { fd = tmpfs_file("within_size"); if (ftruncate(fd, total)) return 1; }
    else if (mode == 3) { fd = tmpfs_file("always"); }
    else { fd = tmpfs_file(mode == 4 ? "within_size" : "always"); if (ftruncate(fd, total)) return 1; }
    unsigned char *buf = malloc(run); memset(buf, 7, run);
    volatile unsigned char *sv = 0;
    if (mode >= 4) { sv = mmap(0, total, PROT_READ, MAP_SHARED, fd, 0); if (madvise((void *)sv, total, MADV_NOHUGEPAGE)) { perror("nohuge"); return 1; } }
    double t0 = now();
    for (long off = 0; off < total; off += run) {
        if (sv && mode == 6) { (void)sv[off]; (void)sv[off + run - 4096]; }  /* the run's first and last page, 4 KiB */
        else if (sv && off % (512 << 10) == 0) (void)sv[off + (511 << 10)];  /* a 4 KiB page at the extent's last page */
        if (pwrite(fd, buf, run, off) != run) { perror("pwrite"); return 1; }
    }
    double t1 = now();
    if (mode == 1 || mode == 3) { /* the view needs the file's size; already reached */ }
    unsigned long *v = mmap(0, total, PROT_READ, MAP_SHARED, fd, 0);
    if (v == MAP_FAILED) { perror("mmap"); return 1; }
    unsigned long s = 0; for (long i = 0; i < total / 8; i++) s += v[i];
    double t2 = now();
    printf("mode %d run %ldK: land %.0f MB/s (%.2f us/page), read %.0f MB/s, both %.0f MB/s sum %lu |", mode, run >> 10,
           mb / (t1 - t0), (t1 - t0) * 1e6 / (total / 4096), mb / (t2 - t1), mb / (t2 - t0), s & 1);
    for (int i = 0; i < 8; i++) { long d = stat_of(sizes[i]) - before[i]; if (d) printf(" %s:%ld", sizes[i], d); }
    printf("\n");
    return 0;
}
