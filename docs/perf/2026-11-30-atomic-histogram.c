#include <string.h>
#include <jia.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
/* Every node adds 1 to each of N bins (relaxed atomics), then node 0 checks them. */
int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    jia_init(argc, argv);
    uint64_t *bins = (uint64_t *)jia_alloc3(n * 8, 4096 * 16, 0);
    jia_barrier();
    for (long i = 0; i < n; i++) __atomic_fetch_add(&bins[(i * 7919 + jiapid) % n], 1, __ATOMIC_RELAXED);
    jia_barrier();
    if (jiapid == 0) {
        long bad = 0;
        for (long i = 0; i < n; i++) bad += bins[i] != (uint64_t)jiahosts;
        FILE *f = fopen("/proc/self/status", "r"); char line[256];
        while (fgets(line, sizeof line, f)) if (!strncmp(line, "VmHWM", 5)) printf("node 0 %s", line);
        printf("hist %ld bins, %ld wrong\n", n, bad);
    }
    jia_exit();
    return 0;
}
