/*
 * jia.h: JIAJIA's C interface on the dsm runtime.
 *
 * Build:  <repo>/target/release/dsmcc prog.c -o prog   (from any directory; dsmcc --show prints
 *         the cc line it runs: -I<repo>/jia/include -L<repo>/target/release -ljia -lpthread -ldl
 *         -lm -Wl,-rpath,<repo>/target/release, all absolute; --static-jia links libjia.a)
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
#define Maxlocks 64         /* locks 0 to 63 */
#define Maxcvs 64           /* condition variables 0 to 63 (JIAJIA: 16) */
#define Pagesize 4096

/* This node's id, 0 to hostc-1, and the number of nodes (valid after jia_init). JIAJIA 2.1's names
 * are the variables; jiapid and jiahosts are macros for them, so both spellings work. */
extern int jia_pid;
extern int hostc;
#define jiapid jia_pid
#define jiahosts hostc

void jia_init(int argc, char **argv);
void jia_exit(void);

/* Allocation is collective: every node makes the same calls in the same order and gets the same
 * address. Sizes are rounded up to pages. */
unsigned long jia_alloc3(int totalsize, int blocksize, int starthost); /* blocks dealt in turn */
unsigned long jia_alloc4(int totalsize, int *blocks, int n, int starthost); /* block sizes given */
unsigned long jia_alloc2(int totalsize, int blocksize);      /* jia_alloc3(.., .., 0) */
unsigned long jia_alloc2p(int totalsize, int starthost);     /* all homed on starthost */
unsigned long jia_alloc(int totalsize);                      /* all on one node, in turn per call */
unsigned long jia_alloc1(int totalsize);                     /* 2.1: all homed on node 0 */
unsigned long jia_alloc_random(int totalsize);               /* 3.0: all on one node drawn at random */
unsigned long jia_alloc_array(int totalsize, int *blocks, int n); /* 3.0: jia_alloc4(.., .., .., 0) */
void jia_free(void *addr);                                   /* 3.0: accepted; memory is kept */

void jia_lock(int lockid);
void jia_unlock(int lockid);
void jia_barrier(void);
/* A barrier of threads: called by `threads` threads of every node (pthreads, OpenMP), the same
 * count on each; the last of a node to arrive does the node's barrier, and none leaves before
 * it is done. Every write of any thread of any node before it is seen by every thread of every
 * node after it. jia_barrier() keeps JIAJIA's meaning: one call per node. Any number of threads
 * of a node may also fault, lock, wait on condition variables, send and receive. */
void jia_barrier_threads(int threads);
void jia_wait(void);
void jia_setcv(int cvnum);
void jia_resetcv(int cvnum);
void jia_waitcv(int cvnum);

#ifdef JIA_CHECK_RACES
/* Built by `dsmcc --check-races`: the race checker sees what the printf family writes into a
 * string (sprintf, snprintf, vsprintf, vsnprintf: the string and its NUL) and, for every one of
 * them (printf, fprintf, dprintf and their v forms too), what its %s arguments read (up to
 * their NUL or precision) and its %n arguments store; and what the scanf family reads (sscanf,
 * vsscanf: the input string, up to its NUL) and what its conversions store (scanf, fscanf,
 * sscanf and their v forms: the assigned ones, each integer, float or pointer whole, a %c's
 * characters, a %s's or %['s string and its NUL), at the caller's line. Each argument is evaluated once. A format with positional arguments
 * (%1$s) or a conversion these do not know is followed up to there. */
#include <stdarg.h>
#include <stdio.h>
#include <stddef.h>
/* `n` bytes at `p` read (`write` 0) or written by a call made at `pc` (a return address). */
void __dsm_checked_range_at(const void *p, size_t n, int write, const void *pc);
/* The string at `s` read or written, up to its NUL (included) or `max` bytes. */
void __dsm_checked_string_at(const char *s, size_t max, int write, const void *pc);

/* A conversion's length modifier: none, hh, h, l, ll (also q, j), z (also t), L. */
enum { JIA_LEN_NONE, JIA_LEN_HH, JIA_LEN_H, JIA_LEN_L, JIA_LEN_LL, JIA_LEN_Z, JIA_LEN_LD };

