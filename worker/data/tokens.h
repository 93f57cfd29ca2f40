/* tokens.h - llm.c token shards and the order a rank reads them in.
 *
 * A shard is llm.c's (and nanoGPT's / llm.c's fineweb.py) .bin format: a
 * header of 256 little-endian int32 (magic 20240520, version 1, token count
 * n), then n little-endian uint16 tokens; the file is exactly 1024 + 2n
 * bytes.  A set is every file a glob matches, in sorted (byte) order, as
 * llm.c's glob() gives them.  Each shard is mapped once, checked once at
 * open (magic, version, size, every token below the model's vocab_size; an
 * error names the file and the byte offset) and never copied.  The mapping
 * shows what is written into the file later, so each batch's tokens are
 * checked again as they are copied out of it: a token written past the
 * vocabulary mid-run is refused naming the shard, its byte, the token and
 * the vocabulary, before any model reads it.  With
 * format uint16 (trainer.data.format) a file is a bare array of little-endian
 * uint16 tokens, as nanoGPT's prepare.py writes train.bin and val.bin: its
 * size must be even and the count is size / 2.
 *
 * The order, with world W, batch B and sequence length T (one "sample" is
 * one global batch of W*B*T tokens, as in llm.c's DataLoader):
 * - shard s holds S_s = floor((n_s - 1) / (W*B*T)) samples; sample k of it
 *   starts at token k*W*B*T, and rank r reads its B*T + 1 tokens from
 *   k*W*B*T + r*B*T: inputs the first B*T as [B, T], targets the same
 *   shifted by one.  A shard with S_s = 0 (fewer than W*B*T + 1 tokens) is
 *   an error naming it.  So W ranks of B read the sequences one rank of W*B
 *   reads, rank r its rows r*B .. r*B + B - 1.
 * - shuffle false: shards in sorted order, samples 0, 1, ... of each: this
 *   is llm.c's DataLoader with shuffle off (rank r starts at r*B*T, advances
 *   by W*B*T, moves to the next shard at position r*B*T when fewer than
 *   W*B*T + 1 tokens remain from the global position, wraps after the last).
 * - shuffle true: for epoch e a generator MT19937 is seeded with the low 32
 *   bits of seed + e (sampler.h: torch.Generator().manual_seed(seed + e));
 *   the shard order is torch.randperm(n_shards, generator=g); then, in that
 *   order, each shard's sample order is torch.randperm(S_s, generator=g),
 *   drawn from the same generator as each shard is reached.  Every rank
 *   draws the same permutations, so the ranks still split each global batch.
 * - accum A > 1 (an elastic run, docs/elastic.md): one sample is A micro-
 *   batches, W*B*T*A tokens, the whole global batch of one step.  S_s is
 *   floor((n_s - 1) / (W*B*T*A)), and micro-batch m of sample k is read as
 *   above from k*W*B*T*A + m*W*B*T.  With the global batch kept, W*A is the
 *   same on every world of the run, so are the S_s and the permutations:
 *   after any whole step a loader of another world reads on exactly where
 *   the old one stopped, every sequence of the epoch once (sequence q of a
 *   sample always starts at token q*T of it, whoever reads it).  A = 1 is
 *   the order above, so a fixed-size run reads as llm.c does.
 * One epoch is every sample of every shard once: A x sum S_s batches per rank.
 * A position is (epoch, batch index within the epoch); it maps to (shard
 * file, token offset) and back, which checkpoints store (worker/ckpt.h).
 *
 * Not for images (loader.h) nor for writing shards (`dtrain data bytes`).
 */
#ifndef DT_TOKENS_H
#define DT_TOKENS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "spec/trainer_spec.h"
#include "worker/data/batch.h"

#define DT_TOKENS_MAGIC 20240520
#define DT_TOKENS_VERSION 1
#define DT_TOKENS_HEADER_BYTES 1024 /* 256 int32 */

struct dt_token_shard {
    char *path;
    const uint16_t *tokens; /* n tokens, inside the mapping */
    int64_t n;
    void *map;
    size_t map_bytes;
};

/* The shards of one glob, sorted, mapped and checked. */
struct dt_token_set {
    struct dt_token_shard *shards;
    int n;
    int vocab;        /* every token is below it */
    int header_bytes; /* before the first token: DT_TOKENS_HEADER_BYTES, 0 for uint16 */
};

/* Opens every file `pattern` matches, laid out as `format` says; `what`
 * names the spec key in errors ("trainer.data.train").  No match is an
 * error, as is any bad shard.  vocab in 1..65536: every token must be below
 * it. */
int dt_tokens_open(const char *pattern, enum dt_token_format format, int vocab, const char *what,
                   struct dt_token_set *out);
void dt_tokens_close(struct dt_token_set *s);

/* Checks one shard's bytes (a file's whole contents) as dt_tokens_open does;
 * path is for messages.  On success *tokens and *n point into `bytes`. */
int dt_tokens_check(const char *path, const uint8_t *bytes, size_t size, int vocab, const uint16_t **tokens,
                    int64_t *n);

struct dt_tokens_options {
    int batch_size, seq_len; /* B, T */
    int rank, world;
    bool shuffle;
    uint64_t seed;
    int accum; /* micro-batches of one sample (A above); 0 or 1: one */
};

struct dt_tokens_loader;

/* Checks that every shard holds a sample for all ranks; allocates the batch
 * ([B, T] inputs and targets) and the permutations once. */
int dt_tokens_loader_create(const struct dt_token_set *s, const struct dt_tokens_options *o,
                            struct dt_tokens_loader **out);
void dt_tokens_loader_destroy(struct dt_tokens_loader *l);

/* Batches per rank per epoch: A x the sum over the shards of S_s. */
int64_t dt_tokens_batches_per_epoch(const struct dt_tokens_loader *l);

/* Begins `epoch` at batch `first` of it (resuming mid-epoch). */
void dt_tokens_start_epoch(struct dt_tokens_loader *l, int64_t epoch, int64_t first);

/* The next batch of the epoch (kind DT_BATCH_TOKENS, n = B, index = its
 * number in the epoch), NULL after the last; valid until the next call.
 * NULL too, with the error set and dt_tokens_failed true, when a token read
 * is not below the vocabulary (the shard was written to since it was
 * opened); the batch is not consumed. */
const struct dt_batch *dt_tokens_next(struct dt_tokens_loader *l);

/* Whether the last dt_tokens_next found a token out of the vocabulary. */
bool dt_tokens_failed(const struct dt_tokens_loader *l);

/* Where the next batch of the epoch is read: the shard's index in the
 * sorted set and the token offset of rank 0's sequence there (rank r's is
 * offset + r*B*T).  *shard = -1 when the epoch has no batch left. */
void dt_tokens_where(const struct dt_tokens_loader *l, int *shard, int64_t *offset);

/* Where the batch dt_tokens_next last returned was read: the shard's index
 * and the token offset of this rank's first sequence there (its row i
 * starts at offset + i*T). */
void dt_tokens_origin(const struct dt_tokens_loader *l, int *shard, int64_t *offset);

/* Seconds spent inside dt_tokens_next (the copy into the batch). */
double dt_tokens_wait_s(const struct dt_tokens_loader *l);

#endif
