/* jobspec_source.c - what the key tables read, made from the file: ${VAR} interpolation and --set overrides.
 *
 * Both work on the YAML tree before the tables apply it, so a value that came
 * from the environment or the command line is checked exactly as if it had
 * been written in the file.  Interpolation follows Docker Compose: ${NAME}
 * (an unset NAME is an error at the value's line:column), ${NAME:-default}
 * (the default when NAME is unset or empty, itself interpolated when it is
 * used, so ${A:-${B}} is B's value when A is unset, as in a shell), $$ for a
 * literal dollar; a $ before anything else is left as it is.  Keys are never interpolated, nor
 * the values of DT_KF_VERBATIM keys (command, setup): those reach a shell on
 * the node, which expands $RANK and ${VAR:-x} itself with the rank's
 * environment.  An override "key.path=value" reads value as YAML (3 is a
 * number, [a, b] a list) and puts it where the file would have it, making the
 * sections on the path when the file has none; a path with an empty name
 * ('.', 'env..X') is refused.
 *
 * Not for what the keys mean (jobspec_keys.c and the tables) or YAML reading (jobspec_yaml.c).
 */
#include "spec/jobspec_keys.h"

#include "base/error.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

/* ---- ${VAR} interpolation ---- */

static const char *env_get(char *const *env, const char *name, size_t len)
{
    for (size_t i = 0; env && env[i]; i++)
        if (strncmp(env[i], name, len) == 0 && env[i][len] == '=')
            return env[i] + len + 1;
    return NULL;
}

static size_t name_len(const char *s)
{
    size_t n = 0;
    if (!(isalpha((unsigned char)*s) || *s == '_'))
        return 0;
    while (isalnum((unsigned char)s[n]) || s[n] == '_')
        n++;
    return n;
}

/* ${A:-${B:-${C}}} is three levels; a default nested deeper is refused
 * rather than expanded, so a hostile value's recursion stays bounded. */
#define MAX_NEST 8

/* The '}' that closes the ${ at s, past the ${...} of a nested default and
 * a $$; NULL when there is none. */
static const char *closing(const char *s)
{
    int depth = 0;
    for (const char *p = s + 2; *p; p++) {
        if (p[0] == '$' && (p[1] == '$' || p[1] == '{'))
            depth += *++p == '{';
        else if (*p == '}' && depth-- == 0)
            return p;
    }
    return NULL;
}

static int expand_text(struct dt_spec_ctx *ctx, const struct dt_ynode *v, const char *s, const char *end,
                       char *const *env, FILE *m, int nest);

/* One ${...} at s (s[0..1] == "${"): its value into m, and its length in
 * *used.  A default is expanded as the value is ($$, ${NAME}, a default
 * of its own), as a shell expands ${U:-${A}}: only when it is used.  A
 * reference that is not closed takes the rest of the text with it, so a
 * value of many unclosed ones is scanned once, not once per reference. */
static int expand_ref(struct dt_spec_ctx *ctx, const struct dt_ynode *v, const char *s, char *const *env,
                      FILE *m, size_t *used, int nest)
{
    char q[96];
    size_t n = name_len(s + 2);
    const char *after = s + 2 + n;
    int with_default = strncmp(after, ":-", 2) == 0;
    const char *close = n == 0 ? strchr(s, '}') : with_default ? closing(s) : *after == '}' ? after : NULL;
    if (n == 0 || !close || (!with_default && after != close)) {
        *used = close ? (size_t)(close - s) + 1 : strlen(s);
        snprintf(q, sizeof q, "%.*s", close ? (int)(close - s + 1) : 40, s);
        return dt_spec_report(ctx, v,
                              "'%s': expected ${NAME} or ${NAME:-default} (NAME: letters, digits and _), "
                              "or $$ for a literal $",
                              dt_yaml_quote(q, q, sizeof q));
    }
    *used = (size_t)(close - s) + 1;
    const char *val = env_get(env, s + 2, n);
    if (with_default && (!val || !*val))
        return nest >= MAX_NEST ? dt_spec_report(ctx, v, "${%.*s:-...}: defaults nested more than %d deep",
                                                 (int)n, s + 2, MAX_NEST)
                                : expand_text(ctx, v, after + 2, close, env, m, nest + 1);
    if (!val)
        return dt_spec_report(ctx, v,
                              "${%.*s}: the environment variable %.*s is not set; set it, or write "
                              "${%.*s:-default}",
                              (int)n, s + 2, (int)n, s + 2, (int)n, s + 2);
    fputs(val, m);
    return 0;
}

