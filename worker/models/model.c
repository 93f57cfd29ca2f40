/* model.c - the table of models and what every model shares (see model.h):
 * picking one by trainer.model.type, its arenas, its named tensors and the
 * gradient segments derived from them.  Not for any model's math: that is
 * the model's own file (mlp.c, ...).
 */
#include "worker/models/model_internal.h"

#include <stdio.h>
#include <string.h>

#include "base/arena.h"
#include "base/error.h"

/* ---- the models this trainer builds: one line each ---- */

extern const struct dt_model_ops dt_model__mlp;
extern const struct dt_model_ops dt_model__gpt2;

static const struct dt_model_ops *const models[] = {
    &dt_model__mlp,
    &dt_model__gpt2,
};

#define N_MODELS (int)(sizeof models / sizeof models[0])

static const char *const kind_names[] = {
    [DT_BATCH_IMAGES] = "images with labels", [DT_BATCH_TOKENS] = "token sequences"};

static int find(const char *type, const struct dt_model_ops **out)
{
    char known[256] = "";
    for (int i = 0; i < N_MODELS; i++) {
        if (!strcmp(models[i]->name, type)) {
            *out = models[i];
            return 0;
        }
        snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? ", " : "", models[i]->name);
    }
    return dt_error_set(DT_EUNSUPPORTED, "trainer.model.type '%s': this trainer builds %s", type, known);
}

/* ---- creating and freeing ---- */

size_t dt_model_tensor_numel(const struct dt_model_tensor *t)
{
    size_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= (size_t)t->shape[d];
    return n;
}

/* The lowest tensor at or above offset `from`, NULL when none. */
static const struct dt_model_tensor *lowest_from(const struct dt_model *m, size_t from)
{
    const struct dt_model_tensor *best = NULL;
    for (int i = 0; i < m->n_tensors; i++)
        if (m->tensors[i].offset >= from && (!best || m->tensors[i].offset < best->offset))
            best = &m->tensors[i];
    return best;
}

/* What checkpoints and the reducer rely on (model.h): a model that breaks it
 * is a bug in its file, caught here rather than as a torn checkpoint. */
static int check_tensors(const struct dt_model *m)
{
    const struct dt_model_tensor *t = lowest_from(m, 0);
    if (!t || t->offset != 0)
        return dt_error_set(DT_EINTERNAL, "model %s: no tensor at offset 0", m->ops->name);
    size_t end = 0;
    int seen = 0;
    for (; t; t = lowest_from(m, t->offset + 1), seen++) {
        bool ok = t->ndim >= 1 && t->ndim <= DT_MODEL_TENSOR_DIMS && t->offset >= end;
        for (int d = 0; ok && d < t->ndim; d++)
            ok = t->shape[d] >= 1;
        if (!ok || t->offset + dt_model_tensor_numel(t) > m->n_params)
            return dt_error_set(DT_EINTERNAL,
                                "model %s: tensor %s (floats from %zu) has a bad shape or overlaps",
                                m->ops->name, t->name, t->offset);
        end = t->offset + dt_model_tensor_numel(t);
    }
    if (seen != m->n_tensors)
        return dt_error_set(DT_EINTERNAL, "model %s: two tensors start at the same offset", m->ops->name);
    return 0;
}

int dt_model_create(const struct dt_model_config *c, struct dt_model **out)
{
    *out = NULL;
    const struct dt_model_ops *ops;
    int rc = find(c->spec->type, &ops);
    if (rc)
        return rc;
    if (c->data.kind != ops->input)
        return dt_error_set(DT_EINVAL, "trainer.model.type %s reads %s; this data set gives %s", ops->name,
                            kind_names[ops->input], kind_names[c->data.kind]);
    struct dt_model *m = NULL;
    if ((rc = ops->create(c, &m)))
        return rc;
    m->grad_chunk = DT_MODEL_GRAD_CHUNK;
    m->spec = *c->spec;
    if ((rc = check_tensors(m))) {
        dt_model_destroy(m);
        return rc;
    }
    m->seq_len = c->data.kind == DT_BATCH_TOKENS ? c->data.seq_len : 0;
    *out = m;
    return 0;
}

