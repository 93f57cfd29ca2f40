/* sampler.h - which training examples each rank sees, in which order.
 *
 * Bit-exact with PyTorch: torch.Generator (MT19937) seeded with seed+epoch,
 * torch.randperm's CPU Fisher-Yates, then DistributedSampler's padding by
 * wrap-around (or truncation with drop_last) and the rank::world interleave.
 * A rank's index list for an epoch is therefore the same list PyTorch would
 * give the same rank, so a PyTorch run and a dtrain run see the same batches.
 *
 * Not for loading data: the loader (loader.h) turns indices into batches.
 */
#ifndef DT_SAMPLER_H
#define DT_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

/* MT19937, 32-bit output, as std::mt19937 and ATen's at::mt19937. */
struct dt_mt19937 {
    uint32_t state[624];
    int index;
};

void dt_mt19937_seed(struct dt_mt19937 *g, uint32_t seed);
uint32_t dt_mt19937_next(struct dt_mt19937 *g);

/* torch.randperm(n, generator=g) on CPU: out[0..n) is a permutation of 0..n-1. */
void dt_sampler_randperm(struct dt_mt19937 *g, int64_t n, int64_t *out);

struct dt_sampler {
    int64_t n;            /* examples in the data set */
    int rank, world;
    bool shuffle, drop_last;
    uint64_t seed;
    int64_t num_samples;  /* indices per rank per epoch (len(sampler)) */
    int64_t total_size;   /* num_samples * world */
    int64_t *perm;        /* scratch of n entries, allocated once */
};

/* Checks rank/world like PyTorch ("Invalid rank ..."); allocates the scratch. */
int dt_sampler_init(struct dt_sampler *s, int64_t n, int rank, int world, bool shuffle, bool drop_last,
                    uint64_t seed);
void dt_sampler_release(struct dt_sampler *s);

/* This rank's indices for `epoch` into out[0..num_samples). */
void dt_sampler_epoch(struct dt_sampler *s, int64_t epoch, int64_t *out);

#endif
