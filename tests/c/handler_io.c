/* handler_io.c: receives into shared memory from signal handlers, which POSIX allows (read is
 * async-signal-safe). Node 0 only; SECONDS each:
 *  - a SIGALRM handler (a 200 us timer) reads a pipe into shared pages and writes the bytes back,
 *    while the main thread mallocs and frees: libjia's private buffer came from malloc, and the
 *    handler deadlocked on the allocator's lock its own thread held (the node hung);
 *  - a thread reads a pipe into shared memory in a loop while another sends it SIGUSR1, whose
 *    handler siglongjmps out of the read: a jump out of the malloc libjia had started left the
 *    allocator locked, and the thread hung in a later read.
 *    A receive left so held the thread's kept private buffer for good, and every later receive
 *    left so leaked a mapping of its own (thousands a second): the memory the process maps must
 *    not grow with the jumps.
 * Each ends by checking the pipe still holds the 64 bytes it started with (mode 0) and that a
 * read into shared memory still works. Usage: handler_io [SECONDS] */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include "jia.h"

#define CHECK(cond, ...) do { if (!(cond)) jia_error(__VA_ARGS__); } while (0)
static const char pattern[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
static char *shared;
static int fds[2];
static volatile long handled, jumps, reads;
static sigjmp_buf jump;
static volatile sig_atomic_t armed, stop;

static void on_alarm(int sig)
{
    (void)sig;
    ssize_t r = read(fds[0], shared + 100, 8192);
    if (r > 0 && write(fds[1], shared + 100, r) != r) abort();
    handled++;
}

static void on_usr1(int sig)
{
    (void)sig;
    if (!armed) return;
    armed = 0;
    jumps++;
    siglongjmp(jump, 1);
}

/* The memory mapped in this process, in KiB (VmSize of /proc/self/status). */
static long mapped_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    if (!f) return -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmSize: %ld kB", &kib) == 1) break;
    fclose(f);
    return kib;
}

static void *reader(void *arg)
{
    (void)arg;
    while (!stop) {
        if (sigsetjmp(jump, 1) == 0) {
            armed = 1;
            ssize_t r = read(fds[0], shared + 4096, 4096);
            armed = 0;
            if (r > 0) {
                if (write(fds[1], shared + 4096, r) != r) abort();
                reads++;
            } else if (write(fds[1], pattern, 32) != 32) abort();
        }
    }
    return NULL;
}

int main(int argc, char **argv)
{
    jia_init(argc, argv);
    int seconds = argc > 1 ? atoi(argv[1]) : 2;
    shared = (char *)jia_alloc2p(4 * 4096, 0);
    jia_barrier();
    if (jiapid == 0) {
        struct sigaction sa;
        CHECK(pipe(fds) == 0, "pipe");
        CHECK(write(fds[1], pattern, 64) == 64, "write");
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_alarm;
        sa.sa_flags = SA_RESTART;
        CHECK(sigaction(SIGALRM, &sa, NULL) == 0, "sigaction");
        struct itimerval every = {{0, 200}, {0, 200}}, never = {{0, 0}, {0, 0}};
        CHECK(setitimer(ITIMER_REAL, &every, NULL) == 0, "setitimer");
        long rounds = 0;
        for (time_t end = time(NULL) + seconds; time(NULL) < end; rounds++) {
            void *p[8];
            for (int i = 0; i < 8; i++) p[i] = malloc(2048 + 512 * i);
            for (int i = 0; i < 8; i++) free(p[i]);
        }
        CHECK(setitimer(ITIMER_REAL, &never, NULL) == 0, "setitimer");
        CHECK(handled > 0, "the timer's handler never ran");
        char back[128];
        CHECK(fcntl(fds[0], F_SETFL, O_NONBLOCK) == 0, "fcntl");
        CHECK(read(fds[0], back, sizeof back) == 64 && memcmp(back, pattern, 64) == 0,
              "the pipe lost or changed bytes the handler read into shared memory and wrote back");

        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_usr1;
        CHECK(sigaction(SIGUSR1, &sa, NULL) == 0, "sigaction");
        CHECK(write(fds[1], pattern, 64) == 64, "write");
        pthread_t t;
        long before = mapped_kib();
        CHECK(pthread_create(&t, NULL, reader, NULL) == 0, "pthread_create");
        long sent = 0;
        for (time_t end = time(NULL) + seconds; time(NULL) < end; sent++) {
            pthread_kill(t, SIGUSR1);
            if (sent % 16 == 0) usleep(50);
        }
        stop = 1;
        CHECK(pthread_join(t, NULL) == 0, "pthread_join");
        long after = mapped_kib();
        CHECK(jumps > 10, "only %ld jumps out of reads", (long)jumps);
        /* The thread's stack stays mapped, cached for the next thread: 8 MiB. */
        CHECK(before > 0 && after - before < 16384, "%ld jumps out of reads left %ld KiB more mapped",
              (long)jumps, after - before);
        CHECK(write(fds[1], pattern, 64) == 64, "write");
        CHECK(read(fds[0], shared + 8192, 4096) > 0, "a read into shared memory after the jumps");
        printf("c-handler_io OK handler_reads=%ld reads=%ld jumps=%ld nodes=%d\n", (long)handled,
               (long)reads, (long)jumps, jiahosts);
    }
    jia_barrier();
    jia_exit();
    return 0;
}
