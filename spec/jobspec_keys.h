/* jobspec_keys.h - the table-driven key machinery of the job spec (internal).
 *
 * Each section of the spec is a table of keys: name, type, where the value
 * goes, its range, its default, what it means, and for odd shapes a setter.
 * One walker applies a table to a YAML mapping; the same tables give the
 * defaults (dt_spec_init), the "did you mean" suggestions, the dotted key
 * list, the freeing of everything a load allocated, and, through
 * `make generated` (spec/gen/specgen.c), configs/job.schema.json,
 * configs/reference.yaml and the key tables of docs/dtrain.1 and README.md.
 * A key is added, and its default changed, in one place.
 *
 * Not for the YAML reading itself (jobspec_yaml.h) nor for the public API
 * (jobspec.h).
 */
#ifndef DT_JOBSPEC_KEYS_H
#define DT_JOBSPEC_KEYS_H

#include "spec/jobspec_yaml.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum dt_kt {
    DT_KT_STR,         /* char *, strdup'ed; `names` limits it to a set of words */
    DT_KT_CHARS,       /* char[aux]: a fixed buffer; `names` limits it */
    DT_KT_INT,         /* int */
    DT_KT_I64,         /* int64_t */
    DT_KT_U64,         /* uint64_t */
    DT_KT_NUM,         /* double */
    DT_KT_BOOL,        /* bool */
    DT_KT_ENUM,        /* an enum (int-sized): the index of the word in `names` */
    DT_KT_DURATION,    /* double seconds, written 30s, 10m, 500ms, 1h30m */
    DT_KT_SIZE_MB,     /* double MiB, written 25 (MiB), 25MB, 1GiB */
    DT_KT_BYTES,       /* uint64_t bytes, written 4096, 64Gi, 512MB */
    DT_KT_STRLIST,     /* char **, NULL-terminated; int count at `aux` */
    DT_KT_STRMAP,      /* struct dt_env_entry *; int count at `aux` */
    DT_KT_SECTION,     /* a struct embedded at `off`, keys in `sub` */
    DT_KT_SECTION_PTR, /* a pointer at `off` to a struct allocated as `sub` says */
    DT_KT_SECLIST,     /* an array of `sub` structs at `off`; int count at `aux` */
    DT_KT_CUSTOM,      /* `set` parses it; `release` frees what it allocated */
    DT_KT_YAML,        /* char *: any YAML mapping, kept as one line of flow YAML (dt_yaml_put_flow) */
};

/* Range flags: which of lo/hi apply, and whether they are excluded. */
#define DT_KF_LO 1u
#define DT_KF_HI 2u
#define DT_KF_LO_X 4u
#define DT_KF_HI_X 8u
#define DT_KF_REQUIRED 16u
#define DT_KF_EMPTY_OK 32u    /* strings: "" is allowed */
#define DT_KF_ENVNAME 64u     /* strmap: keys must be environment variable names */
#define DT_KF_ZERO_UNSET 128u /* numbers and enums: 0 (an enum's first name) means "not set" and is left out by --print */
#define DT_KF_NEG_UNSET 256u  /* numbers: below 0 means "not set" and is left out by --print */
#define DT_KF_VERBATIM 512u   /* taken as written: no ${VAR} interpolation (a shell expands it on the node) */

/* How configs/reference.yaml shows a key (its value is `def`, else `example`). */
#define DT_DOC_REF_COMMENT                                                                                   \
    1u /* commented out: the value would clash with another key's (command and trainer) */

struct dt_spec_ctx;
struct dt_spec_key;
struct dt_spec_section;

typedef int (*dt_spec_set_fn)(struct dt_spec_ctx *ctx, const struct dt_spec_key *key,
                              const struct dt_ynode *val, void *obj);
typedef void (*dt_spec_release_fn)(void *obj);

