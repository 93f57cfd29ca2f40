/* json.h - the one way dtrain reads JSON: jansson, with dtrain's rules.
 *
 * Every JSON text dtrain reads goes through here: metrics.jsonl rows (the
 * report and the live progress line), summary.json and trainer_summary.json,
 * Chrome traces, safetensors headers and a rank's error file.  So all of
 * them refuse the same things: what RFC 8259 refuses (jansson is strict by
 * default: no NaN or Infinity, no comments or trailing commas, no bare
 * control characters, no invalid UTF-8 or lone surrogates, one value per
 * text), \u0000 (dtrain's strings are C strings, where a NUL would silently
 * end a name), duplicate member names, and nesting deeper than
 * DT_JSON_MAX_DEPTH.  Numbers keep jansson's two kinds: integers that fit a
 * long long, and reals that fit a double (1e999 is refused, not read as inf).
 *
 * Values are jansson's own json_t: walk them with json_object_get,
 * json_object_foreach, json_array_foreach and the rest of jansson.h.  The
 * caller owns what it gets and frees it with json_decref.
 *
 * Documents dtrain writes whole (launch.json) are built as jansson values
 * too, their strings through dt_json_str, and written with json_dumpf.
 * Streams written a line at a time (metrics.jsonl, traces) use
 * base/json_escape.h's string writers instead.
 */
#ifndef DT_JSON_H
#define DT_JSON_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* Containers inside containers beyond this are refused: no file dtrain
 * reads nests deeper than 4, and code that walks a tree recurses. */
#define DT_JSON_MAX_DEPTH 64

/* Parses text[0..len) as one JSON text.  NULL on error, with err->text
 * saying what is wrong and err->line, err->column (1-based; a column counts
 * characters) and err->position (bytes read, the one at fault included)
 * saying where.  A text nested too deep parsed whole before it could be
 * measured: its error has line, column and position -1. */
json_t *dt_json_loadb(const char *text, size_t len, json_error_t *err);

/* dt_json_loadb with the error set as "name:line:column: what is wrong";
 * lines count from first_line (a metrics.jsonl row passes its own). */
int dt_json_parse(const char *text, size_t len, const char *name, int first_line, json_t **out);

/* Reads path whole (a regular file of at most max_bytes) into *text,
 * malloc'd and NUL-terminated; DT_ENOTFOUND when there is no such file.
 * Anything but a regular file (a FIFO, a device, a directory) is refused
 * before it is opened, so none of them blocks the reader (base/fs.h,
 * dt_fs_open_read).  A symbolic link at path is followed: for files the
 * user names. */
int dt_json_read_file(const char *path, size_t max_bytes, char **text, size_t *len);

/* dt_json_read_file for a file dtrain finds in a run or checkpoint
 * directory (launch.json, summary.json, metrics.jsonl, traces, error
 * files): a symbolic link at path is refused, not followed, so a link
 * planted there never makes dtrain read another file of its user's. */
int dt_json_read_run_file(const char *path, size_t max_bytes, char **text, size_t *len);

/* dt_json_read_file (dt_json_read_run_file), then dt_json_parse with path
 * as the name. */
int dt_json_load_file(const char *path, size_t max_bytes, json_t **out);
int dt_json_load_run_file(const char *path, size_t max_bytes, json_t **out);

/* The number, integer or real, in member key of obj; false if obj is no
 * object or the member is absent or no number (null included). */
bool dt_json_get_num(const json_t *obj, const char *key, double *out);

/* A JSON string of any bytes: s as it is when it is valid UTF-8, else with
 * each byte that starts no character as U+FFFD (dt_json_utf8).  NULL when
 * out of memory, as jansson's constructors (json_object_set_new then fails). */
json_t *dt_json_str(const char *s);

#endif
