/* messages.c: JIAJIA's message passing beside shared memory, and JIAJIA 3.0's allocation calls:
 * jia_send/jia_recv (exact sender and tag, and the MSG_PROC_ALL/MSG_TAG_ALL wildcards; to itself;
 * from and into shared memory), jia_bcast, jia_reduce with all nine operations and two roots,
 * jia_alloc_random, jia_alloc_array, jia_free; jia_current_time (3.0's tools.h: nanoseconds
 * since the epoch, timed as 3.0's mpitest does). Every result is checked exactly on every node.
 * Usage: messages [ROUNDS] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "tools.h"   /* JIAJIA 3.0's internal header, for the public interface: here jia.h */

#define CHECK(cond, ...) do { if (!(cond)) jia_error(__VA_ARGS__); } while (0)

static void ring(int round)
{
    int to = (jiapid + 1) % jiahosts, from = (jiapid + jiahosts - 1) % jiahosts;
    int out[4] = {jiapid, round, 7, -7}, in[8], got;
    jia_send((char *)out, sizeof out, to, 100 + jiapid);
    /* Any sender, but the tag names the left neighbour. */
    got = jia_recv((char *)in, sizeof in, MSG_PROC_ALL, 100 + from);
    CHECK(got == (int)sizeof out, "node %d: ring received %d bytes", jiapid, got);
    CHECK(in[0] == from && in[1] == round && in[2] == 7 && in[3] == -7,
          "node %d: ring round %d got %d %d", jiapid, round, in[0], in[1]);
}

static void gather_with_wildcards(int round)
{
    int k, seq[64] = {0};
    if (jiapid != 0) {
        for (k = 0; k < 3; k++) {
            int msg[3] = {jiapid, k, round};
            jia_send((char *)msg, sizeof msg, 0, 10 + k);
        }
        return;
    }
    /* Node 0 takes every letter with both wildcards: each sender's arrive in the order sent. */
    for (k = 0; k < 3 * (jiahosts - 1); k++) {
        int msg[3], got = jia_recv((char *)msg, sizeof msg, MSG_PROC_ALL, MSG_TAG_ALL);
        CHECK(got == (int)sizeof msg && msg[0] > 0 && msg[0] < jiahosts && msg[2] == round,
              "gather: %d bytes from %d in round %d", got, msg[0], msg[2]);
        CHECK(msg[1] == seq[msg[0]], "gather: node %d's letter %d came as number %d", msg[0],
              msg[1], seq[msg[0]]);
        seq[msg[0]]++;
    }
}

static void to_myself(void)
{
    char hello[] = "to myself", back[32];
    int got;
    jia_send(hello, sizeof hello, jiapid, 5);
    got = jia_recv(back, sizeof back, jiapid, 5);
    CHECK(got == (int)sizeof hello && strcmp(back, hello) == 0, "node %d: letter to itself", jiapid);
}

static void broadcast(int root)
{
    double a[1000];
    int i;
    for (i = 0; i < 1000; i++) a[i] = jiapid == root ? i * 0.5 + root : -1.0;
    jia_bcast((char *)a, sizeof a, root);
    for (i = 0; i < 1000; i++)
        CHECK(a[i] == i * 0.5 + root, "node %d: bcast from %d: a[%d] = %g", jiapid, root, i, a[i]);
}