struct dt_spec_key {
    const char *name;
    enum dt_kt type;
    size_t off;    /* the field inside the section's struct */
    size_t aux;    /* count field (lists, maps) or buffer size (chars) */
    double lo, hi; /* range, with DT_KF_LO/HI */
    unsigned flags;
    const char *const *names; /* words of an enum or an allowed-word string */
    const struct dt_spec_section *sub;
    dt_spec_set_fn set;         /* DT_KT_CUSTOM */
    dt_spec_release_fn release; /* DT_KT_CUSTOM: frees the field's allocations */
    const char *hint;           /* added to a wrong-shape message: how to write it */
    /* DT_KT_CUSTOM: writes the value as one line of YAML (a scalar or a flow
     * list or map) for --print; returns 0 when the value is unset. */
    int (*print)(const void *obj, char *buf, size_t size);
    /* What the key means, said once; texts mark literal words `like this`. */
    const char *def; /* the default as YAML ("25", "30s", "[0.9, 0.999]"), set by dt_spec_init; NULL: none */
    const char *unset;   /* without def: what leaving the key out means ("none", "Kubernetes' default") */
    const char *example; /* configs/reference.yaml's value where def is NULL */
    const char *form;    /* the value's form in words where type and range do not say it (custom keys) */
    const char *help;    /* what it does; the first sentence is reference.yaml's comment */
    const char
        *schema;  /* JSON members laid over the key's generated schema (patterns, anyOf; null drops one) */
    unsigned doc; /* DT_DOC_* */
};

struct dt_spec_section {
    const char *title; /* for messages: "the top level", "rendezvous" */
    const struct dt_spec_key *keys;
    size_t n_keys;
    size_t size;             /* struct size, for SECTION_PTR and SECLIST */
    /* Values that mean "not set" where zero means something (a trace's last
     * step -1); defaults are the keys' `def`, set after it.  NULL: none. */
    void (*init)(void *obj);
    /* Rules between keys of this section, run after its keys are set. */
    int (*check)(struct dt_spec_ctx *ctx, const struct dt_ynode *map, void *obj);
    void (*release)(void *obj); /* frees what `init` allocated beyond the keys */
    const char *help;           /* a SECLIST's item ("A toleration."), the root's whole spec */
    const char *schema;         /* JSON members laid over the section's generated schema (oneOf, if/then) */
};

/* One problem found in a spec: where (line < 0: the -(line)th --set), what. */
struct dt_spec_problem {
    int line, col, seq;
    char *msg; /* the whole line: "<file>:<line>:<col>: ..." */
};

struct dt_spec_ctx {
    const char *file;
    char path[256]; /* dotted path of the section being read ("" at the top) */
    const struct dt_spec_section *root;
    /* Every problem found, so one load reports them all (in file order once sorted). */
    struct dt_spec_problem *problems;
    int n_problems, cap_problems;
    char *const *sets; /* the --set assignments, for messages about nodes they made */
};

/* A table entry: DT_KEY("nodes", DT_KT_INT, struct dt_job, nodes, .lo = 1, .flags = DT_KF_LO). */
#define DT_KEY(n, t, S, f, ...)                                                                              \
    {                                                                                                        \
        .name = (n), .type = (t), .off = offsetof(S, f), __VA_ARGS__                                         \
    }
#define DT_COUNT(S, f) .aux = offsetof(S, f)
#define DT_NKEYS(a) (sizeof(a) / sizeof((a)[0]))

/* The top level: the table every walk starts from. */
extern const struct dt_spec_section dt_jobspec_root;

/* The sections defined outside jobspec.c. */
extern const struct dt_spec_section dt_jobspec_trainer_section;
extern const struct dt_spec_section dt_jobspec_slurm_section;
extern const struct dt_spec_section dt_jobspec_kubernetes_section;
extern const struct dt_spec_section dt_jobspec_mpirun_section;
extern const struct dt_spec_section dt_jobspec_console_section;

/* signals_to_handle (jobspec_torchrun.c): a list of signal names, or
 * torchrun's "SIGTERM,SIGINT" in one string, as a mask (bit N: signal N). */
int dt_spec_set_signals(struct dt_spec_ctx *ctx, const struct dt_spec_key *k, const struct dt_ynode *v, void *obj);
int dt_spec_print_signals(const void *obj, char *buf, size_t size);

/* A number key's setter (DT_KT_INT ... DT_KT_NUM), for a custom key whose
 * plain form is a number (nodes: N besides MIN:MAX). */
int dt_spec_set_number(struct dt_spec_ctx *ctx, const struct dt_spec_key *k, const struct dt_ynode *v, void *obj);

/* True when `s` is a DNS-1123 label of at most 63 characters. */
int dt_spec_dns_label(const char *s);

/* Fills `obj` (zeroed) with the section's "not set" values (its init) and its
 * keys' defaults, descending into embedded sections.  Fails (DT_EINTERNAL,
 * naming the key) only for a default its own key refuses, which
 * tests/unit/test_jobspec_defaults.c rules out. */
int dt_spec_init(const struct dt_spec_section *sec, void *obj);

