/* jobspec_yaml.c - libyaml events to a marked tree, with the limits that make hostile input harmless.
 *
 * Everything a YAML file can do that a job spec never needs is refused here,
 * with a position: aliases and anchors (the billion-laughs expansion), tags,
 * several documents, nesting deeper than DT_YAML_MAX_DEPTH, duplicate keys,
 * non-scalar keys and NUL bytes.  The tree is built with an explicit stack, so
 * nothing here recurses on input depth except freeing, which is capped by it.
 *
 * Not for key names, types or ranges (jobspec_keys.c).
 */
#include "spec/jobspec_yaml.h"

#include "base/error.h"
#include "base/yaml_escape.h"

#include <stdlib.h>
#include <string.h>
#include <yaml.h>

struct builder {
    const char *name;
    const char *text;
    size_t len;
    struct dt_ynode *stack[DT_YAML_MAX_DEPTH + 1];
    int depth;
    struct dt_ynode *root;
    int documents;
};

static int fail_at(const struct builder *b, yaml_mark_t mark, const char *what)
{
    return dt_error_set(DT_EINVAL, "%s:%zu:%zu: %s", b->name, mark.line + 1, mark.column + 1, what);
}

/* libyaml reports a tab in indentation as a generic scanner error; users
 * who pasted from an editor set to tabs need to be told the real cause. */
static int line_has_tab_indent(const char *text, size_t len, size_t line)
{
    size_t i = 0;
    for (size_t l = 0; l < line && i < len; i++)
        if (text[i] == '\n')
            l++;
    for (; i < len && (text[i] == ' ' || text[i] == '\t' || text[i] == '-'); i++)
        if (text[i] == '\t')
            return 1;
    return 0;
}

static int parser_error(const struct builder *b, const yaml_parser_t *p)
{
    const char *problem = p->problem ? p->problem : "malformed YAML";
    const char *hint = "";
    if (strstr(problem, "tab") || line_has_tab_indent(b->text, b->len, p->problem_mark.line) ||
        (p->context_mark.line != p->problem_mark.line &&
         line_has_tab_indent(b->text, b->len, p->context_mark.line)))
        hint = "; YAML indentation uses spaces, not tabs";
    else if (strstr(problem, "UTF") || strstr(problem, "octet") || strstr(problem, "control characters"))
        hint = "; a job spec must be UTF-8 text (is this a binary file?)";
    char what[512];
    yaml_mark_t mark = p->problem_mark;
    if (p->error == YAML_READER_ERROR) {
        /* The reader reports a byte offset, not a mark: count lines up to it. */
        mark.line = mark.column = 0;
        for (size_t i = 0; i < p->problem_offset && i < b->len; i++) {
            if (b->text[i] == '\n') {
                mark.line++;
                mark.column = 0;
            } else {
                mark.column++;
            }
        }
    }
    if (p->context)
        snprintf(what, sizeof what, "YAML syntax error: %s %s%s", problem, p->context, hint);
    else
        snprintf(what, sizeof what, "YAML syntax error: %s%s", problem, hint);
    return fail_at(b, mark, what);
}

static struct dt_ynode *new_node(enum dt_ynode_kind kind, yaml_mark_t mark)
{
    struct dt_ynode *n = calloc(1, sizeof *n);
    if (n) {
        n->kind = kind;
        n->line = (int)mark.line + 1;
        n->col = (int)mark.column + 1;
    }
    return n;
}

static size_t item_count(const struct dt_ynode *c)
{
    if (c->kind == DT_Y_SCALAR)
        return 0;
    return c->kind == DT_Y_MAP ? 2 * c->n + (c->len & 1) : c->n;
}

void dt_yaml_free(struct dt_ynode *node)
{
    if (!node)
        return;
    size_t count = item_count(node);
    for (size_t i = 0; i < count; i++)
        dt_yaml_free(node->items[i]);
    free(node->items);
    free(node->text);
    free(node);
}

/* Mappings store key,value pairs flat; `len` counts the dangling key while
 * its value is being built, so the count stays exact for freeing. */
