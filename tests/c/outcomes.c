/* outcomes.c: programs that end badly on purpose, one per case, for the outcome tests
 * (tests/tests/outcomes.rs): each case is a mistake a user makes with threads inside nodes, forked
 * children or exit statuses, and the test checks the line and status the job ends with.
 * Usage: outcomes CASE [ARG] */
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>
#include "jia.h"

static int team_count;

static void *in_team(void *arg)
{
    (void)arg;
    jia_barrier_threads(team_count);
    return NULL;
}

/* `threads` threads of this node each call jia_barrier_threads(count), joined by the main thread. */
static void team(int threads, int count)
{
    pthread_t t[64];
    int i;
    team_count = count;
    for (i = 0; i < threads; i++) pthread_create(&t[i], NULL, in_team, NULL);
    for (i = 0; i < threads; i++) pthread_join(t[i], NULL);
}

static void *plain_barrier(void *arg)
{
    (void)arg;
    jia_barrier();
    return NULL;
}

/* A true deadlock: node 0 holds lock 1 while its two threads wait in a barrier of threads, which
 * waits for node 1, which waits for lock 1. Node 0's main thread sits in pthread_join. */
static void deadlock(void)
{
    jia_barrier();
    if (jiapid == 0) {
        jia_lock(1);
        jia_barrier();
        team(2, 2);
        jia_unlock(1);
    } else {
        jia_barrier();
        jia_lock(1);
        jia_unlock(1);
        team(2, 2);
    }
}

static pthread_mutex_t first = PTHREAD_MUTEX_INITIALIZER, second = PTHREAD_MUTEX_INITIALIZER;
static pthread_barrier_t both_hold;

/* Takes one mutex, waits until the other thread holds the other, then takes that one. */
static void *take_both(void *arg)
{
    int mine = arg != NULL;
    pthread_mutex_lock(mine ? &second : &first);
    pthread_barrier_wait(&both_hold);
    pthread_mutex_lock(mine ? &first : &second);
    return NULL;
}

/* Node 0's two threads take two mutexes in opposite orders while its main thread joins them:
 * no thread of node 0 is in a DSM call, and node 1 waits in jia_barrier for it. Each node
 * prints a line first, left in stdio's buffer (stdout is a pipe). */
static void mutexes(void)
{
    printf("node %d before the hang\n", jiapid);
    jia_barrier();
    if (jiapid == 0) {
        pthread_t a, b;
        pthread_barrier_init(&both_hold, NULL, 2);
        pthread_create(&a, NULL, take_both, NULL);
        pthread_create(&b, NULL, take_both, (void *)1);
        pthread_join(a, NULL);
        pthread_join(b, NULL);
    }
    jia_barrier();
}

static void lock_in_handler(int sig)
{
    (void)sig;
    jia_lock(2);
    jia_unlock(2);
}

/* A SIGALRM handler makes a DSM call while node 0's thread waits in jia_barrier (node 1 comes a
 * second later): the handler's call is refused by name. */
static void nested(void)
{
    jia_barrier();
    if (jiapid == 0) {
        struct itimerval once = {{0, 0}, {0, 100000}};
        signal(SIGALRM, lock_in_handler);
        setitimer(ITIMER_REAL, &once, NULL);
    } else {
        sleep(1);
    }
    jia_barrier();
}

/* jia_barrier from one thread while another waits in jia_barrier_threads(2). */
static void mixed(void)
{
    pthread_t a, b;
    team_count = 2;
    pthread_create(&a, NULL, in_team, NULL);
    pthread_create(&b, NULL, plain_barrier, NULL);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
}

