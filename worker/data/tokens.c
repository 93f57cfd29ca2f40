/* tokens.c - llm.c token shards: opening and checking them, and the order a
 * rank reads them in (see tokens.h).
 *
 * Shards are mapped read-only and shared with the page cache (every rank of
 * a host maps the same pages).  Batches are made on the calling thread: a
 * batch is B*T + 1 uint16 widened to int32, far less than one step of any
 * model, so no loader threads.  Not for images (loader.c).
 */
#include "worker/data/tokens.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/fs.h"
#include "worker/data/sampler.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "token shards are little-endian and mapped as they are");

/* ---- one shard ---- */

static int32_t le32(const uint8_t *p)
{
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

/* Index of the first token >= vocab, n when none: the maximum per block of
 * 4096 first (a loop that vectorizes), the block searched only when it fails. */
static int64_t first_out_of_vocab(const uint16_t *t, int64_t n, int vocab)
{
    const int64_t block = 4096;
    for (int64_t lo = 0; lo < n; lo += block) {
        int64_t hi = n - lo < block ? n : lo + block;
        uint16_t max = 0;
        for (int64_t i = lo; i < hi; i++)
            max = t[i] > max ? t[i] : max;
        if (max >= vocab)
            for (int64_t i = lo; i < hi; i++)
                if (t[i] >= vocab)
                    return i;
    }
    return n;
}

int dt_tokens_check(const char *path, const uint8_t *bytes, size_t size, int vocab, const uint16_t **tokens,
                    int64_t *n)
{
    if (size < DT_TOKENS_HEADER_BYTES)
        return dt_error_set(DT_EINVAL, "%s: %zu bytes, shorter than the %d-byte header of a token shard",
                            path, size, DT_TOKENS_HEADER_BYTES);
    int32_t magic = le32(bytes), version = le32(bytes + 4), count = le32(bytes + 8);
    if (magic != DT_TOKENS_MAGIC)
        return dt_error_set(DT_EINVAL,
                            "%s: byte 0: magic %d, expected %d: not an llm.c token shard (header of 256 "
                            "little-endian int32: magic, version, token count); for a bare uint16 array "
                            "such as nanoGPT's train.bin set data.format: uint16",
                            path, magic, DT_TOKENS_MAGIC);
    if (version != DT_TOKENS_VERSION)
        return dt_error_set(DT_EINVAL, "%s: byte 4: version %d, expected %d (uint16 tokens)", path, version,
                            DT_TOKENS_VERSION);
    int64_t want = DT_TOKENS_HEADER_BYTES + 2 * (int64_t)count;
    if (count < 0 || (int64_t)size != want)
        return dt_error_set(DT_EINVAL,
                            "%s: byte 8: the header counts %d tokens, which take %lld bytes with the header; "
                            "the file has %zu (truncated or not a token shard)",
                            path, count, (long long)want, size);
    const uint16_t *t = (const uint16_t *)(bytes + DT_TOKENS_HEADER_BYTES);
    int64_t bad = first_out_of_vocab(t, count, vocab);
    if (bad < count)
        return dt_error_set(DT_EINVAL, "%s: byte %lld: token %u is not below the model's vocab_size %d", path,
                            (long long)(DT_TOKENS_HEADER_BYTES + 2 * bad), (unsigned)t[bad], vocab);
    *tokens = t;
    *n = count;
    return 0;
}

/* A bare uint16 array (nanoGPT's train.bin): no header to check, only an
 * even, non-empty size and the tokens. */
static int check_uint16(const char *path, const uint8_t *bytes, size_t size, int vocab,
                        const uint16_t **tokens, int64_t *n)
{
    if (size == 0 || size % 2)
        return dt_error_set(DT_EINVAL,
                            "%s: %zu bytes: a file of uint16 tokens (data.format uint16) has an even, "
                            "non-zero size",
                            path, size);
    const uint16_t *t = (const uint16_t *)bytes;
    int64_t count = (int64_t)(size / 2), bad = first_out_of_vocab(t, count, vocab);
    if (bad < count)
        return dt_error_set(DT_EINVAL, "%s: byte %lld: token %u is not below the model's vocab_size %d", path,
                            (long long)(2 * bad), (unsigned)t[bad], vocab);
    *tokens = t;
    *n = count;
    return 0;
}

static int open_shard(const char *path, enum dt_token_format format, int vocab, struct dt_token_shard *s)
{
    int (*check)(const char *, const uint8_t *, size_t, int, const uint16_t **, int64_t *) =
        format == DT_TOKENS_UINT16 ? check_uint16 : dt_tokens_check;
    struct stat st;
    int fd = dt_fs_open_read(AT_FDCWD, path, DT_FS_FOLLOW, &st), rc = 0; /* a FIFO is refused unopened */
    if (fd < 0)
        return fd;
    if (st.st_size == 0 || (format == DT_TOKENS_LLMC && st.st_size < DT_TOKENS_HEADER_BYTES))
        /* mmap of 0 bytes fails, and a file shorter than the header cannot
         * be a shard: the check's message says it better (it reads no byte) */
        rc = check(path, (const uint8_t[DT_TOKENS_HEADER_BYTES]){0}, (size_t)st.st_size, vocab, &s->tokens,
                   &s->n);
    if (rc) {
        close(fd);
        return rc;
    }
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int err = errno;
    close(fd);
    if (map == MAP_FAILED)
        return dt_error_set_errno(DT_EIO, err, "%s: cannot map %lld bytes", path, (long long)st.st_size);
    s->map = map;
    s->map_bytes = (size_t)st.st_size;
    return check(path, map, s->map_bytes, vocab, &s->tokens, &s->n);
}

/* ---- a set ---- */

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int dt_tokens_open(const char *pattern, enum dt_token_format format, int vocab, const char *what,
                   struct dt_token_set *out)
{
    memset(out, 0, sizeof *out);
    if (vocab < 1 || vocab > 65536)
        return dt_error_set(DT_EINVAL, "%s: vocab_size %d: uint16 tokens need 1..65536", what, vocab);
    out->vocab = vocab;
    out->header_bytes = format == DT_TOKENS_UINT16 ? 0 : DT_TOKENS_HEADER_BYTES;
    glob_t g;
    int grc = glob(pattern, GLOB_ERR, NULL, &g);
    if (grc == GLOB_NOMATCH || (grc == 0 && g.gl_pathc == 0)) {
        globfree(&g);
        return dt_error_set(DT_ENOTFOUND, "%s: no file matches '%s'", what, pattern);
    }
    if (grc != 0) {
        globfree(&g);
        return dt_error_set(DT_EIO, "%s: cannot expand '%s' (a directory could not be read)", what, pattern);
    }
    /* byte order, whatever the locale: the order Python's sorted() gives */
    qsort(g.gl_pathv, g.gl_pathc, sizeof *g.gl_pathv, by_name);
    int rc = 0;
    out->shards = calloc(g.gl_pathc, sizeof *out->shards);
    if (!out->shards)
        rc = dt_error_set(DT_ENOMEM, "%s: no memory for %zu shards", what, g.gl_pathc);
    for (size_t i = 0; !rc && i < g.gl_pathc; i++) {
        struct dt_token_shard *s = &out->shards[out->n++];
        if (!(s->path = strdup(g.gl_pathv[i])))
            rc = dt_error_set(DT_ENOMEM, "%s: no memory", what);
        else if ((rc = open_shard(s->path, format, vocab, s)))
            dt_error_prefix("%s", what);
    }
    globfree(&g);
    if (rc)
        dt_tokens_close(out);
    return rc;
}

void dt_tokens_close(struct dt_token_set *s)
{
    for (int i = 0; s->shards && i < s->n; i++) {
        if (s->shards[i].map)
            munmap(s->shards[i].map, s->shards[i].map_bytes);
        free(s->shards[i].path);
    }
    free(s->shards);
    memset(s, 0, sizeof *s);
}

/* ---- the order ---- */

struct dt_tokens_loader {
    const struct dt_token_set *set;
    struct dt_tokens_options o;
    int64_t global;       /* W*B*T: tokens of one micro-batch of all ranks */
    int64_t accum;        /* micro-batches of one sample (options' accum, at least 1) */
    int64_t *samples;     /* S_s per shard of the sorted set */
    int64_t per_epoch;    /* batches: accum x sum of S_s */
    int64_t *order;       /* the epoch's shard order */
    int64_t *sample_perm; /* shuffle: the current shard's sample order */
    struct dt_mt19937 g;  /* shuffle: the epoch's generator, drawn as shards are reached */
    int64_t epoch, batch; /* the next batch */
    int at;               /* its shard: order[at] */
    int64_t k;            /* its sample's place in that shard's order */
    int64_t m;            /* its micro-batch within the sample */
    int origin_shard;     /* the batch last returned: shard and this rank's first token */
    int64_t origin_offset;
    struct dt_batch b;
    double wait_s;
    bool failed; /* the last batch held a token out of the vocabulary */
};

int dt_tokens_loader_create(const struct dt_token_set *s, const struct dt_tokens_options *o,
                            struct dt_tokens_loader **out)
{
    *out = NULL;
    if (o->batch_size < 1 || o->seq_len < 1 || o->world < 1 || o->rank < 0 || o->rank >= o->world || s->n < 1)
        return dt_error_set(DT_EINVAL, "token loader: batch %d, seq_len %d, rank %d of %d, %d shards",
                            o->batch_size, o->seq_len, o->rank, o->world, s->n);
    struct dt_tokens_loader *l = calloc(1, sizeof *l);
    if (!l)
        return dt_error_set(DT_ENOMEM, "token loader: no memory");
    l->set = s;
    l->o = *o;
    l->global = (int64_t)o->world * o->batch_size * o->seq_len;
    l->accum = o->accum > 1 ? o->accum : 1;
    const int64_t unit = l->global * l->accum;
    size_t bt = (size_t)o->batch_size * (size_t)o->seq_len;
    l->samples = calloc((size_t)s->n, sizeof *l->samples);
    l->order = calloc((size_t)s->n, sizeof *l->order);
    l->b.inputs = malloc(bt * sizeof(int32_t));
    l->b.targets = malloc(bt * sizeof(int32_t));
    int rc = l->samples && l->order && l->b.inputs && l->b.targets
                 ? 0
                 : dt_error_set(DT_ENOMEM, "token loader: no memory for a batch of %zu tokens", bt);
    int64_t most = 1;
    for (int i = 0; !rc && i < s->n; i++) {
        l->samples[i] = (s->shards[i].n - 1) / unit;
        if (l->samples[i] < 1)
            rc = dt_error_set(DT_EINVAL,
                              "%s: %lld tokens, too few for one step of %d ranks x batch %d x seq_len %d%s "
                              "(%lld + 1 tokens)",
                              s->shards[i].path, (long long)s->shards[i].n, o->world, o->batch_size,
                              o->seq_len, l->accum > 1 ? " x grad_accum" : "", (long long)unit);
        l->per_epoch += l->samples[i] * l->accum;
        most = l->samples[i] > most ? l->samples[i] : most;
    }
    if (!rc && o->shuffle && !(l->sample_perm = malloc((size_t)most * sizeof *l->sample_perm)))
        rc = dt_error_set(DT_ENOMEM, "token loader: no memory for %lld sample indices", (long long)most);
    if (rc) {
        dt_tokens_loader_destroy(l);
        return rc;
    }
    l->b.kind = DT_BATCH_TOKENS;
    l->b.n = o->batch_size;
    l->b.T = o->seq_len;
    l->batch = l->per_epoch; /* idle until an epoch starts */
    *out = l;
    return 0;
}

void dt_tokens_loader_destroy(struct dt_tokens_loader *l)
{
    if (!l)
        return;
    free(l->samples);
    free(l->order);
    free(l->sample_perm);
    free(l->b.inputs);
    free(l->b.targets);
    free(l);
}

int64_t dt_tokens_batches_per_epoch(const struct dt_tokens_loader *l)
{
    return l->per_epoch;
}

/* shuffle: the sample order of the shard at order[at], the generator's next draws */
static void enter_shard(struct dt_tokens_loader *l)
{
    if (l->o.shuffle && l->at < l->set->n)
        dt_sampler_randperm(&l->g, l->samples[l->order[l->at]], l->sample_perm);
}

void dt_tokens_start_epoch(struct dt_tokens_loader *l, int64_t epoch, int64_t first)
{
    l->epoch = epoch;
    if (l->o.shuffle) {
        dt_mt19937_seed(&l->g, (uint32_t)(l->o.seed + (uint64_t)epoch));
        dt_sampler_randperm(&l->g, l->set->n, l->order);
    } else {
        for (int i = 0; i < l->set->n; i++)
            l->order[i] = i;
    }
    first = first < 0 ? 0 : first > l->per_epoch ? l->per_epoch : first;
    l->batch = first;
    l->at = 0;
    l->k = first / l->accum;
    l->m = first % l->accum;
    enter_shard(l);
    /* replays the draws of the shards before the one `first` is in */
    while (l->at < l->set->n && l->k >= l->samples[l->order[l->at]]) {
        l->k -= l->samples[l->order[l->at]];
        l->at++;
        enter_shard(l);
    }
}

/* token offset in its shard of the next batch's micro-batch (rank 0's) */
static int64_t offset_of(const struct dt_tokens_loader *l)
{
    int64_t sample = l->o.shuffle ? l->sample_perm[l->k] : l->k;
    return (sample * l->accum + l->m) * l->global;
}

/* Token j of the batch just copied (inputs[j] for j < bt, then the last
 * target) at or past the vocabulary: refused naming where it is.  Checked on
 * the copy, not the mapping, so what is checked is what the model reads. */
static int check_copied(struct dt_tokens_loader *l, const struct dt_token_shard *s, int64_t bt)
{
    int32_t max = 0;
    for (int64_t i = 0; i < bt; i++)
        max = l->b.inputs[i] > max ? l->b.inputs[i] : max;
    max = l->b.targets[bt - 1] > max ? l->b.targets[bt - 1] : max;
    if (max < l->set->vocab)
        return 0;
    int64_t j = 0;
    while (j < bt && l->b.inputs[j] < l->set->vocab)
        j++;
    int32_t id = j < bt ? l->b.inputs[j] : l->b.targets[bt - 1];
    int64_t token = l->origin_offset + j;
    l->failed = true;
    return dt_error_set(DT_EINVAL,
                        "%s: byte %lld (token %lld): token %d is not below the model's vocab_size %d; it "
                        "was when the run opened the shard, so the file was written to since (restore it, "
                        "or start the run again on the new data)",
                        s->path, (long long)l->set->header_bytes + 2 * token, (long long)token, (int)id,
                        l->set->vocab);
}

bool dt_tokens_failed(const struct dt_tokens_loader *l)
{
    return l->failed;
}

const struct dt_batch *dt_tokens_next(struct dt_tokens_loader *l)
{
    l->failed = false;
    if (l->batch >= l->per_epoch)
        return NULL;
    double t0 = dt_clock_s();
    const struct dt_token_shard *s = &l->set->shards[l->order[l->at]];
    int64_t bt = (int64_t)l->o.batch_size * l->o.seq_len;
    l->origin_shard = (int)l->order[l->at];
    l->origin_offset = offset_of(l) + (int64_t)l->o.rank * bt;
    const uint16_t *src = s->tokens + l->origin_offset;
    for (int64_t i = 0; i < bt; i++) {
        l->b.inputs[i] = src[i];
        l->b.targets[i] = src[i + 1];
    }
    if (check_copied(l, s, bt))
        return NULL;
    l->b.index = l->batch++;
    if (++l->m < l->accum) {
        l->wait_s += dt_clock_s() - t0;
        return &l->b;
    }
    l->m = 0;
    if (++l->k == l->samples[l->order[l->at]]) {
        l->k = 0;
        l->at++;
        enter_shard(l);
    }
    l->wait_s += dt_clock_s() - t0;
    return &l->b;
}

void dt_tokens_where(const struct dt_tokens_loader *l, int *shard, int64_t *offset)
{
    *shard = -1;
    *offset = 0;
    if (l->batch >= l->per_epoch)
        return;
    *shard = (int)l->order[l->at];
    *offset = offset_of(l);
}

void dt_tokens_origin(const struct dt_tokens_loader *l, int *shard, int64_t *offset)
{
    *shard = l->origin_shard;
    *offset = l->origin_offset;
}

double dt_tokens_wait_s(const struct dt_tokens_loader *l)
{
    return l->wait_s;
}
