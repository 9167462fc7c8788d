/* free_read_between_barriers.c: node 0 reads a file into shared memory with read(2) and
 * pread(2), writes part of it out with write(2); node 1 reads and overwrites it after a barrier:
 * race-free. */
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
        if (fd < 0 || read(fd, block, N / 2) != N / 2 || pread(fd, block + N / 2, N / 2, 0) != N / 2)
            exit(1);
        close(fd);
    }
    jia_barrier();
    if (jiapid == 1) {
        int fd = open("/dev/null", O_WRONLY);
        if (fd < 0 || write(fd, block, N) != N)
            exit(1);
        close(fd);
        block[100] = 1;
    }

    jia_barrier();
    jia_exit();
    return 0;
}
