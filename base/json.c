/* json.c - jansson with dtrain's rules (see json.h).
 *
 * jansson (Debian's libjansson-dev) is strict RFC 8259 unless asked
 * otherwise; dtrain asks for any value at the top (a metrics row that is an
 * array gets its own message from its reader) and for duplicate member
 * names to be refused.  Two things it cannot be told: its depth limit is
 * compiled in (2048 levels, enough to bound its own recursion but not
 * dtrain's 64), so depth is measured after the parse; and its words for a
 * \u0000 name its own flag, so they are replaced by dtrain's reason.
 */
#include "base/json.h"

#include "base/json_escape.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/fs.h"

#define LOAD_FLAGS (JSON_DECODE_ANY | JSON_REJECT_DUPLICATES)

/* True if a container in v sits deeper than DT_JSON_MAX_DEPTH; v's own
 * level is depth.  Recursion stops one level past the limit. */
static bool too_deep(json_t *v, int depth)
{
    const char *key;
    size_t i;
    json_t *c;
    if (!json_is_object(v) && !json_is_array(v))
        return false;
    if (depth > DT_JSON_MAX_DEPTH)
        return true;
    if (json_is_array(v)) {
        json_array_foreach (v, i, c)
            if (too_deep(c, depth + 1))
                return true;
    } else {
        json_object_foreach (v, key, c)
            if (too_deep(c, depth + 1))
                return true;
    }
    return false;
}

/* Replaces err's text, keeping the error code jansson stores after it. */
static void say(json_error_t *err, const char *text)
{
    snprintf(err->text, sizeof err->text - 1, "%s", text);
}

json_t *dt_json_loadb(const char *text, size_t len, json_error_t *err)
{
    json_t *v = json_loadb(text, len, LOAD_FLAGS, err);
    if (!v) {
        enum json_error_code code = json_error_code(err);
        if (code == json_error_null_character || code == json_error_null_byte_in_key)
            say(err, "\\u0000 (a NUL character) is not allowed: dtrain's strings are C strings");
        return NULL;
    }
    if (too_deep(v, 1)) {
        json_decref(v);
        err->line = err->column = -1;
        err->position = -1;
        char why[64];
        snprintf(why, sizeof why, "nested deeper than %d levels", DT_JSON_MAX_DEPTH);
        say(err, why);
        return NULL;
    }
    return v;
}

int dt_json_parse(const char *text, size_t len, const char *name, int first_line, json_t **out)
{
    json_error_t err;
    *out = dt_json_loadb(text, len, &err);
    if (*out)
        return 0;
    if (err.line < 0) /* not placed: the text's first line */
        return dt_error_set(DT_EINVAL, "%s:%d: %s", name, first_line, err.text);
    /* column 0: nothing read on that line yet (an empty text) */
    return dt_error_set(DT_EINVAL, "%s:%d:%d: %s", name, first_line + err.line - 1,
                        err.column > 0 ? err.column : 1, err.text);
}

int dt_json_read_file(const char *path, size_t max_bytes, char **text, size_t *len)
{
    return dt_fs_read_whole(AT_FDCWD, NULL, path, DT_FS_FOLLOW, max_bytes, text, len);
}

int dt_json_read_run_file(const char *path, size_t max_bytes, char **text, size_t *len)
{
    return dt_fs_read_whole(AT_FDCWD, NULL, path, DT_FS_NOFOLLOW, max_bytes, text, len);
}

static int load(const char *path, enum dt_fs_links links, size_t max_bytes, json_t **out)
{
    char *text;
    size_t len;
    *out = NULL;
    int rc = dt_fs_read_whole(AT_FDCWD, NULL, path, links, max_bytes, &text, &len);
    if (rc)
        return rc;
    rc = dt_json_parse(text, len, path, 1, out);
    free(text);
    return rc;
}

int dt_json_load_file(const char *path, size_t max_bytes, json_t **out)
{
    return load(path, DT_FS_FOLLOW, max_bytes, out);
}

int dt_json_load_run_file(const char *path, size_t max_bytes, json_t **out)
{
    return load(path, DT_FS_NOFOLLOW, max_bytes, out);
}

bool dt_json_get_num(const json_t *obj, const char *key, double *out)
{
    const json_t *v = json_object_get(obj, key);
    if (!json_is_number(v))
        return false;
    *out = json_number_value(v);
    return true;
}

json_t *dt_json_str(const char *s)
{
    json_t *v = json_string(s);
    if (v)
        return v;
    char *fixed = dt_json_utf8(s);
    v = fixed ? json_string(fixed) : NULL;
    free(fixed);
    return v;
}
