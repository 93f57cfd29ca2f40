/* test_tokens.c - llm.c token shards (worker/data/tokens.h): every rank reads
 * the (shard, offset) llm.c's DataLoader reads at every step
 * (tests/fixtures/tokens_order.txt, made by make_tokens_order.py), and with
 * shuffle the order tokens.h defines; inputs and targets are the shard's
 * tokens there, shifted by one; starting mid-epoch gives the rest of the same
 * epoch; each bad shard is refused with a message naming the file and the
 * byte offset; a checkpoint keeps a token position and only a token run's
 * file has one; the trainer runs a gpt2 over shards for whole epochs, with
 * the validation loss over all of val and the position in its checkpoint;
 * with accum (an elastic run) an epoch begun on 3 ranks and finished on 2
 * reads every sequence once. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "worker/ckpt.h"
#include "worker/data/tokens.h"
#include "worker/safetensors.h"
#include "worker/trainer.h"
#include "mlp_fixture.h"

#define VOCAB 50257

static char dir[64];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/dt_tokens_XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static uint16_t token_at(int shard, int64_t i)
{
    return (uint16_t)((shard * 4099 + i * 7) % VOCAB);
}

/* A shard file of n tokens; header fields and the file's length as given. */
static void write_raw(const char *path, int32_t magic, int32_t version, int32_t count, int shard, int64_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    int32_t h[256] = {magic, version, count};
    assert_int_equal(fwrite(h, 4, 256, f), 256);
    for (int64_t i = 0; i < n; i++) {
        uint16_t t = token_at(shard, i);
        assert_int_equal(fwrite(&t, 2, 1, f), 1);
    }
    assert_int_equal(fclose(f), 0);
}

static void write_shard(const char *name, int shard, int64_t n)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    write_raw(path, DT_TOKENS_MAGIC, DT_TOKENS_VERSION, (int32_t)n, shard, n);
}

/* ---- the order, against the fixture ---- */

struct tcase {
    char name[64];
    int world, batch, seq, shuffle, epochs, n;
    unsigned long long seed;
    int64_t ntok[16];
};

static void check_batch(const struct dt_batch *b, const struct dt_token_set *set, int shard, int64_t off,
                        int B, int T)
{
    assert_int_equal(b->kind, DT_BATCH_TOKENS);
    assert_int_equal(b->n, B);
    assert_int_equal(b->T, T);
    for (int64_t i = 0; i < (int64_t)B * T; i++) {
        assert_int_equal(b->inputs[i], set->shards[shard].tokens[off + i]);
        assert_int_equal(b->targets[i], set->shards[shard].tokens[off + i + 1]);
        assert_int_equal(b->inputs[i], token_at(shard, off + i));
    }
}

/* Rank r's rows of the fixture: epoch, batch, shard, offset each. */
static void run_case(const struct tcase *c, FILE *f)
{
    char pattern[256], name[96];
    for (int s = 0; s < c->n; s++) {
        snprintf(name, sizeof name, "%s_%03d.bin", c->name, s);
        write_shard(name, s, c->ntok[s]);
    }
    snprintf(pattern, sizeof pattern, "%s/%s_*.bin", dir, c->name);
    struct dt_token_set set;
    assert_int_equal(dt_tokens_open(pattern, DT_TOKENS_LLMC, VOCAB, "trainer.data.train", &set), 0);
    assert_int_equal(set.n, c->n);
    struct dt_tokens_loader *l[8];
    for (int r = 0; r < c->world; r++) {
        struct dt_tokens_options o = {c->batch, c->seq, r, c->world, c->shuffle != 0, c->seed, 1};
        assert_int_equal(dt_tokens_loader_create(&set, &o, &l[r]), 0);
    }
    int64_t per_epoch = dt_tokens_batches_per_epoch(l[0]), rows = 0;
    char line[256];
    int cur_rank = -1;
    int64_t epoch = -1;
    while (fgets(line, sizeof line, f) && strncmp(line, "end", 3)) {
        int r, shard, sh;
        long long e, b, off;
        int64_t o2;
        assert_int_equal(sscanf(line, "at %d %lld %lld %d %lld", &r, &e, &b, &shard, &off), 5);
        if (r != cur_rank || e != epoch) {
            assert_int_equal(b, 0);
            dt_tokens_start_epoch(l[r], e, 0);
            cur_rank = r;
            epoch = e;
        }
        dt_tokens_where(l[r], &sh, &o2);
        assert_int_equal(sh, shard);
        assert_int_equal(o2 + (int64_t)r * c->batch * c->seq, off);
        const struct dt_batch *x = dt_tokens_next(l[r]);
        assert_non_null(x);
        assert_int_equal(x->index, b);
        check_batch(x, &set, shard, off, c->batch, c->seq);
        if (b == per_epoch - 1) {
            assert_null(dt_tokens_next(l[r]));
            dt_tokens_where(l[r], &sh, &o2);
            assert_int_equal(sh, -1);
        }
        rows++;
    }
    assert_int_equal(rows, per_epoch * c->epochs * c->world);
    for (int r = 0; r < c->world; r++)
        dt_tokens_loader_destroy(l[r]);
    dt_tokens_close(&set);
}

