/* free_letter_value.c (race-free): node 0 sums a table both nodes only read, and sends the sum
 * to node 1 in a letter; node 1 uses the value from the letter, not from shared memory, and
 * writes it to its own slot of the results. */
#include "jia.h"

#define N 1024

static long *table, *result;

int main(int argc, char **argv)
{
    long sum = 0, got = 0;
    int i;

    jia_init(argc, argv);
    table = (long *)jia_alloc1(N * sizeof(long));
    result = (long *)jia_alloc1(Pagesize);
    if (jiapid == 0)
        for (i = 0; i < N; i++)
            table[i] = i;
    jia_barrier();

    if (jiapid == 0) {
        for (i = 0; i < N; i++)
            sum += table[i];
        result[0] = sum;
        jia_send((char *)&sum, sizeof sum, 1, 9);
    } else {
        sum = table[N - 1];
        jia_recv((char *)&got, sizeof got, 0, 9);
        result[1] = got + sum;
    }

    jia_barrier();
    if (jiapid == 0 && result[1] != result[0] + N - 1)
        jia_error("free_letter_value: node 1 stored %ld", result[1]);
    jia_barrier();
    jia_exit();
    return 0;
}