static inline int __jia_length(const char **f)
{
    const char *c = *f;
    int len = JIA_LEN_NONE;
    if (c[0] == 'h' && c[1] == 'h') { len = JIA_LEN_HH; c += 2; }
    else if (c[0] == 'h') { len = JIA_LEN_H; c++; }
    else if (c[0] == 'l' && c[1] == 'l') { len = JIA_LEN_LL; c += 2; }
    else if (c[0] == 'l') { len = JIA_LEN_L; c++; }
    else if (c[0] == 'q' || c[0] == 'j') { len = JIA_LEN_LL; c++; }
    else if (c[0] == 'z' || c[0] == 't') { len = JIA_LEN_Z; c++; }
    else if (c[0] == 'L') { len = JIA_LEN_LD; c++; }
    *f = c;
    return len;
}

static inline size_t __jia_int_bytes(int len)
{
    switch (len) {
    case JIA_LEN_HH: return 1;
    case JIA_LEN_H: return 2;
    case JIA_LEN_L: return sizeof(long);
    case JIA_LEN_LL: return sizeof(long long);
    case JIA_LEN_Z: return sizeof(size_t);
    default: return sizeof(int);
    }
}

/* What the arguments of a printf format read (%s) and store (%n), the arguments taken as
 * printf takes them. */
static inline void __jia_printf_reads(const void *pc, const char *f, va_list ap)
{
    for (; *f; f++) {
        if (*f != '%')
            continue;
        f++;
        if (*f == '%')
            continue;
        while (*f == '-' || *f == '+' || *f == ' ' || *f == '#' || *f == '0' || *f == '\'' || *f == 'I')
            f++;
        if (*f == '*') {
            (void)va_arg(ap, int);
            f++;
        } else {
            while (*f >= '0' && *f <= '9')
                f++;
            if (*f == '$')
                return;
        }
        size_t precision = (size_t)-1;
        if (*f == '.') {
            f++;
            if (*f == '*') {
                int p = va_arg(ap, int);
                precision = p < 0 ? (size_t)-1 : (size_t)p;
                f++;
            } else {
                precision = 0;
                while (*f >= '0' && *f <= '9')
                    precision = precision * 10 + (size_t)(*f++ - '0');
            }
        }
        int len = __jia_length(&f);
        switch (*f) {
        case 'd': case 'i': case 'o': case 'u': case 'x': case 'X': case 'c':
            if (len == JIA_LEN_LL)
                (void)va_arg(ap, long long);
            else if (len == JIA_LEN_L || len == JIA_LEN_Z)
                (void)va_arg(ap, long);
            else
                (void)va_arg(ap, int);
            break;
        case 'e': case 'E': case 'f': case 'F': case 'g': case 'G': case 'a': case 'A':
            if (len == JIA_LEN_LD)
                (void)va_arg(ap, long double);
            else
                (void)va_arg(ap, double);
            break;
        case 's': {
            const char *s = va_arg(ap, const char *);
            if (s && len == JIA_LEN_NONE)
                __dsm_checked_string_at(s, precision, 0, pc);
            break;
        }
        case 'p':
            (void)va_arg(ap, void *);
            break;
        case 'n':
            __dsm_checked_range_at(va_arg(ap, void *), __jia_int_bytes(len), 1, pc);
            break;
        case 'm':
            break;
        default:
            return;
        }
        if (!*f)
            return;
    }
}

/* What the assigned conversions of a scanf format stored (the first `assigned` of them, and
 * each %n before the input ended), the arguments taken as scanf takes them. */
