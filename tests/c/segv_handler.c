/* segv_handler.c: the program installs its own SIGSEGV handler (sigaction) and SIGBUS handler
 * (signal) after jia_init, as crash reporters, garbage collectors and libsigsegv do. The DSM's
 * handler must stay first: faults on shared memory are still served (each node writes its block
 * and reads the next node's), the previous actions the program gets back are its own (the
 * default action: it installed nothing before), and faults that are not the DSM's reach the
 * program's handler: a write to a PROT_NONE page of its own, and a read in the shared region
 * where nothing is allocated. The handler leaves by siglongjmp; any other fault it gets is
 * reported, and the node ends with status 3 (before the fix, the first fault on shared memory
 * after the handler was installed did that).
 * Usage: segv_handler [PAGES_PER_NODE] */
#define _GNU_SOURCE
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "jia.h"

static sigjmp_buf back;
static volatile sig_atomic_t armed, caught;
static char *volatile expected;

static void say(const char *s) { (void)!write(2, s, strlen(s)); }

static void on_segv(int sig, siginfo_t *si, void *ctx)
{
    (void)sig;
    (void)ctx;
    if (armed && (char *)si->si_addr == expected) {
        armed = 0;
        caught++;
        siglongjmp(back, 1);
    }
    say("segv_handler: the program's SIGSEGV handler got a fault it did not cause\n");
    _exit(3);
}

static void on_bus(int sig)
{
    (void)sig;
    say("segv_handler: the program's SIGBUS handler got a fault it did not cause\n");
    _exit(3);
}

static long value(long i) { return i * 5 + 2; }

/* A fault at `p` (a write, or a read) must reach on_segv. */
static void expect_fault(char *p, int write_it, const char *what)
{
    expected = p;
    armed = 1;
    if (!sigsetjmp(back, 1)) {
        if (write_it)
            *(volatile char *)p = 1;
        else
            (void)*(volatile char *)p;
        jia_error("%s did not reach the program's SIGSEGV handler", what);
    }
    if (armed)
        jia_error("%s: the handler was not run", what);
}

int main(int argc, char **argv)
{
    long pages = argc > 1 ? atol(argv[1]) : 8;
    long words = pages * 4096 / (long)sizeof(long), i, next;
    long *a;
    char *own;
    struct sigaction act, old, now;

    jia_init(argc, argv);
    a = (long *)jia_alloc3(jiahosts * words * sizeof(long), words * sizeof(long), 0);

    memset(&act, 0, sizeof act);
    act.sa_sigaction = on_segv;
    act.sa_flags = SA_SIGINFO;
    sigemptyset(&act.sa_mask);
    if (sigaction(SIGSEGV, &act, &old) != 0)
        jia_error("sigaction(SIGSEGV): %s", strerror(errno));
    if (old.sa_handler != SIG_DFL || (old.sa_flags & SA_SIGINFO))
        jia_error("sigaction(SIGSEGV) gave back %p (flags %#x), not the program's own previous action (SIG_DFL)",
                  (void *)old.sa_sigaction, old.sa_flags);
    if (sigaction(SIGSEGV, NULL, &now) != 0 || now.sa_sigaction != on_segv || !(now.sa_flags & SA_SIGINFO))
        jia_error("sigaction(SIGSEGV, NULL, &now) does not give the program's handler back");
    if (signal(SIGBUS, on_bus) != SIG_DFL)
        jia_error("signal(SIGBUS) did not give back SIG_DFL");
    if (signal(SIGBUS, on_bus) != on_bus)
        jia_error("signal(SIGBUS) a second time did not give back the handler set the first time");

    /* Shared memory as before: faults served by the DSM, not the program's handler. */
    for (i = jiapid * words; i < (jiapid + 1) * words; i++)
        a[i] = value(i);
    jia_barrier();
    next = (jiapid + 1) % jiahosts;
    for (i = next * words; i < (next + 1) * words; i++)
        if (a[i] != value(i))
            jia_error("word %ld of node %ld's block is %ld, not %ld", i, next, a[i], value(i));

    /* Faults that are not the DSM's. */
    own = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (own == MAP_FAILED)
        jia_error("mmap: %s", strerror(errno));
    expect_fault(own, 1, "a write to a PROT_NONE page of the program's");
    expect_fault((char *)a + (64L << 20), 0, "a read in the shared region where nothing is allocated");
    if (caught != 2)
        jia_error("the program's handler ran %d times, not 2", (int)caught);

    jia_barrier();
    if (jiapid == 0)
        printf("c-segv-handler OK pages=%ld nodes=%d\n", pages, jiahosts);
    jia_exit();
    return 0;
}
