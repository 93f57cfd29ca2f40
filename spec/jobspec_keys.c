/* jobspec_keys.c - applies a section's key table to a YAML mapping, and frees and lists by the same table.
 *
 * One setter per value type; a table entry says which.  Keys that need more
 * than a type and a range (nproc_per_node's "gpu", betas, trace steps) bring
 * their own setter but are still found, suggested and listed through the table.
 *
 * Not for the tables themselves (jobspec.c, jobspec_trainer.c, jobspec_sched.c).
 */
#include "spec/jobspec_keys.h"

#include "base/error.h"
#include "spec/jobspec.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(sizeof(enum dt_backend) == sizeof(int), "enums are stored as int");

#define FIELD(obj, k, T) ((T *)((char *)(obj) + (k)->off))
#define COUNT(obj, k) ((int *)((char *)(obj) + (k)->aux))

static int shape_error(struct dt_spec_ctx *ctx, const struct dt_spec_key *k, const struct dt_ynode *v,
                       const char *what)
{
    char q[96];
    if (v->kind == DT_Y_SCALAR && !dt_ynode_is_null(v))
        return dt_spec_fail(ctx, v, k->name, "expected %s, got '%s'%s%s", what,
                            dt_yaml_quote(v->text, q, sizeof q), k->hint ? "; " : "", k->hint ? k->hint : "");
    return dt_spec_fail(ctx, v, k->name, "expected %s, got %s%s%s", what, dt_ynode_kind_name(v),
                        k->hint ? "; " : "", k->hint ? k->hint : "");
}

