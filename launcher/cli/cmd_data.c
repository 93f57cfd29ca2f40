/* cmd_data.c - `dtrain data bytes INPUT... -o DIR`: text files as llm.c token
 * shards of byte-level tokens (vocabulary 256), for trainer.data dataset
 * tokens.
 *
 * The inputs are concatenated in the order given; the last
 * floor(bytes * F) bytes are the validation split (nanoGPT's
 * shakespeare_char takes the last 10% the same way), the rest the training
 * split.  Each split is written as DIR/train_NNNNNN.bin and DIR/val_NNNNNN.bin,
 * shards of at most --shard-tokens tokens (default 100,000,000, the shard
 * size of llm.c's fineweb.py), in the format worker/data/tokens.h reads:
 * 256 little-endian int32 (magic 20240520, version 1, count), then the
 * bytes as uint16.  Each shard is written whole or not at all.
 *
 * Not for reading shards (worker/data/tokens.c) nor for other tokenizers:
 * GPT-2 token shards come from llm.c's or nanoGPT's own scripts.
 */
#include "launcher/cli/cli.h"

#include <errno.h>
#include <glob.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "base/fs.h"
#include "worker/data/tokens.h"

#define DEFAULT_SHARD_TOKENS 100000000LL

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: dtrain data bytes INPUT... -o DIR [--val-fraction F] [--shard-tokens N] [--force]\n\n"
            "Writes the bytes of the INPUT files (concatenated in order; - is standard input) as\n"
            "llm.c token shards of byte-level tokens, vocabulary 256, for a job spec's\n"
            "  trainer.data: {dataset: tokens, train: DIR/train_*.bin, val: DIR/val_*.bin, ...}\n"
            "with trainer.model.vocab_size: 256.  The last F of the bytes are the validation split,\n"
            "the rest the training split; each is cut into shards DIR/train_000000.bin, ...\n"
            "of at most N tokens.  A shard is 1024 bytes of header (magic 20240520, version 1,\n"
            "token count, as little-endian int32) and one uint16 per byte.\n\n"
            "Options:\n"
            "  -o, --output DIR    where the shards go (created if missing)\n"
            "  --val-fraction F    share of the bytes for validation, 0 <= F < 1 (default 0.1);\n"
            "                      0 writes no validation shards\n"
            "  --shard-tokens N    tokens per shard at most (default 100000000)\n"
            "  --force             replace the shards DIR already holds (train_*.bin, val_*.bin);\n"
            "                      without it such a DIR is refused, since a glob would read old\n"
            "                      shards beside the new ones\n"
            "  -h, --help          show this help\n\n"
            "Example (the King James Bible from Debian's bible-kjv-text package, printed by bible):\n"
            "  bible gen1:1-rev22:21 </dev/null | dtrain data bytes - -o data/kjv   # make kjv-data\n\n"
            "Exit status: 0 on success, 1 when an input cannot be read or is empty or a shard\n"
            "cannot be written, 2 on a usage error.\n");
}

/* ---- reading ---- */

struct bytes {
    uint8_t *p;
    size_t n, cap;
};

static int read_input(const char *path, struct bytes *b)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    if (!f)
        return dt_error_set_errno(DT_EIO, errno, "%s: cannot open", path);
    size_t before = b->n;
    int rc = 0;
    for (;;) {
        if (b->cap - b->n < 65536) {
            size_t cap = b->cap ? 2 * b->cap : 1 << 20;
            uint8_t *p = realloc(b->p, cap);
            if (!p) {
                rc = dt_error_set(DT_ENOMEM, "%s: no memory for %zu bytes", path, cap);
                break;
            }
            b->p = p;
            b->cap = cap;
        }
        size_t got = fread(b->p + b->n, 1, b->cap - b->n, f);
        b->n += got;
        if (got == 0) {
            if (ferror(f))
                rc = dt_error_set_errno(DT_EIO, errno, "%s: read error", path);
            break;
        }
    }
    if (f != stdin)
        fclose(f);
    if (!rc && b->n == before)
        rc = dt_error_set(DT_EINVAL, "%s: is empty", path);
    return rc;
}

/* ---- writing ---- */

struct shard {
    const uint8_t *bytes;
    int64_t n;
};

static int write_shard(void *ctx, FILE *f)
{
    const struct shard *s = ctx;
    int32_t header[DT_TOKENS_HEADER_BYTES / 4] = {DT_TOKENS_MAGIC, DT_TOKENS_VERSION, (int32_t)s->n};
    fwrite(header, sizeof header, 1, f); /* little-endian hosts only: tokens.h says so */
    uint16_t buf[4096];
    for (int64_t at = 0; at < s->n;) {
        int64_t k = s->n - at < 4096 ? s->n - at : 4096;
        for (int64_t i = 0; i < k; i++)
            buf[i] = s->bytes[at + i];
        fwrite(buf, 2, (size_t)k, f);
        at += k;
    }
    return 0; /* a write error the stream reports is dt_fs_write_atomic's to name */
}

/* One split as shards <dir>/<name>_NNNNNN.bin; prints each. */
static int write_split(const char *dir, const char *name, const uint8_t *bytes, int64_t n, int64_t per_shard)
{
    for (int64_t at = 0, i = 0; at < n; at += per_shard, i++) {
        struct shard s = {bytes + at, n - at < per_shard ? n - at : per_shard};
        char path[4200];
        if ((size_t)snprintf(path, sizeof path, "%s/%s_%06lld.bin", dir, name, (long long)i) >= sizeof path)
            return dt_error_set(DT_EINVAL, "output directory name too long: %.80s...", dir);
        int rc = dt_fs_write_atomic(path, false, write_shard, &s);
        if (rc)
            return rc;
        printf("%s: %lld tokens\n", path, (long long)s.n);
    }
    return 0;
}