static int append(struct builder *b, struct dt_ynode *node, yaml_mark_t mark)
{
    if (b->depth == 0) {
        b->root = node;
        return 0;
    }
    struct dt_ynode *c = b->stack[b->depth - 1];
    size_t used = item_count(c);
    if ((used & (used - 1)) == 0) { /* grow at powers of two */
        size_t cap = used ? 2 * used : 4;
        struct dt_ynode **items = realloc(c->items, cap * sizeof *items);
        if (!items) {
            dt_yaml_free(node);
            return dt_error_set(DT_ENOMEM, "%s: out of memory reading YAML", b->name);
        }
        c->items = items;
    }
    c->items[used] = node;
    if (c->kind == DT_Y_SEQ) {
        c->n++;
    } else if ((c->len & 1) == 0) {
        c->len = 1;
        if (node->kind != DT_Y_SCALAR)
            return fail_at(b, mark, "a mapping key must be a plain name, not a list or mapping");
    } else {
        c->len = 0;
        c->n++;
    }
    return 0;
}

static int cmp_key(const void *a, const void *b)
{
    const struct dt_ynode *x = *(const struct dt_ynode *const *)a;
    const struct dt_ynode *y = *(const struct dt_ynode *const *)b;
    int c = strcmp(x->text, y->text);
    if (c)
        return c;
    return x->line != y->line ? x->line - y->line : x->col - y->col;
}

/* Sorting makes the check O(n log n): a hostile file with 100k keys in one
 * mapping must not take quadratic time. */
static int check_duplicates(const struct builder *b, const struct dt_ynode *map)
{
    if (map->n < 2)
        return 0;
    const struct dt_ynode **keys = malloc(map->n * sizeof *keys);
    if (!keys)
        return dt_error_set(DT_ENOMEM, "%s: out of memory reading YAML", b->name);
    for (size_t i = 0; i < map->n; i++)
        keys[i] = dt_ymap_key(map, i);
    qsort(keys, map->n, sizeof *keys, cmp_key);
    const struct dt_ynode *first = NULL, *dup = NULL;
    for (size_t i = 1; i < map->n; i++) {
        if (strcmp(keys[i - 1]->text, keys[i]->text) == 0 &&
            (!dup || keys[i]->line < dup->line || (keys[i]->line == dup->line && keys[i]->col < dup->col))) {
            dup = keys[i];
            first = keys[i - 1];
        }
    }
    int rc = 0;
    if (dup) {
        char q[96];
        rc = dt_error_set(DT_EINVAL, "%s:%d:%d: duplicate key '%s' (first set at line %d)", b->name,
                          dup->line, dup->col, dt_yaml_quote(dup->text, q, sizeof q), first->line);
    }
    free(keys);
    return rc;
}

static int on_scalar(struct builder *b, const yaml_event_t *ev)
{
    struct dt_ynode *n = new_node(DT_Y_SCALAR, ev->start_mark);
    if (!n || !(n->text = malloc(ev->data.scalar.length + 1))) {
        free(n);
        return dt_error_set(DT_ENOMEM, "%s: out of memory reading YAML", b->name);
    }
    memcpy(n->text, ev->data.scalar.value, ev->data.scalar.length);
    n->text[ev->data.scalar.length] = '\0';
    n->len = ev->data.scalar.length;
    n->plain = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE && !ev->data.scalar.tag;
    if (strlen(n->text) != n->len) {
        dt_yaml_free(n);
        return fail_at(b, ev->start_mark, "a value contains a NUL character (\\0)");
    }
    return append(b, n, ev->start_mark);
}

static int on_start(struct builder *b, const yaml_event_t *ev, enum dt_ynode_kind kind)
{
    if (b->depth >= DT_YAML_MAX_DEPTH) {
        char what[96];
        snprintf(what, sizeof what, "nesting deeper than %d levels; a job spec is never this deep",
                 DT_YAML_MAX_DEPTH);
        return fail_at(b, ev->start_mark, what);
    }
    struct dt_ynode *n = new_node(kind, ev->start_mark);
    if (!n)
        return dt_error_set(DT_ENOMEM, "%s: out of memory reading YAML", b->name);
    int rc = append(b, n, ev->start_mark);
    if (rc)
        return rc;
    b->stack[b->depth++] = n;
    return 0;
}