/* Words in a sentence: "one of relu, gelu". */
static void word_list(const char *const *names, char *buf, size_t size)
{
    size_t used = (size_t)snprintf(buf, size, "one of");
    for (size_t i = 0; names[i] && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s %s", i ? "," : "", names[i]);
}

static int word_index(const struct dt_spec_key *k, const char *text)
{
    for (int i = 0; k->names[i]; i++)
        if (strcmp(k->names[i], text) == 0)
            return i;
    return -1;
}

static int set_word(struct dt_spec_ctx *ctx, const struct dt_spec_key *k, const struct dt_ynode *v, void *obj)
{
    char want[256];
    if (k->names)
        word_list(k->names, want, sizeof want);
    else
        snprintf(want, sizeof want, "%s", k->flags & DT_KF_EMPTY_OK ? "a string" : "a non-empty string");
    if (v->kind != DT_Y_SCALAR || dt_ynode_is_null(v))
        return shape_error(ctx, k, v, want);
    int idx = k->names ? word_index(k, v->text) : 0;
    const char *close = idx < 0 ? dt_spec_suggest_word(k->names, v->text) : NULL;
    if (close) {
        char q[96];
        return dt_spec_fail(ctx, v, k->name, "expected %s, got '%s'; did you mean '%s'?", want,
                            dt_yaml_quote(v->text, q, sizeof q), close);
    }
    if (idx < 0 || (!(k->flags & DT_KF_EMPTY_OK) && v->len == 0))
        return shape_error(ctx, k, v, want);
    if (k->type == DT_KT_ENUM) {
        *FIELD(obj, k, int) = idx;
    } else if (k->type == DT_KT_CHARS) {
        if (v->len >= k->aux)
            return shape_error(ctx, k, v, "a shorter value");
        memcpy(FIELD(obj, k, char), v->text, v->len + 1);
    } else {
        char *copy = strdup(v->text);
        if (!copy)
            return dt_error_set(DT_ENOMEM, "out of memory reading the job spec");
        free(*FIELD(obj, k, char *));
        *FIELD(obj, k, char *) = copy;
    }
    return 0;
}

/* A quoted "3" where a number belongs is refused: the JSON Schema (and any
 * YAML library) sees a string there, and the two must agree. */
static int set_number(struct dt_spec_ctx *ctx, const struct dt_spec_key *k, const struct dt_ynode *v,
                      void *obj)
{
    int integer = k->type == DT_KT_INT || k->type == DT_KT_I64 || k->type == DT_KT_U64;
    const char *what = integer ? "an integer" : "a number";
    if (v->kind != DT_Y_SCALAR || dt_ynode_is_null(v))
        return shape_error(ctx, k, v, what);
    long long i = 0;
    double x = 0;
    int bad = integer ? dt_spec_parse_int(v->text, &i) : dt_spec_parse_num(v->text, &x);
    if (bad)
        return shape_error(ctx, k, v, what);
    if (!v->plain) {
        char q[96];
        return dt_spec_fail(ctx, v, k->name, "expected %s, got the string \"%s\" (remove the quotes)", what,
                            dt_yaml_quote(v->text, q, sizeof q));
    }
    if (integer)
        x = (double)i;
    if (dt_spec_check_range(ctx, k, v, x, integer))
        return DT_EINVAL;
    if (k->type == DT_KT_INT)
        *FIELD(obj, k, int) = (int)i;
    else if (k->type == DT_KT_I64)
        *FIELD(obj, k, int64_t) = i;
    else if (k->type == DT_KT_U64)
        *FIELD(obj, k, uint64_t) = (uint64_t)i;
    else
        *FIELD(obj, k, double) = x;
    return 0;
}

int dt_spec_set_number(struct dt_spec_ctx *ctx, const struct dt_spec_key *k, const struct dt_ynode *v, void *obj)
{
    return set_number(ctx, k, v, obj);
}

/* YAML 1.2 booleans only: yes/no/on/off mean true/false to some YAML
 * libraries and strings to others, so they are refused rather than guessed. */
static int set_bool(struct dt_spec_ctx *ctx, const struct dt_spec_key *k, const struct dt_ynode *v, void *obj)
{
    static const char *const yes[] = {"true", "True", "TRUE", NULL}, *const no[] = {"false", "False", "FALSE",
                                                                                    NULL};
    if (v->kind == DT_Y_SCALAR && v->plain) {
        for (int i = 0; yes[i]; i++) {
            if (strcmp(v->text, yes[i]) == 0)
                return *FIELD(obj, k, bool) = true, 0;
            if (strcmp(v->text, no[i]) == 0)
                return *FIELD(obj, k, bool) = false, 0;
        }
    }
    return shape_error(ctx, k, v, "true or false");
}

static int set_measure(struct dt_spec_ctx *ctx, const struct dt_spec_key *k, const struct dt_ynode *v,
                       void *obj)
{
    double x;
    const char *what = k->type == DT_KT_DURATION  ? "a duration like 30s, 10m or 500ms"
                       : k->type == DT_KT_SIZE_MB ? "a size like 25 (MiB), 25MB or 1GiB"
                                                  : "a size like 512Mi, 64Gi or 4GB";
    if (v->kind != DT_Y_SCALAR || dt_ynode_is_null(v))
        return shape_error(ctx, k, v, what);
    int bad = k->type == DT_KT_DURATION
                  ? dt_spec_parse_duration(v->text, &x)
                  : dt_spec_parse_bytes(v->text, k->type == DT_KT_SIZE_MB ? 1048576.0 : 1.0, &x);
    if (bad) {
        char q[96];
        double n;
        if (k->type == DT_KT_DURATION && dt_spec_parse_num(v->text, &n) == 0)
            return dt_spec_fail(ctx, v, k->name, "expected %s, got '%s' (add a unit: %ss)", what,
                                dt_yaml_quote(v->text, q, sizeof q), q);
        return shape_error(ctx, k, v, what);
    }
    if (k->type == DT_KT_SIZE_MB)
        x /= 1048576.0;
    if (dt_spec_check_range(ctx, k, v, x, 0))
        return DT_EINVAL;
    if (k->type == DT_KT_BYTES)
        *FIELD(obj, k, uint64_t) = (uint64_t)x;
    else
        *FIELD(obj, k, double) = x;
    return 0;
}

static void free_strlist(char **list)
{
    for (size_t i = 0; list && list[i]; i++)
        free(list[i]);
    free(list);
}

/* Items are taken as written: in `command: [train, --epochs, 3]` the 3 is
 * the text "3", which is what a user means. */
static int set_strlist(struct dt_spec_ctx *ctx, const struct dt_spec_key *k, const struct dt_ynode *v,
                       void *obj)
{
    if (v->kind != DT_Y_SEQ)
        return shape_error(ctx, k, v, "a list of strings like [a, b]");
    if ((k->flags & DT_KF_LO) && (double)v->n < k->lo)
        return dt_spec_fail(ctx, v, k->name, "expected a list of at least %g item(s), got %zu", k->lo, v->n);
    if ((k->flags & DT_KF_HI) && (double)v->n > k->hi)
        return dt_spec_fail(ctx, v, k->name, "expected a list of at most %g items, got %zu", k->hi, v->n);
    for (size_t i = 0; i < v->n; i++)
        if (dt_spec_scalar(ctx, k->name, v->items[i], "a list of strings (one item is not a string)"))
            return DT_EINVAL;
    char **list = calloc(v->n + 1, sizeof *list);
    if (!list)
        return dt_error_set(DT_ENOMEM, "out of memory reading the job spec");
    for (size_t i = 0; i < v->n; i++) {
        if (!(list[i] = strdup(v->items[i]->text))) {
            free_strlist(list);
            return dt_error_set(DT_ENOMEM, "out of memory reading the job spec");
        }
    }
    free_strlist(*FIELD(obj, k, char **));
    *FIELD(obj, k, char **) = list;
    *COUNT(obj, k) = (int)v->n;
    return 0;
}

static void free_strmap(struct dt_env_entry *e, int n)
{
    for (int i = 0; e && i < n; i++) {
        free(e[i].name);
        free(e[i].value);
    }
    free(e);
}

static int env_name_ok(const char *s)
{
    if (!*s || isdigit((unsigned char)*s))
        return 0;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '_')
            return 0;
    return 1;
}