/* Shards a previous run left in dir: the spec's globs would read them beside
 * the new ones (a run with fewer shards, or with --val-fraction 0, leaves
 * some), so they are refused, or removed first with --force. */
static int clear_old_shards(const char *dir, bool force)
{
    static const char *const names[] = {"train", "val"};
    int rc = 0;
    for (int k = 0; !rc && k < 2; k++) {
        char pattern[4200];
        if ((size_t)snprintf(pattern, sizeof pattern, "%s/%s_[0-9][0-9][0-9][0-9][0-9][0-9].bin", dir,
                             names[k]) >= sizeof pattern)
            return dt_error_set(DT_EINVAL, "output directory name too long: %.80s...", dir);
        glob_t g;
        if (glob(pattern, 0, NULL, &g) != 0)
            continue; /* none (or the directory does not exist yet) */
        if (!force)
            rc = dt_error_set(DT_EINVAL,
                              "%s already holds shards (%s, %zu in all); a glob would read them with "
                              "the new ones: give --force to replace them, or another -o",
                              dir, g.gl_pathv[0], g.gl_pathc);
        for (size_t i = 0; !rc && i < g.gl_pathc; i++)
            if (unlink(g.gl_pathv[i]) != 0)
                rc = dt_error_set_errno(DT_EIO, errno, "%s: cannot remove the old shard", g.gl_pathv[i]);
        globfree(&g);
    }
    return rc;
}

/* ---- the command line ---- */

static int parse_number(const char *s, double *out)
{
    char *end;
    errno = 0;
    *out = strtod(s, &end);
    return *s && !*end && !errno ? 0 : -1;
}

static int run(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "bytes") != 0)
        return dt_cli_usage_error("data", argc < 2 ? "needs a subcommand: bytes" : "unknown subcommand '%s'",
                                  argc < 2 ? "" : argv[1]);
    const char *dir = NULL;
    double frac = 0.1, per = (double)DEFAULT_SHARD_TOKENS;
    bool force = false;
    char **inputs = calloc((size_t)argc, sizeof *inputs);
    int n_in = 0;
    enum { VAL_FRACTION = DT_CLI_OPT_OWN, SHARD_TOKENS, FORCE };
    static const struct option own[] = {{"output", required_argument, NULL, 'o'},
                                        {"val-fraction", required_argument, NULL, VAL_FRACTION},
                                        {"shard-tokens", required_argument, NULL, SHARD_TOKENS},
                                        {"force", no_argument, NULL, FORCE},
                                        {0}};
    static const struct option *const tables[] = {own, NULL};
    struct dt_cli_opts s;
    dt_cli_opts_init(&s, "data", "o:", false, tables);
    const char *v;
    for (int ch; inputs && (ch = dt_cli_opts_next(&s, argc - 1, argv + 1, &v)) != -1;) { /* after "bytes" */
        if (ch == DT_CLI_OPT_ERROR)
            return free(inputs), DT_EXIT_REFUSED;
        if (ch == VAL_FRACTION && (parse_number(v, &frac) || !(frac >= 0 && frac < 1)))
            return free(inputs), dt_cli_usage_error("data", "--val-fraction needs a number in [0, 1), got '%s'", v);
        if (ch == SHARD_TOKENS && (parse_number(v, &per) || per < 1 || per > INT32_MAX || per != (int64_t)per))
            return free(inputs),
                   dt_cli_usage_error("data", "--shard-tokens needs an integer in 1..%d, got '%s'", INT32_MAX, v);
        if (ch == 'o')
            dir = v;
        else if (ch == FORCE)
            force = true;
        else if (ch == DT_CLI_OPT_OPERAND)
            inputs[n_in++] = (char *)v;
    }
    if (!inputs)
        return fprintf(stderr, "dtrain data bytes: no memory\n"), 1;
    if (n_in == 0 || !dir)
        return free(inputs),
               dt_cli_usage_error("data", n_in == 0 ? "bytes needs at least one input file"
                                                    : "bytes needs -o DIR, where the shards go");
    struct bytes b = {0};
    int rc = 0;
    for (int i = 0; !rc && i < n_in; i++)
        rc = read_input(inputs[i], &b);
    int64_t n_val = (int64_t)((double)b.n * frac), n_train = (int64_t)b.n - n_val;
    if (!rc && frac > 0 && (n_val < 1 || n_train < 1))
        rc = dt_error_set(
            DT_EINVAL, "%zu bytes cannot be split by --val-fraction %g into two non-empty parts", b.n, frac);
    if (!rc)
        rc = clear_old_shards(dir, force);
    if (!rc)
        rc = dt_fs_mkdir_p(dir, 0777, "output directory");
    if (!rc)
        rc = write_split(dir, "train", b.p, n_train, (int64_t)per);
    if (!rc)
        rc = write_split(dir, "val", b.p + n_train, n_val, (int64_t)per);
    free(b.p);
    free(inputs);
    if (rc) {
        fprintf(stderr, "dtrain data bytes: %s\n", dt_error_last());
        return 1;
    }
    return 0;
}

const struct dt_cli_command dt_cli_data = {
    .name = "data",
    .summary = "write text as byte-level token shards for trainer.data dataset tokens",
    .run = run,
    .usage = usage,
};
