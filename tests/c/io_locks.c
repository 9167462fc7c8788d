/* io_locks.c: system calls on shared memory while another thread of the node takes locks.
 * Node 1's thread S writes 384 pages homed on node 0 to a file with write (fwrite every other
 * round) and reads a file into 128 other pages with read (fread every other round), ROUNDS
 * times, checking every byte; meanwhile its thread L takes and releases lock 0 in a loop, and
 * node 0 writes word 0 of S's source pages under lock 0, so each of L's acquires takes those
 * pages away from node 1 and each release write-protects what S's reads made writable, however
 * soon after libjia made them ready for the kernel. libjia makes the pages ready again and goes
 * on with the rest; it gave up after four tries (a read failed with EFAULT) or returned a short
 * count (a write of 1.5 MB came back after 4 KB). Each round S also reads datagrams into the
 * pages it reads files into, from a socket pair's other end: a datagram the kernel could not copy
 * is dropped, and libjia lost one at each try (the read failed after five). Usage: io_locks
 * [ROUNDS] (2 nodes or more) */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "jia.h"

#define WORDS 512
#define SRC_PAGES 384
#define DST_PAGES 128
#define CHECK(cond, ...) do { if (!(cond)) jia_error(__VA_ARGS__); } while (0)

static volatile uint64_t *a, *flag;
static int rounds;
static volatile int done;
static long failures;

static uint64_t word(long i) { return (uint64_t)i * 0x9e3779b97f4a7c15ULL; }

static void *locker(void *unused)
{
    (void)unused;
    while (!done) {
        jia_lock(0);
        jia_unlock(0);
        usleep(200);
    }
    return NULL;
}

/* Moves len bytes between the file fd and buf in shared memory: write (reading: read), or in
 * odd rounds fwrite (fread) on an unbuffered stream of the same file. Says and counts a call
 * that moved fewer; returns whether it moved them all. */
static int moved_all(int fd, char *buf, long len, int round, int reading)
{
    static const char *names[2][2] = {{"write from", "fwrite from"}, {"read into", "fread into"}};
    int stdio = round % 2;
    ssize_t k;
    errno = 0;
    if (!stdio) {
        k = reading ? read(fd, buf, len) : write(fd, buf, len);
    } else {
        FILE *f = fdopen(dup(fd), reading ? "r" : "w");
        CHECK(f, "fdopen");
        setvbuf(f, NULL, _IONBF, 0);
        k = (ssize_t)(reading ? fread(buf, 1, len, f) : fwrite(buf, 1, len, f));
        fclose(f);
    }
    if (k == len) return 1;
    printf("round %d: %s shared memory: %ld of %ld bytes (errno %d)\n", round,
           names[reading][stdio], (long)k, len, errno);
    failures++;
    return 0;
}

#define DATAGRAMS 8
#define DATAGRAM_BYTES (16 * 1024)

/* Sends DATAGRAMS datagrams of round r from a private buffer, each read right after into buf in
 * shared memory (non-blocking: a datagram lost is a failure, not a wait); says and counts each
 * that did not arrive whole. */
static void datagrams(char *buf, int r)
{
    static char out[DATAGRAM_BYTES];
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK, 0, sv) == 0, "socketpair");
    for (int m = 0; m < DATAGRAMS; m++) {
        char *at = buf + (long)m * DATAGRAM_BYTES;
        ssize_t k;
        for (int j = 0; j < DATAGRAM_BYTES; j++) out[j] = (char)(r * 31 + m * 7 + j);
        CHECK(send(sv[0], out, DATAGRAM_BYTES, 0) == DATAGRAM_BYTES, "send");
        errno = 0;
        k = read(sv[1], at, DATAGRAM_BYTES);
        if (k != DATAGRAM_BYTES || memcmp(at, out, DATAGRAM_BYTES) != 0) {
            printf("round %d: datagram %d read into shared memory: %ld of %d bytes (errno %d)\n", r,
                   m, (long)k, DATAGRAM_BYTES, errno);
            failures++;
        }
    }
    close(sv[0]);
    close(sv[1]);
}

static void *mover(void *unused)
{
    long len = SRC_PAGES * 4096L, rlen = DST_PAGES * 4096L, j;
    uint64_t *back = malloc(len), *in = malloc(rlen);
    char path[256];
    (void)unused;
    CHECK(back && in, "out of memory");
    snprintf(path, sizeof path, "/tmp/dsm-io-locks-%d", (int)getpid());
    for (int r = 0; r < rounds; r++) {
        int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
        char *dst = (char *)(a + SRC_PAGES * WORDS);
        CHECK(fd >= 0, "open %s", path);
        if (moved_all(fd, (char *)a, len, r, 0)) {
            if (pread(fd, back, len, 0) != len) {
                printf("round %d: the file holds less than was written\n", r);
                failures++;
            } else {
                for (j = 0; j < len / 8; j++)
                    if (j % WORDS && back[j] != word(j)) {
                        printf("round %d: word %ld written as %llx\n", r, j,
                               (unsigned long long)back[j]);
                        failures++;
                        break;
                    }
            }
        }
        for (j = 0; j < rlen / 8; j++) in[j] = ((uint64_t)r << 48) ^ word(j);
        CHECK(pwrite(fd, in, rlen, 0) == rlen && lseek(fd, 0, SEEK_SET) == 0, "writing the file");
        if (moved_all(fd, dst, rlen, r, 1) && memcmp(dst, in, rlen) != 0) {
            printf("round %d: bytes read into shared memory differ\n", r);
            failures++;
        }
        close(fd);
        datagrams(dst, r);
    }
    unlink(path);
    free(back);
    free(in);
    done = 1;
    return NULL;
}

int main(int argc, char **argv)
{
    long i;
    jia_init(argc, argv);
    rounds = argc > 1 ? atoi(argv[1]) : 20;
    CHECK(jiahosts >= 2 && rounds > 0, "usage: io_locks [ROUNDS>0], on 2 nodes or more");
    a = (uint64_t *)jia_alloc2p((SRC_PAGES + DST_PAGES) * 4096L, 0);
    flag = (uint64_t *)jia_alloc2p(4096, 0);
    if (jiapid == 0)
        for (i = 0; i < (SRC_PAGES + DST_PAGES) * WORDS; i++) a[i] = word(i);
    jia_barrier();
    double t0 = jia_clock();
    if (jiapid == 1) {
        pthread_t s, l;
        pthread_create(&l, NULL, locker, NULL);
        pthread_create(&s, NULL, mover, NULL);
        pthread_join(s, NULL);
        pthread_join(l, NULL);
        jia_lock(0);
        *flag = 1;
        jia_unlock(0);
    } else if (jiapid == 0) {
        for (uint64_t k = 1;; k++) {
            int stop;
            jia_lock(0);
            for (i = 1; i < SRC_PAGES; i += 3) a[i * WORDS] = k;
            stop = *flag != 0;
            jia_unlock(0);
            if (stop) break;
            usleep(300);
        }
    }
    jia_barrier();
    if (jiapid == 1) {
        CHECK(failures == 0, "%ld calls on shared memory failed, came back short or moved wrong bytes", failures);
        printf("c-io_locks OK rounds=%d nodes=%d time=%.3fs\n", rounds, jiahosts, jia_clock() - t0);
    }
    jia_exit();
    return 0;
}