/* Values are taken as written (OMP_NUM_THREADS: 1 is "1"): an environment
 * value is always a string, and making users quote numbers helps nobody. */
static int set_strmap(struct dt_spec_ctx *ctx, const struct dt_spec_key *k, const struct dt_ynode *v,
                      void *obj)
{
    char q[96];
    if (v->kind != DT_Y_MAP)
        return shape_error(ctx, k, v, "a mapping of names to values (NAME: value)");
    for (size_t i = 0; i < v->n; i++) {
        const struct dt_ynode *name = dt_ymap_key(v, i), *val = dt_ymap_val(v, i);
        if ((k->flags & DT_KF_ENVNAME) && !env_name_ok(name->text))
            return dt_spec_fail(ctx, name, k->name,
                                "'%s' is not an environment variable name (letters, digits and _, not "
                                "starting with a digit)",
                                dt_yaml_quote(name->text, q, sizeof q));
        if (!(k->flags & DT_KF_ENVNAME) && name->len == 0)
            return dt_spec_fail(ctx, name, k->name, "empty name");
        if (val->kind != DT_Y_SCALAR || dt_ynode_is_null(val))
            return dt_spec_fail(ctx, val, k->name,
                                "%s: expected a string value, got %s (write \"\" for an empty value)",
                                dt_yaml_quote(name->text, q, sizeof q), dt_ynode_kind_name(val));
    }
    struct dt_env_entry *e = calloc(v->n ? v->n : 1, sizeof *e);
    if (!e)
        return dt_error_set(DT_ENOMEM, "out of memory reading the job spec");
    for (size_t i = 0; i < v->n; i++) {
        e[i].name = strdup(dt_ymap_key(v, i)->text);
        e[i].value = strdup(dt_ymap_val(v, i)->text);
        if (!e[i].name || !e[i].value) {
            free_strmap(e, (int)v->n);
            return dt_error_set(DT_ENOMEM, "out of memory reading the job spec");
        }
    }
    free_strmap(*FIELD(obj, k, struct dt_env_entry *), *COUNT(obj, k));
    *FIELD(obj, k, struct dt_env_entry *) = e;
    *COUNT(obj, k) = (int)v->n;
    return 0;
}

/* Descends into `key` (or `key[index]`), keeping the dotted path for messages. */
static size_t push_path(struct dt_spec_ctx *ctx, const char *key, long index)
{
    size_t old = strlen(ctx->path);
    size_t room = sizeof ctx->path - old;
    if (index >= 0)
        snprintf(ctx->path + old, room, "%s%s[%ld]", old ? "." : "", key, index);
    else
        snprintf(ctx->path + old, room, "%s%s", old ? "." : "", key);
    return old;
}

static int apply_sub(struct dt_spec_ctx *ctx, const struct dt_spec_key *k, const struct dt_ynode *v,
                     void *sub, long index)
{
    size_t old = push_path(ctx, k->name, index);
    int rc = dt_spec_apply(ctx, k->sub, v, sub);
    ctx->path[old] = '\0';
    return rc;
}

/* Fills n structs of `sec` with their defaults; NULL when out of memory or a
 * default is refused (dt_error_last() says which). */
