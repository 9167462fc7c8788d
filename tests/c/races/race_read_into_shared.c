/* race_read_into_shared.c: node 0 reads a file into a block of shared memory with read(2) while
 * node 1 stores one of its words, with no barrier between (write-write: the kernel writes the
 * block on node 0's behalf). */
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>
#include "jia.h"

#define N 4096

static char *block;

int main(int argc, char **argv)
{
    jia_init(argc, argv);
    block = (char *)jia_alloc1(N);
    jia_barrier();

    if (jiapid == 0) {
        int fd = open("/dev/zero", O_RDONLY);
        if (fd < 0 || read(fd, block, N) != N) /* race */
            exit(1);
        close(fd);
    } else {
        block[1000] = 42; /* race */
    }

    jia_barrier();
    jia_exit();
    return 0;
}
