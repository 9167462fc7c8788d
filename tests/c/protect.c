/* protect.c: the program changes the protection or mapping of shared memory: mprotect, munmap,
 * mremap and madvise(MADV_DONTNEED) on a page homed at node 0 are refused at the last node with
 * -1 (MAP_FAILED) and errno EPERM (libjia also says so on standard error), and the 512 writes
 * that follow the refused mprotect reach node 0 after a barrier (before the fix mprotect
 * succeeded, the writes no longer faulted, and all 512 were lost without a word; munmap
 * succeeded and the node ended later asking to raise vm.max_map_count). The same calls on the
 * program's own memory, and madvise(MADV_WILLNEED) on shared memory, are made as before.
 * madvise(MADV_HUGEPAGE) on shared memory is taken (0) and ignored: the mapping is not marked for
 * huge pages (smaps' VmFlags has no "hg"). Usage: protect */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "jia.h"

#define WRITES 512

static int failures;

static void expect_refused(long r, const char *what)
{
    if (r != -1 || errno != EPERM) {
        fprintf(stderr, "protect: node %d: %s on shared memory returned %ld (errno %d: %s), not -1 with EPERM\n",
                jiapid, what, r, errno, strerror(errno));
        failures++;
    }
}

/* Whether the mapping holding `p` is marked for huge pages (VmFlags "hg" in /proc/self/smaps). */
static int marked_huge(const void *p)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[512];
    int inside = 0, huge = 0;
    if (!f)
        jia_error("/proc/self/smaps: %s", strerror(errno));
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' '))
            inside = (unsigned long)p >= lo && (unsigned long)p < hi;
        else if (inside && strncmp(line, "VmFlags:", 8) == 0)
            huge = strstr(line, " hg") != NULL;
    }
    fclose(f);
    return huge;
}

static void expect_done(long r, const char *what)
{
    if (r == -1) {
        fprintf(stderr, "protect: node %d: %s on the program's own memory failed: %s\n", jiapid, what,
                strerror(errno));
        failures++;
    }
}

int main(int argc, char **argv)
{
    int *a, i, lost = 0, last;
    char *own, *moved;

    jia_init(argc, argv);
    a = (int *)jia_alloc2p(4096, 0);
    last = jiahosts - 1;
    if (jiapid == 0)
        for (i = 0; i < WRITES; i++)
            a[i] = -1;
    jia_barrier();
    if (jiapid == last) {
        errno = 0;
        expect_refused(mprotect(a, 4096, PROT_READ | PROT_WRITE), "mprotect(PROT_READ|PROT_WRITE)");
        for (i = 0; i < WRITES; i++)
            a[i] = i * 3 + 1;
    }
    jia_barrier();
    if (jiapid == 0) {
        for (i = 0; i < WRITES; i++)
            lost += a[i] != i * 3 + 1;
        if (lost) {
            fprintf(stderr, "protect: %d of the %d writes made after mprotect were lost\n", lost, WRITES);
            failures++;
        }
    }
    jia_barrier();
    if (jiapid == last) {
        expect_refused(munmap(a, 4096), "munmap");
        expect_refused((long)mremap(a, 4096, 8192, MREMAP_MAYMOVE), "mremap");
        expect_refused(madvise(a, 4096, MADV_DONTNEED), "madvise(MADV_DONTNEED)");
        expect_refused(mprotect((char *)a - 4096, 8192, PROT_NONE), "mprotect of a range that ends in it");
        if (madvise(a, 4096, MADV_HUGEPAGE) != 0) {
            fprintf(stderr, "protect: madvise(MADV_HUGEPAGE) on shared memory failed: %s\n", strerror(errno));
            failures++;
        }
        if (marked_huge(a)) {
            fprintf(stderr, "protect: madvise(MADV_HUGEPAGE) marked shared memory for huge pages\n");
            failures++;
        }
        if (madvise(a, 4096, MADV_WILLNEED) != 0) {
            fprintf(stderr, "protect: madvise(MADV_WILLNEED) on shared memory failed: %s\n", strerror(errno));
            failures++;
        }
        own = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (own == MAP_FAILED)
            jia_error("mmap: %s", strerror(errno));
        own[0] = 1;
        moved = mremap(own, 8192, 16384, MREMAP_MAYMOVE);
        if (moved == MAP_FAILED)
            jia_error("mremap of the program's own memory failed: %s", strerror(errno));
        if (moved[0] != 1) {
            fprintf(stderr, "protect: mremap lost the program's own byte\n");
            failures++;
        }
        expect_done(mprotect(moved, 4096, PROT_READ), "mprotect");
        expect_done(madvise(moved + 4096, 4096, MADV_DONTNEED), "madvise(MADV_DONTNEED)");
        expect_done(munmap(moved, 16384), "munmap");
        /* Shared memory still works after all that. */
        a[WRITES] = 7;
    }
    jia_barrier();
    if (jiapid == 0 && a[WRITES] != 7) {
        fprintf(stderr, "protect: a write after the refused calls was lost\n");
        failures++;
    }
    if (failures)
        jia_error("%d checks failed (above)", failures);
    jia_barrier();
    if (jiapid == 0)
        printf("c-protect OK writes=%d nodes=%d\n", WRITES, jiahosts);
    jia_exit();
    return 0;
}