static void *new_struct(const struct dt_spec_section *sec, size_t n)
{
    char *mem = calloc(n ? n : 1, sec->size);
    if (!mem) {
        dt_error_set(DT_ENOMEM, "out of memory reading the job spec");
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        if (dt_spec_init(sec, mem + i * sec->size)) {
            for (size_t j = 0; j <= i; j++)
                dt_spec_release(sec, mem + j * sec->size);
            free(mem);
            return NULL;
        }
    return mem;
}

static int set_seclist(struct dt_spec_ctx *ctx, const struct dt_spec_key *k, const struct dt_ynode *v,
                       void *obj)
{
    if (v->kind != DT_Y_SEQ)
        return shape_error(ctx, k, v, "a list of mappings");
    if (*FIELD(obj, k, void *))
        return dt_spec_fail(ctx, v, k->name, "set twice");
    char *arr = new_struct(k->sub, v->n);
    if (!arr)
        return dt_error_code();
    /* Stored before filling so that dt_spec_release frees a half-read list. */
    *FIELD(obj, k, void *) = arr;
    *COUNT(obj, k) = (int)v->n;
    for (size_t i = 0; i < v->n; i++)
        if (apply_sub(ctx, k, v->items[i], arr + i * k->sub->size, (long)i))
            return DT_EINVAL;
    return 0;
}

/* A mapping taken whole, for a consumer that knows its shape (a Kubernetes
 * pod template): kept as flow YAML, which --print writes back as it is. */
static int set_yaml(struct dt_spec_ctx *ctx, const struct dt_spec_key *k, const struct dt_ynode *v, void *obj)
{
    if (v->kind != DT_Y_MAP)
        return shape_error(ctx, k, v, "a mapping");
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    if (!m)
        return dt_error_set(DT_ENOMEM, "out of memory reading the job spec");
    dt_yaml_put_flow(m, v);
    if (fclose(m) != 0) {
        free(text);
        return dt_error_set(DT_ENOMEM, "out of memory reading the job spec");
    }
    free(*FIELD(obj, k, char *));
    *FIELD(obj, k, char *) = text;
    return 0;
}

static int set_one(struct dt_spec_ctx *ctx, const struct dt_spec_key *k, const struct dt_ynode *v, void *obj)
{
    switch (k->type) {
    case DT_KT_STR:
    case DT_KT_CHARS:
    case DT_KT_ENUM:
        return set_word(ctx, k, v, obj);
    case DT_KT_INT:
    case DT_KT_I64:
    case DT_KT_U64:
    case DT_KT_NUM:
        return set_number(ctx, k, v, obj);
    case DT_KT_BOOL:
        return set_bool(ctx, k, v, obj);
    case DT_KT_DURATION:
    case DT_KT_SIZE_MB:
    case DT_KT_BYTES:
        return set_measure(ctx, k, v, obj);
    case DT_KT_STRLIST:
        return set_strlist(ctx, k, v, obj);
    case DT_KT_STRMAP:
        return set_strmap(ctx, k, v, obj);
    case DT_KT_SECTION:
        return apply_sub(ctx, k, v, FIELD(obj, k, char), -1);
    case DT_KT_SECTION_PTR:
        if (!*FIELD(obj, k, void *) && !(*FIELD(obj, k, void *) = new_struct(k->sub, 1)))
            return dt_error_code();
        return apply_sub(ctx, k, v, *FIELD(obj, k, void *), -1);
    case DT_KT_SECLIST:
        return set_seclist(ctx, k, v, obj);
    case DT_KT_CUSTOM:
        return k->set(ctx, k, v, obj);
    case DT_KT_YAML:
        return set_yaml(ctx, k, v, obj);
    }
    return dt_error_set(DT_EINTERNAL, "job spec: key '%s' has no type", k->name);
}

/* A key's default, read as the key reads a file's value: a plain scalar, or
 * flow YAML ("[0.9, 0.999]") through the YAML reader. */
static int set_default(const struct dt_spec_key *k, void *obj)
{
    struct dt_spec_ctx ctx = {.file = "<default>"};
    struct dt_ynode plain = {
        .kind = DT_Y_SCALAR, .line = 1, .col = 1, .text = (char *)k->def, .len = strlen(k->def), .plain = 1};
    struct dt_ynode *tree = NULL;
    int rc = strchr("[{", k->def[0]) ? dt_yaml_parse(k->def, strlen(k->def), "<default>", &tree) : 0;
    if (rc == 0)
        rc = set_one(&ctx, k, tree ? tree : &plain, obj);
    dt_yaml_free(tree);
    if (rc == 0 && ctx.n_problems)
        rc = DT_EINVAL;
    dt_spec_problems_finish(&ctx, NULL);
    if (rc == DT_ENOMEM)
        return rc;
    return rc ? dt_error_set(DT_EINTERNAL, "job spec: key '%s' refuses its own default '%s': %s", k->name,
                             k->def, dt_error_last())
              : 0;
}

int dt_spec_init(const struct dt_spec_section *sec, void *obj)
{
    if (sec->init)
        sec->init(obj);
    for (size_t i = 0; i < sec->n_keys; i++) {
        const struct dt_spec_key *k = &sec->keys[i];
        int rc = k->type == DT_KT_SECTION ? dt_spec_init(k->sub, FIELD(obj, k, char))
                 : k->def                 ? set_default(k, obj)
                                          : 0;
        if (rc)
            return rc;
    }
    return 0;
}

const struct dt_spec_key *dt_spec_find_key(const struct dt_spec_section *sec, const char *name)
{
    for (size_t i = 0; i < sec->n_keys; i++)
        if (strcmp(sec->keys[i].name, name) == 0)
            return &sec->keys[i];
    return NULL;
}

static int unknown_key(struct dt_spec_ctx *ctx, const struct dt_spec_section *sec, const struct dt_ynode *key)
{
    char q[96], where[300], elsewhere[300];
    const char *title = ctx->path[0] ? ctx->path : "the top level";
    dt_yaml_quote(key->text, q, sizeof q);
    const char *colon = strchr(key->text, ':');
    if (colon && colon[1] != ' ' && colon > key->text) {
        /* "timeout:3s" is one plain word to YAML: the space after ':' is missing. */
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)(colon - key->text) < 63 ? (int)(colon - key->text) : 63,
                 key->text);
        if (dt_spec_find_key(sec, name))
            return dt_spec_report(ctx, key,
                                  "unknown key '%s' in %s; write '%s: %s' (YAML needs a space after the "
                                  "colon)",
                                  q, title, name, colon + 1);
    }
    const char *close = dt_spec_suggest(sec, key->text);
    if (close)
        return dt_spec_report(ctx, key, "unknown key '%s' in %s; did you mean '%s'?", q, title, close);
    if (dt_spec_find_elsewhere(ctx->root, sec, key->text, elsewhere, sizeof elsewhere))
        return dt_spec_report(ctx, key, "unknown key '%s' in %s; it belongs in another section: %s", q, title,
                              elsewhere);
    size_t used = 0;
    where[0] = '\0';
    for (size_t i = 0; i < sec->n_keys && used < sizeof where; i++)
        used += (size_t)snprintf(where + used, sizeof where - used, "%s%s", i ? ", " : "", sec->keys[i].name);
    return dt_spec_report(ctx, key, "unknown key '%s' in %s (known keys: %s)", q, title, where);
}

