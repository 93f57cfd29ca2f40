/* ckpt_model.c - a checkpoint's model entry (ckpt.h): trainer.model as
 * the JSON the file's "model" metadata holds, written once per save, read
 * back by `dtrain export hf` and `dtrain sample` (dt_ckpt_model_spec), and
 * matched against the run's model on resume.  A gpt2 entry is read back only
 * when the file's tensors are the ones it declares: the entry decides what
 * is allocated, the tensors what the file can fill.
 *
 * Not for the file's counters, checksums or tensors' values (ckpt.c).
 */
#include "worker/ckpt.h"
#include "worker/ckpt_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/json.h"
#include "base/json_escape.h"
#include "worker/hf_weights.h"

/* {"type": ..., then the type's fields}: what `dtrain export hf` and
 * `dtrain sample` rebuild the model from, and what a resume must match.
 * One writer, fields in a fixed order, so two equal specs give equal text. */
int dt_ckpt__model_json(const struct dt_model_spec *m, char *buf, size_t size)
{
    char type[6 * sizeof m->type + 2];
    size_t at = 0, n;
    if (dt_json_quote(type, sizeof type, m->type, DT_JSON_U, &n))
        return dt_error_prefix("checkpoint: the model type");
    at = (size_t)snprintf(buf, size, "{\"type\":%s", type);
    if (strcmp(m->type, "mlp") == 0) {
        for (int i = 0; i < m->n_hidden && at < size; i++)
            at += (size_t)snprintf(buf + at, size - at, "%s%d", i ? "," : ",\"hidden\":[", m->hidden[i]);
        if (at < size)
            at += (size_t)snprintf(buf + at, size - at, "%s,\"activation\":\"%s\"", m->n_hidden ? "]" : "",
                                   m->activation == DT_ACT_GELU ? "gelu" : "relu");
    } else if (strcmp(m->type, "gpt2") == 0 && at < size) {
        at += (size_t)snprintf(
            buf + at, size - at,
            ",\"n_layer\":%d,\"n_head\":%d,\"n_embd\":%d,\"vocab_size\":%d,\"block_size\":%d", m->n_layer,
            m->n_head, m->n_embd, m->vocab_size, m->block_size);
    }
    if (at + 2 > size)
        return dt_error_set(DT_EINTERNAL, "checkpoint: the model entry is longer than %zu bytes", size);
    snprintf(buf + at, size - at, "}");
    return 0;
}

/* Member key of o: an integer in [lo, hi]. */
static int model_int(const char *path, json_t *o, const char *key, int lo, int hi, int *out)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return dt_error_set(DT_EINVAL, "%s: the model entry's %s is missing or not an integer in %d..%d",
                            path, key, lo, hi);
    *out = (int)json_integer_value(v);
    return 0;
}

static int model_mlp(const char *path, json_t *o, struct dt_model_spec *out)
{
    json_t *h = json_object_get(o, "hidden"), *v;
    const char *act = json_string_value(json_object_get(o, "activation"));
    size_t i;
    if (!json_is_array(h) || json_array_size(h) < 1 || json_array_size(h) > DT_MLP_MAX_HIDDEN)
        return dt_error_set(DT_EINVAL, "%s: the model entry's hidden is not a list of 1 to %d widths", path,
                            DT_MLP_MAX_HIDDEN);
    json_array_foreach (h, i, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 65536)
            return dt_error_set(DT_EINVAL, "%s: the model entry's hidden[%zu] is not a width in 1..65536",
                                path, i);
        out->hidden[i] = (int)json_integer_value(v);
    }
    out->n_hidden = (int)json_array_size(h);
    if (!act || (strcmp(act, "relu") && strcmp(act, "gelu")))
        return dt_error_set(DT_EINVAL, "%s: the model entry's activation is not relu or gelu", path);
    out->activation = strcmp(act, "gelu") == 0 ? DT_ACT_GELU : DT_ACT_RELU;
    return 0;
}

static int model_gpt2(const char *path, json_t *o, struct dt_model_spec *out)
{
    const int big = 1 << 24;
    if (model_int(path, o, "n_layer", 1, 1024, &out->n_layer) ||
        model_int(path, o, "n_head", 1, 4096, &out->n_head) ||
        model_int(path, o, "n_embd", 1, big, &out->n_embd) ||
        model_int(path, o, "vocab_size", 1, big, &out->vocab_size) ||
        model_int(path, o, "block_size", 1, big, &out->block_size))
        return DT_EINVAL;
    if (out->n_embd % out->n_head)
        return dt_error_set(DT_EINVAL, "%s: the model entry's n_embd %d is not a multiple of n_head %d", path,
                            out->n_embd, out->n_head);
    return 0;
}

