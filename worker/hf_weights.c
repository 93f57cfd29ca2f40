/* hf_weights.c - Hugging Face GPT-2 weights in (trainer.init_from) and out
 * (`dtrain export hf`); see hf_weights.h.
 *
 * Loading checks everything before it copies anything: each model tensor
 * found (under its name, or without "transformer." as GPT2Model saves it),
 * of a known float dtype, of the model's shape and finite, and every other
 * tensor of the file accounted for.  Only then are the values converted into
 * the parameter arena, so a refused file leaves the model as it was.  The
 * one shape that may differ is wpe's: a file with more positions than
 * trainer.model.block_size gives its first block_size rows, as nanoGPT's
 * crop_block_size does, so GPT-2's 1024 positions fine-tune at T = 256.
 *
 * Not for dtrain's checkpoints (ckpt.c) or the safetensors format itself
 * (safetensors.c).
 */
#include "worker/hf_weights.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/error.h"
#include "base/fs.h"
#include "base/json.h"
#include "worker/safetensors.h"

#define HF_PATH_MAX 4400
#define PREFIX "transformer."
#define BLOCK 4096 /* floats converted at a time while checking */

/* ---- GPT-2's tensors ---- */

/* A block's tensors, Hugging Face's order: ndim, then the shape in units of C. */
static const struct {
    const char *name;
    int ndim, rows, cols;
} block_tensors[] = {
    {"ln_1.weight", 1, 1, 0},      {"ln_1.bias", 1, 1, 0},          {"attn.c_attn.weight", 2, 1, 3},
    {"attn.c_attn.bias", 1, 3, 0}, {"attn.c_proj.weight", 2, 1, 1}, {"attn.c_proj.bias", 1, 1, 0},
    {"ln_2.weight", 1, 1, 0},      {"ln_2.bias", 1, 1, 0},          {"mlp.c_fc.weight", 2, 1, 4},
    {"mlp.c_fc.bias", 1, 4, 0},    {"mlp.c_proj.weight", 2, 4, 1},  {"mlp.c_proj.bias", 1, 1, 0},
};
#define PER_BLOCK (int)(sizeof block_tensors / sizeof block_tensors[0])

struct dt_hf_tensor *dt_hf_gpt2_tensors(const struct dt_model_spec *s, int *n)
{
    int64_t C = s->n_embd;
    *n = 4 + PER_BLOCK * s->n_layer;
    struct dt_hf_tensor *t = calloc((size_t)*n, sizeof *t);
    if (!t) {
        dt_error_set(DT_ENOMEM, "no memory for the names of %d tensors", *n);
        return NULL;
    }
    t[0] = (struct dt_hf_tensor){PREFIX "wte.weight", 2, {s->vocab_size, C}};
    t[1] = (struct dt_hf_tensor){PREFIX "wpe.weight", 2, {s->block_size, C}};
    for (int i = 0; i < s->n_layer; i++)
        for (int j = 0; j < PER_BLOCK; j++) {
            struct dt_hf_tensor *x = &t[2 + PER_BLOCK * i + j];
            snprintf(x->name, sizeof x->name, PREFIX "h.%d.%s", i, block_tensors[j].name);
            x->ndim = block_tensors[j].ndim;
            x->shape[0] = block_tensors[j].rows * C;
            x->shape[1] = block_tensors[j].cols * C;
        }
    t[*n - 2] = (struct dt_hf_tensor){PREFIX "ln_f.weight", 1, {C}};
    t[*n - 1] = (struct dt_hf_tensor){PREFIX "ln_f.bias", 1, {C}};
    return t;
}

static void shape_str(const int64_t *shape, int ndim, char *buf, size_t size)
{
    size_t at = 0;
    buf[0] = 0;
    for (int d = 0; d < ndim && at < size; d++)
        at += (size_t)snprintf(buf + at, size - at, "%s%lld", d ? ", " : "", (long long)shape[d]);
}

/* ---- reading: dtypes ---- */

static float half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0 && man) { /* subnormal: man * 2^-24, exact in fp32 */
        float v = (float)man * 0x1p-24f;
        return sign ? -v : v;
    }
    if (exp == 0x1f)
        bits = sign | 0x7f800000u | man << 13;
    else
        bits = sign | (exp ? (exp + 112) << 23 : 0) | man << 13;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static bool is_float_dtype(const char *dtype)
{
    return !strcmp(dtype, "F32") || !strcmp(dtype, "F16") || !strcmp(dtype, "BF16") || !strcmp(dtype, "F64");
}