/* A forked child of node 0 makes a DSM call; the parent waits for it, then the job goes on. */
static void forked(const char *call)
{
    pid_t pid;
    int status, *shared = (int *)jia_alloc(4096);
    if (jiapid == 0) shared[0] = 7;
    jia_barrier();
    if (jiapid == 0) {
        fflush(stdout);
        pid = fork();
        if (pid == 0) {
            char buf[8] = "hi";
            if (!strcmp(call, "lock")) jia_lock(0);
            else if (!strcmp(call, "send")) jia_send(buf, 3, 1, 5);
            else if (!strcmp(call, "barrier")) jia_barrier();
            else if (!strcmp(call, "exit")) jia_exit();
            else if (!strcmp(call, "return")) exit(0); /* leaving main: no call of its own */
            printf("child went on after %s\n", call);
            exit(0);
        }
        if (waitpid(pid, &status, 0) != pid) { perror("waitpid"); exit(1); }
        printf("child status %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
    }
    jia_barrier();
    printf("fork OK node %d value %d\n", jiapid, shared[0]);
    jia_exit();
}

/* Each node starts processes that would outlive it: a child (fork) running a shell that leaves
 * a sleep behind, each pid printed. With `kill`, node 1 then dies of SIGKILL, leaving its own to
 * the launcher. */
static void orphans(const char *how)
{
    pid_t pid = fork();
    if (pid == 0) {
        /* The grandchild's pid, then a sleep that outlives the node. */
        execlp("sh", "sh", "-c", "sleep 300 & echo orphan $!; sleep 300", (char *)NULL);
        _exit(127);
    }
    printf("orphan %d\n", (int)pid);
    fflush(stdout);
    sleep(1);
    jia_barrier();
    if (!strcmp(how, "kill") && jiapid == 1) raise(SIGKILL);
    jia_exit();
}

/* Node 1 takes more memory than its cgroup allows (the test sets the limit). */
static void oom(void)
{
    jia_barrier();
    if (jiapid == 1) {
        long mb;
        for (mb = 0; mb < 16384; mb++) {
            char *p = malloc(1 << 20);
            if (!p) break;
            memset(p, 1, 1 << 20);
        }
    }
    jia_barrier();
}

/* Every node says it waits, then sleeps (for the tests that signal the launcher). */
/* Node 1's second thread calls exit(0) a second after its main thread went into jia_barrier
 * (node 0 comes to the barrier later). */
static volatile int in_barrier;

static void *exit_soon(void *arg)
{
    (void)arg;
    while (!in_barrier) usleep(1000);
    sleep(1);
    exit(0);
}

/* Node 1's second thread keeps taking lock 1 while its main thread leaves the job, and then
 * waits for that thread (which never ends: its calls are refused). */
static int *counted;
static volatile int leaving;

static void *keep_locking(void *arg)
{
    (void)arg;
    while (!leaving) usleep(1000);
    for (;;) {
        jia_lock(1);
        counted[0]++;
        jia_unlock(1);
    }
    return NULL;
}

static void exit_under_a_worker(void)
{
    pthread_t t;
    counted = (int *)jia_alloc(4096);
    jia_barrier();
    if (jiapid == 1) pthread_create(&t, NULL, keep_locking, NULL);
    leaving = 1;
    jia_exit();
    if (jiapid == 1) pthread_join(t, NULL);
}

static void thread_exit(void)
{
    pthread_t t;
    if (jiapid == 1) pthread_create(&t, NULL, exit_soon, NULL);
    else sleep(4);
    in_barrier = 1;
    jia_barrier();
}

/* Node 1 waits on a semaphore of its own that its SIGALRM handler posts 6 s later (sem_post is
 * async-signal-safe), node 0 in a barrier meanwhile: a correct program, which the deadlock
 * detection took for a node whose threads wait for each other. */
static sem_t alarmed;
static void post_alarmed(int s) { (void)s; sem_post(&alarmed); }
static void alarm_posts(void)
{
    sem_init(&alarmed, 0, 0);
    signal(SIGALRM, post_alarmed);
    if (jiapid == 1) {
        alarm(6);
        while (sem_wait(&alarmed) != 0) continue;
    }
    jia_barrier();
    if (jiapid == 0) printf("alarm_posts OK\n");
}

/* Node 0's threads deadlock on two mutexes (as `mutexes`) while a periodic SIGALRM (every 200 ms)
 * ticks a counter: the handler keeps running, and wakes nobody. */
static volatile sig_atomic_t ticks;
static void tick(int s) { (void)s; ticks++; }
static void ticking_mutexes(void)
{
    if (jiapid == 0) {
        struct itimerval every = {{0, 200000}, {0, 200000}};
        signal(SIGALRM, tick);
        setitimer(ITIMER_REAL, &every, NULL);
    }
    mutexes();
}

/* Node 1 waits on a semaphore that its periodic SIGALRM handler (every second) posts at the fifth
 * tick, node 0 in a barrier meanwhile: a correct program, longer than the plain verdict's wait. */
static void tick_posts(int s)
{
    (void)s;
    if (++ticks == 5) sem_post(&alarmed);
}
static void ticks_post(void)
{
    sem_init(&alarmed, 0, 0);
    if (jiapid == 1) {
        struct itimerval every = {{1, 0}, {1, 0}}, off = {{0, 0}, {0, 0}};
        signal(SIGALRM, tick_posts);
        setitimer(ITIMER_REAL, &every, NULL);
        while (sem_wait(&alarmed) != 0) continue;
        setitimer(ITIMER_REAL, &off, NULL);
    }
    jia_barrier();
    if (jiapid == 0) printf("ticks_post OK\n");
}

/* Node 1 waits on a semaphore its SIGCHLD handler posts when a child that sleeps ARG seconds
 * ends, node 0 in a barrier meanwhile: a correct program (the child's end wakes it). */
static void child_ends(int s)
{
    (void)s;
    sem_post(&alarmed);
}
static void child_posts(const char *arg)
{
    sem_init(&alarmed, 0, 0);
    if (jiapid == 1) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = child_ends;
        sa.sa_flags = SA_RESTART;
        sigaction(SIGCHLD, &sa, NULL);
        pid_t child = fork();
        if (child < 0) jia_error("fork: %s", strerror(errno));
        if (child == 0) {
            sleep((unsigned)atoi(arg));
            _exit(0);
        }
        while (sem_wait(&alarmed) != 0) continue;
        waitpid(child, NULL, 0);
    }
    jia_barrier();
    if (jiapid == 0) printf("child_posts OK\n");
}

