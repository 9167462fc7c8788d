/* cancel.c: threads of a C program cancelled (pthread_cancel, deferred) while they use the DSM.
 * Each round, on every node:
 *  - two workers take lock 0, add 1 to a word of each of PAGES pages homed on node 0 (faults on
 *    the other nodes), release the lock, count the round, then reach pthread_testcancel, their
 *    only cancellation point of their own; they are cancelled a few milliseconds in. The DSM's
 *    own system calls inside jia_lock, jia_unlock and the faults (write, sendmsg, epoll_wait...)
 *    are cancellation points of the C library: a cancellation acting there unwound through the
 *    runtime's frames, and the node ended with SIGABRT or SIGSEGV;
 *  - threads blocked in read() of a pipe and of a datagram socket into shared memory (which
 *    libjia receives through a private buffer), in write() of shared memory to a full pipe, in
 *    fread() and fgets() of a pipe, in readv(), recv() and recvfrom() (into shared memory and
 *    private memory: libjia's definitions, or a checked build's, are on the stack) are
 *    cancelled: these are cancellation points, so the thread must end there, PTHREAD_CANCELED,
 *    and the node go on (fread, and a checked build's readv, recv and recvfrom, aborted it: a
 *    call the compiler took for one that cannot unwind); then a datagram sent to that socket is
 *    read into the same shared buffer, whole;
 *  - a thread with asynchronous cancellation copying a private structure (memcpy: the checker's
 *    copy hooks in a checked build, which aborted the node) is cancelled;
 *  - a reader whose cancellation is asynchronous sums a word of each page (faults on every node
 *    but 0) and is cancelled wherever it is, often inside a fault: the node goes on, pthread_join
 *    gets PTHREAD_CANCELED (glibc 2.36 gave NULL to a thread whose pending cancellation acted as
 *    the fault handler enabled it again), and its cleanup handler runs with SIGSEGV unblocked
 *    and reads a page not held (a cancellation acting at the handler's end skips sigreturn:
 *    SIGSEGV stayed blocked, and that read ended the node);
 *  - after node 0 changed every page, a thread with asynchronous cancellation that nobody
 *    cancels sums them (faults) and returns its own value, and a thread blocked in read() of a
 *    pipe, interrupted by a SIGUSR1 handler that reads other changed pages (faults inside a
 *    cancellation point of the C library), gets its byte and returns its own value: neither
 *    ended cancelled (an earlier fix sent the thread glibc's cancellation signal at each such
 *    fault, which cancelled them; a node whose signal 32 had the default action died).
 * At the end every node's rounds are summed under lock 1, and node 0 checks that each word holds
 * that sum: no increment lost or made twice by a thread cancelled inside the DSM.
 * Usage: cancel [ROUNDS] */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>
#include "jia.h"

#define PAGES 32
#define WORKERS 2
#define WORDS_PER_PAGE (4096 / sizeof(long))
#define CHECK(cond, ...) do { if (!(cond)) jia_error(__VA_ARGS__); } while (0)

static volatile long *counts; /* PAGES pages, homed on node 0 */
static volatile long *rounds_of; /* one word per node */
static volatile long *extra; /* PAGES pages, homed on node 0: what the SIGUSR1 handler reads */
static char *landing; /* 4 pages per node: where the blocked reads land */
static volatile long done[WORKERS];

static void *worker(void *arg)
{
    long me = (long)arg, r;
    for (r = 0;; r++) {
        jia_lock(0);
        for (int p = 0; p < PAGES; p++) counts[p * WORDS_PER_PAGE] += 1;
        jia_unlock(0);
        done[me] = r + 1;
        pthread_testcancel();
    }
    return NULL;
}

static volatile long sink;
static volatile int cleanup_saw_sigsegv_blocked, handler_done;

