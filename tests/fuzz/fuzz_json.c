/* fuzz_json.c - libFuzzer target for dtrain's JSON reader (base/json.h:
 * jansson with dtrain's rules), which reads every JSON file dtrain takes.
 *
 * Any bytes must give either a tree or an error whose message names the file
 * and a line and column inside the input (or, for nesting too deep, the
 * first line); never a crash, a leak, a hang or a deep recursion.  A tree is
 * walked to its last value and checked for what base/json.h promises: no
 * container deeper than DT_JSON_MAX_DEPTH, strings without a NUL, finite
 * numbers.  It is then written with jansson and read back, and must be the
 * same tree.
 *
 * Not a test of what the readers make of a tree: fuzz_report_load.c,
 * fuzz_trace_merge.c, fuzz_safetensors.c.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/json.h"

static unsigned sink; /* so the reads of the walk are not optimised away */

static void walk(json_t *v, int depth)
{
    const char *key;
    size_t i;
    json_t *c;
    if (depth > DT_JSON_MAX_DEPTH + 1)
        abort();
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        if (strlen(s) != json_string_length(v))
            abort(); /* a NUL inside */
        for (size_t k = 0; k < json_string_length(v); k++)
            sink += (unsigned char)s[k];
    } else if (json_is_number(v) && !isfinite(json_number_value(v))) {
        abort();
    } else if (json_is_array(v)) {
        if (depth > DT_JSON_MAX_DEPTH)
            abort();
        json_array_foreach (v, i, c)
            walk(c, depth + 1);
    } else if (json_is_object(v)) {
        if (depth > DT_JSON_MAX_DEPTH)
            abort();
        json_object_foreach (v, key, c) {
            if (json_object_get(v, key) != c)
                abort(); /* names are unique */
            walk(c, depth + 1);
        }
    }
}

/* "fuzz.json:line:col: ..." with the place inside the input, or
 * "fuzz.json:1: nested deeper than ...". */
static void check_error(const uint8_t *data, size_t size)
{
    int line, col, lines = 1;
    const char *msg = dt_error_last();
    if (strncmp(msg, "fuzz.json:1: nested deeper than", 31) == 0)
        return;
    if (sscanf(msg, "fuzz.json:%d:%d: ", &line, &col) != 2)
        abort();
    for (size_t i = 0; i < size; i++)
        lines += data[i] == '\n';
    if (line < 1 || line > lines || col < 1 || (size_t)col > size + 1)
        abort();
}

/* jansson's text of v reads back as v, and writes the same text again. */
static void round_trip(json_t *v)
{
    size_t flags = JSON_ENCODE_ANY | JSON_REAL_PRECISION(17);
    char *text = json_dumps(v, flags);
    json_t *again = NULL;
    if (!text || dt_json_parse(text, strlen(text), "written.json", 1, &again) || !json_equal(v, again))
        abort();
    char *text2 = json_dumps(again, flags);
    if (!text2 || strcmp(text, text2) != 0)
        abort();
    free(text2);
    free(text);
    json_decref(again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* libFuzzer's data is a heap copy of exactly size bytes: reading past
     * the end is an ASan report, as it would be past a file's contents */
    json_t *root = NULL;
    if (dt_json_parse((const char *)data, size, "fuzz.json", 1, &root)) {
        check_error(data, size);
    } else {
        walk(root, 1);
        round_trip(root);
    }
    json_decref(root);
    dt_error_clear();
    return 0;
}
