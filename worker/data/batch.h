/* batch.h - one batch as the data side hands it to a model: images with
 * labels, or token sequences with their targets.
 *
 * The loader (loader.h) fills it, the model (worker/models/model.h) reads
 * it, and the training loop passes it from one to the other without looking
 * inside: only dt_batch_terms() tells it how a summed loss becomes a mean.
 * A model says which kind it reads (struct dt_model_ops.input) and is made
 * for the shape of its data set (struct dt_batch_shape).
 *
 * Not for loading or ordering examples: loader.h, sampler.h.
 */
#ifndef DT_BATCH_H
#define DT_BATCH_H

#include <stdint.h>

enum dt_batch_kind {
    DT_BATCH_IMAGES, /* x [n, features] normalised floats, y [n] class labels */
    DT_BATCH_TOKENS, /* inputs and targets [n, T] int32; targets are the inputs shifted by one */
};

struct dt_batch {
    enum dt_batch_kind kind;
    int n;         /* rows: examples or sequences (an epoch's last batch may be short) */
    int64_t index; /* batch number within the epoch */
    float *x;      /* DT_BATCH_IMAGES */
    int32_t *y;
    int T; /* DT_BATCH_TOKENS: sequence length */
    int32_t *inputs, *targets;
};

/* What a data set gives a model to size itself by. */
struct dt_batch_shape {
    enum dt_batch_kind kind;
    int features, classes; /* images: values per example, label count */
    int seq_len, vocab;    /* tokens */
};

/* Terms of the batch's loss (one per image, one per target token): a
 * model's summed loss over them, divided by this, is the batch's mean. */
static inline int64_t dt_batch_terms(const struct dt_batch *b)
{
    return b->kind == DT_BATCH_TOKENS ? (int64_t)b->n * b->T : b->n;
}

#endif