/* Node 1 spins on a flag only node 0 sets, after a barrier node 1 never reaches (`spin`: atomic
 * loads; `spinlock`: node 0 holds a spin lock of shared memory, node 1's compare-exchanges fail;
 * `spin_usleep`, `spin_sleep`: atomic loads with usleep(1000) or sleep(1) between them;
 * `taslock`: a test-and-set lock's exchanges of 1, each reading the 1 node 0 holds).
 * `poll`: node 1 polls the flag between pieces of private work of about a millisecond, for ARG
 * seconds, then goes on: a correct program, not a spin. `spin_alarm`: node 1 spins until the
 * flag is set or its SIGALRM handler, ARG seconds on (`alarm`), says to stop: correct too.
 * `stream`: node 1 polls the flag between lines a child writes on a pipe every 0.3 s for ARG
 * seconds, then goes on: correct too (it waits for the pipe, not the flag). `stream_sem`: the
 * same with a process-shared semaphore a child posts every 0.3 s (the futex of a semaphore in
 * shared memory another process may post). */
static volatile double sink;
static volatile sig_atomic_t rang;
static void ring(int s)
{
    (void)s;
    rang = 1;
}
static void spins(const char *how, const char *arg)
{
    volatile unsigned int *word = (volatile unsigned int *)jia_alloc(4096);
    if (jiapid == 0 && (!strcmp(how, "spinlock") || !strcmp(how, "taslock")))
        jia_atomic_store_32(word, 1, __ATOMIC_RELEASE);
    jia_barrier();
    if (jiapid == 1 && !strcmp(how, "spin"))
        while (jia_atomic_load_32(word, __ATOMIC_ACQUIRE) == 0) continue;
    if (jiapid == 1 && !strcmp(how, "spin_usleep"))
        while (jia_atomic_load_32(word, __ATOMIC_ACQUIRE) == 0) usleep(1000);
    if (jiapid == 1 && !strcmp(how, "spin_sleep"))
        while (jia_atomic_load_32(word, __ATOMIC_ACQUIRE) == 0) sleep(1);
    if (jiapid == 1 && !strcmp(how, "spinlock")) {
        unsigned int expected = 0;
        while (!jia_atomic_compare_exchange_32(word, &expected, 1, __ATOMIC_ACQ_REL)) expected = 0;
    }
    if (jiapid == 1 && !strcmp(how, "taslock"))
        while (jia_atomic_exchange_32(word, 1, __ATOMIC_ACQ_REL) != 0) continue;
    if (jiapid == 1 && !strcmp(how, "spin_alarm")) {
        signal(SIGALRM, ring);
        alarm((unsigned)atoi(arg));
        while (jia_atomic_load_32(word, __ATOMIC_ACQUIRE) == 0 && !rang) continue;
    }
    if (jiapid == 1 && !strcmp(how, "stream")) {
        /* A line every 0.3 s for ARG seconds from a child: polls between reads of a pipe. */
        char cmd[160], line[64];
        snprintf(cmd, sizeof cmd,
                 "i=0; while [ $i -lt %d ]; do echo $i; sleep 0.3; i=$((i+1)); done",
                 (int)(atof(arg) / 0.3));
        FILE *p = popen(cmd, "r");
        if (!p) jia_error("popen: %s", strerror(errno));
        while (jia_atomic_load_32(word, __ATOMIC_ACQUIRE) == 0 && fgets(line, sizeof line, p))
            continue;
        pclose(p);
    }
    if (jiapid == 1 && !strcmp(how, "stream_sem")) {
        /* A post every 0.3 s for ARG seconds from a child: polls between waits on a semaphore
         * of memory shared with it. */
        int posts = (int)(atof(arg) / 0.3);
        sem_t *s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (s == MAP_FAILED || sem_init(s, 1, 0) != 0) jia_error("a shared semaphore: %s", strerror(errno));
        pid_t child = fork();
        if (child < 0) jia_error("fork: %s", strerror(errno));
        if (child == 0) {
            for (int i = 0; i < posts; i++) {
                usleep(300000);
                sem_post(s);
            }
            _exit(0);
        }
        for (int i = 0; i < posts && jia_atomic_load_32(word, __ATOMIC_ACQUIRE) == 0; i++)
            while (sem_wait(s) != 0 && errno == EINTR) continue;
        waitpid(child, NULL, 0);
    }
    if (jiapid == 1 && !strcmp(how, "poll")) {
        double t0 = jia_clock();
        while (jia_atomic_load_32(word, __ATOMIC_ACQUIRE) == 0 && jia_clock() - t0 < atof(arg)) {
            double x = 0;
            for (int i = 0; i < 400000; i++) x += i * 0.5;
            sink = x;
        }
    }
    jia_barrier();
    if (jiapid == 0) {
        jia_atomic_store_32(word, 1, __ATOMIC_RELEASE);
        printf("%s OK\n", how);
    }
}

