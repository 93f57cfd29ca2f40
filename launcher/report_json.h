/* report_json.h - a small strict JSON reader for the files dtrain itself
 * writes (metrics.jsonl, summary.json, trace_rank<N>.json), used by
 * `dtrain report` and `dtrain trace merge`.
 *
 * Strict means RFC 8259 and nothing more: no comments, no trailing commas,
 * no NaN or Infinity, no bare control characters in strings, one value per
 * text.  Errors name the file, line and column: "metrics.jsonl:7:12: expected
 * ',' or '}' after a member".  Nesting deeper than 64 is refused, so garbage
 * cannot exhaust the stack.
 *
 * Nodes and decoded strings live in an arena owned by the caller; freeing
 * the arena frees every tree parsed into it.  Not for writing JSON beyond
 * re-emitting a parsed value (dt_json_write); strings are written by
 * base/json_escape.h.
 */
#ifndef DT_REPORT_JSON_H
#define DT_REPORT_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

enum dt_json_type { DT_JSON_NULL, DT_JSON_FALSE, DT_JSON_TRUE, DT_JSON_NUMBER, DT_JSON_STRING, DT_JSON_ARRAY,
                    DT_JSON_OBJECT };

struct dt_json {
    enum dt_json_type type;
    int line, col;         /* where the value starts, 1-based */
    double num;            /* NUMBER */
    const char *str;       /* STRING: decoded UTF-8, NUL-terminated; NUMBER: the source text */
    size_t len;            /* bytes in str */
    const char *key;       /* the member name when the parent is an object */
    struct dt_json *child; /* ARRAY/OBJECT: first element or member */
    struct dt_json *next;  /* next element or member of the parent */
    size_t n;              /* ARRAY/OBJECT: number of children */
};

struct dt_json_block;
struct dt_json_arena {
    struct dt_json_block *head;
};

/* Parses src[0..len) as one JSON text.  file and first_line only shape
 * error messages (a metrics.jsonl line passes its line number). */
int dt_json_parse(struct dt_json_arena *a, const char *src, size_t len, const char *file, int first_line,
                  struct dt_json **out);

/* Reads a whole file (at most max_bytes) into memory owned by the arena. */
int dt_json_read_file(struct dt_json_arena *a, const char *path, size_t max_bytes, char **data, size_t *len);

void dt_json_arena_free(struct dt_json_arena *a);

/* The member `key` of an object (NULL if absent or v is not an object). */
const struct dt_json *dt_json_get(const struct dt_json *v, const char *key);

/* The number in member `key`, or false if it is absent, null or not a number. */
bool dt_json_get_num(const struct dt_json *v, const char *key, double *out);

/* The string in member `key`, or NULL. */
const char *dt_json_get_str(const struct dt_json *v, const char *key);

/* Writes v compactly; numbers as their source text, so nothing is rounded. */
void dt_json_write(FILE *f, const struct dt_json *v);

#endif
