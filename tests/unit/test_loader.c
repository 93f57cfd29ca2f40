/* test_loader.c - the loader threads give the sampler's order, normalised as
 * torchvision does, for any number of workers and queue depth; a short last
 * batch or none with drop_last; starting mid-epoch gives the same batches;
 * a batch's loss terms (one per image, one per target token). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "worker/data/loader.h"

/* 1003 tiny 2x2 "images": pixel j of image i is (i * 7 + j) % 256, label i % 10. */
static struct dt_dataset make_set(void)
{
    struct dt_dataset d = {.n = 1003, .rows = 2, .cols = 2, .classes = 10};
    d.images = malloc(1003 * 4);
    d.labels = malloc(1003);
    for (int i = 0; i < 1003; i++) {
        for (int j = 0; j < 4; j++)
            d.images[i * 4 + j] = (uint8_t)((i * 7 + j) % 256);
        d.labels[i] = (uint8_t)(i % 10);
    }
    return d;
}

static float norm(int p)
{
    return ((float)p / 255.0f - 0.2860f) / 0.3530f;
}

static void check_epoch(const struct dt_dataset *d, int workers, int prefetch, int batch, bool drop_last,
                        int rank, int world, int64_t epoch, int64_t first)
{
    struct dt_loader_options o = {.batch_size = batch, .drop_last = drop_last, .shuffle = true, .seed = 5,
                                  .rank = rank, .world = world, .workers = workers, .prefetch = prefetch};
    struct dt_loader *l;
    assert_int_equal(dt_loader_create(d, &o, &l), 0);
    struct dt_sampler s;
    assert_int_equal(dt_sampler_init(&s, d->n, rank, world, true, drop_last, 5), 0);
    int64_t *idx = malloc((size_t)s.num_samples * sizeof *idx);
    dt_sampler_epoch(&s, epoch, idx);
    int64_t want_batches = drop_last ? s.num_samples / batch : (s.num_samples + batch - 1) / batch;
    assert_int_equal(dt_loader_batches_per_epoch(l), want_batches);
    for (int rep = 0; rep < 2; rep++) { /* the same epoch twice: start_epoch resets the ring */
        dt_loader_start_epoch(l, epoch, first);
        int64_t b = first;
        for (const struct dt_batch *x; (x = dt_loader_next(l)); b++) {
            assert_int_equal(x->index, b);
            int64_t left = s.num_samples - b * batch;
            assert_int_equal(x->n, left < batch ? left : batch);
            for (int i = 0; i < x->n; i++) {
                int64_t e = idx[b * batch + i];
                assert_int_equal(x->y[i], d->labels[e]);
                for (int j = 0; j < 4; j++)
                    assert_true(x->x[i * 4 + j] == norm(d->images[e * 4 + j]));
            }
        }
        assert_int_equal(b, want_batches);
    }
    free(idx);
    dt_sampler_release(&s);
    dt_loader_destroy(l);
}

static void order_and_values(void **state)
{
    (void)state;
    struct dt_dataset d = make_set();
    check_epoch(&d, 0, 1, 64, false, 0, 1, 0, 0);  /* on the calling thread */
    check_epoch(&d, 1, 1, 64, false, 0, 1, 1, 0);  /* queue of one */
    check_epoch(&d, 3, 2, 50, false, 2, 3, 2, 0);  /* 3 workers, rank 2 of 3 */
    check_epoch(&d, 2, 4, 100, true, 1, 4, 0, 0);  /* drop_last: no short batch */
    check_epoch(&d, 2, 2, 32, false, 0, 2, 3, 7);  /* resumed at batch 7 */
    dt_data_release(&d);
}

static void normalisation_as_torchvision(void **state)
{
    (void)state;
    /* ToTensor + Normalize((0.2860,), (0.3530,)): 0 -> -0.8101983, 255 -> 2.0226629 */
    struct dt_dataset d = {.n = 2, .rows = 1, .cols = 1, .classes = 10};
    uint8_t img[2] = {0, 255}, lab[2] = {3, 4};
    d.images = img;
    d.labels = lab;
    float x[2];
    int32_t y[2];
    struct dt_batch b = {.x = x, .y = y};
    dt_loader_fill_range(&d, 0, 2, &b);
    assert_int_equal(b.n, 2);
    assert_true(x[0] > -0.81020f && x[0] < -0.81019f);
    assert_true(x[1] > 2.02266f && x[1] < 2.02267f);
    assert_int_equal(y[1], 4);
}

static void bad_options(void **state)
{
    (void)state;
    struct dt_dataset d = make_set();
    struct dt_loader *l;
    struct dt_loader_options o = {.batch_size = 0, .world = 1, .prefetch = 1};
    assert_int_equal(dt_loader_create(&d, &o, &l), DT_EINVAL);
    o.batch_size = 8;
    o.rank = 3;
    assert_int_equal(dt_loader_create(&d, &o, &l), DT_EINVAL);
    dt_data_release(&d);
}

static void batch_terms(void **state)
{
    (void)state;
    struct dt_batch images = {.kind = DT_BATCH_IMAGES, .n = 7};
    struct dt_batch tokens = {.kind = DT_BATCH_TOKENS, .n = 7, .T = 1024};
    assert_int_equal(dt_batch_terms(&images), 7);
    assert_int_equal(dt_batch_terms(&tokens), 7 * 1024);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(order_and_values),
        cmocka_unit_test(normalisation_as_torchvision),
        cmocka_unit_test(bad_options),
        cmocka_unit_test(batch_terms),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