/* s up to end, expanded into m; the first problem's code (every one is reported). */
static int expand_text(struct dt_spec_ctx *ctx, const struct dt_ynode *v, const char *s, const char *end,
                       char *const *env, FILE *m, int nest)
{
    int rc = 0;
    while (s < end) {
        size_t used = 2;
        if (s[0] == '$' && s[1] == '$') {
            fputc('$', m);
        } else if (s[0] == '$' && s[1] == '{') {
            int r = expand_ref(ctx, v, s, env, m, &used, nest);
            rc = rc ? rc : r;
        } else {
            fputc(*s, m);
            used = 1;
        }
        s += used;
    }
    return rc;
}

static int expand_scalar(struct dt_spec_ctx *ctx, struct dt_ynode *v, char *const *env)
{
    if (!strchr(v->text, '$'))
        return 0;
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    if (!m)
        return dt_error_set(DT_ENOMEM, "out of memory reading the job spec");
    int rc = expand_text(ctx, v, v->text, v->text + v->len, env, m, 0);
    if (fclose(m) != 0) {
        free(text);
        return dt_error_set(DT_ENOMEM, "out of memory reading the job spec");
    }
    if (rc || strcmp(text, v->text) == 0) {
        free(text);
        return rc;
    }
    free(v->text);
    v->text = text;
    v->len = len;
    return 1;
}

/* The tables are walked alongside the tree only to find DT_KF_VERBATIM keys;
 * under a key without a section (a map of names, a pod template) every value is text. */
static int walk(struct dt_spec_ctx *ctx, const struct dt_spec_section *sec, struct dt_ynode *n, char *const *env)
{
    if (n->kind == DT_Y_SCALAR)
        return expand_scalar(ctx, n, env);
    int changed = 0, rc = 0;
    for (size_t i = 0; i < n->n; i++) {
        struct dt_ynode *child = n->kind == DT_Y_MAP ? n->items[2 * i + 1] : n->items[i];
        const struct dt_spec_section *sub = n->kind == DT_Y_SEQ ? sec : NULL;
        if (n->kind == DT_Y_MAP && sec) {
            const struct dt_spec_key *k = dt_spec_find_key(sec, n->items[2 * i]->text);
            if (k && (k->flags & DT_KF_VERBATIM))
                continue;
            sub = k ? k->sub : NULL;
        }
        int r = walk(ctx, sub, child, env);
        if (r > 0)
            changed = 1;
        else if (r < 0 && (rc == 0 || rc == DT_EINVAL))
            rc = r;
    }
    return rc ? rc : changed;
}

int dt_spec_interpolate(struct dt_spec_ctx *ctx, struct dt_ynode *root, char *const *env)
{
    return walk(ctx, ctx->root, root, env);
}

/* ---- --set key.path=value ---- */

/* Marks a node an override made: line -(index+1), which messages print as "--set <assignment>". */
static void mark(struct dt_ynode *n, int index)
{
    n->line = -(index + 1);
    n->col = 0;
    size_t count = n->kind == DT_Y_MAP ? 2 * n->n : n->kind == DT_Y_SEQ ? n->n : 0;
    for (size_t i = 0; i < count; i++)
        mark(n->items[i], index);
}

static struct dt_ynode *new_scalar(const char *text, int index)
{
    struct dt_ynode *n = calloc(1, sizeof *n);
    if (!n || !(n->text = strdup(text))) {
        free(n);
        return NULL;
    }
    n->kind = DT_Y_SCALAR;
    n->len = strlen(text);
    n->plain = 1;
    mark(n, index);
    return n;
}

/* The value slot of `name` in mapping `map`, added (with a null value) when missing. */
static struct dt_ynode **slot(struct dt_ynode *map, const char *name, int index)
{
    for (size_t i = 0; i < map->n; i++)
        if (strcmp(map->items[2 * i]->text, name) == 0)
            return &map->items[2 * i + 1];
    struct dt_ynode **items = realloc(map->items, (2 * map->n + 2) * sizeof *items);
    if (!items)
        return NULL;
    map->items = items;
    struct dt_ynode *key = new_scalar(name, index), *val = new_scalar("", index);
    if (!key || !val) {
        dt_yaml_free(key);
        dt_yaml_free(val);
        return NULL;
    }
    items[2 * map->n] = key;
    items[2 * map->n + 1] = val;
    map->n++;
    return &items[2 * map->n - 1];
}