static void test_order_matches_llmc(void **state)
{
    (void)state;
    FILE *f = fopen("tests/fixtures/tokens_order.txt", "r");
    assert_non_null(f);
    char line[512];
    int cases = 0;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "case ", 5))
            continue;
        struct tcase c = {0};
        int used = 0;
        assert_int_equal(
            sscanf(line, "case %63s world %d batch %d seq %d shuffle %d seed %llu epochs %d shards %d%n",
                   c.name, &c.world, &c.batch, &c.seq, &c.shuffle, &c.seed, &c.epochs, &c.n, &used),
            8);
        char *p = line + used;
        for (int s = 0; s < c.n; s++)
            c.ntok[s] = strtoll(p, &p, 10);
        run_case(&c, f);
        cases++;
    }
    fclose(f);
    assert_int_equal(cases, 5);
}

/* Starting an epoch at batch b gives exactly batches b.. of a whole epoch. */
static void test_start_mid_epoch(void **state)
{
    (void)state;
    write_shard("mid_0.bin", 0, 1000);
    write_shard("mid_1.bin", 1, 333);
    write_shard("mid_2.bin", 2, 2000);
    char pattern[128];
    snprintf(pattern, sizeof pattern, "%s/mid_*.bin", dir);
    struct dt_token_set set;
    assert_int_equal(dt_tokens_open(pattern, DT_TOKENS_LLMC, VOCAB, "t", &set), 0);
    for (int shuffle = 0; shuffle < 2; shuffle++) {
        struct dt_tokens_options o = {4, 8, 1, 2, shuffle, 11, 1};
        struct dt_tokens_loader *a, *b;
        assert_int_equal(dt_tokens_loader_create(&set, &o, &a), 0);
        assert_int_equal(dt_tokens_loader_create(&set, &o, &b), 0);
        int64_t n = dt_tokens_batches_per_epoch(a);
        assert_int_equal(n, 999 / 64 + 332 / 64 + 1999 / 64);
        for (int64_t first = 0; first <= n; first += 3) {
            dt_tokens_start_epoch(a, 2, 0);
            for (int64_t i = 0; i < first; i++)
                assert_non_null(dt_tokens_next(a));
            dt_tokens_start_epoch(b, 2, first);
            for (;;) {
                int sa, sb;
                int64_t oa, ob;
                dt_tokens_where(a, &sa, &oa);
                dt_tokens_where(b, &sb, &ob);
                assert_int_equal(sa, sb);
                assert_int_equal(oa, ob);
                const struct dt_batch *x = dt_tokens_next(a), *y = dt_tokens_next(b);
                if (!x) {
                    assert_null(y);
                    break;
                }
                assert_non_null(y);
                assert_int_equal(x->index, y->index);
                assert_memory_equal(x->inputs, y->inputs, 32 * sizeof(int32_t));
            }
        }
        dt_tokens_loader_destroy(a);
        dt_tokens_loader_destroy(b);
    }
    dt_tokens_close(&set);
}

/* ---- bad shards: each error names the file and where ---- */

static void expect_format_error(const char *pattern, enum dt_token_format format, int vocab,
                                const char *const *parts)
{
    struct dt_token_set set;
    assert_int_not_equal(dt_tokens_open(pattern, format, vocab, "trainer.data.train", &set), 0);
    const char *msg = dt_error_last();
    for (int i = 0; parts[i]; i++)
        if (!strstr(msg, parts[i]))
            fail_msg("error '%s' lacks '%s'", msg, parts[i]);
    assert_null(set.shards);
}

