/* loader.h - batches for the training loop, made ahead by loader threads.
 *
 * The loader owns this rank's sampler (sampler.h) and a ring of
 * workers * prefetch batch slots allocated once.  Worker threads fill slots
 * in batch order (gather the examples, normalise pixels as torchvision's
 * ToTensor + Normalize((0.2860,), (0.3530,)) do); the training thread takes
 * them in order and gives each back by asking for the next one.  A full ring
 * makes workers wait (the queue is bounded); an empty one makes the trainer
 * wait, and that time is counted (dt_loader_wait_s) so a slow loader shows.
 * With workers = 0 batches are made on the calling thread.
 *
 * Not for evaluation: the test set is read in order (dt_loader_fill_range).
 */
#ifndef DT_LOADER_H
#define DT_LOADER_H

#include <stdbool.h>
#include <stdint.h>

#include "worker/data/batch.h"
#include "worker/data/idx.h"
#include "worker/data/sampler.h"

struct dt_loader;

struct dt_loader_options {
    int batch_size;
    bool drop_last;      /* sampler drop_last, and drop a short last batch */
    bool shuffle;
    uint64_t seed;
    int rank, world;
    int workers, prefetch;
};

int dt_loader_create(const struct dt_dataset *d, const struct dt_loader_options *o, struct dt_loader **out);
void dt_loader_destroy(struct dt_loader *l);

int64_t dt_loader_batches_per_epoch(const struct dt_loader *l);

/* Begins `epoch` (sampler order seed+epoch) at batch `first` (resuming mid-epoch). */
void dt_loader_start_epoch(struct dt_loader *l, int64_t epoch, int64_t first);

/* The next batch of the epoch (images: x [n, rows*cols] normalised, y [n]),
 * NULL after the last one.  The batch stays valid until the next call. */
const struct dt_batch *dt_loader_next(struct dt_loader *l);

/* This rank's order of the current epoch: its j-th sample is position
 * j * world + rank of the epoch's global order (DistributedSampler's
 * interleave), so batch b's row i is entry b * batch_size + i. */
const int64_t *dt_loader_indices(const struct dt_loader *l);

/* Seconds the caller has spent waiting inside dt_loader_next so far. */
double dt_loader_wait_s(const struct dt_loader *l);

/* Examples [first, first+n) of a data set, normalised, into b (its x and y
 * hold n rows): evaluation reads the test set in order. */
void dt_loader_fill_range(const struct dt_dataset *d, int64_t first, int n, struct dt_batch *b);

#endif
