/* test_hf_weights.c - Hugging Face GPT-2 weights in and out (worker/hf_weights.h),
 * on a model laid out as the contract of issue 24 says gpt2's tensors are
 * (names, Conv1D shapes, vocabulary padding after wte), built here so the
 * loader and the exporter are tested apart from the model's arithmetic:
 * an HF directory loads exactly, with or without the "transformer."
 * prefix, with the buffers and a tied lm_head, from fp16 and bf16; a longer
 * wpe is cropped; each bad input (a shape, a missing tensor, an extra layer,
 * an untied head, another n_head in config.json, a pickle, a sharded file,
 * an unknown tensor, a NaN) is refused with its sentence and leaves the
 * model as it was; an export of a checkpoint writes only the model's
 * tensors and a config, refuses a non-gpt2 checkpoint and a non-empty
 * directory without --force, and loads back to the same parameters, for
 * the real gpt2 model too. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/json.h"
#include "base/log.h"
#include "worker/ckpt.h"
#include "worker/hf_weights.h"
#include "worker/optim/adamw.h"
#include "worker/safetensors.h"
#include "mlp_fixture.h"

#define L 2
#define C 8
#define V 13
#define VPAD 16
#define BLOCKSZ 6
#define NT (4 + 12 * L)

/* ---- a gpt2-shaped model: the tensors only ---- */

struct fake {
    struct dt_model m;
    struct dt_model_tensor t[NT];
};