/* Elements [from, from + n) of t as fp32.  Element by element through
 * memcpy: a file's data need not be aligned to its dtype. */
static void to_f32(const struct dt_st_tensor *t, size_t from, size_t n, float *out)
{
    const uint8_t *p = t->data;
    size_t sz = dt_safetensors_dtype_size(t->dtype);
    p += from * sz;
    if (sz == 4) {
        memcpy(out, p, n * 4);
    } else if (sz == 8) {
        for (size_t i = 0; i < n; i++) {
            double d;
            memcpy(&d, p + 8 * i, 8);
            out[i] = (float)d;
        }
    } else {
        bool bf16 = strcmp(t->dtype, "BF16") == 0;
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            uint32_t bits = (uint32_t)h << 16;
            if (bf16)
                memcpy(&out[i], &bits, 4);
            else
                out[i] = half_to_float(h);
        }
    }
}

/* ---- reading: where the weights are ---- */

static bool is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static bool ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), m = strlen(tail);
    return n >= m && strcmp(s + n - m, tail) == 0;
}

static int pickle_refused(const char *file, const char *dir)
{
    return dt_error_set(
        DT_EUNSUPPORTED,
        "%s is a PyTorch pickle, which dtrain does not read (loading one can run code); convert "
        "it once to model.safetensors with: python3 -c \"from transformers import "
        "GPT2LMHeadModel as M; M.from_pretrained('%s').save_pretrained('%s')\"",
        file, dir, dir);
}

/* path -> the safetensors file and, for a directory with one, its config.json ("" if none). */
static int resolve(const char *path, char *file, char *config)
{
    struct stat st;
    config[0] = 0;
    if (stat(path, &st) != 0)
        return dt_error_set_errno(errno == ENOENT ? DT_ENOTFOUND : DT_EIO, errno, "cannot open %s", path);
    if (!S_ISDIR(st.st_mode)) {
        if (ends_with(path, ".bin") || ends_with(path, ".pt") || ends_with(path, ".pth"))
            return pickle_refused(path, "DIR");
        snprintf(file, HF_PATH_MAX, "%s", path);
        return 0;
    }
    if (strlen(path) > HF_PATH_MAX - 64)
        return dt_error_set(DT_EINVAL, "directory name of %zu bytes is too long: %.80s...", strlen(path),
                            path);
    snprintf(file, HF_PATH_MAX, "%s/model.safetensors", path);
    snprintf(config, HF_PATH_MAX, "%s/config.json", path);
    if (!is_file(config))
        config[0] = 0;
    if (is_file(file))
        return 0;
    char other[HF_PATH_MAX];
    snprintf(other, sizeof other, "%s/model.safetensors.index.json", path);
    if (is_file(other))
        return dt_error_set(
            DT_EUNSUPPORTED,
            "%s holds a sharded model (model.safetensors.index.json), which dtrain does not read; "
            "save it as one file with save_pretrained(DIR, max_shard_size=\"100GB\")",
            path);
    snprintf(other, sizeof other, "%s/pytorch_model.bin", path);
    if (is_file(other))
        return pickle_refused(other, path);
    return dt_error_set(
        DT_ENOTFOUND,
        "%s has no model.safetensors (a Hugging Face model directory holds one: save_pretrained "
        "writes it)",
        path);
}

/* ---- reading: config.json against trainer.model ---- */

static int config_int(const char *path, json_t *cfg, const char *key, const char *ours, int want,
                      bool at_least)
{
    json_t *v = json_object_get(cfg, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v))
        return dt_error_set(DT_EINVAL, "%s: %s is not an integer", path, key);
    long long got = json_integer_value(v);
    if (got == want || (at_least && got > want))
        return 0;
    return dt_error_set(
        DT_EINVAL, "%s: %s is %lld, this model's trainer.model.%s is %d: set %s: %lld to use these weights",
        path, key, got, ours, want, ours, got);
}

