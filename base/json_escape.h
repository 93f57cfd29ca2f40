/* json_escape.h - JSON string literals, so every writer of dtrain's JSON
 * writes strings the same way: dt_json_put_str and dt_json_quote write a C
 * string as a JSON string literal, for the trace, the run summary, the error
 * file the worker leaves for the agent, safetensors headers and `dtrain
 * report`/`trace merge`; dt_json_utf8 makes any bytes a string jansson takes,
 * for the documents built as jansson values (base/json.h).  What they write is valid UTF-8 whatever the bytes
 * given, so base/json.h (jansson, which refuses invalid UTF-8) reads it back.
 *
 * Not for reading JSON (base/json.h) or writing anything but strings.
 */
#ifndef DT_JSON_ESCAPE_H
#define DT_JSON_ESCAPE_H

#include <stddef.h>
#include <stdio.h>

/* How bytes below 0x20 are written; either way '"' and '\\' get a backslash,
 * well-formed UTF-8 (and DEL) is copied as it is, and a byte that starts no
 * UTF-8 character is written as U+FFFD.  Both styles are what RFC 8259
 * section 7 allows: it requires only '"', '\\' and 0x00-0x1F to be escaped. */
enum dt_json_style {
    DT_JSON_U,        /* all of them as \u00xx (lowercase hex) */
    DT_JSON_SHORT_WS, /* \n, \r and \t by name, the rest as \u00xx: messages stay readable */
};

/* Writes s to f as a JSON string literal, quotes included.  Write errors
 * are left in f's error flag for the caller's fclose/ferror. */
void dt_json_put_str(FILE *f, const char *s, enum dt_json_style style);

/* Writes s into buf as a JSON string literal, quotes included, and a NUL
 * after it; *len gets the literal's length without the NUL.  Returns 0, or
 * DT_ENOMEM when the literal and its NUL need more than size bytes (buf
 * then holds "" if size > 0).  6 bytes per byte of s, plus 3, always do. */
int dt_json_quote(char *buf, size_t size, const char *s, enum dt_json_style style, size_t *len);

/* A malloc'd copy of s that is valid UTF-8: well-formed characters copied,
 * each byte that starts none replaced by U+FFFD, as the writers above do
 * (jansson's json_string refuses anything else).  NULL when out of memory. */
char *dt_json_utf8(const char *s);

#endif
