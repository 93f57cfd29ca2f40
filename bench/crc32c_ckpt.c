/* crc32c_ckpt.c - how fast CRC-32C is, alone and inside a checkpoint's save and load.
 *
 *   crc32c_ckpt [--mb 256] [--reps 5] [--ckpt DIR]
 *
 * Prints the best of --reps passes of dt_crc32c and of dt_crc32c_table over
 * --mb MiB of random bytes, in MB/s.  With --ckpt, also saves a GPT-2
 * 124M-sized checkpoint (the model's parameters and AdamW's two moments,
 * 1.5 GB) into DIR and reads it back (dt_ckpt_save; dt_ckpt_read, which
 * checks every tensor's CRC, and dt_ckpt_apply), printing the seconds of
 * each.  Linked before libdtrain.a, another crc32c.o (the old table-only
 * one: git show <rev>:base/crc32c.c) replaces the library's dt_crc32c, which
 * gives the "before" of the same program (the library's dt_crc32c_table brings its crc32c.o
 * along: -Wl,--allow-multiple-definition keeps the first dt_crc32c).  Built:
 *
 *   cc -std=c11 -D_GNU_SOURCE -I. -O2 -o crc32c_ckpt bench/crc32c_ckpt.c build/libdtrain.a \
 *      -lyaml -luv -ljansson -lopenblas -lz -lm -lpthread -ldl -lrt
 *
 * Not a test (tests/unit/test_crc32c.c is).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/crc32c.h"
#include "base/error.h"
#include "worker/ckpt.h"
#include "worker/models/model.h"
#include "worker/optim/adamw.h"

typedef uint32_t (*crc_fn)(uint32_t, const void *, size_t);

static double best_mb_s(crc_fn f, const unsigned char *p, size_t n, int reps)
{
    double best = 1e30;
    volatile uint32_t sink = 0;
    for (int i = 0; i < reps; i++) {
        double t0 = dt_clock_s();
        sink = sink + f(0, p, n);
        double dt = dt_clock_s() - t0;
        best = dt < best ? dt : best;
    }
    return (double)n / best / 1e6;
}

static int time_ckpt(const char *dir)
{
    struct dt_model_spec s = {
        .type = "gpt2", .n_layer = 12, .n_head = 12, .n_embd = 768, .vocab_size = 50257, .block_size = 1024};
    struct dt_model_config c = {.spec = &s,
                                .k = &dt_kernels_cpu,
                                .max_batch = 1,
                                .seed = 1,
                                .data = {.kind = DT_BATCH_TOKENS, .seq_len = 64, .vocab = 50257}};
    struct dt_model *m;
    struct dt_adamw a;
    if (dt_model_create(&c, &m) || dt_adamw_init(&a, m->k, m->n_params, 0.999, 1e-8, 0.01))
        return fprintf(stderr, "crc32c_ckpt: %s\n", dt_error_last()), 1;
    for (size_t i = 0; i < m->n_params; i++) {
        a.m[i] = 1e-3f * (float)(i % 1000);
        a.v[i] = 1e-6f * (float)(i % 777);
    }
    struct dt_ckpt_state st = {.step = 1, .seed = 1, .world = 1, .batch_size = 1};
    double t0 = dt_clock_s();
    if (dt_ckpt_save(dir, m, &a, &st, 1))
        return fprintf(stderr, "crc32c_ckpt: %s\n", dt_error_last()), 1;
    double t1 = dt_clock_s();
    struct dt_ckpt_file f;
    int rc = dt_ckpt_read_latest(dir, &f);
    double t2 = dt_clock_s();
    rc = rc ? rc : dt_ckpt_apply(&f, m, &a, &st);
    double t3 = dt_clock_s();
    dt_ckpt_release(&f);
    if (rc)
        return fprintf(stderr, "crc32c_ckpt: %s\n", dt_error_last()), 1;
    printf(
        "checkpoint of %zu parameters + 2 moments (%.2f GB): save %.2f s, read+verify %.2f s, apply %.2f s\n",
        m->n_params, 3.0 * 4 * (double)m->n_params / 1e9, t1 - t0, t2 - t1, t3 - t2);
    dt_adamw_release(&a);
    dt_model_destroy(m);
    return 0;
}

int main(int argc, char **argv)
{
    int mb = 256, reps = 5;
    const char *ckpt = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--mb"))
            mb = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps"))
            reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--ckpt"))
            ckpt = argv[i + 1];
        else
            return fprintf(stderr, "crc32c_ckpt: unknown option %s\n", argv[i]), 2;
    }
    size_t n = (size_t)mb << 20;
    unsigned char *buf = malloc(n);
    if (!buf)
        return fprintf(stderr, "crc32c_ckpt: out of memory for %d MiB\n", mb), 1;
    uint64_t r = 88172645463325252ull;
    for (size_t i = 0; i < n; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        buf[i] = (unsigned char)r;
    }
    printf("dt_crc32c: %.0f MB/s\n", best_mb_s(dt_crc32c, buf, n, reps));
    printf("dt_crc32c_table: %.0f MB/s\n", best_mb_s(dt_crc32c_table, buf, n, reps > 2 ? 2 : reps));
    free(buf);
    return ckpt ? time_ckpt(ckpt) : 0;
}
