/* test_sample.c - generation (worker/sample.h) on a bigram model made here,
 * so the sampler is tested apart from any transformer: temperature 0 is the
 * argmax chain; the context window is the last min(block_size, seq_len)
 * tokens; padded logit columns are never read; the random numbers are
 * SplitMix64 as documented (a pinned sequence); top-k keeps only the k
 * largest; draws follow the softmax; a seed names one sample; bad
 * arguments get a sentence; byte-level tokens print as escaped text. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "worker/sample.h"
#include "mlp_fixture.h"

#define V 7
#define STRIDE 10 /* 3 padding columns, NaN: reading one would show */
#define MAXT 8

/* logits(position t) = table[inputs[t]]: the next token depends on the last only. */
struct bigram {
    struct dt_model m;
    float table[V][V];
    float logits[MAXT * STRIDE];
    int last_T, max_T, calls;
    int32_t last_inputs[MAXT];
};

static double bigram_eval(struct dt_model *m, const struct dt_batch *b, int64_t *correct)
{
    struct bigram *g = (struct bigram *)m;
    assert_int_equal(b->kind, DT_BATCH_TOKENS);
    assert_int_equal(b->n, 1);
    assert_true(b->T >= 1 && b->T <= m->seq_len);
    for (int t = 0; t < b->T; t++) {
        assert_true(b->targets[t] >= 0 && b->targets[t] < V);
        memcpy(&g->logits[t * STRIDE], g->table[b->inputs[t]], sizeof g->table[0]);
        g->last_inputs[t] = b->inputs[t];
    }
    g->last_T = b->T;
    g->max_T = b->T > g->max_T ? b->T : g->max_T;
    g->calls++;
    (void)correct;
    return 0;
}

static const float *bigram_logits(const struct dt_model *m)
{
    return ((const struct bigram *)m)->logits;
}

static const struct dt_model_ops bigram_ops = {
    .name = "bigram", .input = DT_BATCH_TOKENS, .eval_batch = bigram_eval, .logits = bigram_logits};

/* Next of i is (3i + 1) mod V by a margin of 2 over the rest. */
static struct bigram *bigram(int block_size, int seq_len)
{
    struct bigram *g = calloc(1, sizeof *g);
    g->m.ops = &bigram_ops;
    g->m.logits_cols = V;
    g->m.logits_stride = STRIDE;
    g->m.seq_len = seq_len;
    g->m.spec = (struct dt_model_spec){.type = "gpt2", .vocab_size = V, .block_size = block_size};
    for (int i = 0; i < V; i++)
        g->table[i][(3 * i + 1) % V] = 2.0f;
    for (int i = 0; i < MAXT * STRIDE; i++)
        if (i % STRIDE >= V)
            g->logits[i] = NAN;
    return g;
}

static void temperature_zero_is_the_argmax_chain(void **state)
{
    (void)state;
    struct bigram *g = bigram(16, 8);
    int32_t prompt[1] = {2}, out[20];
    assert_int_equal(dt_sample_generate(&g->m, prompt, 1, 20, 0.0, 0, 0, out), 0);
    int32_t want = 2;
    for (int i = 0; i < 20; i++) {
        want = (3 * want + 1) % V;
        assert_int_equal(out[i], want);
    }
    assert_int_equal(g->calls, 20);
    /* top_k 1 is the argmax too, at any temperature */
    int32_t again[20];
    assert_int_equal(dt_sample_generate(&g->m, prompt, 1, 20, 5.0, 1, 99, again), 0);
    assert_memory_equal(again, out, sizeof out);
    free(g);
}

/* The window is the last min(block_size, seq_len) tokens of prompt + output. */
static void the_window_is_the_last_tokens(void **state)
{
    (void)state;
    struct bigram *g = bigram(4, 8); /* block_size 4 < seq_len 8 */
    int32_t prompt[6] = {0, 1, 2, 3, 4, 5}, out[5];
    assert_int_equal(dt_sample_generate(&g->m, prompt, 6, 5, 0.0, 0, 0, out), 0);
    assert_int_equal(g->max_T, 4);
    assert_int_equal(g->last_T, 4);
    /* the last forward saw the prompt's tail and the first four outputs minus one */
    int32_t all[11];
    memcpy(all, prompt, sizeof prompt);
    memcpy(all + 6, out, sizeof out);
    assert_memory_equal(g->last_inputs, all + 6, 4 * sizeof(int32_t));
    free(g);
    g = bigram(50, 3); /* seq_len 3 < block_size */
    assert_int_equal(dt_sample_generate(&g->m, prompt, 2, 5, 0.0, 0, 0, out), 0);
    assert_int_equal(g->max_T, 3);
    free(g);
}

/* SplitMix64 from the seed, one draw per token: two equal logits give
 * token 1 exactly when u >= 0.5; seed 0's first draws are 0.883, 0.432,
 * 0.026, 0.971, 0.106, 0.327, 0.174, 0.772. */
