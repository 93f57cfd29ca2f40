/* kernel_profile.c - the per-kernel time table of a GPU run
 * (kernel_profile.h): records summed by raw name in a hash table, a cheap
 * reading of C++ mangled names, the categories of the step's time, and the
 * table itself.  Not for collecting the records: worker/cuda/profile_cuda.c
 * does that through CUPTI. */
#include <ctype.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "worker/kernel_profile.h"

struct kprof_row {
    char *name; /* raw, as the collector saw it */
    uint64_t calls, ns;
};

struct dt_kprof {
    struct kprof_row *rows;
    size_t n, cap;
    uint32_t *slot; /* open addressing: row index + 1, 0 empty; nslot a power of two > 2n */
    size_t nslot;
};

/* ---- the table of rows ---- */

static uint32_t hash_name(const char *s)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

struct dt_kprof *dt_kprof_new(void)
{
    return calloc(1, sizeof(struct dt_kprof));
}

void dt_kprof_free(struct dt_kprof *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->n; i++)
        free(p->rows[i].name);
    free(p->rows);
    free(p->slot);
    free(p);
}

static int rehash(struct dt_kprof *p, size_t nslot)
{
    uint32_t *slot = calloc(nslot, sizeof *slot);
    if (!slot)
        return -1;
    for (size_t i = 0; i < p->n; i++) {
        size_t j = hash_name(p->rows[i].name) & (nslot - 1);
        while (slot[j])
            j = (j + 1) & (nslot - 1);
        slot[j] = (uint32_t)(i + 1);
    }
    free(p->slot);
    p->slot = slot;
    p->nslot = nslot;
    return 0;
}

static struct kprof_row *find_or_add(struct dt_kprof *p, const char *name)
{
    if (p->nslot < 2 * (p->n + 1) && rehash(p, p->nslot ? 2 * p->nslot : 64))
        return NULL;
    size_t j = hash_name(name) & (p->nslot - 1);
    for (; p->slot[j]; j = (j + 1) & (p->nslot - 1))
        if (!strcmp(p->rows[p->slot[j] - 1].name, name))
            return &p->rows[p->slot[j] - 1];
    if (p->n == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 64;
        struct kprof_row *r = realloc(p->rows, cap * sizeof *r);
        if (!r)
            return NULL;
        p->rows = r;
        p->cap = cap;
    }
    char *copy = strdup(name);
    if (!copy)
        return NULL;
    p->rows[p->n] = (struct kprof_row){copy, 0, 0};
    p->slot[j] = (uint32_t)++p->n;
    return &p->rows[p->n - 1];
}

int dt_kprof_add(struct dt_kprof *p, const char *name, uint64_t ns)
{
    struct kprof_row *r = find_or_add(p, name && *name ? name : "(unnamed)");
    if (!r)
        return -1;
    r->calls++;
    r->ns += ns;
    return 0;
}

/* ---- names ---- */

/* Appends at *o (bounded by end) the source names of an Itanium-ABI mangled
 * name from p: <length><identifier> parts, "St" for std; stops at the first
 * template argument list (I), the end of a nested name (E), or anything else
 * (substitutions, operators): what came before is the readable part. */
static void source_names(const char *p, bool nested, char **o, char *end)
{
    bool first = true;
    for (;;) {
        const char *part = NULL;
        size_t len = 0;
        if (p[0] == 'S' && p[1] == 't') {
            part = "std", len = 3, p += 2;
        } else if (isdigit((unsigned char)*p)) {
            char *q;
            unsigned long l = strtoul(p, &q, 10);
            if (l == 0 || strnlen(q, l) < l)
                return;
            part = q, len = l, p = q + l;
        } else {
            return;
        }
        if (!first && end - *o > 2)
            *(*o)++ = ':', *(*o)++ = ':';
        first = false;
        for (size_t i = 0; i < len && *o < end; i++)
            *(*o)++ = part[i];
        if (!nested)
            return;
    }
}

const char *dt_kprof_short_name(const char *name, char *buf, size_t n)
{
    if (!n)
        return buf;
    if (!name)
        name = "(unnamed)";
    buf[0] = '\0';
    if (name[0] == '_' && name[1] == 'Z') {
        const char *p = name + 2;
        if (*p == 'L')
            p++;
        bool nested = *p == 'N';
        if (nested)
            for (p++; *p && strchr("rVKRO", *p); p++)
                ;
        char *o = buf, *end = buf + n - 1;
        source_names(p, nested, &o, end);
        *o = '\0';
    }
    if (!buf[0])
        snprintf(buf, n, "%s", name);
    return buf;
}

/* Case-insensitive: does s contain any of the words? */
static bool has_any(const char *s, const char *const *words)
{
    for (; *words; words++)
        for (const char *p = s; *p; p++)
            if (!strncasecmp(p, *words, strlen(*words)))
                return true;
    return false;
}

/* The attention kernels are worker/cuda/attention_cuda.cu's (fwd_*, bwd_*)
 * and cuDNN's (cudnn_generated_fort_native_sdpa_*, and its backward's
 * cudnn::fusion::compute_dot_do_o_* and matmul_dq: attention_cudnn.cpp),
 * the others by their names in the .cu files of worker/cuda and in cuBLASLt (whose
 * Hopper GEMMs are sm90_xmma_*, cutlass::* and nvjet_*), NCCL's ncclDevKernel_*. */
