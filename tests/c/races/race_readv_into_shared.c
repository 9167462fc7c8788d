/* race_readv_into_shared.c: node 0 reads a file into two pieces of shared memory with readv while
 * node 1 stores into the second piece, with no barrier between (write-write). */
#include <fcntl.h>
#include <stdlib.h>
#include <sys/uio.h>
#include <unistd.h>
#include "jia.h"

#define N 4096

static char *block;

int main(int argc, char **argv)
{
    jia_init(argc, argv);
    block = (char *)jia_alloc1(2 * N);
    jia_barrier();

    if (jiapid == 0) {
        struct iovec iov[2] = {{block, N}, {block + N + 512, 256}};
        int fd = open("/dev/zero", O_RDONLY);
        if (fd < 0 || readv(fd, iov, 2) != N + 256) /* race */
            exit(1);
        close(fd);
    } else {
        block[N + 600] = 9; /* race */
    }

    jia_barrier();
    jia_exit();
    return 0;
}