static inline void __jia_scanf_stores(const void *pc, int assigned, const char *f, va_list ap)
{
    int done = 0;
    for (; *f; f++) {
        if (*f != '%')
            continue;
        f++;
        if (*f == '%')
            continue;
        int suppress = *f == '*';
        if (suppress)
            f++;
        size_t width = 0;
        while (*f >= '0' && *f <= '9')
            width = width * 10 + (size_t)(*f++ - '0');
        if (*f == '$')
            return;
        int allocate = *f == 'm';
        if (allocate)
            f++;
        int len = __jia_length(&f);
        char c = *f;
        if (c == '[') {
            f++;
            if (*f == '^')
                f++;
            if (*f == ']')
                f++;
            while (*f && *f != ']')
                f++;
            if (!*f)
                return;
        }
        if (suppress)
            continue;
        if (c == 'n') {
            __dsm_checked_range_at(va_arg(ap, void *), __jia_int_bytes(len), 1, pc);
            continue;
        }
        if (done >= assigned)
            return;
        void *p = va_arg(ap, void *);
        done++;
        switch (c) {
        case 'd': case 'i': case 'o': case 'u': case 'x': case 'X':
            __dsm_checked_range_at(p, __jia_int_bytes(len), 1, pc);
            break;
        case 'e': case 'E': case 'f': case 'F': case 'g': case 'G': case 'a': case 'A':
            __dsm_checked_range_at(p, len == JIA_LEN_LD ? sizeof(long double)
                                      : len == JIA_LEN_L ? sizeof(double) : sizeof(float), 1, pc);
            break;
        case 'p':
            __dsm_checked_range_at(p, sizeof(void *), 1, pc);
            break;
        case 'c':
            if (allocate || len != JIA_LEN_NONE) /* %mc: a pointer; %lc: wide characters */
                __dsm_checked_range_at(p, allocate ? sizeof(char *) : (width ? width : 1) * sizeof(int), 1, pc);
            else
                __dsm_checked_range_at(p, width ? width : 1, 1, pc);
            break;
        case 's': case '[':
            if (allocate)
                __dsm_checked_range_at(p, sizeof(char *), 1, pc);
            else if (len == JIA_LEN_NONE)
                __dsm_checked_string_at((const char *)p, (size_t)-1, 1, pc);
            break;
        default:
            return;
        }
    }
}

/* The string a printf of `ret` characters made at `s`, in `room` bytes: its characters and NUL. */
static inline void __jia_printed(const void *pc, char *s, size_t room, int ret)
{
    if (ret >= 0 && room > 0)
        __dsm_checked_range_at(s, ((size_t)ret < room - 1 ? (size_t)ret : room - 1) + 1, 1, pc);
}

__attribute__((noinline, unused, format(printf, 4, 0)))
static int __jia_vsnprintf_at(const void *pc, char *s, size_t room, const char *f, va_list ap)
{
    va_list walk;
    va_copy(walk, ap);
    __jia_printf_reads(pc, f, walk);
    va_end(walk);
    int r = room == (size_t)-1 ? (vsprintf)(s, f, ap) : (vsnprintf)(s, room, f, ap);
    __jia_printed(pc, s, room, r);
    return r;
}

__attribute__((noinline, unused, format(printf, 2, 3)))
static int __jia_sprintf(char *s, const char *f, ...)
{
    va_list ap;
    va_start(ap, f);
    int r = __jia_vsnprintf_at(__builtin_return_address(0), s, (size_t)-1, f, ap);
    va_end(ap);
    return r;
}

__attribute__((noinline, unused, format(printf, 3, 4)))
static int __jia_snprintf(char *s, size_t room, const char *f, ...)
{
    va_list ap;
    va_start(ap, f);
    int r = __jia_vsnprintf_at(__builtin_return_address(0), s, room, f, ap);
    va_end(ap);
    return r;
}

__attribute__((noinline, unused, format(printf, 2, 0)))
static int __jia_vsprintf(char *s, const char *f, va_list ap)
{
    return __jia_vsnprintf_at(__builtin_return_address(0), s, (size_t)-1, f, ap);
}

__attribute__((noinline, unused, format(printf, 3, 0)))
static int __jia_vsnprintf(char *s, size_t room, const char *f, va_list ap)
{
    return __jia_vsnprintf_at(__builtin_return_address(0), s, room, f, ap);
}

__attribute__((noinline, unused, format(scanf, 2, 3)))
static int __jia_sscanf(const char *s, const char *f, ...)
{
    const void *pc = __builtin_return_address(0);
    va_list ap;
    va_start(ap, f);
    int r = (vsscanf)(s, f, ap);
    va_end(ap);
    if (s)
        __dsm_checked_string_at(s, (size_t)-1, 0, pc);
    if (r > 0) {
        va_start(ap, f);
        __jia_scanf_stores(pc, r, f, ap);
        va_end(ap);
    }
    return r;
}