static void the_random_numbers_are_splitmix64(void **state)
{
    (void)state;
    struct bigram *g = bigram(16, 8);
    memset(g->table, 0, sizeof g->table);
    for (int i = 0; i < V; i++)
        for (int j = 2; j < V; j++)
            g->table[i][j] = -1e30f;
    int32_t prompt[1] = {3}, out[8], again[8], other[8];
    assert_int_equal(dt_sample_generate(&g->m, prompt, 1, 8, 1.0, 0, 0, out), 0);
    const int32_t want[8] = {1, 0, 0, 1, 0, 0, 0, 1};
    assert_memory_equal(out, want, sizeof want);
    assert_int_equal(dt_sample_generate(&g->m, prompt, 1, 8, 1.0, 0, 0, again), 0);
    assert_memory_equal(again, out, sizeof out);
    assert_int_equal(dt_sample_generate(&g->m, prompt, 1, 8, 1.0, 0, 12345, other), 0);
    assert_memory_not_equal(other, out, sizeof out);
    free(g);
}

/* Draws follow softmax(logits / temperature); top-k keeps the k largest. */
static void draws_follow_the_softmax_and_top_k(void **state)
{
    (void)state;
    struct bigram *g = bigram(4, 8);
    const double p[V] = {0.05, 0.1, 0.15, 0.2, 0.25, 0.2, 0.05};
    for (int i = 0; i < V; i++)
        for (int j = 0; j < V; j++)
            g->table[i][j] = (float)(2.0 * log(p[j])); /* temperature 2 undoes the 2 */
    enum { N = 3000 };
    int32_t prompt[1] = {0}, *out = malloc(N * sizeof *out);
    assert_int_equal(dt_sample_generate(&g->m, prompt, 1, N, 2.0, 0, 7, out), 0);
    int count[V] = {0};
    for (int i = 0; i < N; i++)
        count[out[i]]++;
    for (int j = 0; j < V; j++) /* 4 standard deviations at most */
        assert_true(fabs(count[j] - N * p[j]) < 4 * sqrt(N * p[j] * (1 - p[j])));
    assert_int_equal(dt_sample_generate(&g->m, prompt, 1, N, 2.0, 2, 7, out), 0);
    memset(count, 0, sizeof count);
    for (int i = 0; i < N; i++)
        count[out[i]]++;
    assert_int_equal(count[4] + count[3] + count[5],
                     N); /* top 2: 0.25 and a 0.2 (ties at the threshold stay) */
    assert_true(count[4] > N / 3);
    free(out);
    free(g);
}

static void bad_arguments_get_a_sentence(void **state)
{
    (void)state;
    struct bigram *g = bigram(16, 8);
    int32_t bad[2] = {3, 7}, out[4];
    assert_int_equal(dt_sample_generate(&g->m, bad, 2, 4, 1.0, 0, 0, out), DT_EINVAL);
    assert_string_equal(dt_error_last(),
                        "prompt token 7 (at 1) is outside this model's vocabulary of 7 tokens (0..6)");
    assert_int_equal(dt_sample_generate(&g->m, bad, 0, 4, 1.0, 0, 0, out), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "a prompt of at least one token"));
    assert_int_equal(dt_sample_generate(&g->m, bad, 1, 4, -1.0, 0, 0, out), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "temperature -1 is not a finite number >= 0"));
    assert_int_equal(dt_sample_generate(&g->m, bad, 1, 4, 1.0, -3, 0, out), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "top_k -3 is negative"));
    g->table[3][2] = INFINITY;
    assert_int_equal(dt_sample_generate(&g->m, bad, 1, 4, 1.0, 0, 0, out), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "logit for token 2 is inf"));
    assert_int_equal(g->calls, 1); /* refused arguments ran nothing */
    free(g);
    const int hidden[1] = {4};
    struct dt_model *mlp;
    assert_int_equal(mlp_fixture(3, hidden, 1, 2, DT_ACT_RELU, 1, 0, &mlp), 0);
    assert_int_equal(dt_sample_generate(mlp, bad, 1, 4, 1.0, 0, 0, out), DT_EINVAL);
    assert_non_null(
        strstr(dt_error_last(), "sampling needs a language model; model mlp reads no token sequences"));
    dt_model_destroy(mlp);
}

static void bytes_print_as_text(void **state)
{
    (void)state;
    const int32_t t[] = {'I', 'n', ' ', 'a', '\n', '\t', '\\', 0, 27, 0xe9, '~'};
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    dt_sample_print_bytes(f, t, (int)(sizeof t / sizeof t[0]));
    fclose(f);
    assert_string_equal(buf, "In a\n\t\\\\\\x00\\x1b\\xe9~");
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(temperature_zero_is_the_argmax_chain),
        cmocka_unit_test(the_window_is_the_last_tokens),
        cmocka_unit_test(the_random_numbers_are_splitmix64),
        cmocka_unit_test(draws_follow_the_softmax_and_top_k),
        cmocka_unit_test(bad_arguments_get_a_sentence),
        cmocka_unit_test(bytes_print_as_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