static void expect_open_error(const char *pattern, int vocab, const char *const *parts)
{
    expect_format_error(pattern, DT_TOKENS_LLMC, vocab, parts);
}

static void test_bad_shards(void **state)
{
    (void)state;
    char path[256];
    snprintf(path, sizeof path, "%s/bad_magic.bin", dir);
    write_raw(path, 20240521, 1, 100, 0, 100);
    expect_open_error(
        path, VOCAB,
        (const char *[]){"trainer.data.train", path, "byte 0: magic 20240521", "expected 20240520", NULL});
    snprintf(path, sizeof path, "%s/bad_version.bin", dir);
    write_raw(path, DT_TOKENS_MAGIC, 2, 100, 0, 100);
    expect_open_error(path, VOCAB, (const char *[]){path, "byte 4: version 2, expected 1", NULL});
    snprintf(path, sizeof path, "%s/truncated.bin", dir);
    write_raw(path, DT_TOKENS_MAGIC, 1, 100, 0, 99);
    expect_open_error(path, VOCAB,
                      (const char *[]){path, "byte 8: the header counts 100 tokens", "1224 bytes",
                                       "the file has 1222", NULL});
    snprintf(path, sizeof path, "%s/long.bin", dir);
    write_raw(path, DT_TOKENS_MAGIC, 1, 100, 0, 101);
    expect_open_error(path, VOCAB, (const char *[]){path, "the file has 1226", NULL});
    snprintf(path, sizeof path, "%s/negative.bin", dir);
    write_raw(path, DT_TOKENS_MAGIC, 1, -5, 0, 0);
    expect_open_error(path, VOCAB, (const char *[]){path, "counts -5 tokens", NULL});
    snprintf(path, sizeof path, "%s/short.bin", dir);
    FILE *f = fopen(path, "wb");
    assert_int_equal(fwrite("abc", 1, 3, f), 3);
    fclose(f);
    expect_open_error(path, VOCAB,
                      (const char *[]){path, "3 bytes, shorter than the 1024-byte header", NULL});
    snprintf(path, sizeof path, "%s/empty.bin", dir);
    fclose(fopen(path, "wb"));
    expect_open_error(path, VOCAB, (const char *[]){path, "0 bytes, shorter", NULL});
    /* token i of shard 0 is 7i: 37 is the first >= 256, at byte 1024 + 2 * 37 */
    snprintf(path, sizeof path, "%s/vocab.bin", dir);
    write_raw(path, DT_TOKENS_MAGIC, 1, 100, 0, 100);
    expect_open_error(
        path, 256,
        (const char *[]){path, "byte 1098: token 259 is not below the model's vocab_size 256", NULL});
    struct dt_token_set ok;
    assert_int_equal(dt_tokens_open(path, DT_TOKENS_LLMC, 700, "t", &ok), 0); /* 7 * 99 = 693 */
    assert_int_equal(ok.shards[0].n, 100);
    dt_tokens_close(&ok);
    snprintf(path, sizeof path, "%s/nothing_*.bin", dir);
    expect_open_error(path, VOCAB, (const char *[]){"trainer.data.train: no file matches", path, NULL});
    snprintf(path, sizeof path, "%s", dir); /* a directory */
    expect_open_error(path, VOCAB, (const char *[]){path, "not a regular file", NULL});
    snprintf(path, sizeof path, "%s/fifo.bin", dir); /* open(2) of a FIFO waited for a writer */
    assert_int_equal(mkfifo(path, 0600), 0);
    alarm(10);
    expect_open_error(path, VOCAB, (const char *[]){path, "not a regular file (a FIFO)", NULL});
    alarm(0);
    unlink(path);
}

/* data.format uint16: nanoGPT's bare train.bin (np.uint16 tokens, no
 * header) loads as it is; an odd size or a token past the vocabulary is
 * named with its byte, and an llm.c shard read this way is not mistaken for
 * one (its header's int32 become tokens and the size tells them apart only
 * by luck, so the format is the user's statement, not a guess). */