static int on_end(struct builder *b)
{
    struct dt_ynode *c = b->stack[--b->depth];
    return c->kind == DT_Y_MAP ? check_duplicates(b, c) : 0;
}

/* Anchors, aliases and tags are refused outright, !!str included: a job
 * spec has no use for them (quotes make a string), and refusing aliases is
 * what bounds the expansion of a hostile file. */
static int refuse_extras(const struct builder *b, const yaml_event_t *ev)
{
    const yaml_char_t *anchor = NULL, *tag = NULL;
    if (ev->type == YAML_ALIAS_EVENT)
        return fail_at(b, ev->start_mark,
                       "YAML aliases (*name) are not supported in a job spec; write the value out");
    if (ev->type == YAML_SCALAR_EVENT) {
        anchor = ev->data.scalar.anchor;
        tag = ev->data.scalar.tag;
    } else if (ev->type == YAML_SEQUENCE_START_EVENT) {
        anchor = ev->data.sequence_start.anchor;
        tag = ev->data.sequence_start.tag;
    } else if (ev->type == YAML_MAPPING_START_EVENT) {
        anchor = ev->data.mapping_start.anchor;
        tag = ev->data.mapping_start.tag;
    }
    if (anchor)
        return fail_at(b, ev->start_mark,
                       "YAML anchors (&name) are not supported in a job spec; write the value out");
    if (tag)
        return fail_at(b, ev->start_mark,
                       "YAML tags (!tag, !!type) are not supported in a job spec; quote a value to make it "
                       "a string (\"3\", not !!str 3)");
    return 0;
}

static int on_event(struct builder *b, const yaml_event_t *ev)
{
    int rc = refuse_extras(b, ev);
    if (rc)
        return rc;
    switch (ev->type) {
    case YAML_DOCUMENT_START_EVENT:
        if (++b->documents > 1)
            return fail_at(b, ev->start_mark,
                           "a second YAML document ('---'); a job spec file holds exactly one");
        return 0;
    case YAML_SCALAR_EVENT:
        return on_scalar(b, ev);
    case YAML_SEQUENCE_START_EVENT:
        return on_start(b, ev, DT_Y_SEQ);
    case YAML_MAPPING_START_EVENT:
        return on_start(b, ev, DT_Y_MAP);
    case YAML_SEQUENCE_END_EVENT:
    case YAML_MAPPING_END_EVENT:
        return on_end(b);
    default:
        return 0;
    }
}

static int refuse_nul(const struct builder *b)
{
    const char *nul = memchr(b->text, '\0', b->len);
    if (!nul)
        return 0;
    size_t line = 1, col = 1;
    for (const char *p = b->text; p < nul; p++) {
        if (*p == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
    }
    return dt_error_set(DT_EINVAL,
                        "%s:%zu:%zu: a NUL byte: a job spec is a text file (is this a binary file?)", b->name,
                        line, col);
}

int dt_yaml_parse(const char *text, size_t len, const char *name, struct dt_ynode **root)
{
    struct builder b = {.name = name, .text = text, .len = len};
    *root = NULL;
    int rc = refuse_nul(&b);
    if (rc)
        return rc;
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser))
        return dt_error_set(DT_ENOMEM, "%s: out of memory starting the YAML parser", name);
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    for (int done = 0; !done && rc == 0;) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&parser, &ev)) {
            rc = parser_error(&b, &parser);
            break;
        }
        done = ev.type == YAML_STREAM_END_EVENT;
        rc = on_event(&b, &ev);
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&parser);
    if (rc == 0 && (!b.root || (b.root->kind == DT_Y_SCALAR && b.root->plain && b.root->len == 0)))
        rc = dt_error_set(DT_EINVAL,
                          "%s:1:1: the file is empty (or only comments); a job spec is a mapping with at "
                          "least name and command (or trainer)",
                          name);
    if (rc) {
        dt_yaml_free(b.root);
        return rc;
    }
    *root = b.root;
    return 0;
}

const struct dt_ynode *dt_ymap_get(const struct dt_ynode *map, const char *key)
{
    if (!map || map->kind != DT_Y_MAP)
        return NULL;
    for (size_t i = 0; i < map->n; i++)
        if (strcmp(dt_ymap_key(map, i)->text, key) == 0)
            return dt_ymap_val(map, i);
    return NULL;
}