/* Applies `sec` to mapping `map`, filling `obj` (already initialised). */
int dt_spec_apply(struct dt_spec_ctx *ctx, const struct dt_spec_section *sec, const struct dt_ynode *map,
                  void *obj);

/* Frees every string, list and sub-section the keys of `sec` hold in `obj`. */
void dt_spec_release(const struct dt_spec_section *sec, void *obj);

/* Writes `obj` as block YAML at `indent` spaces: every key with its value,
 * defaults included, in table order; unset optional values are left out. */
void dt_spec_print(const struct dt_spec_section *sec, const void *obj, int indent, FILE *out);

/* The shortest text that reads back to exactly x (for --print). */
const char *dt_spec_shortest(double x, char *buf, size_t size);

/* Prints every key path ("rendezvous.timeout", "kubernetes.volumes[].name"), one a line. */
void dt_spec_list_keys(const struct dt_spec_section *root, FILE *out);

/* Records "<where>: <message>" as a problem at `at` (where: "<file>:<line>:<col>", or
 * "--set <assignment>" for a value an override made) and sets it as the current
 * error; returns DT_EINVAL, or DT_ENOMEM when it cannot be kept. */
int dt_spec_report(struct dt_spec_ctx *ctx, const struct dt_ynode *at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Sorts the problems into file order (overrides after the file) and frees them into one
 * '\n'-joined string (*joined, when joined is not NULL); the first becomes dt_error_last(). */
void dt_spec_problems_finish(struct dt_spec_ctx *ctx, char **joined);

/* The key of `sec` called `name`, or NULL. */
const struct dt_spec_key *dt_spec_find_key(const struct dt_spec_section *sec, const char *name);

/* ${VAR}, ${VAR:-default} and $$ in every scalar value of `root` (not keys, not values of
 * DT_KF_VERBATIM keys), reading `env` ("NAME=value", NULL-terminated).  Returns 1 when a
 * value changed, 0 when none did, or DT_EINVAL having reported each unset variable. */
int dt_spec_interpolate(struct dt_spec_ctx *ctx, struct dt_ynode *root, char *const *env);

/* Applies one --set "key.path=value" (ctx->sets[index]) to the tree: the value is read as
 * YAML (a scalar, or a flow list or mapping) and put where the file would have it.  An
 * unknown key path is reported naming it. */
int dt_spec_override(struct dt_spec_ctx *ctx, struct dt_ynode *root, int index);

/* "<file>:<line>:<col>: <path>.<key>: <message>" at `at`; returns DT_EINVAL.
 * `key` may be NULL (the message is about the section itself). */
int dt_spec_fail(struct dt_spec_ctx *ctx, const struct dt_ynode *at, const char *key, const char *fmt,
                 ...) __attribute__((format(printf, 4, 5)));

/* The key's full dotted name into buf ("rendezvous.timeout"). */
const char *dt_spec_path(const struct dt_spec_ctx *ctx, const char *key, char *buf, size_t size);

/* Scalar readers shared by the tables' custom setters.  Each checks the
 * node's shape and text and reports failures through dt_spec_fail. */
/* "'text'" for a scalar, "a list", "a mapping" or "nothing (null)" otherwise: the "got" of a message. */
const char *dt_spec_got(const struct dt_ynode *v, char *buf, size_t size);
int dt_spec_scalar(struct dt_spec_ctx *ctx, const char *key, const struct dt_ynode *v, const char *what);
int dt_spec_parse_int(const char *s, long long *out);
int dt_spec_parse_num(const char *s, double *out);
int dt_spec_parse_duration(const char *s, double *seconds);
int dt_spec_parse_bytes(const char *s, double plain_unit, double *bytes);
int dt_spec_check_range(struct dt_spec_ctx *ctx, const struct dt_spec_key *key, const struct dt_ynode *v,
                        double x, int integer);

/* The closest known key of `sec` to `name`, or NULL when none is close. */
const char *dt_spec_suggest(const struct dt_spec_section *sec, const char *name);
/* The closest of the NULL-terminated `words` to `text`, or NULL. */
const char *dt_spec_suggest_word(const char *const *words, const char *text);
/* The dotted path of a key called exactly `name` in another section of the
 * tree under `root` (into buf), or NULL. */
const char *dt_spec_find_elsewhere(const struct dt_spec_section *root, const struct dt_spec_section *not_in,
                                   const char *name, char *buf, size_t size);

#endif