static void test_uint16_format(void **state)
{
    (void)state;
    char path[256];
    snprintf(path, sizeof path, "%s/nanogpt_train.bin", dir);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    for (int i = 0; i < 500; i++) { /* 1000 bytes: shorter than an llm.c header, read from the file itself */
        uint8_t le[2] = {(uint8_t)((i * 7) % 250), 0};
        assert_int_equal(fwrite(le, 1, 2, f), 2);
    }
    fclose(f);
    struct dt_token_set set;
    assert_int_equal(dt_tokens_open(path, DT_TOKENS_UINT16, 256, "t", &set), 0);
    assert_int_equal(set.n, 1);
    assert_int_equal(set.shards[0].n, 500);
    assert_int_equal(set.shards[0].tokens[3], 21);
    assert_int_equal(set.shards[0].tokens[499], (499 * 7) % 250);
    dt_tokens_close(&set);
    /* the same bytes are no llm.c shard */
    expect_format_error(path, DT_TOKENS_LLMC, 256,
                        (const char *[]){path, "shorter than the 1024-byte header", NULL});
    /* token 7 * 3 = 21 is the first >= 20, at byte 2 * 3 */
    expect_format_error(
        path, DT_TOKENS_UINT16, 20,
        (const char *[]){path, "byte 6: token 21 is not below the model's vocab_size 20", NULL});
    f = fopen(path, "ab");
    assert_int_equal(fwrite("x", 1, 1, f), 1);
    fclose(f);
    expect_format_error(path, DT_TOKENS_UINT16, 256,
                        (const char *[]){path, "1001 bytes", "even, non-zero", NULL});
}

/* A shard that cannot give every rank one sequence of B*T + 1 tokens. */
static void test_shard_too_small(void **state)
{
    (void)state;
    write_shard("small_0.bin", 0, 1000);
    write_shard("small_1.bin", 1, 64); /* 2 ranks x 4 x 8 = 64: needs 65 */
    char pattern[128], small[128];
    snprintf(pattern, sizeof pattern, "%s/small_*.bin", dir);
    snprintf(small, sizeof small, "%s/small_1.bin", dir);
    struct dt_token_set set;
    assert_int_equal(dt_tokens_open(pattern, DT_TOKENS_LLMC, VOCAB, "t", &set), 0);
    struct dt_tokens_options o = {4, 8, 0, 2, false, 0, 1};
    struct dt_tokens_loader *l = NULL;
    assert_int_not_equal(dt_tokens_loader_create(&set, &o, &l), 0);
    assert_null(l);
    const char *msg = dt_error_last();
    if (!strstr(msg, small) ||
        !strstr(msg, "64 tokens, too few for one step of 2 ranks x batch 4 x seq_len 8"))
        fail_msg("unexpected error: %s", msg);
    o.world = 1; /* 32 + 1 fits */
    assert_int_equal(dt_tokens_loader_create(&set, &o, &l), 0);
    assert_int_equal(dt_tokens_batches_per_epoch(l), 999 / 32 + 63 / 32);
    dt_tokens_loader_destroy(l);
    dt_tokens_close(&set);
}

/* Shards come in byte order of their names, whatever order they were made in. */
static void test_sorted(void **state)
{
    (void)state;
    write_shard("sort_b.bin", 1, 100);
    write_shard("sort_B.bin", 2, 100);
    write_shard("sort_a.bin", 0, 100);
    char pattern[128];
    snprintf(pattern, sizeof pattern, "%s/sort_*.bin", dir);
    struct dt_token_set set;
    assert_int_equal(dt_tokens_open(pattern, DT_TOKENS_LLMC, VOCAB, "t", &set), 0);
    assert_int_equal(set.n, 3);
    assert_non_null(strstr(set.shards[0].path, "sort_B.bin"));
    assert_non_null(strstr(set.shards[1].path, "sort_a.bin"));
    assert_non_null(strstr(set.shards[2].path, "sort_b.bin"));
    dt_tokens_close(&set);
}

/* ---- the position in checkpoints (worker/ckpt.h) ---- */

