/* race_sendmmsg_from_shared.c: node 0 sends two messages, the second from shared memory, with
 * sendmmsg while node 1 stores one of the bytes sent, with no barrier between (read-write). */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>
#include "jia.h"

#define N 2048

static char *block;

int main(int argc, char **argv)
{
    jia_init(argc, argv);
    block = (char *)jia_alloc1(N);
    jia_barrier();

    if (jiapid == 0) {
        int sv[2];
        static char first[8], in[8 + N];
        struct iovec iov[2] = {{first, sizeof first}, {block, N}};
        struct mmsghdr m[2];
        memset(m, 0, sizeof m);
        m[0].msg_hdr.msg_iov = &iov[0];
        m[0].msg_hdr.msg_iovlen = 1;
        m[1].msg_hdr.msg_iov = &iov[1];
        m[1].msg_hdr.msg_iovlen = 1;
        if (socketpair(AF_UNIX, SOCK_DGRAM, 0, sv) != 0)
            exit(1);
        if (sendmmsg(sv[0], m, 2, 0) != 2) /* race */
            exit(1);
        if (read(sv[1], in, sizeof in) <= 0 || read(sv[1], in, sizeof in) <= 0)
            exit(1);
        close(sv[0]);
        close(sv[1]);
    } else {
        block[700] = 5; /* race */
    }

    jia_barrier();
    jia_exit();
    return 0;
}