__attribute__((noinline, unused, format(scanf, 2, 0)))
static int __jia_vsscanf(const char *s, const char *f, va_list ap)
{
    const void *pc = __builtin_return_address(0);
    va_list walk;
    va_copy(walk, ap);
    int r = (vsscanf)(s, f, ap);
    if (s)
        __dsm_checked_string_at(s, (size_t)-1, 0, pc);
    if (r > 0)
        __jia_scanf_stores(pc, r, f, walk);
    va_end(walk);
    return r;
}

/* The printf family onto a stream or a descriptor: what its %s arguments read and %n store. */
__attribute__((noinline, unused, format(printf, 3, 0)))
static int __jia_vfprintf_at(const void *pc, FILE *out, const char *f, va_list ap)
{
    va_list walk;
    va_copy(walk, ap);
    __jia_printf_reads(pc, f, walk);
    va_end(walk);
    return (vfprintf)(out, f, ap);
}

__attribute__((noinline, unused, format(printf, 1, 2)))
static int __jia_printf(const char *f, ...)
{
    va_list ap;
    va_start(ap, f);
    int r = __jia_vfprintf_at(__builtin_return_address(0), stdout, f, ap);
    va_end(ap);
    return r;
}

__attribute__((noinline, unused, format(printf, 2, 3)))
static int __jia_fprintf(FILE *out, const char *f, ...)
{
    va_list ap;
    va_start(ap, f);
    int r = __jia_vfprintf_at(__builtin_return_address(0), out, f, ap);
    va_end(ap);
    return r;
}

__attribute__((noinline, unused, format(printf, 1, 0)))
static int __jia_vprintf(const char *f, va_list ap)
{
    return __jia_vfprintf_at(__builtin_return_address(0), stdout, f, ap);
}

__attribute__((noinline, unused, format(printf, 2, 0)))
static int __jia_vfprintf(FILE *out, const char *f, va_list ap)
{
    return __jia_vfprintf_at(__builtin_return_address(0), out, f, ap);
}

__attribute__((noinline, unused, format(printf, 2, 3)))
static int __jia_dprintf(int fd, const char *f, ...)
{
    const void *pc = __builtin_return_address(0);
    va_list ap, walk;
    va_start(ap, f);
    va_copy(walk, ap);
    __jia_printf_reads(pc, f, walk);
    va_end(walk);
    int r = (vdprintf)(fd, f, ap);
    va_end(ap);
    return r;
}

/* The scanf family from a stream: what its assigned conversions store. */
__attribute__((noinline, unused, format(scanf, 3, 0)))
static int __jia_vfscanf_at(const void *pc, FILE *in, const char *f, va_list ap)
{
    va_list walk;
    va_copy(walk, ap);
    int r = (vfscanf)(in, f, ap);
    if (r > 0)
        __jia_scanf_stores(pc, r, f, walk);
    va_end(walk);
    return r;
}

__attribute__((noinline, unused, format(scanf, 1, 2)))
static int __jia_scanf(const char *f, ...)
{
    va_list ap;
    va_start(ap, f);
    int r = __jia_vfscanf_at(__builtin_return_address(0), stdin, f, ap);
    va_end(ap);
    return r;
}

__attribute__((noinline, unused, format(scanf, 2, 3)))
static int __jia_fscanf(FILE *in, const char *f, ...)
{
    va_list ap;
    va_start(ap, f);
    int r = __jia_vfscanf_at(__builtin_return_address(0), in, f, ap);
    va_end(ap);
    return r;
}

__attribute__((noinline, unused, format(scanf, 1, 0)))
static int __jia_vscanf(const char *f, va_list ap)
{
    return __jia_vfscanf_at(__builtin_return_address(0), stdin, f, ap);
}

__attribute__((noinline, unused, format(scanf, 2, 0)))
static int __jia_vfscanf(FILE *in, const char *f, va_list ap)
{
    return __jia_vfscanf_at(__builtin_return_address(0), in, f, ap);
}