/* What shapes cannot show: n_head, the activation, the MLP width. */
static int check_config(const char *path, const struct dt_model_spec *s)
{
    json_t *cfg;
    int rc = dt_json_load_file(path, 1 << 20, &cfg);
    if (rc)
        return rc;
    const char *type = json_string_value(json_object_get(cfg, "model_type"));
    const char *act = json_string_value(json_object_get(cfg, "activation_function"));
    json_t *inner = json_object_get(cfg, "n_inner");
    if (!json_is_object(cfg))
        rc = dt_error_set(DT_EINVAL, "%s: not a JSON object", path);
    else if (type && strcmp(type, "gpt2"))
        rc = dt_error_set(DT_EINVAL, "%s: model_type is %s; trainer.init_from reads GPT-2 (model_type gpt2)",
                          path, type);
    else if (act && strcmp(act, "gelu_new") && strcmp(act, "gelu_pytorch_tanh"))
        rc = dt_error_set(DT_EINVAL,
                          "%s: activation_function is %s; dtrain's gpt2 has GELU's tanh form (gelu_new)",
                          path, act);
    else if (inner && !json_is_null(inner) &&
             (!json_is_integer(inner) || json_integer_value(inner) != 4LL * s->n_embd))
        rc = dt_error_set(DT_EINVAL, "%s: n_inner is not 4 * n_embd (%d); dtrain's gpt2 has that MLP width",
                          path, 4 * s->n_embd);
    if (!rc)
        rc = config_int(path, cfg, "n_layer", "n_layer", s->n_layer, false);
    if (!rc)
        rc = config_int(path, cfg, "n_head", "n_head", s->n_head, false);
    if (!rc)
        rc = config_int(path, cfg, "n_embd", "n_embd", s->n_embd, false);
    if (!rc)
        rc = config_int(path, cfg, "vocab_size", "vocab_size", s->vocab_size, false);
    if (!rc)
        rc = config_int(path, cfg, "n_positions", "block_size", s->block_size, true);
    json_decref(cfg);
    return rc;
}

/* ---- reading: tensors against the model ---- */

/* What the file's tensors say of its config (-1 where it says nothing). */
struct file_dims {
    long long vocab, embd, block, layers;
};

static const char *bare(const char *name)
{
    return strncmp(name, PREFIX, strlen(PREFIX)) == 0 ? name + strlen(PREFIX) : name;
}

static const struct dt_st_tensor *hf_find(const struct dt_safetensors *f, const char *name)
{
    const struct dt_st_tensor *t = dt_safetensors_find(f, name);
    return t ? t : dt_safetensors_find(f, bare(name));
}

static void read_dims(const struct dt_safetensors *f, struct file_dims *d)
{
    *d = (struct file_dims){-1, -1, -1, -1};
    const struct dt_st_tensor *wte = hf_find(f, PREFIX "wte.weight"), *wpe = hf_find(f, PREFIX "wpe.weight");
    if (wte && wte->ndim == 2) {
        d->vocab = wte->shape[0];
        d->embd = wte->shape[1];
    }
    if (wpe && wpe->ndim == 2)
        d->block = wpe->shape[0];
    for (int i = 0; i < f->n; i++) {
        int layer, used = 0;
        if (sscanf(bare(f->tensors[i].name), "h.%d.%n", &layer, &used) == 1 && used > 0 && layer >= d->layers)
            d->layers = layer + 1LL;
    }
}

/* "set trainer.model.n_embd: 64, n_layer: 4 to match the file" for the keys
 * the file's dims contradict. */
static void hint(const struct file_dims *d, const struct dt_model_spec *s, char *buf, size_t size)
{
    const struct {
        const char *key;
        long long file, ours;
    } k[] = {{"n_layer", d->layers, s->n_layer},
             {"n_embd", d->embd, s->n_embd},
             {"vocab_size", d->vocab, s->vocab_size},
             {"block_size", d->block, s->block_size}};
    size_t at = 0;
    for (size_t i = 0; i < sizeof k / sizeof k[0] && at < size; i++)
        if (k[i].file >= 0 && k[i].file != k[i].ours &&
            (strcmp(k[i].key, "block_size") || k[i].file < k[i].ours))
            at += (size_t)snprintf(buf + at, size - at, "%s%s: %lld", at ? ", " : "set trainer.model.",
                                   k[i].key, k[i].file);
    if (at == 0)
        snprintf(buf, size, "the file's tensors do not agree with one another: not a GPT-2 file");
    else if (at < size)
        snprintf(buf + at, size - at, " to match the file");
}

/* The model tensor mt in the file: present, a float dtype, its shape (wpe:
 * at least its rows), finite. */