static void test_checkpoint_position(void **state)
{
    (void)state;
    const int hidden[1] = {8};
    struct dt_model *m;
    struct dt_adamw a;
    assert_int_equal(mlp_fixture(4, hidden, 1, 3, DT_ACT_RELU, 2, 1, &m), 0);
    assert_int_equal(dt_adamw_init(&a, &dt_kernels_cpu, m->n_params, 0.999, 1e-8, 0.01), 0);
    char ck[128], path[256];
    snprintf(ck, sizeof ck, "%s/ckpt", dir);
    struct dt_ckpt_state s = {.step = 7,
                              .epoch = 2,
                              .batch = 3,
                              .seed = 1,
                              .world = 2,
                              .batch_size = 4,
                              .has_data_pos = true,
                              .data_shard = 5,
                              .data_offset = 123456789012LL};
    assert_int_equal(dt_ckpt_save(ck, m, &a, &s, 0), 0);
    struct dt_ckpt_state back = {.seed = 1, .world = 2, .batch_size = 4};
    snprintf(path, sizeof path, "%s/step_00000007.safetensors", ck);
    assert_int_equal(dt_ckpt_load(path, m, &a, &back), 0);
    assert_true(back.has_data_pos);
    assert_int_equal(back.data_shard, 5);
    assert_int_equal(back.data_offset, 123456789012LL);
    assert_int_equal(back.epoch, 2);
    assert_int_equal(back.batch, 3);
    /* an image run's file has neither key, and loads without a position */
    s = (struct dt_ckpt_state){.step = 8, .seed = 1, .world = 2, .batch_size = 4};
    assert_int_equal(dt_ckpt_save(ck, m, &a, &s, 0), 0);
    snprintf(path, sizeof path, "%s/step_00000008.safetensors", ck);
    struct dt_safetensors f;
    assert_int_equal(dt_safetensors_read(path, &f), 0);
    assert_null(dt_safetensors_meta(&f, "data_shard"));
    assert_null(dt_safetensors_meta(&f, "data_offset"));
    dt_safetensors_release(&f);
    back = (struct dt_ckpt_state){.seed = 1, .world = 2, .batch_size = 4, .has_data_pos = true};
    assert_int_equal(dt_ckpt_load(path, m, &a, &back), 0);
    assert_false(back.has_data_pos);
    dt_adamw_release(&a);
    dt_model_destroy(m);
}

/* ---- the trainer on tokens ---- */

static int count_lines(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    char line[4096];
    int n = 0;
    while (f && fgets(line, sizeof line, f))
        n += strstr(line, needle) != NULL;
    if (f)
        fclose(f);
    return n;
}

static void test_trainer_epochs(void **state)
{
    (void)state;
    write_shard("run_train_0.bin", 0, 100); /* B 2 x T 8 = 16: 99 / 16 = 6 samples */
    write_shard("run_train_1.bin", 1, 60);  /* 59 / 16 = 3 */
    write_shard("run_val_0.bin", 2, 50);    /* 3 */
    char train[128], val[128], ck[128], path[256];
    snprintf(train, sizeof train, "%s/run_train_*.bin", dir);
    snprintf(val, sizeof val, "%s/run_val_*.bin", dir);
    snprintf(ck, sizeof ck, "%s/run_ckpt", dir);
    struct dt_trainer_spec s;
    dt_trainer_spec_defaults(&s);
    s.model = (struct dt_model_spec){
        .type = "gpt2", .n_layer = 1, .n_head = 2, .n_embd = 8, .vocab_size = VOCAB, .block_size = 8};
    snprintf(s.data.dataset, sizeof s.data.dataset, "tokens");
    s.data.train = train;
    s.data.val = val;
    s.data.batch_size = 2;
    s.data.seq_len = 8;
    s.data.shuffle = false;
    s.epochs = 2;
    s.optimizer.weight_decay = 0;
    s.eval_batches = 0; /* all of val */
    s.checkpoint.every_steps = 0;
    s.checkpoint.dir = ck;
    s.checkpoint.resume = DT_RESUME_NEVER;
    s.log_every_steps = 1;
    struct dt_trainer_options o = {.run_dir = dir, .threads = 1, .quiet = true};
    struct dt_trainer *t;
    if (dt_trainer_create(&s, &o, &t))
        fail_msg("%s", dt_error_last());
    struct dt_metrics_summary sum;
    if (dt_trainer_run(t, &sum))
        fail_msg("%s", dt_error_last());
    dt_trainer_destroy(t);
    assert_int_equal(sum.total_steps, 2 * 9); /* an epoch: every sample of every shard */
    assert_int_equal(sum.steps, 18);
    assert_true(sum.epochs == 2.0);
    assert_int_equal(sum.seq_len, 8);
    assert_true(isfinite(sum.test_loss) && sum.test_loss > 0 && sum.test_loss < 12); /* ln 50257 = 10.8 */
    assert_true(isfinite(sum.final_loss) && sum.final_loss < 12);
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    assert_int_equal(count_lines(path, "\"val_loss\""), 2); /* after epoch 1, and at the end */
    assert_int_equal(count_lines(path, "\"tokens_per_s\""), 18);
    assert_int_equal(count_lines(path, "\"test_loss\""), 0);
    snprintf(path, sizeof path, "%s/step_00000018.safetensors", ck);
    struct dt_safetensors f;
    assert_int_equal(dt_safetensors_read(path, &f), 0);
    assert_string_equal(dt_safetensors_meta(&f, "epoch"), "2");
    assert_string_equal(dt_safetensors_meta(&f, "batch"), "0");
    assert_string_equal(dt_safetensors_meta(&f, "data_shard"), "0"); /* the next epoch's first batch */
    assert_string_equal(dt_safetensors_meta(&f, "data_offset"), "0");
    dt_safetensors_release(&f);
}