#undef sprintf
#undef snprintf
#undef vsprintf
#undef vsnprintf
#undef sscanf
#undef vsscanf
#undef printf
#undef fprintf
#undef vprintf
#undef vfprintf
#undef dprintf
#undef scanf
#undef fscanf
#undef vscanf
#undef vfscanf
#define sprintf __jia_sprintf
#define snprintf __jia_snprintf
#define vsprintf __jia_vsprintf
#define vsnprintf __jia_vsnprintf
#define sscanf __jia_sscanf
#define vsscanf __jia_vsscanf
#define printf __jia_printf
#define fprintf __jia_fprintf
#define vprintf __jia_vprintf
#define vfprintf __jia_vfprintf
#define dprintf __jia_dprintf
#define scanf __jia_scanf
#define fscanf __jia_fscanf
#define vscanf __jia_vscanf
#define vfscanf __jia_vfscanf
#endif

/* Atomic operations on shared memory, exact across nodes (ours; JIAJIA has none). `p` is an
 * aligned 1-, 2-, 4- or 8-byte word of shared memory (_8, _16, _32, _64); `order` is a C11 memory order (__ATOMIC_RELAXED,
 * _CONSUME (taken as acquire), _ACQUIRE, _RELEASE, _ACQ_REL, _SEQ_CST, or memory_order_* of
 * <stdatomic.h>, the same numbers). Each operation is applied at the word's home, in one order
 * per word, and returns the value before. A release makes this node's writes before it visible
 * to a node whose acquire reads the value it wrote, as unlock and lock do. C11 atomics and
 * __atomic_* / __sync_* builtins on shared memory are the same when dsmcc builds the program
 * (it instruments them); built by a compiler outside dsmcc they are atomic only among the
 * threads of one node: use these across nodes then. */
unsigned long jia_atomic_load_64(volatile unsigned long *p, int order);
void jia_atomic_store_64(volatile unsigned long *p, unsigned long v, int order);
unsigned long jia_atomic_exchange_64(volatile unsigned long *p, unsigned long v, int order);
/* Writes `desired` if *p holds *expected and returns 1; else stores *p's value in *expected
 * and returns 0 (as C11's atomic_compare_exchange_strong). */
int jia_atomic_compare_exchange_64(volatile unsigned long *p, unsigned long *expected,
                                   unsigned long desired, int order);
unsigned long jia_atomic_fetch_add_64(volatile unsigned long *p, unsigned long v, int order);
unsigned long jia_atomic_fetch_sub_64(volatile unsigned long *p, unsigned long v, int order);
unsigned long jia_atomic_fetch_and_64(volatile unsigned long *p, unsigned long v, int order);
unsigned long jia_atomic_fetch_or_64(volatile unsigned long *p, unsigned long v, int order);
unsigned long jia_atomic_fetch_xor_64(volatile unsigned long *p, unsigned long v, int order);
unsigned int jia_atomic_load_32(volatile unsigned int *p, int order);
void jia_atomic_store_32(volatile unsigned int *p, unsigned int v, int order);
unsigned int jia_atomic_exchange_32(volatile unsigned int *p, unsigned int v, int order);
int jia_atomic_compare_exchange_32(volatile unsigned int *p, unsigned int *expected,
                                   unsigned int desired, int order);
unsigned int jia_atomic_fetch_add_32(volatile unsigned int *p, unsigned int v, int order);
unsigned int jia_atomic_fetch_sub_32(volatile unsigned int *p, unsigned int v, int order);
unsigned int jia_atomic_fetch_and_32(volatile unsigned int *p, unsigned int v, int order);
unsigned int jia_atomic_fetch_or_32(volatile unsigned int *p, unsigned int v, int order);
unsigned int jia_atomic_fetch_xor_32(volatile unsigned int *p, unsigned int v, int order);
unsigned short jia_atomic_load_16(volatile unsigned short *p, int order);
void jia_atomic_store_16(volatile unsigned short *p, unsigned short v, int order);
unsigned short jia_atomic_exchange_16(volatile unsigned short *p, unsigned short v, int order);
int jia_atomic_compare_exchange_16(volatile unsigned short *p, unsigned short *expected,
                                   unsigned short desired, int order);
