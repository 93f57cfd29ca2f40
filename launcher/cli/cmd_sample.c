/* cmd_sample.c - `dtrain sample`: text from a gpt2 checkpoint.  Its command
 * line, the prompt in and the tokens out: the model is rebuilt from the
 * checkpoint's "model" metadata (worker/ckpt.h), its weights copied in, and
 * generation is dt_sample_generate (worker/sample.h).
 *
 * A byte-level model (vocab_size 256, `dtrain data bytes`) takes its prompt
 * as text and prints text; any other vocabulary takes and prints token ids,
 * since dtrain has no tokenizer.  Not for training or evaluation.
 */
#include "launcher/cli/cli.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "worker/ckpt.h"
#include "worker/models/model.h"
#include "worker/sample.h"

#define GPT2_EOT 50256 /* <|endoftext|>: GPT-2's vocabulary's last token, where its samples start */
#define MAX_NEW 1000000

static void usage(FILE *out)
{
    fprintf(out, "Usage: dtrain sample CHECKPOINT_OR_RUN_DIR [--prompt TEXT | --tokens LIST] [-n 200]\n"
                 "                     [--temperature 0.8] [--top-k 200] [--seed 0]\n\n"
                 "Generates text with a gpt2 checkpoint: a step_<N>.safetensors file, a checkpoint\n"
                 "directory or a run directory (its newest intact checkpoint).  The model is rebuilt\n"
                 "from the checkpoint's \"model\" metadata.  Each new token is drawn from the logits of\n"
                 "the last position after a forward of the last block_size tokens, divided by the\n"
                 "temperature, keeping the top-k (nanoGPT's sample.py; docs/trainer.md).\n\n"
                 "A byte-level model (vocab_size 256, from `dtrain data bytes`) reads --prompt as text\n"
                 "and prints the prompt and its continuation as text; bytes that are not printable\n"
                 "ASCII, newline or tab are written \\xNN, and a backslash \\\\.  Other vocabularies\n"
                 "read --tokens and print the prompt's and the new tokens' ids, space-separated (dtrain\n"
                 "has no tokenizer); without a prompt GPT-2's vocabulary starts from <|endoftext|>.\n\n"
                 "Options:\n"
                 "  --prompt TEXT        the prompt (byte-level models)\n"
                 "  --tokens LIST        the prompt as token ids: \"15496, 11, 995\" (commas or spaces)\n"
                 "  -n, --new N          tokens to generate (default 200)\n"
                 "  --temperature T      >= 0; 0 takes the most likely token each time (default 0.8)\n"
                 "  --top-k K            keep the K most likely tokens; 0 keeps all (default 200)\n"
                 "  --seed S             the sample's random numbers (SplitMix64; default 0)\n"
                 "  -h, --help           show this help\n\n"
                 "Exit status: 0 on success, 1 when the checkpoint cannot be used or the prompt does not\n"
                 "fit the model (a token outside the vocabulary, more tokens than block_size), 2 on a\n"
                 "usage error.\n");
}

/* ---- the command line ---- */

struct opts {
    const char *path, *prompt, *tokens;
    long long n_new, top_k;
    double temperature;
    unsigned long long seed;
};