static int check_tensor(const char *path, const struct dt_safetensors *f, const struct dt_model *m,
                        const struct dt_model_tensor *mt, const struct dt_st_tensor **out)
{
    char h[256], fs[96], ms[96];
    const struct dt_st_tensor *t = *out = hf_find(f, mt->name);
    if (!t || t->ndim != mt->ndim || memcmp(t->shape, mt->shape, (size_t)mt->ndim * sizeof *t->shape)) {
        struct file_dims d; /* only on the way to an error: it reads every name */
        read_dims(f, &d);
        hint(&d, &m->spec, h, sizeof h);
    }
    if (!t)
        return dt_error_set(DT_EINVAL, "%s: no tensor %s (nor %s) in the file; %s", path, mt->name,
                            bare(mt->name), h);
    if (!is_float_dtype(t->dtype))
        return dt_error_set(DT_EINVAL, "%s: tensor %s is %s; weights must be F32, F16, BF16 or F64", path,
                            t->name, t->dtype);
    bool crop = strcmp(bare(mt->name), "wpe.weight") == 0;
    bool same = t->ndim == mt->ndim;
    for (int i = 0; same && i < mt->ndim; i++)
        same = t->shape[i] == mt->shape[i] || (crop && i == 0 && t->shape[0] > mt->shape[0]);
    if (!same) {
        shape_str(t->shape, t->ndim, fs, sizeof fs);
        shape_str(mt->shape, mt->ndim, ms, sizeof ms);
        return dt_error_set(DT_EINVAL, "%s: tensor %s is [%s] in the file, [%s] in this model: %s", path,
                            t->name, fs, ms, h);
    }
    float buf[BLOCK];
    size_t n = dt_model_tensor_numel(mt);
    for (size_t at = 0; at < n; at += BLOCK) {
        size_t k = n - at < BLOCK ? n - at : BLOCK;
        to_f32(t, at, k, buf);
        for (size_t i = 0; i < k; i++)
            if (!isfinite(buf[i]))
                return dt_error_set(DT_EINVAL, "%s: tensor %s holds %g at element %zu", path, t->name,
                                    isnan(buf[i]) ? (double)NAN : (double)buf[i],
                                    at + i); /* "nan", any sign */
    }
    return 0;
}

static bool same_values(const struct dt_st_tensor *a, const struct dt_st_tensor *b, size_t n)
{
    float x[BLOCK], y[BLOCK];
    for (size_t at = 0; at < n; at += BLOCK) {
        size_t k = n - at < BLOCK ? n - at : BLOCK;
        to_f32(a, at, k, x);
        to_f32(b, at, k, y);
        if (memcmp(x, y, k * sizeof *x))
            return false;
    }
    return true;
}

/* A tensor the model has no place for: lm_head.weight when tied (equal to
 * wte), the causal-mask buffers of old files; anything else is refused. */
static int check_extra(const char *path, const struct dt_safetensors *f, const struct dt_st_tensor *t,
                       const struct dt_model *m)
{
    const char *b = bare(t->name);
    if (strncmp(b, "h.", 2) == 0 && (ends_with(b, ".attn.bias") || ends_with(b, ".attn.masked_bias"))) {
        int layer = -1;
        if (sscanf(b, "h.%d.", &layer) == 1 && layer < m->spec.n_layer)
            return 0;
    }
    if (strcmp(t->name, "lm_head.weight") == 0) {
        const struct dt_st_tensor *wte = hf_find(f, PREFIX "wte.weight");
        bool tied = wte && t->ndim == 2 && t->shape[0] == wte->shape[0] && t->shape[1] == wte->shape[1] &&
                    is_float_dtype(t->dtype) && same_values(t, wte, (size_t)(t->shape[0] * t->shape[1]));
        return tied ? 0
                    : dt_error_set(
                          DT_EINVAL,
                          "%s: lm_head.weight differs from transformer.wte.weight; dtrain's gpt2 ties the "
                          "language-model head to the token embedding, as GPT-2 does",
                          path);
    }
    struct file_dims d;
    char h[256];
    read_dims(f, &d);
    hint(&d, &m->spec, h, sizeof h);
    return dt_error_set(DT_EINVAL, "%s: tensor %s has no place in this model (%s)", path, t->name,
                        d.layers > m->spec.n_layer ? h : "not a tensor of GPT2LMHeadModel");
}