unsigned short jia_atomic_fetch_add_16(volatile unsigned short *p, unsigned short v, int order);
unsigned short jia_atomic_fetch_sub_16(volatile unsigned short *p, unsigned short v, int order);
unsigned short jia_atomic_fetch_and_16(volatile unsigned short *p, unsigned short v, int order);
unsigned short jia_atomic_fetch_or_16(volatile unsigned short *p, unsigned short v, int order);
unsigned short jia_atomic_fetch_xor_16(volatile unsigned short *p, unsigned short v, int order);
unsigned char jia_atomic_load_8(volatile unsigned char *p, int order);
void jia_atomic_store_8(volatile unsigned char *p, unsigned char v, int order);
unsigned char jia_atomic_exchange_8(volatile unsigned char *p, unsigned char v, int order);
int jia_atomic_compare_exchange_8(volatile unsigned char *p, unsigned char *expected,
                                  unsigned char desired, int order);
unsigned char jia_atomic_fetch_add_8(volatile unsigned char *p, unsigned char v, int order);
unsigned char jia_atomic_fetch_sub_8(volatile unsigned char *p, unsigned char v, int order);
unsigned char jia_atomic_fetch_and_8(volatile unsigned char *p, unsigned char v, int order);
unsigned char jia_atomic_fetch_or_8(volatile unsigned char *p, unsigned char v, int order);
unsigned char jia_atomic_fetch_xor_8(volatile unsigned char *p, unsigned char v, int order);
/* C11's atomic_thread_fence(order) for this thread's relaxed jia_atomic_* operations, across
 * nodes (C11's own fence reaches no other node): after a release fence, a relaxed store makes
 * the thread's writes before the fence visible to a node that reads its value with a relaxed
 * load and then makes an acquire fence. An acquire fence loads again, with acquire order, each
 * word the thread read with relaxed order since its last one (a round trip to each's home).
 * In programs dsmcc builds, atomic_thread_fence is this too. */
void jia_atomic_thread_fence(int order);

/* Seconds since jia_init (or since the first jia_clock call, which may come before jia_init).
 * JIAJIA 3.0 returns double, 2.1 float: compile a 2.1 program that declares jia_clock as float
 * itself with -DJIA_FLOAT_CLOCK (the name is then bound to the library's float version). Either
 * way `float t = jia_clock();` and `printf("%f", jia_clock())` work. */
#ifdef JIA_FLOAT_CLOCK
float jia_clock(void) __asm__("jia_clock_float");
#else
double jia_clock(void);
#endif
/* JIAJIA 3.0's (declared in its tools.h): nanoseconds since the Unix epoch, from the real-time
 * clock, as 3.0's library returns them. The difference of two calls divided by 1e6 is
 * milliseconds. */
unsigned long jia_current_time(void);
unsigned int jia_startstat(void);
unsigned int jia_stopstat(void);

/* Message passing (JIAJIA 2.1/3.0). jia_send returns at once; the message waits at the receiver.
 * jia_recv waits for the oldest message from frompid with tag (either may be a wildcard),
 * copies it into buf and returns its length; a message longer than len ends the job with a
 * message. Messages carry bytes, not coherence: order shared-memory writes with a barrier, lock
 * or condition variable. */
#define MSG_PROC_ALL (-1)
#define MSG_TAG_ALL (-1)
void jia_send(char *buf, int len, int topid, int tag);
int jia_recv(char *buf, int len, int frompid, int tag);
/* Collectives: every node calls them, in the same order. jia_bcast copies root's len bytes into
 * every node's buf; jia_reduce combines each node's cnt values at snd, in node order, into rcv
 * at root. */
#define SUM_INT 0
#define MAX_INT 1
#define MIN_INT 2
#define SUM_FLOAT 10
#define MAX_FLOAT 11
#define MIN_FLOAT 12
#define SUM_DOUBLE 20
#define MAX_DOUBLE 21
#define MIN_DOUBLE 22
void jia_bcast(char *buf, int len, int root);
void jia_reduce(char *snd, char *rcv, int cnt, int op, int root);

/* JIAJIA's optional mechanisms. HMIG turns home migration on or off (on by default here, also
 * the home_migration key of .jiaconf). The others are not needed for correct runs here:
 * jia_config(X, ON) is accepted and node 0 says once on stderr what was ignored; OFF is what
 * happens anyway. */