/* A setter or rule that failed without dt_spec_report (a plain dt_error_set) still
 * leaves its message among the problems, placed at the value it was reading. */
static int keep_problem(struct dt_spec_ctx *ctx, const struct dt_ynode *at, int rc)
{
    if (rc != DT_EINVAL || (ctx->n_problems && strcmp(ctx->problems[ctx->n_problems - 1].msg, dt_error_last()) == 0))
        return rc;
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", dt_error_last());
    int n = ctx->n_problems;
    int rc2 = dt_spec_report(ctx, at, "%s", msg);
    if (rc2 == DT_EINVAL && ctx->n_problems > n) { /* kept as it was, without a second "where" */
        free(ctx->problems[n].msg);
        ctx->problems[n].msg = strdup(msg);
        dt_error_set(DT_EINVAL, "%s", msg);
        if (!ctx->problems[n].msg)
            return dt_error_set(DT_ENOMEM, "out of memory reading the job spec");
    }
    return rc2;
}

int dt_spec_apply(struct dt_spec_ctx *ctx, const struct dt_spec_section *sec, const struct dt_ynode *map,
                  void *obj)
{
    if (map->kind != DT_Y_MAP) {
        int colon = map->kind == DT_Y_SCALAR && strchr(map->text, ':');
        if (!ctx->path[0])
            return dt_spec_fail(ctx, map, NULL,
                                "the top level must be a mapping of keys (name: ..., command: ...), "
                                "got %s%s",
                                dt_ynode_kind_name(map), colon ? " (YAML needs a space after each ':')" : "");
        return dt_spec_fail(ctx, map, NULL, "expected a mapping of keys (key: value), got %s%s",
                            dt_ynode_kind_name(map),
                            dt_ynode_is_null(map) ? " (indent its keys under it, with spaces)"
                            : colon               ? " (YAML needs a space after each ':')"
                                                  : "");
    }
    /* Every key is read even after a bad one, so one load reports every problem;
     * the rules between keys run only on a section whose keys were all good. */
    int before = ctx->n_problems;
    for (size_t i = 0; i < map->n; i++) {
        const struct dt_ynode *key = dt_ymap_key(map, i);
        const struct dt_spec_key *k = dt_spec_find_key(sec, key->text);
        int rc = k ? keep_problem(ctx, dt_ymap_val(map, i), set_one(ctx, k, dt_ymap_val(map, i), obj))
                   : unknown_key(ctx, sec, key);
        if (rc && rc != DT_EINVAL)
            return rc;
    }
    for (size_t i = 0; i < sec->n_keys; i++) {
        if ((sec->keys[i].flags & DT_KF_REQUIRED) && !dt_ymap_get(map, sec->keys[i].name)) {
            int rc = dt_spec_report(ctx, map, "missing required key '%s' in %s", sec->keys[i].name,
                                    ctx->path[0] ? ctx->path : "the top level");
            if (rc != DT_EINVAL)
                return rc;
        }
    }
    if (ctx->n_problems != before)
        return DT_EINVAL;
    return sec->check ? keep_problem(ctx, map, sec->check(ctx, map, obj)) : 0;
}