const char *dt_kprof_category(const char *raw)
{
    static const char *const copy[] = {"[memcpy", "[memset", NULL};
    static const char *const nccl[] = {"nccl", NULL};
    static const char *const gemm[] = {"gemm", "xmma", "cutlass", "nvjet", "cublas", "splitk", NULL};
    static const char *const attn[] = {"attn",   "attention", "flash",    "fwd_fast", "fwd_simple", "bwd_dkdv",
                                       "bwd_dq", "bwd_dsum",  "sdpa",     "fmha",     "cudnn::fusion", NULL};
    static const char *const ln[] = {"ln_forward", "ln_backward", "ln_param",
                                     "layernorm",  "layer_norm",  NULL};
    static const char *const xent[] = {"xent", "cross_entropy", "crossentropy", "classifier", NULL};
    static const char *const adam[] = {"adamw", "sumsq", "unscale", "scaler_update", NULL};
    if (!raw)
        return "other";
    char buf[256]; /* the readable name: a mangled "_ZN5cudnn6fusion..." has no "cudnn::fusion" */
    const char *name = dt_kprof_short_name(raw, buf, sizeof buf);
    if (has_any(name, copy))
        return "copies";
    if (has_any(name, nccl))
        return "NCCL";
    if (has_any(name, gemm))
        return "GEMM";
    if (has_any(name, attn))
        return "attention";
    if (has_any(name, ln))
        return "layernorm";
    if (has_any(name, xent))
        return "cross-entropy";
    if (has_any(name, adam))
        return "AdamW";
    return "other";
}

/* ---- the table ---- */

static int by_time(const void *a, const void *b)
{
    const struct kprof_row *x = *(const struct kprof_row *const *)a, *y = *(const struct kprof_row *const *)b;
    return x->ns < y->ns ? 1 : x->ns > y->ns ? -1 : strcmp(x->name, y->name);
}

static const char *const categories[] = {"GEMM",  "attention", "layernorm", "cross-entropy",
                                         "AdamW", "NCCL",      "copies",    "other"};
enum { N_CATEGORIES = sizeof categories / sizeof *categories };

static void write_summary(const struct dt_kprof *p, FILE *f, int64_t steps, double total_ms)
{
    double ms[N_CATEGORIES] = {0};
    for (size_t i = 0; i < p->n; i++) {
        const char *c = dt_kprof_category(p->rows[i].name);
        for (int k = 0; k < N_CATEGORIES; k++)
            if (!strcmp(c, categories[k]))
                ms[k] += (double)p->rows[i].ns / 1e6;
    }
    fprintf(f, "\nby category:\n  %-14s %10s %7s\n", "category", steps > 0 ? "ms/step" : "total ms", "%");
    for (int k = 0; k < N_CATEGORIES; k++)
        fprintf(f, "  %-14s %10.3f %6.1f%%\n", categories[k], steps > 0 ? ms[k] / (double)steps : ms[k],
                total_ms > 0 ? 100.0 * ms[k] / total_ms : 0.0);
}

void dt_kprof_write(const struct dt_kprof *p, FILE *f, int64_t steps, int top)
{
    const struct kprof_row **order = malloc((p->n ? p->n : 1) * sizeof *order);
    if (!order) {
        fprintf(f, "dtrain kernel profile: no memory to sort %zu rows\n", p->n);
        return;
    }
    uint64_t calls = 0, ns = 0;
    for (size_t i = 0; i < p->n; i++) {
        order[i] = &p->rows[i];
        calls += p->rows[i].calls;
        ns += p->rows[i].ns;
    }
    qsort(order, p->n, sizeof *order, by_time);
    double total_ms = (double)ns / 1e6, st = steps > 0 ? (double)steps : 0;
    fprintf(f, "dtrain kernel profile: %llu records, %zu names, GPU time %.3f ms", (unsigned long long)calls,
            p->n, total_ms);
    if (steps > 0)
        fprintf(f, " over %lld steps (%.3f ms/step)", (long long)steps, total_ms / st);
    fprintf(
        f,
        "\n(summed per record: kernels on concurrent streams overlap, so this can exceed the wall time)\n");
    fprintf(f, "%10s %9s %9s %10s %9s %6s  %s\n", "total ms", "calls", "calls/st", "mean us", "ms/step", "%",
            "name");
    size_t shown = top > 0 && (size_t)top < p->n ? (size_t)top : p->n;
    for (size_t i = 0; i < shown; i++) {
        const struct kprof_row *r = order[i];
        char name[160];
        double ms = (double)r->ns / 1e6;
        fprintf(f, "%10.3f %9llu %9.1f %10.2f %9.4f %5.1f%%  %s\n", ms, (unsigned long long)r->calls,
                st > 0 ? (double)r->calls / st : 0.0, 1e3 * ms / (double)r->calls, st > 0 ? ms / st : 0.0,
                total_ms > 0 ? 100.0 * ms / total_ms : 0.0, dt_kprof_short_name(r->name, name, sizeof name));
    }
    if (shown < p->n)
        fprintf(f, "(%zu more rows)\n", p->n - shown);
    write_summary(p, f, steps, total_ms);
    free(order);
}