#ifndef ON
#define OFF 0
#define ON 1
#endif
#define HMIG 0              /* home migration: a page one node alone writes moves there (on by default) */
#define ADWD 1              /* adaptive write detection: writes are detected per page */
#define BROADCAST 2         /* broadcast barrier grants: they reach every node anyway */
#define LOADBAL 3           /* load balancing: jia_divtask divides evenly */
#define WVEC 4              /* write vectors: diffs are word-granular anyway */
void jia_config(int feature, int on_off);
/* JIAJIA 2.1's work division: on entry [*begin, *end] is the whole range (both included); on
 * return this node's contiguous share, the last node taking the remainder. */
void jia_divtask(int *begin, int *end);
void jia_loadcheck(void);   /* does nothing: the division is static */

/* Write-notice hints: empty, as in JIAJIA. */
#define jia_wtnt(a, b)
#define jia_wtntw(a)
#define jia_wtntd(a)

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
#define jia_errexit jia_error

/* JIAJIA 2.1's assert(cond, msg), a function its library exported: when cond is 0 the whole job
 * ends as with jia_error, the message ("assertion failed: msg") naming the node. C's <assert.h>
 * defines a one-argument macro of the same name; the name is in parentheses here so that the
 * macro, if defined, is not expanded. Without <assert.h>, assert(cond, "msg") calls this
 * function; with it, assert(x) is C's macro and (assert)(cond, "msg") this function. */
void (assert)(int cond, char *msg);

/* The ANL (SPLASH-2) macros, on JIAJIA's calls. Locks are handed out in turn from
 * jia_lock_index, modulo Maxlocks. PAUSE flags are condition variables (PAUSE_SET sets, _ACCEPT
 * and _POLL wait until set, _RESET clears), handed out in turn from jia_cv_index modulo Maxcvs.
 * GETSUB hands out subscripts 0..max from a counter that must live in shared memory (declare it
 * with GSDEC in the G_MALLOC'd global structure, as SPLASH programs do), under lock Maxlocks-1;
 * once past max it returns -1 (the counter is not reset by itself: GSINIT it again). */
extern int jia_lock_index;
extern int jia_cv_index;
#define LOCKDEC(x) int x;
#define LOCKINIT(x) (x) = (jia_lock_index++) % Maxlocks;
#define LOCK(x) jia_lock(x);
#define UNLOCK(x) jia_unlock(x);
#define ALOCKDEC(x, y) int x[y];
#define ALOCKINIT(x, y)                                        \
    {                                                          \
        int jia_i_;                                            \
        for (jia_i_ = 0; jia_i_ < (y); jia_i_++)               \
            (x)[jia_i_] = (jia_lock_index++) % Maxlocks;       \
    }
#define ALOCK(x, y) jia_lock((x)[y]);
#define AULOCK(x, y) jia_unlock((x)[y]);
#define BARDEC(x) int x;
#define BARINIT(x)
#define BARRIER(x, y) jia_barrier();
#define EXTERN_ENV
#define MAIN_ENV
#define MAIN_INITENV(x, y)
#define MAIN_END
#define WAIT_FOR_END(x) jia_barrier();
#define PAUSEDEC(x) int x;
#define PAUSEINIT(x) (x) = (jia_cv_index++) % Maxcvs;
#define PAUSE_SET(x, y) jia_setcv(x);
#define PAUSE_RESET(x) jia_resetcv(x);
#define PAUSE_ACCEPT(x) jia_waitcv(x);
#define PAUSE_POLL(x) jia_waitcv(x);
#define GSDEC(x) int x;
#define GSINIT(x) (x) = 0;
#define GETSUB(x, y, z, zz)                                    \
    {                                                          \
        jia_lock(Maxlocks - 1);                                \
        if ((x) <= (z))                                        \
            (y) = (x)++;                                       \
        else                                                   \
            (y) = -1;                                          \
        jia_unlock(Maxlocks - 1);                              \
    }
#define G_MALLOC(x) jia_alloc1((x));
#define G2_MALLOC(x, y) jia_alloc2((x), (y));
#define CLOCK(x) (x) = jia_clock();

#ifdef __cplusplus
}
#endif

#endif /* JIA_H */
