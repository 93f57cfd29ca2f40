/* json_escape.h - the \uXXXX escape of JSON strings, decoded to UTF-8, for
 * the readers that need it: launcher/report_json.c (dtrain's own run files)
 * and worker/safetensors.c (checkpoint and model headers).  One decoder, so
 * both join surrogate pairs and refuse the same escapes.
 *
 * Not a JSON parser, and not for writing escapes.
 */
#ifndef DT_JSON_ESCAPE_H
#define DT_JSON_ESCAPE_H

#include <stddef.h>

/* Decodes the escape whose 'u' is at s (the text ends before end), joining
 * a surrogate pair "\uD83D\uDE00" into one code point, and appends its
 * UTF-8 at *o: at most 4 bytes, never more than the escape's own length.
 * Returns the bytes used from s on (5, or 11 for a pair), or 0 with *why
 * saying what is wrong.  \u0000 is refused: dtrain's strings are C strings,
 * where a NUL would silently end the name or value. */
size_t dt_json_decode_u(const char *s, const char *end, char **o, const char **why);

#endif
