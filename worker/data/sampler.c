/* sampler.c - MT19937, torch.randperm and DistributedSampler (see sampler.h).
 *
 * Sources of truth: aten/src/ATen/core/MT19937RNGEngine.h (init_with_uint32,
 * twist), randperm_cpu in aten/src/ATen/native/TensorFactories.cpp, and
 * torch/utils/data/distributed.py.  Not for anything random beyond that.
 */
#include "worker/data/sampler.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"

enum { MT_N = 624, MT_M = 397 };
#define MT_MATRIX_A 0x9908b0dfu
#define MT_UPPER 0x80000000u
#define MT_LOWER 0x7fffffffu

/* init_genrand: s[0] = seed; s[i] = 1812433253 * (s[i-1] ^ (s[i-1] >> 30)) + i. */
void dt_mt19937_seed(struct dt_mt19937 *g, uint32_t seed)
{
    g->state[0] = seed;
    for (int i = 1; i < MT_N; i++)
        g->state[i] = 1812433253u * (g->state[i - 1] ^ (g->state[i - 1] >> 30)) + (uint32_t)i;
    g->index = MT_N;
}

static void mt_twist(struct dt_mt19937 *g)
{
    uint32_t *s = g->state;
    for (int i = 0; i < MT_N; i++) {
        uint32_t y = (s[i] & MT_UPPER) | (s[(i + 1) % MT_N] & MT_LOWER);
        s[i] = s[(i + MT_M) % MT_N] ^ (y >> 1) ^ ((y & 1u) ? MT_MATRIX_A : 0u);
    }
    g->index = 0;
}

uint32_t dt_mt19937_next(struct dt_mt19937 *g)
{
    if (g->index >= MT_N)
        mt_twist(g);
    uint32_t y = g->state[g->index++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

/* randperm_cpu: for i in 0..n-2: z = random() % (n-i); swap(r[i], r[i+z]).
 * random() is one 32-bit draw (ATen's CPUGeneratorImpl::random). */
void dt_sampler_randperm(struct dt_mt19937 *g, int64_t n, int64_t *out)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = i;
    for (int64_t i = 0; i < n - 1; i++) {
        int64_t z = (int64_t)(dt_mt19937_next(g) % (uint64_t)(n - i));
        int64_t t = out[i];
        out[i] = out[i + z];
        out[i + z] = t;
    }
}

int dt_sampler_init(struct dt_sampler *s, int64_t n, int rank, int world, bool shuffle, bool drop_last,
                    uint64_t seed)
{
    memset(s, 0, sizeof *s);
    if (world < 1)
        return dt_error_set(DT_EINVAL, "sampler: world size %d, expected at least 1", world);
    if (rank < 0 || rank >= world)
        return dt_error_set(DT_EINVAL, "Invalid rank %d, rank should be in the interval [0, %d]", rank,
                            world - 1);
    if (n < 0)
        return dt_error_set(DT_EINVAL, "sampler: negative data set size %lld", (long long)n);
    s->n = n;
    s->rank = rank;
    s->world = world;
    s->shuffle = shuffle;
    s->drop_last = drop_last;
    s->seed = seed;
    /* num_samples = ceil((N - R) / R) when dropping an uneven tail, else ceil(N / R). */
    if (drop_last && n % world != 0)
        s->num_samples = n >= world ? (n - world + world - 1) / world : 0;
    else
        s->num_samples = (n + world - 1) / world;
    s->total_size = s->num_samples * world;
    s->perm = malloc((size_t)(n > 0 ? n : 1) * sizeof *s->perm);
    if (!s->perm)
        return dt_error_set(DT_ENOMEM, "sampler: no memory for %lld indices", (long long)n);
    return 0;
}

void dt_sampler_release(struct dt_sampler *s)
{
    free(s->perm);
    s->perm = NULL;
}

/* indices = randperm(N, seed+epoch) or 0..N-1; padded to total_size by
 * repeating from the start (whole copies when pad > N) or truncated; then
 * indices[rank : total_size : world]. */
void dt_sampler_epoch(struct dt_sampler *s, int64_t epoch, int64_t *out)
{
    if (s->shuffle) {
        struct dt_mt19937 g;
        /* torch.Generator.manual_seed takes the low 32 bits for MT19937. */
        dt_mt19937_seed(&g, (uint32_t)(s->seed + (uint64_t)epoch));
        dt_sampler_randperm(&g, s->n, s->perm);
    } else {
        for (int64_t i = 0; i < s->n; i++)
            s->perm[i] = i;
    }
    for (int64_t k = 0; k < s->num_samples; k++) {
        int64_t j = s->rank + k * s->world; /* position in the padded list */
        out[k] = s->perm[j % s->n];
    }
}