/* Node 1 waits for node 0's write on plain loads of a copy it holds (`plain_spin`; with
 * `written_spin`, every node but 0 does, having written a word of its own on the flag's page;
 * with `locks_spin`, another thread of node 1 takes and releases lock 0 every 0.5 s meanwhile),
 * or computes alone for ARG seconds reading a shared word nobody changes, node 0 having written
 * the word beside it, in its 64-byte line (`alone`), while node 0 waits in a barrier. */
static volatile int plain_done;
static void *plain_locks(void *arg)
{
    (void)arg;
    while (!plain_done) {
        jia_lock(0); /* managed by node 0: its acknowledgements wait for the next request */
        jia_unlock(0);
        usleep(500000);
    }
    return NULL;
}
static void plain(const char *how, const char *arg)
{
    volatile int *flag = (volatile int *)jia_alloc(4096);
    int locks = !strcmp(how, "locks_spin");
    int spin = !strcmp(how, "plain_spin") || !strcmp(how, "written_spin") || locks;
    pthread_t locker;
    jia_barrier();
    if (jiapid > 0 && flag[0] != 0) printf("flag set early\n");
    jia_barrier();
    if (jiapid == 0 && spin) flag[0] = 1; /* no release before the barrier */
    if (jiapid == 0 && !strcmp(how, "alone")) flag[1] = 1;
    if (jiapid > 0 && !strcmp(how, "written_spin")) flag[100 + jiapid] = jiapid;
    if (jiapid == 1 && locks) pthread_create(&locker, NULL, plain_locks, NULL);
    if ((jiapid == 1 && spin) || (jiapid > 0 && !strcmp(how, "written_spin")))
        while (!flag[0]) continue;
    if (jiapid == 1 && locks) {
        plain_done = 1;
        pthread_join(locker, NULL);
    }
    if (jiapid == 1 && !strcmp(how, "alone")) {
        double t0 = jia_clock(), x = 0;
        while (jia_clock() - t0 < atof(arg))
            for (int i = 0; i < 100000; i++) x += flag[0] + i * 0.5;
        sink = x;
    }
    jia_barrier();
    if (!strcmp(how, "written_spin"))
        for (int n = 1; n < jiahosts; n++)
            if (flag[100 + n] != n) printf("node %d lost node %d's write\n", jiapid, n);
    if (jiapid == 0) printf("%s OK\n", how);
}

