/* hf_gpt2.c - test helper for tests/integration/test_hf.sh: dtrain's side of
 * the Hugging Face round trip, through the library calls the trainer and
 * the CLI use (dt_model_create, dt_ckpt_save / dt_ckpt_apply_weights,
 * dt_hf_load: what trainer.init_from runs).
 *
 *   hf_gpt2 init DIR L H C V BLOCK SEED   a gpt2 checkpoint in DIR (step 1): GPT-2's initialisation
 *                                         from SEED, then every parameter moved by noise in
 *                                         [-0.1, 0.1) so LayerNorms and biases are not 1 and 0
 *                                         and the logits differ from token to token
 *   hf_gpt2 init-mlp DIR                  an MLP checkpoint in DIR (not a gpt2)
 *   hf_gpt2 logits CKPT TOKENS OUT        the logits of a checkpoint's model for one sequence
 *   hf_gpt2 logits-hf PATH L H C V BLOCK TOKENS OUT
 *                                         the same for weights read as trainer.init_from reads them
 *   hf_gpt2 same CKPT PATH                exit 0 when weights read from PATH (init_from) are the
 *                                         checkpoint's, bit for bit
 *
 * TOKENS is "1,2,3"; OUT gets [T, vocab] float32, little-endian, row-major.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "worker/ckpt.h"
#include "worker/hf_weights.h"
#include "worker/models/model.h"
#include "worker/optim/adamw.h"

static struct dt_model_spec gpt2_spec(char **a)
{
    return (struct dt_model_spec){.type = "gpt2",
                                  .n_layer = atoi(a[0]),
                                  .n_head = atoi(a[1]),
                                  .n_embd = atoi(a[2]),
                                  .vocab_size = atoi(a[3]),
                                  .block_size = atoi(a[4])};
}

static int create(const struct dt_model_spec *s, uint64_t seed, struct dt_model **m)
{
    bool tokens = strcmp(s->type, "gpt2") == 0;
    struct dt_model_config c = {.spec = s, .k = &dt_kernels_cpu, .max_batch = 1, .seed = seed};
    c.data = tokens ? (struct dt_batch_shape){.kind = DT_BATCH_TOKENS,
                                              .seq_len = s->block_size,
                                              .vocab = s->vocab_size}
                    : (struct dt_batch_shape){.kind = DT_BATCH_IMAGES, .features = 16, .classes = 4};
    return dt_model_create(&c, m);
}

static int save(const char *dir, struct dt_model *m)
{
    struct dt_adamw a;
    int rc = dt_adamw_init(&a, &dt_kernels_cpu, m->n_params, 0.999, 1e-8, 0.01);
    struct dt_ckpt_state st = {.step = 1, .seed = 0, .world = 1, .batch_size = 1};
    if (!rc)
        rc = dt_ckpt_save(dir, m, &a, &st, 0);
    dt_adamw_release(&a);
    return rc;
}

static int init(char **a)
{
    struct dt_model_spec s = gpt2_spec(a + 1);
    struct dt_model *m;
    int rc = create(&s, strtoull(a[6], NULL, 10), &m);
    uint64_t x = 88172645463325252ull;              /* xorshift64: noise in [-0.1, 0.1) */
    for (int i = 0; !rc && i < m->n_tensors; i++) { /* the padding rows of wte stay 0 */
        const struct dt_model_tensor *t = &m->tensors[i];
        for (size_t e = 0; e < dt_model_tensor_numel(t); e++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            m->params[t->offset + e] += 0.2f * ((float)(x >> 40) * 0x1p-24f - 0.5f);
        }
    }
    if (!rc)
        rc = save(a[0], m);
    dt_model_destroy(m);
    return rc;
}

static int init_mlp(const char *dir)
{
    struct dt_model_spec s = {.type = "mlp", .hidden = {8}, .n_hidden = 1};
    struct dt_model *m;
    int rc = create(&s, 0, &m);
    if (!rc)
        rc = save(dir, m);
    dt_model_destroy(m);
    return rc;
}

/* The model of a checkpoint, with its weights. */
static int from_ckpt(const char *path, struct dt_model **m)
{
    struct dt_ckpt_file c;
    struct dt_model_spec s;
    int rc = dt_ckpt_read_any(path, &c);
    if (!rc)
        rc = dt_ckpt_model_spec(&c, &s);
    if (!rc)
        rc = create(&s, 0, m);
    if (!rc)
        rc = dt_ckpt_apply_weights(&c, *m);
    dt_ckpt_release(&c);
    return rc;
}

static int write_logits(struct dt_model *m, const char *list, const char *out)
{
    int32_t tokens[4096], targets[4096] = {0};
    int T = 0;
    for (const char *p = list; *p && T < 4096; T++) {
        tokens[T] = (int32_t)strtol(p, (char **)&p, 10);
        p += *p == ',';
    }
    struct dt_batch b = {.kind = DT_BATCH_TOKENS, .n = 1, .T = T, .inputs = tokens, .targets = targets};
    int64_t hits = 0;
    dt_model_eval_batch(m, &b, &hits);
    const float *l = dt_model_logits(m);
    FILE *f = fopen(out, "wb");
    if (!f)
        return dt_error_set(DT_EIO, "cannot write %s", out);
    for (int t = 0; t < T; t++)
        fwrite(l + (size_t)t * (size_t)m->logits_stride, sizeof *l, (size_t)m->logits_cols, f);
    return fclose(f) ? dt_error_set(DT_EIO, "cannot write %s", out) : 0;
}

static int same(const char *ckpt, const char *path)
{
    struct dt_model *a = NULL, *b = NULL;
    int rc = from_ckpt(ckpt, &a);
    if (!rc)
        rc = create(&a->spec, 12345, &b);
    if (!rc)
        rc = dt_hf_load(path, b);
    for (int i = 0; !rc && i < a->n_tensors; i++) {
        const struct dt_model_tensor *t = &a->tensors[i];
        if (memcmp(a->params + t->offset, b->params + t->offset, dt_model_tensor_numel(t) * sizeof(float)))
            rc = dt_error_set(DT_EINVAL, "tensor %s differs", t->name);
    }
    dt_model_destroy(a);
    dt_model_destroy(b);
    return rc;
}

int main(int argc, char **argv)
{
    const char *cmd = argc > 1 ? argv[1] : "";
    struct dt_model *m = NULL;
    int rc;
    if (!strcmp(cmd, "init") && argc == 9)
        rc = init(argv + 2);
    else if (!strcmp(cmd, "init-mlp") && argc == 3)
        rc = init_mlp(argv[2]);
    else if (!strcmp(cmd, "logits") && argc == 5) {
        rc = from_ckpt(argv[2], &m);
        if (!rc)
            rc = write_logits(m, argv[3], argv[4]);
    } else if (!strcmp(cmd, "logits-hf") && argc == 10) {
        struct dt_model_spec s = gpt2_spec(argv + 3);
        rc = create(&s, 0, &m);
        if (!rc)
            rc = dt_hf_load(argv[2], m);
        if (!rc)
            rc = write_logits(m, argv[8], argv[9]);
    } else if (!strcmp(cmd, "same") && argc == 4)
        rc = same(argv[2], argv[3]);
    else {
        fprintf(stderr, "usage: see tests/helpers/hf_gpt2.c\n");
        return 2;
    }
    dt_model_destroy(m);
    if (rc)
        fprintf(stderr, "hf_gpt2 %s: %s\n", cmd, dt_error_last());
    return rc ? 1 : 0;
}
