/* test_model.c - the MLP's logits, loss and gradients for a fixed batch against
 * PyTorch (tests/fixtures/mlp.safetensors, <= 1e-5 relative), 10 AdamW steps of
 * loss, the order in which backward hands gradient ranges to the reducer, and
 * row-chunked weight gradients equal to whole ones bit for bit on any thread
 * count; the model table (an
 * unknown type or a data set of the wrong kind is refused with a sentence)
 * and the MLP's named tensors (PyTorch's names and order, tiling the arena). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "worker/optim/adamw.h"
#include "fixture.h"
#include "mlp_fixture.h"

static struct dt_model *load(const struct dt_safetensors *f, const char *act, enum dt_activation kact)
{
    const int hidden[2] = {48, 24};
    struct dt_model *m;
    assert_int_equal(mlp_fixture(784, hidden, 2, 10, kact, 16, 0, &m), 0);
    for (int l = 0; l < 3; l++) {
        char key[32];
        snprintf(key, sizeof key, "%s.w%d", act, l);
        const struct dt_st_tensor *w = fixture_tensor(f, key, "F32");
        snprintf(key, sizeof key, "%s.b%d", act, l);
        const struct dt_st_tensor *b = fixture_tensor(f, key, "F32");
        assert_int_equal(fixture_numel(w), dt_model_tensor_numel(mlp_tensor(m, l, 0)));
        memcpy(m->params + mlp_tensor(m, l, 0)->offset, w->data, fixture_numel(w) * 4);
        memcpy(m->params + mlp_tensor(m, l, 1)->offset, b->data, fixture_numel(b) * 4);
    }
    return m;
}

static void labels(const struct dt_safetensors *f, const char *act, int32_t *y)
{
    char key[32];
    snprintf(key, sizeof key, "%s.y", act);
    const int64_t *y64 = fixture_tensor(f, key, "I64")->data;
    for (int i = 0; i < 16; i++)
        y[i] = (int32_t)y64[i];
}

/* Tensor-wise relative error ||a - b|| / ||b|| <= 1e-5, and no element off by
 * more than 1e-5 of the tensor's largest magnitude: gradient elements that are
 * sums of cancelling terms carry absolute, not relative, rounding error. */
