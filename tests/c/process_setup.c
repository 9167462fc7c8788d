/* process_setup.c: how a program may set its process up before jia_init.
 *  - "closed": standard error closed (a daemon's habit, a shell's 2>&-): the
 *    node's memory file was opened as descriptor 2, and the runtime's own messages (here: the
 *    line a refused mprotect of shared memory prints) landed at the start of shared memory,
 *    reaching every node ("dsm node" in place of the first word). Every node checks the words.
 *  - "timer": a SIGALRM every millisecond, started before jia_init, its handler installed
 *    without SA_RESTART: joining the job failed ("rendezvous ... Interrupted system call") and
 *    every node ended with status 2.
 * Usage: process_setup closed|timer */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <unistd.h>
#include "jia.h"

#define WORDS 2048
static volatile long alarms;
static void on_alarm(int sig) { (void)sig; alarms++; }

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "closed";
    struct itimerval every = {{0, 1000}, {0, 1000}}, never = {{0, 0}, {0, 0}};
    if (strcmp(mode, "closed") == 0) {
        close(2);
    } else {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_alarm; /* no SA_RESTART */
        sigaction(SIGALRM, &sa, NULL);
        setitimer(ITIMER_REAL, &every, NULL);
    }
    jia_init(argc, argv);
    long *a = (long *)jia_alloc(WORDS * sizeof(long));
    jia_barrier();
    if (jiapid == 0)
        for (int i = 0; i < WORDS; i++) a[i] = i * 7 + 1;
    jia_barrier();
    if (strcmp(mode, "closed") == 0 && jiapid == 0) { /* the home of a[] */
        /* Refused (shared memory): the runtime says so on descriptor 2. */
        if (mprotect(a, 4096, PROT_READ) == 0) {
            printf("c-process_setup WRONG: mprotect of shared memory was not refused\n");
            return 3;
        }
    }
    jia_barrier();
    long bad = 0;
    for (int i = 0; i < WORDS; i++) bad += a[i] != i * 7 + 1;
    setitimer(ITIMER_REAL, &never, NULL);
    if (bad) {
        printf("c-process_setup WRONG node %d: %ld words differ, the first %#lx\n", jiapid, bad, (unsigned long)a[0]);
        fflush(stdout);
        jia_error("shared memory changed under the program");
    }
    jia_barrier();
    if (jiapid == 0) printf("c-process_setup OK %s nodes=%d\n", mode, jiahosts);
    jia_exit();
    return 0;
}