static void shape_str(const int64_t *shape, int ndim, char *buf, size_t size)
{
    size_t at = 0;
    buf[0] = 0;
    for (int d = 0; d < ndim && at < size; d++)
        at += (size_t)snprintf(buf + at, size - at, "%s%lld", d ? ", " : "", (long long)shape[d]);
}

/* Tensor w of the declared model in the file: present, F32, of w's shape;
 * else a sentence naming it and what the file has instead. */
static int has_tensor(const struct dt_ckpt_file *c, const char *model, const struct dt_hf_tensor *w)
{
    const struct dt_st_tensor *t = dt_safetensors_find(&c->st, w->name);
    bool same = t && strcmp(t->dtype, "F32") == 0 && t->ndim == w->ndim;
    for (int d = 0; same && d < w->ndim; d++)
        same = t->shape[d] == w->shape[d];
    if (same)
        return 0;
    char want[64], got[128] = "has no such tensor";
    shape_str(w->shape, w->ndim, want, sizeof want);
    if (t) {
        char dims[96];
        shape_str(t->shape, t->ndim, dims, sizeof dims);
        snprintf(got, sizeof got, "has it as %s [%s]", t->dtype, dims);
    }
    return dt_error_set(DT_EINVAL,
                        "%s: its model entry declares %s, whose tensor %s is F32 [%s]; the file %s: it does "
                        "not hold the model it declares (damaged, or not written by dtrain)",
                        c->path, model, w->name, want, got);
}

/* A gpt2 entry's tensors are in the file (has_tensor), and no tensor
 * besides them and the optimizer's: checked before anything builds the
 * model, since a model is allocated (parameters, gradients, activations)
 * from its entry alone, and a file of a few KB declaring GPT-2 124M would
 * cost 2.4 GB first.  Past this check the model's parameters cost what
 * the file's tensors do, and the file has been read whole already. */
static int check_gpt2_tensors(const struct dt_ckpt_file *c, const struct dt_model_spec *s)
{
    int n;
    struct dt_hf_tensor *want = dt_hf_gpt2_tensors(s, &n);
    if (!want)
        return DT_ENOMEM;
    char model[160];
    snprintf(model, sizeof model, "gpt2 n_layer %d, n_head %d, n_embd %d, vocab_size %d, block_size %d",
             s->n_layer, s->n_head, s->n_embd, s->vocab_size, s->block_size);
    int rc = 0;
    for (int i = 0; i < n && !rc; i++)
        rc = has_tensor(c, model, &want[i]);
    int others = 0; /* names are unique in a file (JSON's, base/json.h): a count tells */
    for (int i = 0; i < c->st.n; i++)
        others += strncmp(c->st.tensors[i].name, "optimizer.", 10) != 0;
    if (!rc && others != n)
        rc = dt_error_set(DT_EINVAL,
                          "%s: %d model tensors, and its model entry (%s) has %d: the file holds tensors "
                          "that model has not",
                          c->path, others, model, n);
    free(want);
    return rc;
}

int dt_ckpt_model_spec(const struct dt_ckpt_file *c, struct dt_model_spec *out)
{
    memset(out, 0, sizeof *out);
    if (!c->model)
        return dt_error_set(DT_ENOTFOUND,
                            "%s has no model entry in its metadata (written by a dtrain from before it "
                            "recorded trainer.model), so which model it holds is not known",
                            c->path);
    json_t *o;
    int rc = dt_json_parse(c->model, strlen(c->model), "the model entry", 1, &o);
    if (rc)
        return dt_error_prefix("%s", c->path);
    const char *type = json_string_value(json_object_get(o, "type"));
    if (!json_is_object(o) || !type || strlen(type) >= sizeof out->type)
        rc = dt_error_set(DT_EINVAL, "%s: the model entry has no type", c->path);
    else
        snprintf(out->type, sizeof out->type, "%s", type);
    if (!rc && strcmp(type, "mlp") == 0)
        rc = model_mlp(c->path, o, out);
    else if (!rc && strcmp(type, "gpt2") == 0 && !(rc = model_gpt2(c->path, o, out)))
        rc = check_gpt2_tensors(c, out);
    json_decref(o);
    return rc;
}

/* The file's model entry must be the model's: a gpt2 of another n_head has
 * tensors of the same shapes, and would resume into another function.  A
 * file without one (from before the entry) is checked by its shapes only. */
int dt_ckpt__same_model(const struct dt_ckpt_file *c, const struct dt_model *m)
{
    char want[DT_CKPT__MODEL_JSON_MAX];
    int rc = dt_ckpt__model_json(&m->spec, want, sizeof want);
    if (rc || !c->model || strcmp(c->model, want) == 0)
        return rc;
    return dt_error_set(DT_EINVAL,
                        "%s: saved from the model %.200s, this run's trainer.model is %s (set it to the "
                        "checkpoint's, or use another checkpoint dir or resume: never)",
                        c->path, c->model, want);
}