static bool parse_ll(const char *s, long long lo, long long hi, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end || errno || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

static int parse_value(struct opts *o, int ch, const char *name, const char *v)
{
    char *end = NULL;
    if (ch == 'n' && !parse_ll(v, 0, MAX_NEW, &o->n_new))
        return dt_cli_usage_error("sample", "%s: expected a token count from 0 to %d, got '%s'", name, MAX_NEW, v);
    if (ch == 'k' && !parse_ll(v, 0, INT32_MAX, &o->top_k))
        return dt_cli_usage_error("sample", "--top-k: expected an integer >= 0, got '%s'", v);
    if (ch == 'T') {
        o->temperature = strtod(v, &end);
        if (!*v || *end || !(o->temperature >= 0) || o->temperature > 1e6)
            return dt_cli_usage_error("sample", "--temperature: expected a number >= 0, got '%s'", v);
    }
    if (ch == 's') {
        errno = 0;
        o->seed = strtoull(v, &end, 10);
        if (*v < '0' || *v > '9' || *end || errno)
            return dt_cli_usage_error("sample", "--seed: expected an integer from 0 to 2^64-1, got '%s'", v);
    }
    return 0;
}

static int parse_args(int argc, char **argv, struct opts *o)
{
    *o = (struct opts){.n_new = 200, .top_k = 200, .temperature = 0.8};
    static const struct option own[] = {{"prompt", required_argument, NULL, 'p'},
                                        {"tokens", required_argument, NULL, 't'},
                                        {"new", required_argument, NULL, 'n'},
                                        {"temperature", required_argument, NULL, 'T'},
                                        {"top-k", required_argument, NULL, 'k'},
                                        {"seed", required_argument, NULL, 's'},
                                        {0}};
    static const struct option *const tables[] = {own, NULL};
    struct dt_cli_opts s;
    dt_cli_opts_init(&s, "sample", "n:", false, tables);
    const char *v;
    for (int ch; (ch = dt_cli_opts_next(&s, argc, argv, &v)) != -1;) {
        int rc = ch == DT_CLI_OPT_ERROR ? DT_EXIT_REFUSED : parse_value(o, ch, argv[optind - 1][1] == '-' ? "--new" : "-n", v);
        if (rc)
            return rc;
        if (ch == 'p')
            o->prompt = v;
        else if (ch == 't')
            o->tokens = v;
        else if (ch == DT_CLI_OPT_OPERAND && o->path)
            return dt_cli_usage_error("sample", "one checkpoint at a time ('%s' is a second)", v);
        else if (ch == DT_CLI_OPT_OPERAND)
            o->path = v;
    }
    if (!o->path)
        return dt_cli_usage_error("sample", "needs a checkpoint file or run directory");
    if (o->prompt && o->tokens)
        return dt_cli_usage_error("sample", "give --prompt or --tokens, not both");
    return 0;
}

/* ---- the prompt ---- */

/* "15496, 11 995" -> ids; DT_EINVAL naming the item that is not one. */
static int parse_tokens(const char *list, int32_t *ids, int max, int *n)
{
    *n = 0;
    for (const char *p = list; *p;) {
        while (*p == ',' || *p == ' ' || *p == '\t' || *p == '\n')
            p++;
        if (!*p)
            break;
        size_t len = strcspn(p, ", \t\n");
        char item[24];
        long long v;
        snprintf(item, sizeof item, "%.*s", (int)(len < sizeof item ? len : sizeof item - 1), p);
        if (len >= sizeof item || !parse_ll(item, 0, INT32_MAX, &v))
            return dt_error_set(DT_EINVAL, "--tokens: '%.*s' is not a token id (an integer >= 0)",
                                (int)(len > 40 ? 40 : len), p);
        if (*n == max)
            return dt_error_set(DT_EINVAL, "--tokens: more than %d tokens, this model's block_size", max);
        ids[(*n)++] = (int32_t)v;
        p += len;
    }
    return 0;
}

/* The prompt's tokens for a model of spec s, into ids (room for block_size). */
static int prompt_tokens(const struct opts *o, const struct dt_model_spec *s, int32_t *ids, int *n)
{
    bool bytes = s->vocab_size == 256;
    *n = 0;
    if (o->tokens) {
        int rc = parse_tokens(o->tokens, ids, s->block_size, n);
        if (!rc && *n == 0)
            rc = dt_error_set(DT_EINVAL, "--tokens is empty: the prompt needs at least one token");
        return rc;
    }
    if (o->prompt && !bytes)
        return dt_error_set(
            DT_EINVAL,
            "this model's vocabulary has %d tokens, not bytes: give the prompt as token ids with "
            "--tokens (dtrain has no tokenizer)",
            s->vocab_size);
    if (o->prompt) {
        size_t len = strlen(o->prompt);
        if (len == 0)
            return dt_error_set(DT_EINVAL, "--prompt is empty: the prompt needs at least one character");
        if (len > (size_t)s->block_size)
            return dt_error_set(DT_EINVAL,
                                "the prompt has %zu bytes, more than this model's block_size %d: shorten it",
                                len, s->block_size);
        for (size_t i = 0; i < len; i++)
            ids[i] = (unsigned char)o->prompt[i];
        *n = (int)len;
        return 0;
    }
    if (s->vocab_size > GPT2_EOT) {
        ids[(*n)++] = GPT2_EOT;
        return 0;
    }
    return dt_error_set(DT_EINVAL, "a prompt is needed: give %s", bytes ? "--prompt TEXT" : "--tokens LIST");
}

/* ---- output ---- */

static void print_ids(const int32_t *t, int n)
{
    for (int i = 0; i < n; i++)
        printf("%s%d", i ? " " : "", (int)t[i]);
}

/* ---- the model ---- */

/* The checkpoint's model: its entry, checked against its tensors
 * (dt_ckpt_model_spec), and a language model. */
static int model_spec(const struct dt_ckpt_file *c, struct dt_model_spec *s)
{
    int rc = dt_ckpt_model_spec(c, s);
    if (rc == 0 && strcmp(s->type, "gpt2"))
        rc = dt_error_set(DT_EINVAL, "%s holds a model of type %s; dtrain sample needs a language model (gpt2)",
                          c->path, s->type);
    return rc;
}

/* The checkpoint's model rebuilt for one sequence of `tokens` (at most
 * block_size: the prompt and what is generated, the longest window a step
 * reads), with the checkpoint's weights.  Its activations are sized for
 * that sequence, not for block_size, so what sampling costs is what was
 * asked of it, whatever block_size the file declares. */
static int load_model(const struct dt_ckpt_file *c, struct dt_model_spec *s, int tokens, struct dt_model **m)
{
    *m = NULL;
    int rc;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    dt_kernels_cpu.set_threads(cores > 0 ? (int)cores : 1);
    struct dt_model_config mc = {
        .spec = s,
        .k = &dt_kernels_cpu,
        .max_batch = 1,
        .data = {.kind = DT_BATCH_TOKENS, .seq_len = tokens, .vocab = s->vocab_size}};
    rc = dt_model_create(&mc, m);
    if (!rc)
        rc = dt_ckpt_apply_weights(c, *m);
    return rc;
}

static int run(int argc, char **argv)
{
    struct opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc;
    struct dt_ckpt_file c;
    struct dt_model_spec s;
    struct dt_model *m = NULL;
    int32_t *ids = NULL;
    int n_prompt = 0;
    rc = dt_ckpt_read_any(o.path, &c);
    if (!rc)
        rc = model_spec(&c, &s);
    if (!rc && !(ids = malloc(((size_t)s.block_size + (size_t)o.n_new) * sizeof *ids)))
        rc = dt_error_set(DT_ENOMEM, "no memory for %lld tokens", (long long)s.block_size + o.n_new);
    if (!rc)
        rc = prompt_tokens(&o, &s, ids, &n_prompt);
    if (!rc)
        rc = load_model(&c, &s, n_prompt + o.n_new < s.block_size ? n_prompt + (int)o.n_new : s.block_size, &m);
    if (!rc)
        rc = dt_sample_generate(m, ids, n_prompt, (int)o.n_new, o.temperature, (int)o.top_k, o.seed,
                                ids + n_prompt);
    if (!rc && s.vocab_size == 256)
        dt_sample_print_bytes(stdout, ids, n_prompt + (int)o.n_new);
    else if (!rc)
        print_ids(ids, n_prompt + (int)o.n_new);
    if (!rc)
        putchar('\n');
    else
        fprintf(stderr, "dtrain sample: %s\n", dt_error_last());
    free(ids);
    dt_model_destroy(m);
    dt_ckpt_release(&c);
    return rc ? 1 : 0;
}

const struct dt_cli_command dt_cli_sample = {
    .name = "sample",
    .summary = "generate text with a gpt2 checkpoint",
    .run = run,
    .usage = usage,
};
