/*
 * jia.h: JIAJIA's C interface on the dsm runtime.
 *
 * Build:  cc prog.c -I<repo>/jia/include -L<repo>/target/release -ljia -lpthread -ldl -lm
 *         (add -Wl,-rpath,<repo>/target/release to use libjia.so without LD_LIBRARY_PATH, or
 *          link -l:libjia.a for a static binary of the library)
 * Run:    dsmrun -n 4 ./prog ARGS      or   ./prog with a .jiahosts in the working directory
 *
 * Memory model: writes become visible to another node when it acquires a lock the writer
 * released after writing, waits on a condition variable the writer set, or passes a barrier.
 */
#ifndef JIA_H
#define JIA_H

#include <stdarg.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define Maxhosts 4096       /* nodes per job */
#define Maxlocks 64         /* locks 0..63 */
#define Maxcvs 16           /* condition variables 0..15 */
#define Pagesize 4096

extern int jiapid;          /* this node's id, 0..jiahosts-1 (valid after jia_init) */
extern int jiahosts;        /* number of nodes */

void jia_init(int argc, char **argv);
void jia_exit(void);

unsigned long jia_alloc3(int totalsize, int blocksize, int starthost);
unsigned long jia_alloc4(int totalsize, int *blocks, int n, int starthost);
unsigned long jia_alloc2(int totalsize, int blocksize);
unsigned long jia_alloc2p(int totalsize, int starthost);
unsigned long jia_alloc(int totalsize);

void jia_lock(int lockid);
void jia_unlock(int lockid);
void jia_barrier(void);
void jia_wait(void);
void jia_setcv(int cvnum);
void jia_resetcv(int cvnum);
void jia_waitcv(int cvnum);

double jia_clock(void);
unsigned int jia_startstat(void);
unsigned int jia_stopstat(void);

/* Ends the whole job: every node stops, dsmrun exits non-zero with the message. */
void jia_error_message(const char *msg);

/* jia_error(fmt, ...): printf-style message, then the whole job ends. Defined here because the
 * library is written in Rust, which cannot define a variadic C function. */
static inline void jia_error(char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    jia_error_message(buf);
}

#ifdef __cplusplus
}
#endif

#endif /* JIA_H */
