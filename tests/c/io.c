/* io.c: system calls on shared memory. Node 0 reads a file into shared pages it does not hold
 * (homed on the last node) with read, pread and fread, and writes shared pages it does not hold
 * to files with write, pwrite and fwrite; every byte is checked, on another node and in the
 * files. Without libjia's help the kernel fails these calls with EFAULT (fread and fwrite come
 * back short) and the data is lost. It includes <assert.h> beside jia.h: C's assert macro and
 * JIAJIA 2.1's assert function, called as (assert)(cond, msg), both work. Usage: io [KIB] */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "jia.h"

#define CHECK(cond, ...) do { if (!(cond)) jia_error(__VA_ARGS__); } while (0)

static unsigned char pattern(long i, int salt) { return (unsigned char)((i * 131 + salt * 7) % 251); }

int main(int argc, char **argv)
{
    long kib = argc > 1 ? atol(argv[1]) : 512, n, i;
    if (kib < 1 || kib > 1 << 20) kib = 512;
    unsigned char *in_read, *in_pread, *in_fread, *out;
    char path[256], back[256];
    double t0;

    jia_init(argc, argv);
    n = kib * 1024;
    CHECK(n > 0, "usage: io [KIB>0]");
    in_read = (unsigned char *)jia_alloc2p(n, jiahosts - 1);
    in_pread = (unsigned char *)jia_alloc2p(n, jiahosts - 1);
    in_fread = (unsigned char *)jia_alloc2p(n, jiahosts - 1);
    out = (unsigned char *)jia_alloc2p(n, jiahosts - 1);
    snprintf(path, sizeof path, "/tmp/dsm-io-%d.in", (int)getpid());
    snprintf(back, sizeof back, "/tmp/dsm-io-%d.out", (int)getpid());
    if (jiapid == jiahosts - 1)
        for (i = 0; i < n; i++) out[i] = pattern(i, 3);
    jia_barrier();
    t0 = jia_clock();
    if (jiapid == 0) {
        FILE *f;
        int fd;
        unsigned char *local = malloc((size_t)n), *check = malloc((size_t)n);
        CHECK(local && check, "out of memory");
        for (i = 0; i < n; i++) local[i] = pattern(i, 1);
        f = fopen(path, "wb");
        CHECK(f && fwrite(local, 1, n, f) == (size_t)n && fclose(f) == 0, "writing %s", path);
        /* Into shared memory this node does not hold. */
        fd = open(path, O_RDONLY);
        CHECK(fd >= 0, "open %s", path);
        assert(fd >= 0);                     /* C's macro */
        (assert)(fd >= 0, "open failed");    /* JIAJIA 2.1's function */
        CHECK(read(fd, in_read, n) == n, "read into shared memory came back short");
        CHECK(pread(fd, in_pread, n, 0) == n, "pread into shared memory came back short");
        close(fd);
        f = fopen(path, "rb");
        CHECK(f && fread(in_fread, 1, n, f) == (size_t)n, "fread into shared memory came back short");
        /* A stream already in error keeps its flag through a short fread into shared memory,
           whatever errno an earlier call left (libjia cleared it, taking the stale EFAULT for
           this call's). */
        CHECK(fputc('x', f) == EOF && ferror(f), "a write to a stream opened for reading sets its error");
        errno = EFAULT;
        CHECK(fread(in_fread, 1, 16, f) == 0 && feof(f), "fread at the end of %s", path);
        CHECK(ferror(f), "a short fread into shared memory cleared the stream's error");
        fclose(f);
        /* From shared memory this node does not hold. */
        fd = open(back, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        CHECK(fd >= 0 && write(fd, out, n) == n, "write from shared memory came back short");
        CHECK(pwrite(fd, out, n / 2, n) == n / 2, "pwrite from shared memory came back short");
        close(fd);
        f = fopen(back, "ab");
        CHECK(f && fwrite(out + n / 2, 1, n - n / 2, f) == (size_t)(n - n / 2), "fwrite from shared memory came back short");
        fclose(f);
        f = fopen(back, "rb");
        CHECK(f && fread(check, 1, n, f) == (size_t)n, "reading %s back", back);
        for (i = 0; i < n; i++) CHECK(check[i] == pattern(i, 3), "written byte %ld", i);
        CHECK(fread(check, 1, n, f) == (size_t)n, "reading %s back", back);
        for (i = 0; i < n / 2; i++) CHECK(check[i] == pattern(i, 3), "pwritten byte %ld", i);
        for (i = 0; i < n - n / 2; i++) CHECK(check[n / 2 + i] == pattern(n / 2 + i, 3), "fwritten byte %ld", i);
        fclose(f);
        unlink(path);
        unlink(back);
        free(local);
        free(check);
    }
    jia_barrier();
    if (jiapid == jiahosts - 1)
        for (i = 0; i < n; i++) {
            CHECK(in_read[i] == pattern(i, 1), "byte %ld read into shared memory", i);
            CHECK(in_pread[i] == pattern(i, 1), "byte %ld preaded into shared memory", i);
            CHECK(in_fread[i] == pattern(i, 1), "byte %ld freaded into shared memory", i);
        }
    jia_barrier();
    if (jiapid == 0) printf("c-io OK kib=%ld nodes=%d time=%.3fs\n", kib, jiahosts, jia_clock() - t0);
    jia_exit();
    return 0;
}
