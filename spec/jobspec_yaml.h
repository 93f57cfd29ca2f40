/* jobspec_yaml.h - a YAML document as a small tree with line/column marks (internal to the job spec).
 *
 * libyaml's event stream is turned into scalars, mappings and sequences that
 * remember where they started, so every later complaint can name
 * "<file>:<line>:<column>".  The reader enforces the limits that make hostile
 * input harmless: a size cap, a nesting cap, one document, no aliases or
 * anchors (no billion laughs), no duplicate keys, no NUL bytes.
 *
 * Not for the meaning of keys: that is the key tables' job (jobspec_keys.h).
 */
#ifndef DT_JOBSPEC_YAML_H
#define DT_JOBSPEC_YAML_H

#include <stddef.h>
#include <stdio.h>

/* Largest job spec accepted, in bytes.  A real spec is a few KiB; the cap
 * keeps a mistaken `dtrain validate big.bin` quick and bounded. */
#define DT_YAML_MAX_BYTES (1024 * 1024)
/* Deepest nesting of mappings and sequences accepted. */
#define DT_YAML_MAX_DEPTH 32

enum dt_ynode_kind { DT_Y_SCALAR, DT_Y_MAP, DT_Y_SEQ };

struct dt_ynode {
    enum dt_ynode_kind kind;
    int line, col;           /* 1-based position of the node's first character */
    char *text;              /* scalar: its value, NUL-terminated */
    size_t len;              /* scalar: length of text */
    int plain;               /* scalar written without quotes: 3 is a number, "3" a string */
    struct dt_ynode **items; /* sequence: the items; mapping: key, value, key, value, ... */
    size_t n;                /* sequence: items; mapping: pairs */
};

/* Parses `text` (len bytes) into a tree.  `name` is used in messages.  On
 * failure returns DT_EINVAL with "<name>:<line>:<col>: <problem>" set.  An
 * empty document (nothing but comments) is an error too. */
int dt_yaml_parse(const char *text, size_t len, const char *name, struct dt_ynode **root);

void dt_yaml_free(struct dt_ynode *node);

/* Mapping helpers: the value for `key`, or NULL. */
const struct dt_ynode *dt_ymap_get(const struct dt_ynode *map, const char *key);
/* The key node named `key` (for messages about the key itself), or NULL. */
const struct dt_ynode *dt_ymap_key_node(const struct dt_ynode *map, const char *key);
/* The key node of pair `i` and its value. */
static inline const struct dt_ynode *dt_ymap_key(const struct dt_ynode *map, size_t i)
{
    return map->items[2 * i];
}
static inline const struct dt_ynode *dt_ymap_val(const struct dt_ynode *map, size_t i)
{
    return map->items[2 * i + 1];
}

/* A scalar's text made safe to quote in a one-line message or a YAML
 * comment: at most bufsize - 4 bytes (then "..."), each character YAML
 * would escape (controls, C1, U+2028/U+2029, ...) and each byte that is not
 * UTF-8 shown as one '?'. */
const char *dt_yaml_quote(const char *text, char *buf, size_t bufsize);

/* A plain empty value, ~ or null: YAML's "nothing". */
int dt_ynode_is_null(const struct dt_ynode *node);

/* "a mapping", "a list", "a scalar" - for "expected X, got Y" messages. */
const char *dt_ynode_kind_name(const struct dt_ynode *node);

/* True when a plain scalar's text is not a string to a YAML 1.2 core
 * reader: empty, ~, null, true/false, a number. */
int dt_yaml_plain_typed(const char *text);

/* `node` as one line of flow YAML that parses back to the same tree: typed
 * plain scalars plain, every other scalar double-quoted. */
void dt_yaml_put_flow(FILE *out, const struct dt_ynode *node);

#endif