/* The value as YAML: "" is null, as `key:` with nothing after it would be. */
static int parse_value(const char *value, int index, struct dt_ynode **out)
{
    if (!*value)
        return (*out = new_scalar("", index)) ? 0 : dt_error_set(DT_ENOMEM, "out of memory reading --set");
    int rc = dt_yaml_parse(value, strlen(value), "value", out);
    if (rc == 0)
        mark(*out, index);
    return rc;
}

/* `done`: the path up to `name` ("" at the top). */
static int unknown_path(struct dt_spec_ctx *ctx, const struct dt_spec_section *sec, const char *done,
                        const char *name, struct dt_ynode *at)
{
    const char *close = dt_spec_suggest(sec, name);
    return dt_spec_report(ctx, at, "unknown key path: no key '%s' in %s%s%s%s%s%s", name,
                          *done ? done : "the top level", close ? "; did you mean '" : "", *done ? done : "",
                          *done && close ? "." : "", close ? close : "", close ? "'?" : "");
}

int dt_spec_override(struct dt_spec_ctx *ctx, struct dt_ynode *root, int index)
{
    const char *assign = ctx->sets[index], *eq = strchr(assign, '=');
    struct dt_ynode at = {.line = -(index + 1)};
    char path[300], done[300] = "";
    if (!eq || eq == assign || (size_t)(eq - assign) >= sizeof path)
        return dt_spec_report(ctx, &at, "expected KEY.PATH=VALUE, like trainer.steps=100");
    snprintf(path, sizeof path, "%.*s", (int)(eq - assign), assign);
    /* strtok_r below would skip an empty name: '.' would set nothing and say
     * nothing, 'env..X' would set env.X */
    size_t pl = strlen(path);
    if (path[0] == '.' || path[pl - 1] == '.' || strstr(path, ".."))
        return dt_spec_report(ctx, &at,
                              "the key path '%s' has an empty name %s; write names joined by single dots, "
                              "like trainer.optimizer.lr",
                              path,
                              path[0] == '.'        ? "at its start"
                              : path[pl - 1] == '.' ? "at its end"
                                                    : "between two dots");
    const struct dt_spec_section *sec = ctx->root;
    struct dt_ynode *map = root;
    char *save = NULL, *name = strtok_r(path, ".", &save);
    while (name) {
        char *next = strtok_r(NULL, ".", &save);
        const struct dt_spec_key *k = sec ? dt_spec_find_key(sec, name) : NULL;
        if (sec && !k)
            return unknown_path(ctx, sec, done, name, &at);
        struct dt_ynode **v = map->kind == DT_Y_MAP ? slot(map, name, index) : NULL;
        if (!v)
            return dt_error_set(DT_ENOMEM, "out of memory applying --set %s", assign);
        if (!next) {
            struct dt_ynode *val;
            int rc = parse_value(eq + 1, index, &val);
            if (rc)
                return rc == DT_EINVAL ? dt_spec_report(ctx, &at, "the value is not YAML: %s", dt_error_last()) : rc;
            dt_yaml_free(*v);
            *v = val;
            return 0;
        }
        /* A key path goes on through sections, or one level into a map of names (env.NAME). */
        int names = k && (k->type == DT_KT_STRMAP || k->type == DT_KT_YAML);
        if (sec && !(k->sub && k->type != DT_KT_SECLIST) && !names)
            return dt_spec_report(ctx, &at, "unknown key path '%s': '%s' holds a value, not keys", assign, name);
        if ((*v)->kind != DT_Y_MAP) {
            struct dt_ynode *m = calloc(1, sizeof *m);
            if (!m)
                return dt_error_set(DT_ENOMEM, "out of memory applying --set %s", assign);
            m->kind = DT_Y_MAP;
            mark(m, index);
            dt_yaml_free(*v);
            *v = m;
        }
        map = *v;
        size_t dl = strlen(done);
        snprintf(done + dl, sizeof done - dl, "%s%s", dl ? "." : "", name);
        sec = names ? NULL : k ? k->sub : NULL;
        name = next;
    }
    return 0;
}
