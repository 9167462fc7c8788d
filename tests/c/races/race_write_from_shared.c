/* race_write_from_shared.c: node 0 writes a block of shared memory to a file with write(2)
 * (the kernel reads it on node 0's behalf) while node 1 stores one of its words, with no barrier
 * between (read-write). */
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
        int fd = open("/dev/null", O_WRONLY);
        if (fd < 0 || write(fd, block, N) != N) /* race */
            exit(1);
        close(fd);
    } else {
        block[2000] = 7; /* race */
    }

    jia_barrier();
    jia_exit();
    return 0;
}