static void reductions(int root)
{
    int n = jiahosts, p = jiapid, i, ri[3], ii[3];
    float rf[3], fi[3];
    double rd[3], di[3];
    /* Values whose sums are exact in float: small integers and halves. */
    for (i = 0; i < 3; i++) {
        ii[i] = (p + 1) * (i + 1) - 5;
        fi[i] = (float)(p * 0.5 + i);
        di[i] = p * 0.25 - i;
    }
    jia_reduce((char *)ii, (char *)ri, 3, SUM_INT, root);
    if (p == root) for (i = 0; i < 3; i++) CHECK(ri[i] == (i + 1) * n * (n + 1) / 2 - 5 * n, "SUM_INT");
    jia_reduce((char *)ii, (char *)ri, 3, MAX_INT, root);
    if (p == root) for (i = 0; i < 3; i++) CHECK(ri[i] == n * (i + 1) - 5, "MAX_INT");
    jia_reduce((char *)ii, (char *)ri, 3, MIN_INT, root);
    if (p == root) for (i = 0; i < 3; i++) CHECK(ri[i] == (i + 1) - 5, "MIN_INT");
    jia_reduce((char *)fi, (char *)rf, 3, SUM_FLOAT, root);
    if (p == root) for (i = 0; i < 3; i++) CHECK(rf[i] == (float)(0.25 * n * (n - 1) + i * n), "SUM_FLOAT");
    jia_reduce((char *)fi, (char *)rf, 3, MAX_FLOAT, root);
    if (p == root) for (i = 0; i < 3; i++) CHECK(rf[i] == (float)((n - 1) * 0.5 + i), "MAX_FLOAT");
    jia_reduce((char *)fi, (char *)rf, 3, MIN_FLOAT, root);
    if (p == root) for (i = 0; i < 3; i++) CHECK(rf[i] == (float)i, "MIN_FLOAT");
    jia_reduce((char *)di, (char *)rd, 3, SUM_DOUBLE, root);
    if (p == root) for (i = 0; i < 3; i++) CHECK(rd[i] == 0.125 * n * (n - 1) - i * n, "SUM_DOUBLE");
    jia_reduce((char *)di, (char *)rd, 3, MAX_DOUBLE, root);
    if (p == root) for (i = 0; i < 3; i++) CHECK(rd[i] == (n - 1) * 0.25 - i, "MAX_DOUBLE");
    jia_reduce((char *)di, (char *)rd, 3, MIN_DOUBLE, root);
    if (p == root) for (i = 0; i < 3; i++) CHECK(rd[i] == -i, "MIN_DOUBLE");
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 20, r, i, blocks[2] = {4096, 8192};
    int *random_block, *arrayed, *inbox;
    double t0, t1;
    unsigned long ns0, ns1;
    time_t s0;

    jia_init(argc, argv);
    CHECK(rounds > 0, "usage: messages [ROUNDS>0]");
    random_block = (int *)jia_alloc_random(4 * 4096);
    arrayed = (int *)jia_alloc_array(8 * 4096, blocks, 2);
    inbox = (int *)jia_alloc2p(4096 * jiahosts, 0);
    for (i = jiapid; i < 4096; i += jiahosts) random_block[i] = i * 3;
    for (i = jiapid; i < 8192; i += jiahosts) arrayed[i] = i ^ 0x55;
    jia_barrier();
    for (i = 0; i < 4096; i++) CHECK(random_block[i] == i * 3, "jia_alloc_random: [%d]", i);
    for (i = 0; i < 8192; i++) CHECK(arrayed[i] == (i ^ 0x55), "jia_alloc_array: [%d]", i);

    s0 = time(NULL);
    ns0 = jia_current_time();
    t0 = jia_clock();
    for (r = 0; r < rounds; r++) {
        ring(r);
        gather_with_wildcards(r);
        jia_wait();   /* no node sends the next round's letters before node 0 took these */
        to_myself();
        broadcast(r % jiahosts);
        reductions(r % 2 ? jiahosts - 1 : 0);
    }
    /* A letter from shared memory into shared memory: the buffers fault in as any access does. */
    jia_send((char *)&arrayed[100 * jiapid], 100 * sizeof(int), (jiapid + 1) % jiahosts, 1);
    jia_recv((char *)&inbox[1024 * jiapid], 100 * sizeof(int), MSG_PROC_ALL, 1);
    jia_barrier();
    if (jiapid == 0)
        for (i = 0; i < 100 * jiahosts; i++) {
            int node = i / 100, left = (node + jiahosts - 1) % jiahosts;
            CHECK(inbox[1024 * node + i % 100] == ((100 * left + i % 100) ^ 0x55),
                  "shared-memory letter to node %d, word %d", node, i % 100);
        }
    t1 = jia_clock();
    ns1 = jia_current_time();
    /* Nanoseconds since the epoch: the seconds agree with time(), the interval with jia_clock's. */
    CHECK(ns0 / 1000000000UL >= (unsigned long)s0 && ns0 / 1000000000UL <= (unsigned long)s0 + 1,
          "jia_current_time() = %lu, time() = %ld", ns0, (long)s0);
    CHECK(ns1 >= ns0 && (ns1 - ns0) / 1e9 > t1 - t0 - 1.0 && (ns1 - ns0) / 1e9 < t1 - t0 + 1.0,
          "jia_current_time: %lu ns between two calls %.6f s apart", ns1 - ns0, t1 - t0);
    jia_free(random_block);
    jia_free(arrayed);
    if (jiapid == 0)
        printf("c-messages OK rounds=%d nodes=%d time=%.3fs (%.3f ms by jia_current_time)\n",
               rounds, jiahosts, t1 - t0, (ns1 - ns0) / 1000000.0);
    jia_exit();
    return 0;
}
