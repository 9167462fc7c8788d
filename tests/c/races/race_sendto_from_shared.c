/* race_sendto_from_shared.c: node 0 sends bytes of shared memory to a socket with sendto while
 * node 1 stores one of them, with no barrier between (read-write). */
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
        static char in[N];
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
            exit(1);
        if (sendto(sv[0], block, N, 0, NULL, 0) != N) /* race */
            exit(1);
        if (read(sv[1], in, N) <= 0)
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