/* Node 1 holds lock 1 and waits on plain loads of its own home page for node 0's write, which
 * node 0 makes and then, without releasing it, asks for lock 1 (`unreleased_spin`). */
static void unreleased(void)
{
    volatile int *flag = (volatile int *)jia_alloc2p(4096, 1);
    jia_barrier();
    if (jiapid == 1) jia_lock(1);
    jia_barrier();
    if (jiapid == 0) {
        flag[0] = 1;
        jia_lock(1);
        jia_unlock(1);
    }
    if (jiapid == 1) {
        while (!flag[0]) continue;
        jia_unlock(1);
    }
    jia_barrier();
    if (jiapid == 0) printf("unreleased_spin OK\n");
}

/* Nodes 0 and 1 hand a flag back and forth on plain loads, neither in a DSM call: node 0
 * writes ping and waits for pong, node 1 waits for ping and writes pong. `handshake`: both
 * words on one page, homed at node 0, which node 1 holds a copy of; `handshake_homes`: ping
 * homed at node 1, pong at node 0 (node 0's write of ping stays in its copy until it is sent
 * home); `handshake_served`: as `handshake`, but pong is a word homed at node 1, which node 0
 * waits for with atomic loads (node 1 serves them) and node 1 stores atomically. */
static void handshake(const char *how)
{
    int homes = !strcmp(how, "handshake_homes"), served = !strcmp(how, "handshake_served");
    volatile int *ping = (volatile int *)(homes ? jia_alloc2p(4096, 1) : jia_alloc(4096));
    volatile int *pong = homes || served ? (volatile int *)jia_alloc2p(4096, !homes) : ping + 16;
    jia_barrier();
    if (jiapid == 1 && *ping != 0) printf("ping set early\n");
    jia_barrier();
    if (jiapid == 0) {
        *ping = 1;
        if (served)
            while (!jia_atomic_load_32((unsigned int *)pong, __ATOMIC_ACQUIRE)) continue;
        while (!*pong) continue;
    }
    if (jiapid == 1) {
        while (!*ping) continue;
        if (served)
            jia_atomic_store_32((unsigned int *)pong, 1, __ATOMIC_RELEASE);
        else
            *pong = 1;
    }
    jia_barrier();
    if (jiapid == 0) printf("%s OK\n", how);
}

static void nap(void)
{
    jia_barrier();
    printf("napping node %d\n", jiapid);
    fflush(stdout);
    sleep(120);
}

/* Node 1 ends with `status` without jia_exit (exit or return from main) while the others wait
 * for it in a barrier. */
static int exits(int status, int how)
{
    jia_barrier();
    if (jiapid == 1) {
        if (how == 0) exit(status);
        return status;
    }
    jia_barrier();
    printf("node %d went on\n", jiapid);
    jia_exit();
    return 0;
}

/* Node 0 prints, every node leaves the job, then node 1 returns 5. */
static int after_exit(void)
{
    printf("node %d printed before jia_exit\n", jiapid);
    jia_exit();
    return jiapid == 1 ? 5 : 0;
}

/* A write past the end of an allocation, still inside the shared region. */
static void overrun(void)
{
    char *a = (char *)jia_alloc(4096);
    jia_barrier();
    if (jiapid == 0) a[40960 + 8] = 1;
    jia_barrier();
    jia_exit();
}

/* Node 0 shrinks the memory file behind the shared region to nothing (found as the descriptor
 * whose file is the one mapped at an allocation), then writes a page of it: a bus error. */
static void shrink(void)
{
    char *a = (char *)jia_alloc(4096 * jiahosts);
    char line[512], path[64];
    unsigned long lo, hi, dev_major, dev_minor, inode = 0;
    struct stat st;
    FILE *maps;
    int fd;
    jia_barrier();
    if (jiapid == 0) {
        maps = fopen("/proc/self/maps", "r");
        while (maps && fgets(line, sizeof line, maps))
            if (sscanf(line, "%lx-%lx %*s %*x %lx:%lx %lu", &lo, &hi, &dev_major, &dev_minor, &inode) == 5
                && (unsigned long)a >= lo && (unsigned long)a < hi)
                break;
        for (fd = 0; fd < 1024; fd++) {
            snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
            if (stat(path, &st) == 0 && st.st_ino == inode && S_ISREG(st.st_mode) && st.st_size > 0) {
                if (ftruncate(fd, 0) != 0) jia_error("ftruncate failed");
                break;
            }
        }
        if (fd == 1024) jia_error("no descriptor of the memory file");
        a[0] = 1;
    }
    jia_barrier();
    jia_exit();
}