int dt_model__alloc_arenas(struct dt_model *m)
{
    m->params = m->params_own = dt_arena_calloc(m->n_params, sizeof(float));
    m->grads = m->grads_own = dt_arena_calloc(m->n_params, sizeof(float));
    if (!m->params || !m->grads)
        return dt_error_set(DT_ENOMEM, "model: no memory for %zu parameters and their gradients",
                            m->n_params);
    return 0;
}

void dt_model_destroy(struct dt_model *m)
{
    if (!m)
        return;
    dt_arena_free(m->params_own);
    dt_arena_free(m->grads_own);
    m->ops->destroy(m);
}

/* An arena moves to caller-owned memory: its values go along when `copy`. */
static void move_arena(float **cur, float **own, float *to, size_t n, bool copy)
{
    if (copy)
        memcpy(to, *cur, n * sizeof *to);
    dt_arena_free(*own);
    *own = NULL;
    *cur = to;
}

void dt_model_use_grads(struct dt_model *m, float *grads)
{
    move_arena(&m->grads, &m->grads_own, grads, m->n_params, false);
}

void dt_model_use_params(struct dt_model *m, float *params, bool copy)
{
    move_arena(&m->params, &m->params_own, params, m->n_params, copy);
}

/* ---- the ops, for callers that hold a model ---- */

int dt_model_set_precision(struct dt_model *m, enum dt_kprec p)
{
    return m->ops->set_precision(m, p);
}

double dt_model_train_batch(struct dt_model *m, const struct dt_batch *b, float dscale, bool accumulate,
                            dt_model_ready_fn ready, void *ctx)
{
    return m->ops->train_batch(m, b, dscale, accumulate, ready, ctx);
}

double dt_model_eval_batch(struct dt_model *m, const struct dt_batch *b, int64_t *correct)
{
    return m->ops->eval_batch(m, b, correct);
}

const float *dt_model_logits(const struct dt_model *m)
{
    return m->ops->logits(m);
}

/* ---- named tensors and gradient segments ---- */

const struct dt_model_tensor *dt_model_find_tensor(const struct dt_model *m, const char *name)
{
    for (int i = 0; i < m->n_tensors; i++)
        if (!strcmp(m->tensors[i].name, name))
            return &m->tensors[i];
    return NULL;
}

void dt_model_set_grad_chunk(struct dt_model *m, size_t floats)
{
    m->grad_chunk = floats;
}

int dt_model_chunk_rows(const struct dt_model *m, const struct dt_model_tensor *t)
{
    int rows = (int)t->shape[0];
    size_t numel = dt_model_tensor_numel(t), row = numel / (size_t)rows;
    if (!t->row_chunks || m->grad_chunk == 0 || numel <= m->grad_chunk)
        return rows;
    size_t per = m->grad_chunk / row / DT_KERNELS_W_ROWS * DT_KERNELS_W_ROWS;
    if (per < DT_KERNELS_W_ROWS)
        per = DT_KERNELS_W_ROWS;
    return per >= (size_t)rows ? rows : (int)per;
}

/* Every chunk starts on a multiple of DT_KERNELS_W_ROWS (64) rows, as the
 * kernels' weight-gradient tiles do, and the first rows, written last, are
 * one 64-row chunk: the all-reduce nothing can hide is the smallest. */
enum { FIRST = DT_KERNELS_W_ROWS };

static int chunk_above(int r, int R)
{
    return r == 0 ? FIRST : r + R;
}

int dt_model__chunk_below(int top, int R)
{
    return top <= FIRST ? 0 : FIRST + (top - FIRST - 1) / R * R;
}

int dt_model_grad_segments(const struct dt_model *m, size_t *bounds, bool *cut)
{
    int n = 0;
    for (const struct dt_model_tensor *t = lowest_from(m, 0); t; t = lowest_from(m, t->offset + 1)) {
        int rows = t->row_chunks ? (int)t->shape[0] : 1, R = t->row_chunks ? dt_model_chunk_rows(m, t) : 1;
        size_t row = dt_model_tensor_numel(t) / (size_t)rows;
        for (int r = 0; r < rows; r = chunk_above(r, R), n++) {
            if (bounds)
                bounds[n] = t->offset + (size_t)r * row;
            if (bounds && cut)
                cut[n] = R < rows;
        }
    }
    if (bounds)
        bounds[n] = m->n_params;
    return n;
}