void dt_spec_release(const struct dt_spec_section *sec, void *obj)
{
    if (!obj)
        return;
    for (size_t i = 0; i < sec->n_keys; i++) {
        const struct dt_spec_key *k = &sec->keys[i];
        switch (k->type) {
        case DT_KT_STR:
        case DT_KT_YAML:
            free(*FIELD(obj, k, char *));
            *FIELD(obj, k, char *) = NULL;
            break;
        case DT_KT_STRLIST:
            free_strlist(*FIELD(obj, k, char **));
            *FIELD(obj, k, char **) = NULL;
            break;
        case DT_KT_STRMAP:
            free_strmap(*FIELD(obj, k, struct dt_env_entry *), *COUNT(obj, k));
            *FIELD(obj, k, struct dt_env_entry *) = NULL;
            break;
        case DT_KT_SECTION:
            dt_spec_release(k->sub, FIELD(obj, k, char));
            break;
        case DT_KT_SECTION_PTR:
            dt_spec_release(k->sub, *FIELD(obj, k, void *));
            free(*FIELD(obj, k, void *));
            *FIELD(obj, k, void *) = NULL;
            break;
        case DT_KT_SECLIST: {
            char *arr = *FIELD(obj, k, char *);
            for (int j = 0; arr && j < *COUNT(obj, k); j++)
                dt_spec_release(k->sub, arr + (size_t)j * k->sub->size);
            free(arr);
            *FIELD(obj, k, char *) = NULL;
            break;
        }
        case DT_KT_CUSTOM:
            if (k->release)
                k->release(obj);
            break;
        default:
            break;
        }
    }
    if (sec->release)
        sec->release(obj);
}

static void list_keys(const struct dt_spec_section *sec, const char *prefix, FILE *out)
{
    char path[300];
    for (size_t i = 0; i < sec->n_keys; i++) {
        const struct dt_spec_key *k = &sec->keys[i];
        snprintf(path, sizeof path, "%s%s%s", prefix, *prefix ? "." : "", k->name);
        fprintf(out, "%s\n", path);
        if (k->type == DT_KT_SECLIST)
            strncat(path, "[]", sizeof path - strlen(path) - 1);
        if (k->type == DT_KT_SECTION || k->type == DT_KT_SECTION_PTR || k->type == DT_KT_SECLIST)
            list_keys(k->sub, path, out);
    }
}

void dt_spec_list_keys(const struct dt_spec_section *root, FILE *out)
{
    list_keys(root, "", out);
}