/* Issue 45: an id past the vocabulary written into a shard after it was
 * opened (the mapping shows it) reached the model, whose refused batch read
 * as "training diverged at step N: loss is nan".  The loader checks what it
 * copies: the shard, the byte, the token and the vocabulary are named. */
static void poke(const char *path, int64_t token, uint16_t id)
{
    int fd = open(path, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, &id, 2, DT_TOKENS_HEADER_BYTES + 2 * token), 2);
    close(fd);
}

static void step_done_poke(void *ctx, int64_t step)
{
    if (step == 1) /* step 3 reads tokens 32..48 */
        poke(ctx, 40, 60000);
}

static void test_out_of_vocab_written_mid_run(void **state)
{
    (void)state;
    char path[256], want[512];
    write_shard("oov_0.bin", 0, 100);
    snprintf(path, sizeof path, "%s/oov_0.bin", dir);
    struct dt_token_set set;
    assert_int_equal(dt_tokens_open(path, DT_TOKENS_LLMC, VOCAB, "trainer.data.train", &set), 0);
    struct dt_tokens_options o = {.batch_size = 2, .seq_len = 8, .world = 1};
    struct dt_tokens_loader *l;
    assert_int_equal(dt_tokens_loader_create(&set, &o, &l), 0);
    dt_tokens_start_epoch(l, 0, 0);
    assert_non_null(dt_tokens_next(l)); /* tokens 0..16 */
    poke(path, 31, 60000);              /* the next batch's last target */
    assert_null(dt_tokens_next(l));
    assert_true(dt_tokens_failed(l));
    snprintf(want, sizeof want,
             "%s: byte 1086 (token 31): token 60000 is not below the model's vocab_size 50257; it was when "
             "the run opened the shard, so the file was written to since",
             path);
    if (!strstr(dt_error_last(), want))
        fail_msg("got: %s", dt_error_last());
    poke(path, 31, 7);
    assert_non_null(dt_tokens_next(l)); /* the same batch, as it is now */
    assert_false(dt_tokens_failed(l));
    dt_tokens_loader_destroy(l);
    dt_tokens_close(&set);
    /* in a run: the run fails with that sentence, not as a divergence */
    struct dt_trainer_spec s;
    dt_trainer_spec_defaults(&s);
    s.model = (struct dt_model_spec){
        .type = "gpt2", .n_layer = 1, .n_head = 2, .n_embd = 8, .vocab_size = VOCAB, .block_size = 8};
    snprintf(s.data.dataset, sizeof s.data.dataset, "tokens");
    s.data.train = path;
    s.data.batch_size = 2;
    s.data.seq_len = 8;
    s.data.shuffle = false;
    s.epochs = 1;
    s.checkpoint.every_steps = 0;
    s.checkpoint.resume = DT_RESUME_NEVER;
    char ck[128];
    snprintf(ck, sizeof ck, "%s/oov_ckpt", dir);
    s.checkpoint.dir = ck;
    struct dt_trainer_options to = {
        .run_dir = dir, .threads = 1, .quiet = true, .step_done = step_done_poke, .ctx = path};
    struct dt_trainer *t;
    if (dt_trainer_create(&s, &to, &t))
        fail_msg("%s", dt_error_last());
    struct dt_metrics_summary sum;
    assert_int_equal(dt_trainer_run(t, &sum), DT_EINVAL);
    dt_trainer_destroy(t);
    snprintf(want, sizeof want, "trainer.data.train: %s: byte 1104 (token 40): token 60000 is not below", path);
    if (!strstr(dt_error_last(), want) || strstr(dt_error_last(), "diverged"))
        fail_msg("got: %s", dt_error_last());
}