/* Every model tensor checked, then every file tensor accounted for; the
 * file's tensor for each model tensor into t[]. */
static int check_all(const char *path, const struct dt_safetensors *f, const struct dt_model *m,
                     const struct dt_st_tensor **t)
{
    bool *used = calloc((size_t)(f->n ? f->n : 1), sizeof *used);
    if (!used)
        return dt_error_set(DT_ENOMEM, "no memory to check %d tensors", f->n);
    int rc = 0;
    for (int i = 0; i < m->n_tensors && !rc; i++)
        if (!(rc = check_tensor(path, f, m, &m->tensors[i], &t[i])))
            used[t[i] - f->tensors] = true;
    for (int i = 0; i < f->n && !rc; i++)
        if (!used[i])
            rc = check_extra(path, f, &f->tensors[i], m);
    free(used);
    return rc;
}

int dt_hf_load(const char *path, struct dt_model *m)
{
    if (strcmp(m->spec.type, "gpt2"))
        return dt_error_set(DT_EINVAL, "%s: Hugging Face GPT-2 weights need trainer.model.type gpt2, not %s",
                            path, m->spec.type);
    char file[HF_PATH_MAX], config[HF_PATH_MAX];
    int rc = resolve(path, file, config);
    if (!rc && config[0])
        rc = check_config(config, &m->spec);
    if (rc)
        return rc;
    struct dt_safetensors f;
    const struct dt_st_tensor **t = calloc((size_t)m->n_tensors, sizeof *t);
    if (!t)
        return dt_error_set(DT_ENOMEM, "no memory for %d tensors", m->n_tensors);
    rc = dt_safetensors_read(file, &f);
    if (!rc)
        rc = check_all(file, &f, m, t);
    for (int i = 0; i < m->n_tensors && !rc; i++)
        to_f32(t[i], 0, dt_model_tensor_numel(&m->tensors[i]), m->params + m->tensors[i].offset);
    dt_safetensors_release(&f);
    free(t);
    return rc;
}

/* ---- writing: `dtrain export hf` ---- */

/* The checkpoint's model tensors, F32 and of the shapes its model entry
 * says, and nothing else besides the optimizer's. */
static int export_entries(const struct dt_ckpt_file *c, const struct dt_model_spec *s, struct dt_st_entry *e,
                          const struct dt_hf_tensor *want, int n)
{
    int found = 0;
    for (int i = 0; i < n; i++) {
        const struct dt_st_tensor *t = dt_safetensors_find(&c->st, want[i].name);
        bool ok = t && strcmp(t->dtype, "F32") == 0 && t->ndim == want[i].ndim;
        for (int d = 0; ok && d < t->ndim; d++)
            ok = t->shape[d] == want[i].shape[d];
        if (!ok)
            return dt_error_set(DT_EINVAL,
                                "%s: tensor %s is missing or not F32 of the shape its model entry "
                                "(n_embd %d, vocab_size %d, block_size %d) gives",
                                c->path, want[i].name, s->n_embd, s->vocab_size, s->block_size);
        e[i] = (struct dt_st_entry){.name = want[i].name, .dtype = "F32", .ndim = t->ndim, .data = t->data};
        memcpy(e[i].shape, t->shape, (size_t)t->ndim * sizeof *t->shape);
    }
    for (int i = 0; i < c->st.n; i++)
        if (strncmp(c->st.tensors[i].name, "optimizer.", 10))
            found++;
    if (found != n)
        return dt_error_set(
            DT_EINVAL, "%s: %d model tensors, its model entry makes %d: not a gpt2 checkpoint of this dtrain",
            c->path, found, n);
    return 0;
}

