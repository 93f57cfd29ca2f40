/* fuzz_json.c - libFuzzer target for the strict JSON reader of `dtrain report`
 * and `dtrain trace merge` (launcher/report_json.h).
 *
 * Any bytes must give either a tree or an error whose message names the file
 * and a line and column inside the input; never a crash, a leak, a hang or a
 * deep recursion.  A tree is walked to its last byte (so a string or number
 * that is not what its node says is read by ASan), checked for the shape the
 * header promises, written back with dt_json_write, and what is written must
 * parse again and write the same bytes.
 *
 * Not a test of what the loaders make of a tree: fuzz_report_load.c and
 * fuzz_trace_merge.c.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "launcher/report_json.h"

#define MAX_DEPTH 64 /* what report_json.h promises to refuse beyond */

static unsigned sink; /* so the reads of the walk are not optimised away */

static void walk(const struct dt_json *v, int depth)
{
    if (depth > MAX_DEPTH + 1 || v->line < 1 || v->col < 1 || v->type > DT_JSON_OBJECT)
        abort();
    if (v->type == DT_JSON_NUMBER) {
        if (!v->str || strlen(v->str) != v->len || isnan(v->num) || strtod(v->str, NULL) != v->num)
            abort(); /* the source text is kept whole and is what num was read from */
    } else if (v->type == DT_JSON_STRING) {
        for (size_t i = 0; i <= v->len; i++) /* decoded strings may hold \u0000 */
            sink += (unsigned char)v->str[i];
        if (v->str[v->len] != 0)
            abort();
    }
    if (v->type != DT_JSON_ARRAY && v->type != DT_JSON_OBJECT) {
        if (v->child || v->n)
            abort();
        return;
    }
    size_t n = 0;
    for (const struct dt_json *c = v->child; c; c = c->next, n++) {
        if ((v->type == DT_JSON_OBJECT) != (c->key != NULL))
            abort(); /* members have names, elements do not */
        if (c->key && !dt_json_get(v, c->key))
            abort();
        walk(c, depth + 1);
    }
    if (n != v->n)
        abort();
}

/* "file:line:col: ..." with the place inside the input. */
static void check_error(const uint8_t *data, size_t size)
{
    int line, col;
    if (sscanf(dt_error_last(), "fuzz.json:%d:%d: ", &line, &col) != 2)
        abort();
    int lines = 1;
    for (size_t i = 0; i < size; i++)
        lines += data[i] == '\n';
    if (line < 1 || line > lines || col < 1 || (size_t)col > size + 1)
        abort();
}

static char *written(const struct dt_json *v, size_t *len)
{
    char *text = NULL;
    FILE *f = open_memstream(&text, len);
    if (!f)
        abort();
    dt_json_write(f, v);
    fclose(f);
    return text;
}

/* What dt_json_write gives is JSON, and writing it again changes nothing. */
static void round_trip(const struct dt_json *v)
{
    size_t len, len2;
    char *text = written(v, &len);
    struct dt_json_arena a = {0};
    struct dt_json *again;
    if (dt_json_parse(&a, text, len, "written.json", 1, &again))
        abort();
    char *text2 = written(again, &len2);
    if (len2 != len || memcmp(text, text2, len) != 0)
        abort();
    free(text2);
    free(text);
    dt_json_arena_free(&a);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* libFuzzer's data is a heap copy of exactly size bytes: reading past
     * the end is an ASan report, as it would be past a file's contents */
    struct dt_json_arena a = {0};
    struct dt_json *root = NULL;
    if (dt_json_parse(&a, (const char *)data, size, "fuzz.json", 1, &root)) {
        check_error(data, size);
    } else {
        walk(root, 1);
        round_trip(root);
    }
    dt_json_arena_free(&a);
    dt_error_clear();
    return 0;
}