static void check(const char *what, const float *mine, const struct dt_st_tensor *t)
{
    const float *ref = t->data;
    double num = 0, den = 0, scale = 0, worst = 0;
    for (size_t i = 0; i < fixture_numel(t); i++) {
        double d = (double)mine[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
        scale = fmax(scale, fabs(ref[i]));
        worst = fmax(worst, fabs(d));
    }
    double rel = sqrt(num / den);
    if (!(rel <= 1e-5) || !(worst <= 1e-5 * scale))
        fail_msg("%s: relative error %.3g, worst element %.3g of scale %.3g (limit 1e-5)", what, rel, worst,
                 scale);
}

static void against_torch(const char *act, enum dt_activation kact)
{
    struct dt_safetensors f;
    fixture_open("mlp.safetensors", &f);
    struct dt_model *m = load(&f, act, kact);
    int32_t y[16];
    labels(&f, act, y);
    char key[32];
    snprintf(key, sizeof key, "%s.x", act);
    const float *x = fixture_tensor(&f, key, "F32")->data;
    struct dt_batch b = mlp_batch(x, y, 16);
    double loss = dt_model_train_batch(m, &b, 1.0f / 16, false, NULL, NULL) / 16;
    snprintf(key, sizeof key, "%s.loss", act);
    float want = *(const float *)fixture_tensor(&f, key, "F32")->data;
    if (fabs(loss - want) > 1e-5 * fabs(want))
        fail_msg("%s loss %.9g, torch %.9g", act, loss, want);
    snprintf(key, sizeof key, "%s.logits", act);
    check("logits", dt_model_logits(m), fixture_tensor(&f, key, "F32"));
    for (int l = 0; l < 3; l++) {
        snprintf(key, sizeof key, "%s.gw%d", act, l);
        check(key, m->grads + mlp_tensor(m, l, 0)->offset, fixture_tensor(&f, key, "F32"));
        snprintf(key, sizeof key, "%s.gb%d", act, l);
        check(key, m->grads + mlp_tensor(m, l, 1)->offset, fixture_tensor(&f, key, "F32"));
    }
    /* Then 10 AdamW steps (lr 1e-3, torch defaults) on the same batch. */
    snprintf(key, sizeof key, "%s.losses", act);
    const double *losses = fixture_tensor(&f, key, "F64")->data;
    struct dt_adamw a;
    assert_int_equal(dt_adamw_init(&a, &dt_kernels_cpu, m->n_params, 0.999, 1e-8, 0.01), 0);
    struct dt_model *fresh = load(&f, act, kact);
    for (int s = 0; s < 10; s++) {
        double l = dt_model_train_batch(fresh, &b, 1.0f / 16, false, NULL, NULL) / 16;
        if (fabs(l - losses[s]) > 1e-5 * fabs(losses[s]))
            fail_msg("%s step %d loss %.9g, torch %.9g", act, s, l, losses[s]);
        dt_adamw_step(&a, fresh->params, fresh->grads, 1e-3, 0.9, 1.0f);
    }
    dt_adamw_release(&a);
    dt_model_destroy(fresh);
    dt_model_destroy(m);
    dt_safetensors_release(&f);
}

static void relu_matches_torch(void **state)
{
    (void)state;
    against_torch("relu", DT_ACT_RELU);
}

static void gelu_matches_torch(void **state)
{
    (void)state;
    against_torch("gelu", DT_ACT_GELU);
}

struct ranges {
    size_t lo[8], hi[8];
    int n;
};

static void record(void *ctx, size_t lo, size_t hi)
{
    struct ranges *r = ctx;
    r->lo[r->n] = lo;
    r->hi[r->n++] = hi;
}

static void ready_ranges_in_reverse_order(void **state)
{
    (void)state;
    const int hidden[2] = {32, 16};
    struct dt_model *m;
    assert_int_equal(mlp_fixture(20, hidden, 2, 10, DT_ACT_RELU, 4, 1, &m), 0);
    float x[80];
    int32_t y[4] = {1, 2, 3, 4};
    for (int i = 0; i < 80; i++)
        x[i] = (float)(i % 7) - 3.0f;
    struct ranges r = {.n = 0};
    struct dt_batch b = mlp_batch(x, y, 4);
    dt_model_train_batch(m, &b, 0.25f, false, record, &r);
    assert_int_equal(r.n, 3);
    /* Last layer first; together the ranges tile the arena from the end down to 0. */
    assert_int_equal(r.hi[0], m->n_params);
    assert_int_equal(r.lo[1 + 1], 0);
    assert_int_equal(r.hi[1], r.lo[0]);
    assert_int_equal(r.hi[2], r.lo[1]);
    dt_model_destroy(m);
}

struct seg_ranges {
    size_t lo[32], hi[32];
    int n;
};

static void record_seg(void *ctx, size_t lo, size_t hi)
{
    struct seg_ranges *r = ctx;
    assert_true(r->n < 32);
    r->lo[r->n] = lo;
    r->hi[r->n++] = hi;
}

/* Two micro-batches (overwrite, then accumulate) of a 100-300-200-10 MLP,
 * of 192 and 191 rows: enough work that the pool splits every GEMM's tiles
 * among 2 or 3 threads (it keeps below 64k elements of work on one). */
enum { TB = 192, TIN = 100 };

static void two_batches(struct dt_model *m, struct seg_ranges *r)
{
    static float x[(TB + 1) * TIN];
    int32_t y[TB];
    for (int i = 0; i < (TB + 1) * TIN; i++)
        x[i] = (float)((i * 37) % 23) / 11.0f - 1.0f;
    for (int i = 0; i < TB; i++)
        y[i] = (i * 7) % 10;
    struct dt_batch b0 = mlp_batch(x, y, TB), b1 = mlp_batch(x + TIN, y, TB - 1);
    dt_model_train_batch(m, &b0, 1.0f / TB, false, record_seg, r);
    dt_model_train_batch(m, &b1, 1.0f / TB, true, NULL, NULL);
}

/* Row-chunked weight gradients (chunks 0, 64, 64+128 rows for the first layer,
 * of 64 rows with an 8-row top for the second) come out from the last rows
 * down and match the segments the reducer is given, and hold the same bits
 * as whole ones, with 1, 2 or 3 threads, on every CPU: the kernels compute a
 * weight gradient in 64-row tiles whatever the chunk, and cut every GEMM into
 * tiles fixed by its shape whatever the threads (worker/kernels_cpu.c).
 * OpenBLAS's own kernels promise neither: Haswell's and Zen's sgemm gave rows
 * of a 64-row call other bits than the same rows of a 300-row call, and a
 * call split among 2 threads other bits than on one. */
static void chunked_weight_grads_equal_whole(void **state)
{
    (void)state;
    const int hidden[2] = {300, 200};
    float *ref = NULL;
    for (int threads = 1; threads <= 3; threads++) {
        dt_kernels_cpu.set_threads(threads);
        struct dt_model *whole, *chunked;
        assert_int_equal(mlp_fixture(TIN, hidden, 2, 10, DT_ACT_RELU, TB, 3, &whole), 0);
        assert_int_equal(mlp_fixture(TIN, hidden, 2, 10, DT_ACT_RELU, TB, 3, &chunked), 0);
        dt_model_set_grad_chunk(whole, 0);
        dt_model_set_grad_chunk(chunked, 12800);
        assert_int_equal(dt_model_chunk_rows(chunked, mlp_tensor(chunked, 0, 0)), 128);
        assert_int_equal(dt_model_chunk_rows(chunked, mlp_tensor(chunked, 1, 0)), 64);
        assert_int_equal(dt_model_chunk_rows(chunked, mlp_tensor(chunked, 2, 0)), 10);
        struct seg_ranges rw = {.n = 0}, rc = {.n = 0};
        two_batches(whole, &rw);
        two_batches(chunked, &rc);
        size_t bytes = whole->n_params * sizeof(float);
        for (size_t i = 0; i < whole->n_params; i++)
            if (memcmp(&whole->grads[i], &chunked->grads[i], sizeof(float)))
                fail_msg("%d threads: gradient %zu is %.9g chunked, %.9g whole", threads, i, chunked->grads[i],
                         whole->grads[i]);
        if (!ref) {
            ref = malloc(bytes);
            memcpy(ref, whole->grads, bytes);
        }
        for (size_t i = 0; i < whole->n_params; i++)
            if (memcmp(&whole->grads[i], &ref[i], sizeof(float)))
                fail_msg("gradient %zu is %.9g with %d threads, %.9g with 1", i, whole->grads[i], threads, ref[i]);
        /* 3 + 4 chunks and the output layer whole: 8 ranges tiling the arena downwards. */
        assert_int_equal(rw.n, 3);
        assert_int_equal(rc.n, 8);
        size_t bounds[16];
        bool cut[16];
        int n = dt_model_grad_segments(chunked, bounds, cut);
        assert_int_equal(n, 3 + 1 + 4 + 1 + 1 + 1);
        assert_int_equal(bounds[n], chunked->n_params);
        assert_int_equal(bounds[1], 64 * 100); /* rows [0, 64): reported last, the smallest */
        assert_int_equal(bounds[2], 192 * 100);
        assert_true(cut[0] && cut[2] && !cut[3] && cut[4] && !cut[9]);
        assert_int_equal(rc.hi[0], chunked->n_params);
        assert_int_equal(rc.lo[rc.n - 1], 0);
        for (int i = 1; i < rc.n; i++) {
            assert_int_equal(rc.hi[i], rc.lo[i - 1]);
            int k = 0; /* every range starts at a segment bound */
            while (k < n && bounds[k] != rc.lo[i])
                k++;
            assert_true(k < n);
        }
        dt_model_destroy(whole);
        dt_model_destroy(chunked);
    }
    dt_kernels_cpu.set_threads(1);
    free(ref);
}

static void init_is_torch_bound_and_seeded(void **state)
{
    (void)state;
    const int hidden[1] = {64};
    struct dt_model *a, *b;
    assert_int_equal(mlp_fixture(100, hidden, 1, 10, DT_ACT_RELU, 2, 7, &a), 0);
    assert_int_equal(mlp_fixture(100, hidden, 1, 10, DT_ACT_RELU, 2, 7, &b), 0);
    assert_memory_equal(a->params, b->params, a->n_params * sizeof(float));
    for (size_t i = 0; i < (size_t)64 * 100; i++)
        assert_true(fabsf(a->params[i]) <= 0.1f);
    dt_model_destroy(a);
    dt_model_destroy(b);
}

static void table_refuses_unknown_type_and_wrong_data(void **state)
{
    (void)state;
    struct dt_model_spec s = {.type = "gpt3", .n_hidden = 1, .hidden = {8}};
    struct dt_model_config c = {.spec = &s,
                                .k = &dt_kernels_cpu,
                                .max_batch = 2,
                                .data = {.kind = DT_BATCH_IMAGES, .features = 4, .classes = 3}};
    struct dt_model dummy, *m = &dummy;
    assert_int_equal(dt_model_create(&c, &m), DT_EUNSUPPORTED);
    assert_null(m);
    assert_non_null(strstr(dt_error_last(), "'gpt3'"));
    assert_non_null(strstr(dt_error_last(), "mlp")); /* the known types are named */
    strcpy(s.type, "mlp");
    c.data = (struct dt_batch_shape){.kind = DT_BATCH_TOKENS, .seq_len = 8, .vocab = 256};
    assert_int_equal(dt_model_create(&c, &m), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "token sequences"));
    c.data = (struct dt_batch_shape){.kind = DT_BATCH_IMAGES, .features = 4, .classes = 3};
    assert_int_equal(dt_model_create(&c, &m), 0);
    assert_string_equal(m->ops->name, "mlp");
    dt_model_destroy(m);
}

