/* agent_error_file.c - the message in a rank's error report (TORCHELASTIC_ERROR_FILE).
 *
 * PyTorch's @record writes {"message": {"message": "ValueError: ...",
 * "extraInfo": {"py_callstack": ..., "timestamp": ...}}}; a program of one's
 * own may write {"message": "..."}.  Either way that string is what a person
 * wants in the failure report, so it is all this takes from the file (read
 * with base/json.h): a file that is not JSON, or has no such string, leaves
 * the message empty, and the report then points at the file instead.
 */
#include "launcher/agent/agent.h"

#include <stdlib.h>
#include <string.h>

#include "base/json.h"

/* A traceback of thousands of frames is a few MiB; the whole file is read,
 * since a file cut short is no JSON. */
#define MAX_ERROR_FILE_BYTES (16u << 20)

/* s into out, cut at a character boundary when it does not fit: summary.json
 * is UTF-8, and half a character would make it unreadable JSON. */
static void copy_utf8(char *out, size_t size, const char *s)
{
    size_t n = strlen(s);
    if (n >= size) {
        n = size - 1;
        while (n > 0 && ((unsigned char)s[n] & 0xc0) == 0x80) /* s[n] continues the character before */
            n--;
    }
    memcpy(out, s, n);
    out[n] = 0;
}

int dt_agent_error_message(const char *text, size_t len, char *out, size_t size)
{
    json_error_t err;
    json_t *doc = dt_json_loadb(text, len, &err);
    json_t *m = json_object_get(doc, "message");
    if (json_is_object(m)) /* @record's form */
        m = json_object_get(m, "message");
    out[0] = 0;
    if (json_is_string(m))
        copy_utf8(out, size, json_string_value(m));
    json_decref(doc);
    return out[0] ? 0 : -1;
}

int dt_agent_error_file_message(const char *path, char *out, size_t size)
{
    char *text;
    size_t len;
    out[0] = 0;
    if (!path[0] || dt_json_read_file(path, MAX_ERROR_FILE_BYTES, &text, &len))
        return -1;
    int rc = dt_agent_error_message(text, len, out, size);
    free(text);
    return rc;
}