const struct dt_ynode *dt_ymap_key_node(const struct dt_ynode *map, const char *key)
{
    if (!map || map->kind != DT_Y_MAP)
        return NULL;
    for (size_t i = 0; i < map->n; i++)
        if (strcmp(dt_ymap_key(map, i)->text, key) == 0)
            return dt_ymap_key(map, i);
    return NULL;
}

const char *dt_yaml_quote(const char *text, char *buf, size_t bufsize)
{
    size_t max = bufsize > 4 ? bufsize - 4 : 0, i = 0, o = 0, len = strlen(text);
    while (text[i]) { /* whole characters only: never half a UTF-8 sequence */
        int unsafe;
        size_t n = dt_yaml_char(text + i, len - i, &unsafe);
        if (o + (unsafe ? 1 : n) > max)
            break;
        if (unsafe)
            buf[o++] = '?';
        else
            memcpy(buf + o, text + i, n), o += n;
        i += n;
    }
    if (text[i] && bufsize >= 4) {
        memcpy(buf + o, "...", 3);
        o += 3;
    }
    buf[o] = '\0';
    return buf;
}

int dt_ynode_is_null(const struct dt_ynode *node)
{
    if (node->kind != DT_Y_SCALAR || !node->plain)
        return 0;
    const char *t = node->text;
    return !*t || !strcmp(t, "~") || !strcmp(t, "null") || !strcmp(t, "Null") || !strcmp(t, "NULL");
}

const char *dt_ynode_kind_name(const struct dt_ynode *node)
{
    switch (node->kind) {
    case DT_Y_MAP:
        return "a mapping";
    case DT_Y_SEQ:
        return "a list";
    default:
        return dt_ynode_is_null(node) ? "nothing (null)" : "a single value";
    }
}

/* ---- writing a tree back ---- */

/* YAML 1.2 core schema: the plain scalars that are not strings. */
int dt_yaml_plain_typed(const char *t)
{
    static const char *const words[] = {"true", "True", "TRUE", "false", "False", "FALSE", "~", "null",
                                        "Null", "NULL", ".inf", ".Inf", "-.inf", ".nan", NULL};
    if (!*t)
        return 1;
    for (int i = 0; words[i]; i++)
        if (strcmp(t, words[i]) == 0)
            return 1;
    if (t[0] == '0' && (t[1] == 'x' || t[1] == 'o') && t[2]) /* 0x1F, 0o17: core-schema integers */
        return !t[2 + strspn(t + 2, t[1] == 'x' ? "0123456789abcdefABCDEF" : "01234567")];
    const char *p = t + (*t == '-' || *t == '+');
    size_t digits = strspn(p, "0123456789");
    if (digits == 0 && !(p[0] == '.' && p[1] >= '0' && p[1] <= '9'))
        return 0;
    p += digits;
    if (*p == '.')
        p += 1 + strspn(p + 1, "0123456789");
    if (*p == 'e' || *p == 'E') {
        p++;
        p += *p == '-' || *p == '+';
        if (!strspn(p, "0123456789"))
            return 0;
        p += strspn(p, "0123456789");
    }
    return *p == 0;
}

/* Typed plain scalars stay plain (3 stays a number); every other scalar is
 * double-quoted, which reads back as the same string in any context.
 * Recursion is bounded by the parser's DT_YAML_MAX_DEPTH. */
void dt_yaml_put_flow(FILE *out, const struct dt_ynode *node)
{
    if (node->kind == DT_Y_SCALAR) {
        if (node->plain && dt_yaml_plain_typed(node->text))
            fputs(*node->text ? node->text : "null", out);
        else
            (void)dt_yaml_put_quoted(out, node->text, node->len, DT_YAML_HEX);
        return;
    }
    int map = node->kind == DT_Y_MAP;
    size_t n = map ? 2 * node->n : node->n;
    fputc(map ? '{' : '[', out);
    for (size_t i = 0; i < n; i++) {
        fputs(i == 0 ? "" : map && i % 2 ? ": " : ", ", out);
        dt_yaml_put_flow(out, node->items[i]);
    }
    fputc(map ? '}' : ']', out);
}
