/* io_calls.c: the system calls beyond read and write that hand shared memory to the kernel, in a
 * plain build (no race checker). Node 0 moves bytes between the kernel and shared pages it does
 * not hold (homed on the last node) with readv, preadv, writev, pwritev (a file), send and recv
 * (a stream socket pair), sendto and recvfrom, sendmsg and recvmsg, sendmmsg and recvmmsg
 * (datagram socket pairs), and, over UDP on the loopback, with the peer's address, its length and
 * a message header in such pages too; a stream's recv with MSG_WAITALL. Every byte is checked, on
 * node 0 and on the home. Without libjia's definitions the kernel fails each of these calls with
 * EFAULT on a page the node does not hold.
 * Usage: io_calls [KIB] (a multiple of 4, at least 32) */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>
#include "jia.h"

#define CHECK(cond, ...) do { if (!(cond)) jia_error(__VA_ARGS__); } while (0)

/* Datagrams: DGRAMS of DGRAM bytes each, spanning pages (not a multiple of the page). */
#define DGRAM 6000
#define DGRAMS 4

enum { READV, PREADV, RECV, WAITALL, RECVFROM, RECVMSG, RECVMMSG, ADDRESSED, INTO };

static const char *const names[INTO] = {"readv", "preadv", "recv", "recv(MSG_WAITALL)", "recvfrom", "recvmsg", "recvmmsg", "recvfrom(address in shared memory)"};

/* What lives in shared memory beside the buffers: a peer's address, another's and its length. */
struct beside {
    struct sockaddr_in to, from;
    socklen_t from_len;
};

static unsigned char pattern(long i, int salt) { return (unsigned char)((i * 131 + salt * 7) % 251); }

/* Sends `n` bytes of `from` on stream socket `out` and receives them into `into` from `in`, a
 * piece at a time (the socket's buffer holds less than a large `n`). */
static void stream_through(int out, int in, const unsigned char *from, unsigned char *into, long n)
{
    long sent = 0, got = 0;
    while (got < n) {
        if (sent < n) {
            long k = n - sent < 16384 ? n - sent : 16384;
            ssize_t s = send(out, from + sent, (size_t)k, 0);
            CHECK(s > 0, "send from shared memory: %s", strerror(errno));
            sent += s;
        }
        ssize_t r = recv(in, into + got, (size_t)(sent - got), 0);
        CHECK(r > 0, "recv into shared memory: %s", strerror(errno));
        got += r;
    }
}