/* nn.Sequential(Linear(20, 32), ReLU(), Linear(32, 16), ReLU(), Linear(16, 10)).state_dict()
 * has these names and shapes in this order; in the arena they follow each other. */
static void mlp_tensors_are_pytorch_state_dict(void **state)
{
    (void)state;
    const int hidden[2] = {32, 16};
    struct dt_model *m;
    assert_int_equal(mlp_fixture(20, hidden, 2, 10, DT_ACT_RELU, 4, 1, &m), 0);
    static const struct {
        const char *name;
        int ndim;
        int64_t rows, cols;
    } want[] = {{"layers.0.weight", 2, 32, 20}, {"layers.0.bias", 1, 32, 0},
                {"layers.2.weight", 2, 16, 32}, {"layers.2.bias", 1, 16, 0},
                {"layers.4.weight", 2, 10, 16}, {"layers.4.bias", 1, 10, 0}};
    assert_int_equal(m->n_tensors, 6);
    size_t at = 0;
    for (int i = 0; i < 6; i++) {
        const struct dt_model_tensor *t = &m->tensors[i];
        assert_string_equal(t->name, want[i].name);
        assert_int_equal(t->ndim, want[i].ndim);
        assert_int_equal(t->shape[0], want[i].rows);
        if (t->ndim == 2)
            assert_int_equal(t->shape[1], want[i].cols);
        assert_int_equal(t->offset, at);
        assert_true(t->decay); /* torch.optim.AdamW(model.parameters()) decays every one */
        assert_int_equal(t->row_chunks, t->ndim == 2);
        at += dt_model_tensor_numel(t);
    }
    assert_int_equal(at, m->n_params);
    assert_ptr_equal(dt_model_find_tensor(m, "layers.2.bias"), &m->tensors[3]);
    assert_null(dt_model_find_tensor(m, "layers.1.weight"));
    dt_model_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(relu_matches_torch),
        cmocka_unit_test(gelu_matches_torch),
        cmocka_unit_test(ready_ranges_in_reverse_order),
        cmocka_unit_test(chunked_weight_grads_equal_whole),
        cmocka_unit_test(init_is_torch_bound_and_seeded),
        cmocka_unit_test(table_refuses_unknown_type_and_wrong_data),
        cmocka_unit_test(mlp_tensors_are_pytorch_state_dict),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