/* The async reader's cleanup: reads the last page (not held here when it was cancelled first). */
static void after_cancel(void *arg)
{
    sigset_t now;
    (void)arg;
    pthread_sigmask(SIG_BLOCK, NULL, &now);
    if (sigismember(&now, SIGSEGV)) cleanup_saw_sigsegv_blocked = 1;
    sink = counts[(PAGES - 1) * WORDS_PER_PAGE];
}

static void *async_reader(void *arg)
{
    int old;
    (void)arg;
    pthread_setcanceltype(PTHREAD_CANCEL_ASYNCHRONOUS, &old);
    pthread_cleanup_push(after_cancel, NULL);
    for (;;) {
        long sum = 0;
        for (int p = 0; p < PAGES - 1; p++) sum += counts[p * WORDS_PER_PAGE];
        sink = sum;
    }
    pthread_cleanup_pop(0);
    return NULL;
}

/* Asynchronous cancellation, never cancelled: sums the pages once and returns 42. */
static void *async_once(void *arg)
{
    int old;
    long sum = 0;
    (void)arg;
    pthread_setcanceltype(PTHREAD_CANCEL_ASYNCHRONOUS, &old);
    for (int p = 0; p < PAGES; p++) sum += counts[p * WORDS_PER_PAGE];
    pthread_setcanceltype(old, &old);
    sink = sum;
    return (void *)42;
}

static void on_usr1(int sig)
{
    long sum = 0;
    (void)sig;
    for (int p = 0; p < PAGES; p++) sum += extra[p * WORDS_PER_PAGE];
    sink = sum;
    handler_done = 1;
}

/* Blocked in read() of a pipe (a private buffer), never cancelled: returns 42 once a byte came. */
static void *interrupted_reader(void *arg)
{
    char byte;
    return (void *)(long)(read(*(int *)arg, &byte, 1) == 1 ? 42 : 7);
}

enum call { READ, WRITE, FREAD, FGETS, READV, RECV, RECVFROM };
static const char *const call_names[] = { "read", "write", "fread", "fgets", "readv", "recv", "recvfrom" };
struct blocked { enum call call; int fd; FILE *stream; char *buf; size_t n; };

static void *blocked_call(void *arg)
{
    struct blocked *b = arg;
    struct iovec iov = { b->buf, b->n };
    long r = -1;
    switch (b->call) {
    case READ: r = read(b->fd, b->buf, b->n); break;
    case WRITE: r = write(b->fd, b->buf, b->n); break;
    case FREAD: r = (long)fread(b->buf, 1, b->n, b->stream); break;
    case FGETS: r = fgets(b->buf, (int)b->n, b->stream) != NULL; break;
    case READV: r = readv(b->fd, &iov, 1); break;
    case RECV: r = recv(b->fd, b->buf, b->n, 0); break;
    case RECVFROM: r = recvfrom(b->fd, b->buf, b->n, 0, NULL, NULL); break;
    }
    /* Reached only if the call returned instead of being cancelled. */
    fprintf(stderr, "node %d: a blocked %s returned %ld (errno %d) instead of being cancelled\n",
            jiapid, call_names[b->call], r, errno);
    return NULL;
}

/* An asynchronous thread copying a private structure (calls of memcpy, through the checker's
 * copy hooks in a checked build), cancelled wherever it is. */
struct many { long w[24]; };
static struct many copy_from, copy_to;
static void *async_copier(void *arg)
{
    int old;
    (void)arg;
    pthread_setcanceltype(PTHREAD_CANCEL_ASYNCHRONOUS, &old);
    for (;;) {
        copy_to = copy_from;
        sink = copy_to.w[1];
        copy_from.w[2]++;
    }
    return NULL;
}

/* Starts a thread blocked in b's call, cancels it, and checks it ended cancelled. */
static void cancel_blocked(struct blocked *b, const char *what)
{
    pthread_t t;
    void *res;
    CHECK(pthread_create(&t, NULL, blocked_call, b) == 0, "pthread_create");
    usleep(2000);
    CHECK(pthread_cancel(t) == 0, "pthread_cancel");
    CHECK(pthread_join(t, &res) == 0, "pthread_join");
    if (res != PTHREAD_CANCELED)
        jia_error("node %d: a thread blocked in %s (%s) was not cancelled", jiapid, call_names[b->call], what);
}

