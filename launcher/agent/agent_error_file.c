/* agent_error_file.c - what a person wants from a rank's error report (TORCHELASTIC_ERROR_FILE).
 *
 * PyTorch's @record writes {"message": {"message": "ValueError: ...",
 * "extraInfo": {"py_callstack": "Traceback (most recent call last): ...",
 * "timestamp": ...}}} (torch/distributed/elastic/multiprocessing/errors/
 * error_handler.py); a program of one's own may write {"message": "..."}.
 * The message and the end of the traceback (the frames nearest the error, at
 * most DT_AGENT_TRACEBACK_LINES lines) go into the failure report and
 * summary.json, as torchrun's "Root Cause" box shows them.  A file that is not
 * JSON, or has no such string, leaves them empty, and the report then points
 * at the file instead.  Read with base/json.h.
 *
 * Not for writing error reports (the ranks do) nor for printing (agent_summary.c).
 */
#include "launcher/agent/agent.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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

/* The last lines of `s` (without its final newline) that fit in out, at most
 * DT_AGENT_TRACEBACK_LINES; returns how many lines before them were left out.
 * Cut at line starts, so what is kept is whole lines and whole characters. */
static int keep_last_lines(const char *s, char *out, size_t size)
{
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == '\r'))
        n--;
    size_t start = n;
    int kept = 0;
    while (start > 0 && kept < DT_AGENT_TRACEBACK_LINES) {
        size_t b = start - 1; /* the '\n' ending the line before the kept ones, or inside the first */
        while (b > 0 && s[b - 1] != '\n')
            b--;
        if (n - b >= size)
            break;
        start = b;
        kept++;
    }
    memcpy(out, s + start, n - start);
    out[n - start] = 0;
    int left_out = 0;
    for (size_t i = 0; i < start; i++)
        left_out += s[i] == '\n';
    return left_out;
}

int dt_agent_error_traceback(const char *text, size_t len, char *out, size_t size)
{
    json_error_t err;
    json_t *doc = dt_json_loadb(text, len, &err);
    json_t *m = json_object_get(doc, "message");
    json_t *extra = json_is_object(m) ? json_object_get(m, "extraInfo") : NULL;
    json_t *stack = json_is_object(extra) ? json_object_get(extra, "py_callstack") : NULL;
    int left_out = -1;
    out[0] = 0;
    if (json_is_string(stack) && json_string_length(stack) > 0)
        left_out = keep_last_lines(json_string_value(stack), out, size);
    json_decref(doc);
    return out[0] ? left_out : -1;
}

int dt_agent_error_file_read(const char *path, struct dt_agent_failure *ff)
{
    char *text;
    size_t len;
    ff->error_message[0] = ff->error_traceback[0] = 0;
    ff->traceback_left_out = 0;
    /* A rank may leave anything under that name: a FIFO would block the
     * agent in open(), a symbolic link would be read through; the run
     * file's open refuses both. */
    if (!path[0] || dt_json_read_run_file(path, MAX_ERROR_FILE_BYTES, &text, &len))
        return -1;
    int rc = dt_agent_error_message(text, len, ff->error_message, sizeof ff->error_message);
    int left = dt_agent_error_traceback(text, len, ff->error_traceback, sizeof ff->error_traceback);
    ff->traceback_left_out = left > 0 ? left : 0;
    free(text);
    return rc;
}
