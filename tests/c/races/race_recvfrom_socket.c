/* race_recvfrom_socket.c: node 0 receives bytes from a socket into shared memory with recvfrom
 * while node 1 stores one of the words it fills, with no barrier between (write-write). */
#include <stdlib.h>
#include <sys/socket.h>
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
        static char out[N];
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0 || write(sv[0], out, N) != N)
            exit(1);
        if (recvfrom(sv[1], block, N, MSG_WAITALL, NULL, NULL) != N) /* race */
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