int main(int argc, char **argv)
{
    const char *what = argc > 1 ? argv[1] : "";
    const char *arg = argc > 2 ? argv[2] : "";
    if (!strcmp(what, "lock_before_init")) jia_lock(1);
    /* Node 1 has nothing to do, it decides before it joins (DSM_RANK: its node number). */
    if (!strcmp(what, "return_before_init") && getenv("DSM_RANK") && atoi(getenv("DSM_RANK")) == 1)
        return 0;
    jia_init(argc, argv);
    if (!strcmp(what, "deadlock")) deadlock();
    else if (!strcmp(what, "mutexes")) mutexes();
    else if (!strcmp(what, "nested")) nested();
    else if (!strcmp(what, "team_short")) team(2, 3);
    else if (!strcmp(what, "waitcv")) jia_waitcv(5); /* nobody sets it */
    else if (!strcmp(what, "thread_exit")) thread_exit();
    else if (!strcmp(what, "exit_under_a_worker")) exit_under_a_worker();
    else if (!strcmp(what, "alarm_posts")) alarm_posts();
    else if (!strcmp(what, "ticking_mutexes")) ticking_mutexes();
    else if (!strcmp(what, "ticks_post")) ticks_post();
    else if (!strcmp(what, "child_posts")) child_posts(arg);
    else if (!strcmp(what, "spin") || !strcmp(what, "spinlock") || !strcmp(what, "poll") ||
             !strcmp(what, "spin_alarm") || !strcmp(what, "spin_usleep") ||
             !strcmp(what, "spin_sleep") || !strcmp(what, "stream") ||
             !strcmp(what, "taslock") || !strcmp(what, "stream_sem")) spins(what, arg);
    else if (!strcmp(what, "unreleased_spin")) unreleased();
    else if (!strcmp(what, "handshake") || !strcmp(what, "handshake_homes") ||
             !strcmp(what, "handshake_served")) handshake(what);
    else if (!strcmp(what, "plain_spin") || !strcmp(what, "written_spin") ||
             !strcmp(what, "locks_spin") ||
             !strcmp(what, "alone")) plain(what, arg);
    else if (!strcmp(what, "bcast_roots")) { /* every node names itself the root */
        char b[8] = "x";
        jia_bcast(b, sizeof b, jiapid);
    }
    else if (!strcmp(what, "free_stack")) { int x; jia_free(&x); }
    else if (!strcmp(what, "array_none")) jia_alloc_array(100, NULL, 3);
    else if (!strcmp(what, "team_mixed")) mixed();
    else if (!strcmp(what, "team_huge")) team(1, 100000);
    else if (!strcmp(what, "team_counts")) team(1 + jiapid, 1 + jiapid);
    else if (!strcmp(what, "fork")) forked(arg);
    else if (!strcmp(what, "orphans")) orphans(arg);
    else if (!strcmp(what, "oom")) oom();
    else if (!strcmp(what, "nap")) nap();
    else if (!strcmp(what, "exit")) return exits(atoi(arg), 0);
    else if (!strcmp(what, "return")) return exits(atoi(arg), 1);
    else if (!strcmp(what, "after_exit")) return after_exit();
    else if (!strcmp(what, "overrun")) overrun();
    else if (!strcmp(what, "shrink")) shrink();
    else if (!strcmp(what, "init_twice")) jia_init(argc, argv);
    else if (!strcmp(what, "atomic_private")) {
        static unsigned long private_word;
        jia_atomic_fetch_add_64(&private_word, 1, __ATOMIC_RELAXED);
    } else if (!strcmp(what, "store_acquire")) {
        unsigned long *w = (unsigned long *)jia_alloc(4096);
        jia_atomic_store_64(w, 1, __ATOMIC_ACQUIRE);
    } else if (!strcmp(what, "load_order_99")) {
        unsigned long *w = (unsigned long *)jia_alloc(4096);
        jia_atomic_load_64(w, 99);
    }
    else {
        fprintf(stderr, "outcomes: unknown case '%s'\n", what);
        return 2;
    }
    printf("%s done node %d\n", what, jiapid);
    jia_exit();
    return 0;
}
