/* store_probe.c - dtrain's store client as a command, for tests against other servers.
 *
 *   store_probe HOST PORT ops          every operation, TAP lines ("ok - ...")
 *   store_probe HOST PORT set KEY VAL
 *   store_probe HOST PORT get KEY      prints the value
 *
 * Connects without a token (PyTorch's server takes none) unless
 * DTRAIN_JOB_TOKEN is set.  Used by tests/integration/test_pytorch_store.sh
 * to show the client speaks PyTorch's protocol to PyTorch's own server.
 */
#include "base/error.h"
#include "comm/store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

static void check(int cond, const char *what)
{
    printf("%s - store_probe: %s\n", cond ? "ok" : "not ok", what);
    if (!cond) {
        printf("#   last error: %s\n", dt_error_last());
        failures++;
    }
}

static int value_is(struct dt_store *s, const char *key, const char *want)
{
    void *v = NULL;
    size_t n = 0;
    int ok = dt_store_get(s, key, &v, &n) == 0 && n == strlen(want) && memcmp(v, want, n) == 0;
    free(v);
    return ok;
}

static void run_ops(struct dt_store *s)
{
    check(dt_store_set(s, "probe/a", "alpha", 5) == 0 && value_is(s, "probe/a", "alpha"), "set then get");
    int64_t r = 0;
    check(dt_store_add(s, "probe/n", 2, &r) == 0 && dt_store_add(s, "probe/n", 3, &r) == 0 && r == 5,
          "add returns the new value");
    const char *two[] = {"probe/a", "probe/missing"};
    bool ready = true;
    check(dt_store_check(s, two, 2, &ready) == 0 && !ready, "check is false while a key is missing");
    check(dt_store_check(s, two, 1, &ready) == 0 && ready, "check is true when all keys exist");
    check(dt_store_wait(s, two, 1, 2) == 0, "wait returns for a present key");
    check(dt_store_wait(s, two + 1, 1, 0.2) == DT_ETIMEDOUT, "wait times out for a missing key");
    check(value_is(s, "probe/a", "alpha"), "the connection is usable after a cancelled wait");
    void *cur = NULL;
    size_t n = 0;
    check(dt_store_compare_set(s, "probe/a", "alpha", 5, "beta", 4, &cur, &n) == 0 && n == 4 &&
              memcmp(cur, "beta", 4) == 0,
          "compare_set swaps on a match");
    free(cur);
    check(dt_store_append(s, "probe/ap", "x", 1) == 0 && dt_store_append(s, "probe/ap", "y", 1) == 0 &&
              value_is(s, "probe/ap", "xy"),
          "append");
    const char *mk[] = {"probe/m1", "probe/m2"};
    const void *mv[] = {"1", "22"};
    size_t ml[] = {1, 2};
    void *out[2] = {0};
    size_t ol[2];
    check(dt_store_multi_set(s, mk, mv, ml, 2) == 0 && dt_store_multi_get(s, mk, 2, out, ol) == 0 &&
              ol[0] == 1 && ol[1] == 2 && memcmp(out[1], "22", 2) == 0,
          "multi_set then multi_get");
    free(out[0]);
    free(out[1]);
    int64_t before = 0, after = 0;
    bool del = false;
    check(dt_store_num_keys(s, &before) == 0 && dt_store_delete_key(s, "probe/m1", &del) == 0 && del &&
              dt_store_num_keys(s, &after) == 0 && after == before - 1,
          "delete_key removes one key from num_keys");
    /* Queues: the same requests PyTorch's client sends, so its server must agree. */
    int64_t qn = -1;
    void *qv = NULL;
    size_t qlen = 0;
    check(dt_store_queue_push(s, "probe/q", "first", 5) == 0 && dt_store_queue_push(s, "probe/q", "2nd", 3) == 0 &&
              dt_store_queue_len(s, "probe/q", &qn) == 0 && qn == 2,
          "queue_push then queue_len");
    check(dt_store_queue_pop(s, "probe/q", true, &qv, &qlen) == 0 && qlen == 5 && memcmp(qv, "first", 5) == 0,
          "queue_pop is first in, first out");
    free(qv);
    qv = NULL;
    int last = dt_store_queue_pop(s, "probe/q", false, &qv, &qlen);
    free(qv);
    check(last == 0 && qlen == 3 && dt_store_queue_pop(s, "probe/q", false, &qv, &qlen) == DT_ENOTFOUND,
          "queue_pop on an empty queue is an error");
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: store_probe HOST PORT ops|set KEY VAL|get KEY\n");
        return 2;
    }
    struct dt_store_options o = {.host = argv[1], .port = atoi(argv[2]),
                                 .token = getenv("DTRAIN_JOB_TOKEN"), .timeout_s = 10};
    struct dt_store *s;
    if (dt_store_connect(&o, &s) != 0) {
        printf("not ok - store_probe: connect: %s\n", dt_error_last());
        return 1;
    }
    int rc = 0;
    if (strcmp(argv[3], "ops") == 0) {
        run_ops(s);
        rc = failures ? 1 : 0;
    } else if (strcmp(argv[3], "set") == 0 && argc == 6) {
        rc = dt_store_set(s, argv[4], argv[5], strlen(argv[5])) ? 1 : 0;
    } else if (strcmp(argv[3], "get") == 0 && argc == 5) {
        void *v;
        size_t n;
        rc = dt_store_get(s, argv[4], &v, &n) ? 1 : 0;
        if (rc == 0) {
            fwrite(v, 1, n, stdout);
            putchar('\n');
            free(v);
        }
    } else {
        fprintf(stderr, "store_probe: unknown mode '%s'\n", argv[3]);
        rc = 2;
    }
    if (rc == 1 && failures == 0)
        fprintf(stderr, "store_probe: %s\n", dt_error_last());
    dt_store_close(s);
    return rc;
}
