/* race_recvmsg_socket.c: node 0 receives bytes from a socket into shared memory with recvmsg (two
 * buffers: a private header, then the shared block) while node 1 stores one of the words it
 * fills, with no barrier between (write-write). */
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
        static char out[16 + N], header[16];
        struct iovec iov[2] = {{header, sizeof header}, {block, N}};
        struct msghdr m;
        memset(&m, 0, sizeof m);
        m.msg_iov = iov;
        m.msg_iovlen = 2;
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0 || write(sv[0], out, sizeof out) != (ssize_t)sizeof out)
            exit(1);
        if (recvmsg(sv[1], &m, MSG_WAITALL) != (ssize_t)sizeof out) /* race */
            exit(1);
        close(sv[0]);
        close(sv[1]);
    } else {
        block[1500] = 3; /* race */
    }

    jia_barrier();
    jia_exit();
    return 0;
}