int main(int argc, char **argv)
{
    long kib = argc > 1 ? atol(argv[1]) : 64, n, i;
    unsigned char *in[INTO], *out, *grams;
    char path[256];
    int k;
    double t0;

    jia_init(argc, argv);
    if (kib < 32 || kib % 4 != 0 || kib > 1 << 16) {
        jia_error("usage: io_calls [KIB: a multiple of 4, 32 to 65536]");
        return 2;
    }
    n = kib * 1024;
    for (k = 0; k < INTO; k++) in[k] = (unsigned char *)jia_alloc2p(n, jiahosts - 1);
    out = (unsigned char *)jia_alloc2p(n, jiahosts - 1);
    grams = (unsigned char *)jia_alloc2p(DGRAM * DGRAMS, jiahosts - 1);
    struct beside *b = (struct beside *)jia_alloc2p(sizeof(struct beside), jiahosts - 1);
    /* Node 0's UDP socket, whose address the home writes into shared memory (with the length
       recvfrom starts from), so node 0 holds none of it when it sends and receives. */
    int rx = -1;
    if (jiapid == 0) {
        struct sockaddr_in here = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t here_len = sizeof here;
        rx = socket(AF_INET, SOCK_DGRAM, 0);
        CHECK(rx >= 0 && bind(rx, (struct sockaddr *)&here, sizeof here) == 0 &&
                  getsockname(rx, (struct sockaddr *)&here, &here_len) == 0, "a UDP socket: %s", strerror(errno));
        jia_send((char *)&here, sizeof here, jiahosts - 1, 7);
    }
    if (jiapid == jiahosts - 1) {
        struct sockaddr_in there;
        CHECK(jia_recv((char *)&there, sizeof there, 0, 7) == sizeof there, "the socket's address");
        b->to = there;
        b->from_len = sizeof b->from;
        for (i = 0; i < n; i++) out[i] = pattern(i, 3);
        for (i = 0; i < DGRAM * DGRAMS; i++) grams[i] = pattern(i, 5);
    }
    jia_barrier();
    t0 = jia_clock();
    if (jiapid == 0) {
        int fd, sv[2];
        unsigned char *local = malloc((size_t)n), *check = malloc((size_t)n);
        CHECK(local && check, "out of memory");
        snprintf(path, sizeof path, "/tmp/dsm-io-calls-%d", (int)getpid());

        /* A file: from shared memory with writev and pwritev, back into it with readv, preadv. */
        fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
        CHECK(fd >= 0, "open %s: %s", path, strerror(errno));
        struct iovec halves[2] = {{out, (size_t)(n / 2)}, {out + n / 2, (size_t)(n - n / 2)}};
        CHECK(writev(fd, halves, 2) == n, "writev from shared memory: %s", strerror(errno));
        CHECK(pwritev(fd, halves, 2, n) == n, "pwritev from shared memory: %s", strerror(errno));
        CHECK(pread(fd, check, (size_t)n, n) == n, "reading %s back", path);
        for (i = 0; i < n; i++) CHECK(check[i] == pattern(i, 3), "pwritev: byte %ld", i);
        CHECK(pread(fd, check, (size_t)n, 0) == n, "reading %s back", path);
        for (i = 0; i < n; i++) CHECK(check[i] == pattern(i, 3), "writev: byte %ld", i);
        CHECK(lseek(fd, 0, SEEK_SET) == 0, "lseek");
        struct iovec into[2] = {{in[READV], 4096 + 100}, {in[READV] + 4096 + 100, (size_t)(n - 4096 - 100)}};
        CHECK(readv(fd, into, 2) == n, "readv into shared memory: %s", strerror(errno));
        struct iovec whole = {in[PREADV], (size_t)n};
        CHECK(preadv(fd, &whole, 1, n) == n, "preadv into shared memory: %s", strerror(errno));
        close(fd);
        unlink(path);

        /* A stream socket: send from shared memory, recv into it; then the whole at once. */
        CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair: %s", strerror(errno));
        stream_through(sv[0], sv[1], out, in[RECV], n);
        struct iovec first = {out, 4096};
        CHECK(writev(sv[0], &first, 1) == 4096, "writev to a stream: %s", strerror(errno));
        CHECK(recv(sv[1], in[WAITALL], n, MSG_WAITALL | MSG_DONTWAIT) == 4096, "recv(MSG_WAITALL | MSG_DONTWAIT) of what is there: %s", strerror(errno));
        stream_through(sv[0], sv[1], out + 4096, in[WAITALL] + 4096, n - 4096);
        close(sv[0]);
        close(sv[1]);

        /* UDP on the loopback: the address sent to, the one received from and its length in
           pages this node does not hold. */
        int tx = socket(AF_INET, SOCK_DGRAM, 0);
        CHECK(tx >= 0, "a UDP socket: %s", strerror(errno));
        CHECK(sendto(tx, grams, DGRAM, 0, (struct sockaddr *)&b->to, sizeof b->to) == DGRAM, "sendto an address in shared memory: %s", strerror(errno));
        CHECK(recvfrom(rx, in[ADDRESSED], DGRAM, 0, (struct sockaddr *)&b->from, &b->from_len) == DGRAM, "recvfrom with the address in shared memory: %s", strerror(errno));
        CHECK(b->from_len == sizeof b->from && b->from.sin_port != 0, "recvfrom wrote no address");
        close(rx);
        close(tx);

        /* Datagrams, each DGRAM bytes, a page boundary inside each. */
        CHECK(socketpair(AF_UNIX, SOCK_DGRAM, 0, sv) == 0, "socketpair: %s", strerror(errno));
        for (k = 0; k < DGRAMS; k++) {
            CHECK(sendto(sv[0], grams + k * DGRAM, DGRAM, 0, NULL, 0) == DGRAM, "sendto from shared memory: %s", strerror(errno));
            CHECK(recvfrom(sv[1], in[RECVFROM] + k * DGRAM, DGRAM, 0, NULL, NULL) == DGRAM, "recvfrom into shared memory: %s", strerror(errno));
        }
        for (k = 0; k < DGRAMS; k++) {
            struct iovec from = {grams + k * DGRAM, DGRAM}, to = {in[RECVMSG] + k * DGRAM, DGRAM};
            struct msghdr sm = {.msg_iov = &from, .msg_iovlen = 1}, rm = {.msg_iov = &to, .msg_iovlen = 1};
            CHECK(sendmsg(sv[0], &sm, 0) == DGRAM, "sendmsg from shared memory: %s", strerror(errno));
            CHECK(recvmsg(sv[1], &rm, 0) == DGRAM, "recvmsg into shared memory: %s", strerror(errno));
        }
        struct iovec from[DGRAMS], to[DGRAMS];
        struct mmsghdr sm[DGRAMS], rm[DGRAMS];
        memset(sm, 0, sizeof sm);
        memset(rm, 0, sizeof rm);
        for (k = 0; k < DGRAMS; k++) {
            from[k] = (struct iovec){grams + k * DGRAM, DGRAM};
            to[k] = (struct iovec){in[RECVMMSG] + k * DGRAM, DGRAM};
            sm[k].msg_hdr.msg_iov = &from[k];
            sm[k].msg_hdr.msg_iovlen = 1;
            rm[k].msg_hdr.msg_iov = &to[k];
            rm[k].msg_hdr.msg_iovlen = 1;
        }
        CHECK(sendmmsg(sv[0], sm, DGRAMS, 0) == DGRAMS, "sendmmsg from shared memory: %s", strerror(errno));
        CHECK(recvmmsg(sv[1], rm, DGRAMS, MSG_WAITFORONE, NULL) >= 1, "recvmmsg into shared memory: %s", strerror(errno));
        for (k = 0; k < DGRAMS; k++) {
            if (rm[k].msg_len == 0) /* MSG_WAITFORONE: the rest, one at a time */
                CHECK(recvmmsg(sv[1], &rm[k], 1, 0, NULL) == 1, "recvmmsg into shared memory: %s", strerror(errno));
            CHECK(rm[k].msg_len == DGRAM, "recvmmsg: datagram %d has %u bytes", k, rm[k].msg_len);
        }
        close(sv[0]);
        close(sv[1]);
        free(local);
        free(check);
    }
    jia_barrier();
    /* The home and node 0 alike see every byte. */
    if (jiapid == 0 || jiapid == jiahosts - 1) {
        for (k = READV; k <= WAITALL; k++)
            for (i = 0; i < n; i++) CHECK(in[k][i] == pattern(i, 3), "node %d: byte %ld %s into shared memory", jiapid, i, names[k]);
        for (i = 0; i < DGRAM; i++) CHECK(in[ADDRESSED][i] == pattern(i, 5), "node %d: byte %ld %s", jiapid, i, names[ADDRESSED]);
        for (k = RECVFROM; k < ADDRESSED; k++)
            for (i = 0; i < DGRAM * DGRAMS; i++) CHECK(in[k][i] == pattern(i, 5), "node %d: byte %ld %s into shared memory", jiapid, i, names[k]);
    }
    jia_barrier();
    if (jiapid == 0) printf("c-io_calls OK kib=%ld nodes=%d time=%.3fs\n", kib, jiahosts, jia_clock() - t0);
    jia_exit();
    return 0;
}