/* dir missing (made), empty, or with --force. */
static int export_dir(const char *dir, bool force)
{
    DIR *d = opendir(dir);
    if (!d && errno == ENOENT)
        return dt_fs_mkdir_p(dir, 0777, "export directory");
    if (!d)
        return dt_error_set_errno(DT_EIO, errno, "cannot use %s as the export directory", dir);
    char other[256] = "";
    struct dirent *de;
    while (!other[0] && (de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
            snprintf(other, sizeof other, "%s", de->d_name);
    closedir(d);
    if (other[0] && !force)
        return dt_error_set(
            DT_EINVAL,
            "%s is not empty (it holds %s): give a new or empty directory, or --force to replace "
            "model.safetensors and config.json there and leave the rest",
            dir, other);
    return 0;
}

struct st_bytes {
    const char *path;
    const struct dt_st_entry *e;
    int n;
};

static int write_weights(void *ctx, FILE *f)
{
    const struct st_bytes *b = ctx;
    static const char *const meta[] = {"format", "pt"}; /* transformers refuses other formats */
    return dt_safetensors_write_fd(fileno(f), b->path, b->e, b->n, meta, 1);
}

/* A GPT2Config of the model: every field transformers 5 writes, in its
 * order (sorted keys, two-space indent), dropout 0; bos/eos are GPT-2's
 * <|endoftext|> only where the vocabulary has it.  Reals print in jansson's
 * shortest form (layer_norm_epsilon as 1e-5, where Python writes 1e-05: the
 * same number to every JSON reader). */
static json_t *gpt2_config(const struct dt_model_spec *s)
{
    json_t *eot = s->vocab_size > 50256 ? json_integer(50256) : json_null();
    json_t *cfg = json_pack(
        "{s:s, s:b, s:[s], s:f, s:O, s:s, s:f, s:O, s:f, s:f,"
        " s:s, s:i, s:i, s:i, s:n, s:i, s:i, s:n, s:b, s:f,"
        " s:b, s:b, s:n, s:f, s:b, s:s, s:b, s:b, s:b, s:i}",
        "activation_function", "gelu_new", "add_cross_attention", 0, "architectures", "GPT2LMHeadModel",
        "attn_pdrop", 0.0, "bos_token_id", eot, "dtype", "float32", "embd_pdrop", 0.0, "eos_token_id", eot,
        "initializer_range", 0.02, "layer_norm_epsilon", 1e-5, "model_type", "gpt2", "n_ctx", s->block_size,
        "n_embd", s->n_embd, "n_head", s->n_head, "n_inner", "n_layer", s->n_layer, "n_positions",
        s->block_size, "pad_token_id", "reorder_and_upcast_attn", 0, "resid_pdrop", 0.0,
        "scale_attn_by_inverse_layer_idx", 0, "scale_attn_weights", 1, "summary_activation",
        "summary_first_dropout", 0.0, "summary_proj_to_labels", 1, "summary_type", "cls_index",
        "summary_use_proj", 1, "tie_word_embeddings", 1, "use_cache", 1, "vocab_size", s->vocab_size);
    json_decref(eot);
    return cfg;
}

static int write_config(void *ctx, FILE *f)
{
    json_t *cfg = gpt2_config(ctx);
    if (!cfg)
        return dt_error_set(DT_ENOMEM, "no memory for config.json");
    /* a stream error is the writer's to report (dt_fs_write_atomic) */
    if (json_dumpf(cfg, f, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(15)) == 0)
        fputc('\n', f);
    json_decref(cfg);
    return 0;
}

int dt_hf_export(const struct dt_ckpt_file *c, const char *dir, bool force)
{
    struct dt_model_spec s;
    int rc = dt_ckpt_model_spec(c, &s);
    if (rc)
        return rc;
    if (strcmp(s.type, "gpt2"))
        return dt_error_set(
            DT_EUNSUPPORTED,
            "%s holds a model of type %s; Hugging Face export writes GPT-2 (trainer.model.type: "
            "gpt2) only",
            c->path, s.type);
    if (strlen(dir) > HF_PATH_MAX - 64)
        return dt_error_set(DT_EINVAL, "directory name of %zu bytes is too long: %.80s...", strlen(dir), dir);
    int n;
    struct dt_hf_tensor *want = dt_hf_gpt2_tensors(&s, &n);
    struct dt_st_entry *e = want ? calloc((size_t)n, sizeof *e) : NULL;
    if (!e) {
        free(want);
        return dt_error_set(DT_ENOMEM, "no memory for %d tensors", n);
    }
    char path[HF_PATH_MAX];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    struct st_bytes b = {.path = path, .e = e, .n = n};
    rc = export_entries(c, &s, e, want, n);
    if (!rc)
        rc = export_dir(dir, force);
    if (!rc)
        rc = dt_fs_write_atomic(path, true, write_weights, &b);
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (!rc)
        rc = dt_fs_write_atomic(path, true, write_config, &s);
    free(e);
    free(want);
    return rc;
}