static void add(struct fake *f, int *i, size_t *at, const char *name, int ndim, int64_t r, int64_t c,
                size_t pad)
{
    struct dt_model_tensor *t = &f->t[(*i)++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = ndim;
    t->shape[0] = r;
    t->shape[1] = c;
    t->offset = *at;
    t->decay = ndim >= 2;
    *at += dt_model_tensor_numel(t) + pad;
}

static struct fake *fake_gpt2(int n_head, float base)
{
    static const char *const blk[12] = {"ln_1.weight",      "ln_1.bias",          "attn.c_attn.weight",
                                        "attn.c_attn.bias", "attn.c_proj.weight", "attn.c_proj.bias",
                                        "ln_2.weight",      "ln_2.bias",          "mlp.c_fc.weight",
                                        "mlp.c_fc.bias",    "mlp.c_proj.weight",  "mlp.c_proj.bias"};
    static const int64_t shp[12][3] = {{1, C, 0},     {1, C, 0},     {2, C, 3 * C}, {1, 3 * C, 0},
                                       {2, C, C},     {1, C, 0},     {1, C, 0},     {1, C, 0},
                                       {2, C, 4 * C}, {1, 4 * C, 0}, {2, 4 * C, C}, {1, C, 0}};
    struct fake *f = calloc(1, sizeof *f);
    int i = 0;
    size_t at = 0;
    add(f, &i, &at, "transformer.wte.weight", 2, V, C, (VPAD - V) * C);
    add(f, &i, &at, "transformer.wpe.weight", 2, BLOCKSZ, C, 0);
    for (int l = 0; l < L; l++)
        for (int j = 0; j < 12; j++) {
            char name[64];
            snprintf(name, sizeof name, "transformer.h.%d.%s", l, blk[j]);
            add(f, &i, &at, name, (int)shp[j][0], shp[j][1], shp[j][2], 0);
        }
    add(f, &i, &at, "transformer.ln_f.weight", 1, C, 0, 0);
    add(f, &i, &at, "transformer.ln_f.bias", 1, C, 0, 0);
    f->m.n_params = at;
    f->m.params = calloc(at, sizeof(float));
    f->m.grads = calloc(at, sizeof(float));
    f->m.tensors = f->t;
    f->m.n_tensors = NT;
    f->m.spec = (struct dt_model_spec){
        .type = "gpt2", .n_layer = L, .n_head = n_head, .n_embd = C, .vocab_size = V, .block_size = BLOCKSZ};
    for (int k = 0; k < NT; k++) /* values exact in fp16 and bf16: multiples of 1/8 below 16 */
        for (size_t e = 0; e < dt_model_tensor_numel(&f->t[k]); e++)
            f->m.params[f->t[k].offset + e] = base + (float)((k * 7 + (int)e) % 64) / 8.0f - 4.0f;
    for (size_t e = V * C; e < VPAD * C; e++) /* the vocabulary padding: no file's business */
        f->m.params[e] = base / 2;
    return f;
}

static void fake_free(struct fake *f)
{
    free(f->m.params);
    free(f->m.grads);
    free(f);
}

/* ---- files as Hugging Face writes them ---- */

static uint16_t to_bf16(float x)
{
    uint32_t b;
    memcpy(&b, &x, 4);
    return (uint16_t)(b >> 16); /* exact for the test's values */
}

static uint16_t to_f16(float x) /* normal values with at most 10 mantissa bits */
{
    uint32_t b;
    memcpy(&b, &x, 4);
    if (x == 0)
        return (uint16_t)(b >> 16);
    uint32_t sign = b >> 31, exp = (b >> 23) & 0xff, man = b & 0x7fffff;
    return (uint16_t)(sign << 15 | (exp - 112) << 10 | man >> 13);
}

struct tweak {
    const char *drop;   /* a tensor left out */
    const char *resize; /* a tensor written [rows + 1, ...] (garbage values) */
    bool bare;          /* names without "transformer." */
    bool buffers;       /* h.i.attn.bias and masked_bias */
    int lm_head;        /* 0 none, 1 tied (= wte), 2 untied */
    const char *dtype;  /* F32 (NULL), F16, BF16 */
    const char *extra;  /* one more tensor of this name */
    int wpe_rows;       /* > 0: wpe written with these rows (its first BLOCKSZ the model's) */
    bool nan;           /* a NaN in ln_f.bias */
};

static void write_st(const char *path, struct fake *f, const struct tweak *w)
{
    struct dt_st_entry e[NT + 8];
    void *bufs[NT + 8];
    int n = 0, nb = 0;
    const char *dtype = w->dtype ? w->dtype : "F32";
    size_t esz = dt_safetensors_dtype_size(dtype);
    char names[NT + 8][80];
    for (int k = 0; k < NT; k++) {
        const struct dt_model_tensor *t = &f->t[k];
        if (w->drop && strcmp(t->name, w->drop) == 0)
            continue;
        snprintf(names[n], sizeof names[n], "%s", w->bare ? t->name + strlen("transformer.") : t->name);
        int64_t rows = t->shape[0] + (w->resize && strcmp(t->name, w->resize) == 0);
        if (w->wpe_rows && strstr(t->name, "wpe"))
            rows = w->wpe_rows;
        size_t numel = (size_t)rows * (t->ndim == 2 ? (size_t)t->shape[1] : 1);
        uint8_t *b = calloc(numel, esz);
        for (size_t i = 0; i < numel && i < dt_model_tensor_numel(t); i++) {
            float x = f->m.params[t->offset + i];
            if (w->nan && strcmp(t->name, "transformer.ln_f.bias") == 0 && i == 3)
                x = 0.0f / 0.0f;
            if (esz == 4)
                memcpy(b + 4 * i, &x, 4);
            else {
                uint16_t h = strcmp(dtype, "BF16") == 0 ? to_bf16(x) : to_f16(x);
                memcpy(b + 2 * i, &h, 2);
            }
        }
        e[n] = (struct dt_st_entry){names[n], dtype, t->ndim, {rows, t->shape[1]}, b};
        bufs[nb++] = b;
        n++;
    }
    static float mask[BLOCKSZ * BLOCKSZ], head[V * C], zero[C];
    for (int l = 0; w->buffers && l < L; l++) {
        snprintf(names[n], sizeof names[n], "%sh.%d.attn.bias", w->bare ? "" : "transformer.", l);
        e[n] = (struct dt_st_entry){names[n], "F32", 4, {1, 1, BLOCKSZ, BLOCKSZ}, mask};
        n++;
        snprintf(names[n], sizeof names[n], "%sh.%d.attn.masked_bias", w->bare ? "" : "transformer.", l);
        e[n] = (struct dt_st_entry){names[n], "F32", 0, {0}, mask};
        n++;
    }
    if (w->lm_head) {
        memcpy(head, f->m.params, sizeof head);
        head[5] += w->lm_head == 2 ? 1.0f : 0.0f;
        e[n++] = (struct dt_st_entry){"lm_head.weight", "F32", 2, {V, C}, head};
        if (esz != 4) /* tied: the same dtype as wte */
            e[n - 1] = (struct dt_st_entry){"lm_head.weight", dtype, 2, {V, C}, e[0].data};
    }
    if (w->extra)
        e[n++] = (struct dt_st_entry){w->extra, "F32", 1, {C}, zero};
    static const char *const meta[] = {"format", "pt"};
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(dt_safetensors_write_fd(fd, path, e, n, meta, 1), 0);
    close(fd);
    for (int i = 0; i < nb; i++)
        free(bufs[i]);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void config_json(const char *path, int n_head, int n_positions)
{
    char text[512];
    snprintf(
        text, sizeof text,
        "{\"model_type\": \"gpt2\", \"activation_function\": \"gelu_new\", \"n_layer\": %d, \"n_head\": %d,"
        " \"n_embd\": %d, \"vocab_size\": %d, \"n_positions\": %d, \"n_inner\": null}",
        L, n_head, C, V, n_positions);
    write_text(path, text);
}

/* ---- fixture ---- */

struct fx {
    char dir[64], hf[128], st[160];
    struct fake *src, *dst;
};

static int setup(void **state)
{
    struct fx *x = calloc(1, sizeof *x);
    strcpy(x->dir, "/tmp/dtrain-hf-test.XXXXXX");
    if (!mkdtemp(x->dir))
        return -1;
    snprintf(x->hf, sizeof x->hf, "%s/hf", x->dir);
    snprintf(x->st, sizeof x->st, "%s/model.safetensors", x->hf);
    mkdir(x->hf, 0777);
    x->src = fake_gpt2(2, 0.0f);
    x->dst = fake_gpt2(2, 100.0f);
    dt_log_set_level(DT_LOG_ERROR);
    *state = x;
    return 0;
}

static int teardown(void **state)
{
    struct fx *x = *state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", x->dir);
    int rc = system(cmd);
    fake_free(x->src);
    fake_free(x->dst);
    free(x);
    return rc == 0 ? 0 : -1;
}

/* dst's tensors equal src's; the padding rows of wte stay as they were. */
static void assert_loaded(struct fx *x)
{
    for (int k = 0; k < NT; k++) {
        const struct dt_model_tensor *t = &x->src->t[k];
        assert_memory_equal(x->dst->m.params + t->offset, x->src->m.params + t->offset,
                            dt_model_tensor_numel(t) * sizeof(float));
    }
    assert_true(x->dst->m.params[V * C] == 50.0f); /* the padding is as fake_gpt2 left it */
    assert_true(x->dst->m.params[VPAD * C - 1] == 50.0f);
}

static void assert_untouched(struct fx *x)
{
    struct fake *fresh = fake_gpt2(2, 100.0f);
    assert_memory_equal(x->dst->m.params, fresh->m.params, fresh->m.n_params * sizeof(float));
    fake_free(fresh);
}

static void expect_refusal(struct fx *x, const char *path, const char *const *says)
{
    int rc = dt_hf_load(path, &x->dst->m);
    if (rc == 0)
        fail_msg("%s loaded; wanted a refusal saying '%s'", path, says[0]);
    for (int i = 0; says[i]; i++)
        if (!strstr(dt_error_last(), says[i]))
            fail_msg("got '%s', wanted '%s'", dt_error_last(), says[i]);
    assert_untouched(x);
}

/* ---- loading ---- */

static void hf_directory_loads_exactly(void **state)
{
    struct fx *x = *state;
    char cfg[200];
    snprintf(cfg, sizeof cfg, "%s/config.json", x->hf);
    config_json(cfg, 2, BLOCKSZ);
    write_st(x->st, x->src, &(struct tweak){.buffers = true, .lm_head = 1});
    if (dt_hf_load(x->hf, &x->dst->m))
        fail_msg("%s", dt_error_last());
    assert_loaded(x);
}

static void hub_names_and_a_file_path_load(void **state)
{
    struct fx *x = *state;
    write_st(x->st, x->src, &(struct tweak){.bare = true, .buffers = true});
    if (dt_hf_load(x->st, &x->dst->m))
        fail_msg("%s", dt_error_last());
    assert_loaded(x);
}

static void fp16_and_bf16_convert(void **state)
{
    struct fx *x = *state;
    const char *types[] = {"F16", "BF16"};
    for (int i = 0; i < 2; i++) {
        struct fake *fresh = fake_gpt2(2, 100.0f);
        memcpy(x->dst->m.params, fresh->m.params, fresh->m.n_params * sizeof(float));
        fake_free(fresh);
        write_st(x->st, x->src, &(struct tweak){.dtype = types[i], .lm_head = 1});
        if (dt_hf_load(x->hf, &x->dst->m))
            fail_msg("%s: %s", types[i], dt_error_last());
        assert_loaded(x);
    }
}

static void longer_wpe_is_cropped(void **state)
{
    struct fx *x = *state;
    char cfg[200];
    snprintf(cfg, sizeof cfg, "%s/config.json", x->hf);
    config_json(cfg, 2, 2 * BLOCKSZ);
    write_st(x->st, x->src, &(struct tweak){.wpe_rows = 2 * BLOCKSZ});
    if (dt_hf_load(x->hf, &x->dst->m))
        fail_msg("%s", dt_error_last());
    assert_loaded(x);
}

static void a_wrong_shape_names_the_tensor_and_the_key(void **state)
{
    struct fx *x = *state;
    write_st(x->st, x->src, &(struct tweak){.resize = "transformer.wte.weight"});
    expect_refusal(
        x, x->hf,
        (const char *[]){"tensor transformer.wte.weight is [14, 8] in the file, [13, 8] in this model",
                         "set trainer.model.vocab_size: 14 to match the file", x->st, NULL});
    write_st(x->st, x->src, &(struct tweak){.resize = "transformer.h.1.mlp.c_fc.weight"});
    expect_refusal(
        x, x->hf,
        (const char *[]){"tensor transformer.h.1.mlp.c_fc.weight is [9, 32] in the file, [8, 32] in this "
                         "model",
                         NULL});
    write_st(x->st, x->src, &(struct tweak){.wpe_rows = BLOCKSZ - 1});
    expect_refusal(
        x, x->hf,
        (const char *[]){"tensor transformer.wpe.weight is [5, 8] in the file, [6, 8] in this model",
                         "set trainer.model.block_size: 5", NULL});
}

static void a_missing_tensor_or_layer_is_named(void **state)
{
    struct fx *x = *state;
    write_st(x->st, x->src, &(struct tweak){.drop = "transformer.h.1.ln_2.bias"});
    expect_refusal(
        x, x->hf,
        (const char *[]){"no tensor transformer.h.1.ln_2.bias (nor h.1.ln_2.bias) in the file", NULL});
    write_st(x->st, x->src, &(struct tweak){.extra = "transformer.h.2.ln_1.weight"});
    expect_refusal(x, x->hf,
                   (const char *[]){"tensor transformer.h.2.ln_1.weight has no place in this model",
                                    "set trainer.model.n_layer: 3 to match the file", NULL});
    write_st(x->st, x->src, &(struct tweak){.extra = "transformer.score.weight"});
    expect_refusal(x, x->hf,
                   (const char *[]){"transformer.score.weight has no place in this model (not a tensor of "
                                    "GPT2LMHeadModel)",
                                    NULL});
}

static void untied_head_nan_and_config_are_refused(void **state)
{
    struct fx *x = *state;
    write_st(x->st, x->src, &(struct tweak){.lm_head = 2});
    expect_refusal(x, x->hf, (const char *[]){"lm_head.weight differs from transformer.wte.weight", NULL});
    write_st(x->st, x->src, &(struct tweak){.nan = true});
    expect_refusal(x, x->hf, (const char *[]){"tensor transformer.ln_f.bias holds nan at element 3", NULL});
    write_st(x->st, x->src, &(struct tweak){0});
    char cfg[200];
    snprintf(cfg, sizeof cfg, "%s/config.json", x->hf);
    config_json(cfg, 4, BLOCKSZ);
    expect_refusal(
        x, x->hf,
        (const char *[]){"config.json: n_head is 4, this model's trainer.model.n_head is 2: set n_head: 4",
                         NULL});
    write_text(cfg, "{\"model_type\": \"gpt2\", \"activation_function\": \"relu\"}");
    expect_refusal(x, x->hf, (const char *[]){"activation_function is relu", NULL});
    write_text(cfg, "{\"model_type\": \"llama\"}");
    expect_refusal(x, x->hf, (const char *[]){"model_type is llama", NULL});
}

static void pickles_and_shards_are_refused(void **state)
{
    struct fx *x = *state;
    char p[200];
    snprintf(p, sizeof p, "%s/pytorch_model.bin", x->hf);
    write_text(p, "not read");
    expect_refusal(x, x->hf,
                   (const char *[]){"pytorch_model.bin is a PyTorch pickle", "save_pretrained", NULL});
    expect_refusal(x, p, (const char *[]){"is a PyTorch pickle", NULL});
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", x->hf);
    write_text(p, "{}");
    expect_refusal(x, x->hf, (const char *[]){"holds a sharded model", NULL});
    snprintf(p, sizeof p, "%s/empty", x->dir);
    mkdir(p, 0777);
    expect_refusal(x, p, (const char *[]){"has no model.safetensors", NULL});
    snprintf(p, sizeof p, "%s/nothing", x->dir);
    expect_refusal(x, p, (const char *[]){"cannot open", "nothing", NULL});
    x->dst->m.spec = (struct dt_model_spec){.type = "mlp"};
    expect_refusal(x, x->hf, (const char *[]){"need trainer.model.type gpt2, not mlp", NULL});
}

/* ---- export ---- */

static void save_ckpt(struct fx *x, struct dt_model *m, char *path, size_t size)
{
    struct dt_adamw a;
    assert_int_equal(dt_adamw_init(&a, &dt_kernels_cpu, m->n_params, 0.999, 1e-8, 0.01), 0);
    struct dt_ckpt_state s = {.step = 3, .seed = 1, .world = 1, .batch_size = 4};
    char dir[128];
    snprintf(dir, sizeof dir, "%s/ck", x->dir);
    if (dt_ckpt_save(dir, m, &a, &s, 0))
        fail_msg("%s", dt_error_last());
    dt_adamw_release(&a);
    snprintf(path, size, "%s/step_00000003.safetensors", dir);
}

static void export_writes_the_model_and_a_config(void **state)
{
    struct fx *x = *state;
    char ck[256], out[128], p[200];
    save_ckpt(x, &x->src->m, ck, sizeof ck);
    struct dt_ckpt_file c;
    assert_int_equal(dt_ckpt_read(ck, &c), 0);
    snprintf(out, sizeof out, "%s/export/new", x->dir);
    if (dt_hf_export(&c, out, false))
        fail_msg("%s", dt_error_last());
    struct dt_safetensors st;
    snprintf(p, sizeof p, "%s/model.safetensors", out);
    assert_int_equal(dt_safetensors_read(p, &st), 0);
    assert_int_equal(st.n, NT); /* no optimizer, no lm_head */
    for (int k = 0; k < NT; k++) {
        const struct dt_st_tensor *t = dt_safetensors_find(&st, x->src->t[k].name);
        assert_non_null(t);
        assert_string_equal(t->dtype, "F32");
        assert_int_equal(t->end - t->begin, dt_model_tensor_numel(&x->src->t[k]) * 4); /* no padding */
    }
    assert_string_equal(dt_safetensors_meta(&st, "format"), "pt");
    dt_safetensors_release(&st);
    json_t *cfg;
    snprintf(p, sizeof p, "%s/config.json", out);
    assert_int_equal(dt_json_load_file(p, 1 << 20, &cfg), 0);
    assert_string_equal(json_string_value(json_object_get(cfg, "model_type")), "gpt2");
    assert_int_equal(json_integer_value(json_object_get(cfg, "n_positions")), BLOCKSZ);
    assert_int_equal(json_integer_value(json_object_get(cfg, "vocab_size")), V);
    assert_true(json_is_null(json_object_get(cfg, "eos_token_id"))); /* no <|endoftext|> in 13 tokens */
    /* transformers reads these types: reals, a list, a null, booleans */
    assert_true(json_real_value(json_object_get(cfg, "layer_norm_epsilon")) == 1e-5);
    assert_true(json_is_real(json_object_get(cfg, "attn_pdrop")));
    assert_string_equal(json_string_value(json_array_get(json_object_get(cfg, "architectures"), 0)),
                        "GPT2LMHeadModel");
    assert_true(json_is_null(json_object_get(cfg, "n_inner")));
    assert_true(json_is_true(json_object_get(cfg, "tie_word_embeddings")));
    assert_true(json_is_false(json_object_get(cfg, "add_cross_attention")));
    assert_int_equal(json_object_size(cfg), 30);
    json_decref(cfg);
    /* and back in: the same parameters */
    if (dt_hf_load(out, &x->dst->m))
        fail_msg("%s", dt_error_last());
    assert_loaded(x);
    /* a directory that holds anything: only with force */
    assert_int_equal(dt_hf_export(&c, out, false), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "is not empty (it holds "));
    assert_non_null(strstr(dt_error_last(), "--force"));
    assert_int_equal(dt_hf_export(&c, out, true), 0);
    dt_ckpt_release(&c);
}

static void export_refuses_a_non_gpt2_checkpoint(void **state)
{
    struct fx *x = *state;
    const int hidden[1] = {8};
    struct dt_model *m;
    assert_int_equal(mlp_fixture(4, hidden, 1, 3, DT_ACT_RELU, 1, 1, &m), 0);
    char ck[256], out[128];
    save_ckpt(x, m, ck, sizeof ck);
    dt_model_destroy(m);
    struct dt_ckpt_file c;
    assert_int_equal(dt_ckpt_read(ck, &c), 0);
    snprintf(out, sizeof out, "%s/mlp-export", x->dir);
    assert_int_equal(dt_hf_export(&c, out, false), DT_EUNSUPPORTED);
    assert_non_null(strstr(dt_error_last(), "holds a model of type mlp; Hugging Face export writes GPT-2"));
    assert_int_equal(access(out, F_OK), -1); /* nothing made */
    dt_ckpt_release(&c);
}

/* The model itself (worker/models/gpt2.c) against the names and shapes the
 * exporter writes: a checkpoint of a real gpt2 exports, and loads back into
 * a gpt2 of another seed with every parameter the same. */
static void real_gpt2_round_trips(void **state)
{
    struct fx *x = *state;
    struct dt_model_spec s = {
        .type = "gpt2", .n_layer = 2, .n_head = 2, .n_embd = 16, .vocab_size = 50, .block_size = 8};
    struct dt_model_config c = {.spec = &s,
                                .k = &dt_kernels_cpu,
                                .max_batch = 1,
                                .seed = 1,
                                .data = {.kind = DT_BATCH_TOKENS, .seq_len = 8, .vocab = 50}};
    struct dt_model *a, *b;
    assert_int_equal(dt_model_create(&c, &a), 0);
    c.seed = 2;
    assert_int_equal(dt_model_create(&c, &b), 0);
    char ck[256], out[128];
    save_ckpt(x, a, ck, sizeof ck);
    struct dt_ckpt_file f;
    assert_int_equal(dt_ckpt_read(ck, &f), 0);
    snprintf(out, sizeof out, "%s/real", x->dir);
    if (dt_hf_export(&f, out, false) || dt_hf_load(out, b))
        fail_msg("%s", dt_error_last());
    assert_int_equal(a->n_tensors, b->n_tensors);
    for (int i = 0; i < a->n_tensors; i++)
        assert_memory_equal(b->params + b->tensors[i].offset, a->params + a->tensors[i].offset,
                            dt_model_tensor_numel(&a->tensors[i]) * sizeof(float));
    dt_ckpt_release(&f);
    dt_model_destroy(a);
    dt_model_destroy(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(hf_directory_loads_exactly, setup, teardown),
        cmocka_unit_test_setup_teardown(hub_names_and_a_file_path_load, setup, teardown),
        cmocka_unit_test_setup_teardown(fp16_and_bf16_convert, setup, teardown),
        cmocka_unit_test_setup_teardown(longer_wpe_is_cropped, setup, teardown),
        cmocka_unit_test_setup_teardown(a_wrong_shape_names_the_tensor_and_the_key, setup, teardown),
        cmocka_unit_test_setup_teardown(a_missing_tensor_or_layer_is_named, setup, teardown),
        cmocka_unit_test_setup_teardown(untied_head_nan_and_config_are_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(pickles_and_shards_are_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(export_writes_the_model_and_a_config, setup, teardown),
        cmocka_unit_test_setup_teardown(export_refuses_a_non_gpt2_checkpoint, setup, teardown),
        cmocka_unit_test_setup_teardown(real_gpt2_round_trips, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