/* ---- an elastic run's order (accum) ---- */

/* The sequences (shard << 40 | first token) that `world` ranks of loaders
 * with accum A read over batches [first, last) of epoch 0; n counts them. */
static void read_sequences(const struct dt_token_set *set, int world, int accum, int shuffle, int64_t first,
                           int64_t last, int64_t *seq, int64_t *n)
{
    for (int r = 0; r < world; r++) {
        struct dt_tokens_options o = {2, 8, r, world, shuffle, 5, accum};
        struct dt_tokens_loader *l;
        assert_int_equal(dt_tokens_loader_create(set, &o, &l), 0);
        dt_tokens_start_epoch(l, 0, first);
        for (int64_t b = first; b < last; b++) {
            const struct dt_batch *bt = dt_tokens_next(l);
            assert_non_null(bt);
            int shard;
            int64_t off;
            dt_tokens_origin(l, &shard, &off);
            check_batch(bt, set, shard, off, 2, 8);
            for (int i = 0; i < bt->n; i++)
                seq[(*n)++] = ((int64_t)shard << 40) + off + (int64_t)i * 8;
        }
        if (last == dt_tokens_batches_per_epoch(l))
            assert_null(dt_tokens_next(l));
        dt_tokens_loader_destroy(l);
    }
}

static int by_value(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* 3 ranks x 2 micro-batches and 2 ranks x 3 read one step's global batch
 * (12 sequences of 8) as one sample: an epoch on 3 ranks stopped after any
 * whole step and finished on 2 reads every sequence of the 3-rank epoch
 * once, with and without shuffle; the batch counts are the same steps. */
static void test_accum_world_change(void **state)
{
    (void)state;
    write_shard("el_0.bin", 0, 1000); /* 10 samples of 96 tokens */
    write_shard("el_1.bin", 1, 500);  /* 5 */
    char pattern[128];
    snprintf(pattern, sizeof pattern, "%s/el_*.bin", dir);
    struct dt_token_set set;
    assert_int_equal(dt_tokens_open(pattern, DT_TOKENS_LLMC, VOCAB, "t", &set), 0);
    static int64_t whole[4096], split[4096];
    for (int shuffle = 0; shuffle < 2; shuffle++) {
        struct dt_tokens_options o3 = {2, 8, 0, 3, shuffle, 5, 2}, o2 = {2, 8, 0, 2, shuffle, 5, 3};
        struct dt_tokens_loader *a, *b;
        assert_int_equal(dt_tokens_loader_create(&set, &o3, &a), 0);
        assert_int_equal(dt_tokens_loader_create(&set, &o2, &b), 0);
        assert_int_equal(dt_tokens_batches_per_epoch(a), 15 * 2);
        assert_int_equal(dt_tokens_batches_per_epoch(b), 15 * 3);
        dt_tokens_loader_destroy(a);
        dt_tokens_loader_destroy(b);
        int64_t nw = 0;
        read_sequences(&set, 3, 2, shuffle, 0, 30, whole, &nw);
        assert_int_equal(nw, 15 * 12);
        qsort(whole, (size_t)nw, sizeof *whole, by_value);
        for (int64_t i = 1; i < nw; i++)
            assert_true(whole[i] != whole[i - 1]);
        for (int steps = 1; steps < 15; steps += 4) {
            int64_t ns = 0;
            read_sequences(&set, 3, 2, shuffle, 0, 2 * steps, split, &ns);
            read_sequences(&set, 2, 3, shuffle, 3 * steps, 45, split, &ns);
            assert_int_equal(ns, nw);
            qsort(split, (size_t)ns, sizeof *split, by_value);
            assert_memory_equal(split, whole, (size_t)nw * sizeof *whole);
        }
    }
    dt_tokens_close(&set);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_order_matches_llmc),
        cmocka_unit_test(test_start_mid_epoch),
        cmocka_unit_test(test_bad_shards),
        cmocka_unit_test(test_shard_too_small),
        cmocka_unit_test(test_sorted),
        cmocka_unit_test(test_checkpoint_position),
        cmocka_unit_test(test_trainer_epochs),
        cmocka_unit_test(test_uint16_format),
        cmocka_unit_test(test_accum_world_change),
        cmocka_unit_test(test_out_of_vocab_written_mid_run),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
