/* sample.c - autoregressive generation (see sample.h): the context window
 * through the model's eval batch, then one token from the last row of its
 * logits; and byte-level tokens shown as text.  Not for loading a model
 * (launcher/cli/cmd_sample.c) or tokenising.
 */
#include "worker/sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

/* ---- the random numbers ---- */

/* SplitMix64's next output (the reference implementation, public domain). */
static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double uniform(uint64_t *x)
{
    return (double)(splitmix64(x) >> 11) * 0x1p-53;
}

/* ---- one token from one row of logits ---- */

struct picker {
    int vocab, top_k;
    double temperature;
    uint64_t rng;
    float *sorted; /* scratch: the row sorted, for top-k's threshold */
};

static int descending(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

static int argmax(const float *row, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (row[i] > row[best])
            best = i;
    return best;
}

/* The smallest logit that stays: the k-th largest (every logit when k is 0
 * or at least the vocabulary). */
static float threshold(struct picker *p, const float *row)
{
    if (p->top_k <= 0 || p->top_k >= p->vocab)
        return -INFINITY;
    memcpy(p->sorted, row, (size_t)p->vocab * sizeof *row);
    qsort(p->sorted, (size_t)p->vocab, sizeof *p->sorted, descending);
    return p->sorted[p->top_k - 1];
}

static int pick(struct picker *p, const float *row)
{
    int best = argmax(row, p->vocab);
    if (p->temperature == 0 || p->top_k == 1)
        return best;
    float lo = threshold(p, row);
    double sum = 0, max = row[best];
    for (int i = 0; i < p->vocab; i++)
        if (row[i] >= lo)
            sum += exp((row[i] - max) / p->temperature);
    double u = uniform(&p->rng) * sum, acc = 0;
    int last = best;
    for (int i = 0; i < p->vocab; i++)
        if (row[i] >= lo) {
            acc += exp((row[i] - max) / p->temperature);
            last = i;
            if (acc > u)
                return i;
        }
    return last; /* u within rounding of the sum */
}

/* ---- byte-level text ---- */

void dt_sample_print_bytes(FILE *f, const int32_t *tokens, int n)
{
    for (int i = 0; i < n; i++) {
        int c = tokens[i];
        if (c == '\\')
            fputs("\\\\", f);
        else if ((c >= 0x20 && c < 0x7f) || c == '\n' || c == '\t')
            fputc(c, f);
        else
            fprintf(f, "\\x%02x", (unsigned)c & 0xff);
    }
}

/* ---- generation ---- */

static int check_args(const struct dt_model *m, const int32_t *prompt, int n_prompt, int n_new,
                      double temperature, int top_k)
{
    if (m->ops->input != DT_BATCH_TOKENS || m->logits_cols < 1 || m->seq_len < 1)
        return dt_error_set(DT_EINVAL, "sampling needs a language model; model %s reads no token sequences",
                            m->ops->name);
    if (n_prompt < 1)
        return dt_error_set(DT_EINVAL, "sampling needs a prompt of at least one token");
    if (n_new < 0 || n_prompt > INT32_MAX / 4 - n_new)
        return dt_error_set(DT_EINVAL, "sampling: %d new tokens after %d is out of range", n_new, n_prompt);
    if (!isfinite(temperature) || temperature < 0)
        return dt_error_set(DT_EINVAL, "sampling: temperature %g is not a finite number >= 0", temperature);
    if (top_k < 0)
        return dt_error_set(DT_EINVAL, "sampling: top_k %d is negative (0 keeps every token)", top_k);
    for (int i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= m->logits_cols)
            return dt_error_set(
                DT_EINVAL, "prompt token %d (at %d) is outside this model's vocabulary of %d tokens (0..%d)",
                (int)prompt[i], i, m->logits_cols, m->logits_cols - 1);
    return 0;
}

int dt_sample_generate(struct dt_model *m, const int32_t *prompt, int n_prompt, int n_new, double temperature,
                       int top_k, uint64_t seed, int32_t *out)
{
    int rc = check_args(m, prompt, n_prompt, n_new, temperature, top_k);
    if (rc)
        return rc;
    int window = m->spec.block_size > 0 && m->spec.block_size < m->seq_len ? m->spec.block_size : m->seq_len;
    struct picker p = {.vocab = m->logits_cols, .top_k = top_k, .temperature = temperature, .rng = seed};
    int32_t *ctx = malloc((size_t)(n_prompt + n_new) * sizeof *ctx);
    int32_t *targets = calloc((size_t)window, sizeof *targets); /* token 0: read by the loss, never used */
    p.sorted = malloc((size_t)p.vocab * sizeof *p.sorted);
    if (!ctx || !targets || !p.sorted)
        rc = dt_error_set(DT_ENOMEM, "sampling: no memory for %d tokens", n_prompt + n_new);
    if (!rc)
        memcpy(ctx, prompt, (size_t)n_prompt * sizeof *ctx);
    for (int step = 0; step < n_new && !rc; step++) {
        int len = n_prompt + step, T = len < window ? len : window;
        struct dt_batch b = {
            .kind = DT_BATCH_TOKENS, .n = 1, .T = T, .inputs = ctx + len - T, .targets = targets};
        int64_t hits = 0;
        dt_model_eval_batch(m, &b, &hits);
        const float *row = dt_model_logits(m) + (size_t)(T - 1) * (size_t)m->logits_stride;
        for (int i = 0; i < p.vocab && !rc; i++)
            if (!isfinite(row[i]))
                rc = dt_error_set(DT_EINVAL,
                                  "sampling: the model's logit for token %d is %g (diverged weights?)", i,
                                  isnan(row[i]) ? (double)NAN : (double)row[i]);
        if (!rc)
            ctx[len] = out[step] = pick(&p, row);
    }
    free(ctx);
    free(targets);
    free(p.sorted);
    return rc;
}