int main(int argc, char **argv)
{
    int rounds, round, pipe_fds[2], full_fds[2], dgram[2], signalled[2], k;
    long total = 0;
    char *mine;
    FILE *pipe_stream;
    jia_init(argc, argv);
    rounds = argc > 1 ? atoi(argv[1]) : 10;
    counts = (volatile long *)jia_alloc(PAGES * 4096); /* the first allocation: node 0's */
    rounds_of = (volatile long *)jia_alloc(4096);
    extra = (volatile long *)jia_alloc3(PAGES * 4096, PAGES * 4096, 0);
    landing = (char *)jia_alloc(4 * 4096 * jiahosts);
    mine = landing + 4 * 4096 * jiapid;
    CHECK(pipe(pipe_fds) == 0 && pipe(full_fds) == 0, "pipe");
    CHECK(socketpair(AF_UNIX, SOCK_DGRAM, 0, dgram) == 0, "socketpair");
    CHECK(pipe(signalled) == 0, "pipe");
    pipe_stream = fdopen(pipe_fds[0], "r");
    CHECK(pipe_stream != NULL, "fdopen");
    {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_usr1;
        sa.sa_flags = SA_RESTART;
        CHECK(sigaction(SIGUSR1, &sa, NULL) == 0, "sigaction");
    }
    /* A full pipe: a write to it blocks. */
    CHECK(fcntl(full_fds[1], F_SETFL, O_NONBLOCK) == 0, "fcntl");
    {
        static char junk[4096];
        while (write(full_fds[1], junk, sizeof junk) > 0) {}
        CHECK(errno == EAGAIN, "filling a pipe");
        CHECK(fcntl(full_fds[1], F_SETFL, 0) == 0, "fcntl");
    }
    jia_barrier();

    for (round = 0; round < rounds; round++) {
        pthread_t t[WORKERS];
        void *res;
        for (k = 0; k < WORKERS; k++) {
            done[k] = 0;
            CHECK(pthread_create(&t[k], NULL, worker, (void *)(long)k) == 0, "pthread_create");
        }
        usleep(3000 + 1000 * (round % 4));
        for (k = 0; k < WORKERS; k++) CHECK(pthread_cancel(t[k]) == 0, "pthread_cancel");
        for (k = 0; k < WORKERS; k++) {
            CHECK(pthread_join(t[k], &res) == 0, "pthread_join");
            if (res != PTHREAD_CANCELED) jia_error("node %d: a worker was not cancelled", jiapid);
            total += done[k];
        }
        jia_barrier(); /* the workers' writes before the readers below */

        char private_buf[512];
        struct blocked blocked[] = {
            { READ, pipe_fds[0], NULL, mine, 8192 },
            { READ, dgram[0], NULL, mine + 4096, 8192 },
            { WRITE, full_fds[1], NULL, mine, 3 * 4096 },
            { FREAD, -1, pipe_stream, mine, 8192 },
            { FREAD, -1, pipe_stream, private_buf, sizeof private_buf },
            { FGETS, -1, pipe_stream, mine, 512 },
            { READV, pipe_fds[0], NULL, mine, 8192 },
            { RECV, dgram[0], NULL, mine + 4096, 8192 },
            { RECVFROM, dgram[0], NULL, mine + 4096, 8192 },
            { RECVFROM, dgram[0], NULL, private_buf, sizeof private_buf },
        };
        for (k = 0; k < (int)(sizeof blocked / sizeof blocked[0]); k++)
            cancel_blocked(&blocked[k], blocked[k].buf == private_buf ? "private memory" : "shared memory");

        CHECK(pthread_create(&t[0], NULL, async_copier, NULL) == 0, "pthread_create");
        usleep(300 + 100 * (round % 5));
        CHECK(pthread_cancel(t[0]) == 0, "pthread_cancel");
        CHECK(pthread_join(t[0], &res) == 0, "pthread_join");
        if (res != PTHREAD_CANCELED) jia_error("node %d: an asynchronous copier was not cancelled", jiapid);

        CHECK(pthread_create(&t[0], NULL, async_reader, NULL) == 0, "pthread_create");
        usleep(500 + 300 * (round % 7));
        CHECK(pthread_cancel(t[0]) == 0, "pthread_cancel");
        CHECK(pthread_join(t[0], &res) == 0, "pthread_join");
        if (res != PTHREAD_CANCELED) jia_error("node %d: a reader with asynchronous cancellation was not cancelled", jiapid);
        if (cleanup_saw_sigsegv_blocked)
            jia_error("node %d: a cancelled thread's cleanup ran with SIGSEGV blocked", jiapid);
        jia_barrier(); /* every reader done before node 0 writes */
        /* Node 0 changes the pages (under lock 0): the other nodes' copies go invalid at the
         * barrier, and the threads below (and the next round's reader) fault on them again. */
        if (jiapid == 0) {
            jia_lock(0);
            for (int p = 0; p < PAGES; p++) counts[p * WORDS_PER_PAGE] += 1000000;
            for (int p = 0; p < PAGES; p++) extra[p * WORDS_PER_PAGE] += 1;
            jia_unlock(0);
        }
        jia_barrier();

        CHECK(pthread_create(&t[0], NULL, async_once, NULL) == 0, "pthread_create");
        CHECK(pthread_join(t[0], &res) == 0, "pthread_join");
        if (res != (void *)42)
            jia_error("node %d: a thread with asynchronous cancellation that nobody cancelled ended with %p", jiapid, res);

        handler_done = 0;
        CHECK(pthread_create(&t[0], NULL, interrupted_reader, &signalled[0]) == 0, "pthread_create");
        usleep(2000);
        CHECK(pthread_kill(t[0], SIGUSR1) == 0, "pthread_kill");
        for (k = 0; !handler_done && k < 10000; k++) usleep(1000);
        CHECK(handler_done, "node %d: the SIGUSR1 handler did not run within 10 s", jiapid);
        CHECK(write(signalled[1], "x", 1) == 1, "write");
        CHECK(pthread_join(t[0], &res) == 0, "pthread_join");
        if (res != (void *)42)
            jia_error("node %d: a read interrupted by a handler that faults, never cancelled, ended with %p", jiapid, res);
        jia_barrier(); /* the reads above before the next round's writes */

        /* The same buffer still takes a datagram whole. */
        char msg[3000];
        for (k = 0; k < (int)sizeof msg; k++) msg[k] = (char)(k * 7 + round + jiapid);
        CHECK(send(dgram[1], msg, sizeof msg, 0) == (ssize_t)sizeof msg, "send");
        CHECK(read(dgram[0], mine + 4096, 8192) == (ssize_t)sizeof msg, "node %d: read of a datagram", jiapid);
        CHECK(memcmp(mine + 4096, msg, sizeof msg) == 0, "node %d: a datagram read into shared memory differs", jiapid);
    }

    jia_lock(1);
    rounds_of[jiapid] = total;
    jia_unlock(1);
    jia_barrier();
    if (jiapid == 0) {
        long sum = 0;
        for (k = 0; k < jiahosts; k++) sum += rounds_of[k];
        sum += 1000000L * rounds;
        for (int p = 0; p < PAGES; p++)
            CHECK(counts[p * WORDS_PER_PAGE] == sum, "page %d counts %ld increments, the nodes made %ld",
                  p, counts[p * WORDS_PER_PAGE], sum);
        printf("c-cancel OK rounds=%d increments=%ld nodes=%d\n", rounds, sum - 1000000L * rounds, jiahosts);
    }
    jia_exit();
    return 0;
}
