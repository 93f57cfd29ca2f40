/* mlp_fixture.h - an MLP made the way the trainer makes one (through the
 * model table, from a trainer.model section), for the tests of the model,
 * AMP and checkpoints and the checkpoint fuzz target.  Header-only, no
 * cmocka; not a test. */
#ifndef DT_TEST_MLP_FIXTURE_H
#define DT_TEST_MLP_FIXTURE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/models/model.h"

/* in -> hidden[0..n_hidden) -> classes with `act` between, activations for
 * max_batch rows, parameters from `seed`; the CPU kernels.  0 or an error. */
static inline int mlp_fixture(int in, const int *hidden, int n_hidden, int classes, enum dt_activation act,
                              int max_batch, uint64_t seed, struct dt_model **out)
{
    struct dt_model_spec s = {.type = "mlp", .n_hidden = n_hidden, .activation = act};
    memcpy(s.hidden, hidden, (size_t)n_hidden * sizeof *hidden);
    struct dt_model_config c = {.spec = &s,
                                .k = &dt_kernels_cpu,
                                .max_batch = max_batch,
                                .seed = seed,
                                .data = {.kind = DT_BATCH_IMAGES, .features = in, .classes = classes}};
    return dt_model_create(&c, out);
}

/* A batch of images for train/eval_batch: n rows of x, labels y. */
static inline struct dt_batch mlp_batch(const float *x, const int32_t *y, int n)
{
    return (struct dt_batch){.kind = DT_BATCH_IMAGES, .n = n, .x = (float *)x, .y = (int32_t *)y};
}

/* Linear l's weight or bias: nn.Sequential's layers.<2l>.weight|bias (aborts
 * naming it when the model has no such tensor). */
static inline const struct dt_model_tensor *mlp_tensor(const struct dt_model *m, int l, int bias)
{
    char name[32];
    snprintf(name, sizeof name, "layers.%d.%s", 2 * l, bias ? "bias" : "weight");
    const struct dt_model_tensor *t = dt_model_find_tensor(m, name);
    if (!t) {
        fprintf(stderr, "the model has no tensor %s\n", name);
        abort();
    }
    return t;
}

#endif
