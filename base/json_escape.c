/* json_escape.c - JSON string escapes (see json_escape.h).
 *
 * RFC 8259 section 7: inside a string '"', '\\' and the control characters
 * U+0000..U+001F must be escaped, as \uXXXX or (for some) a two-character
 * form like \n; anything else may be written as it is.
 */
#include "base/json_escape.h"

#include <string.h>

#include "base/error.h"

/* The escaped form of byte c at e (room for 6); returns its length.  The
 * one place that decides how a byte is written, for both writers below. */
static size_t escape_byte(unsigned char c, enum dt_json_style style, char *e)
{
    static const char hex[] = "0123456789abcdef";
    if (c == '"' || c == '\\') {
        e[0] = '\\';
        e[1] = (char)c;
        return 2;
    }
    if (c >= 0x20) {
        e[0] = (char)c;
        return 1;
    }
    if (style == DT_JSON_SHORT_WS && (c == '\n' || c == '\r' || c == '\t')) {
        e[0] = '\\';
        e[1] = c == '\n' ? 'n' : c == '\r' ? 'r' : 't';
        return 2;
    }
    memcpy(e, "\\u00", 4);
    e[4] = hex[c >> 4];
    e[5] = hex[c & 15];
    return 6;
}

void dt_json_put_str(FILE *f, const char *s, enum dt_json_style style)
{
    char e[6];
    fputc('"', f);
    for (; *s; s++)
        fwrite(e, 1, escape_byte((unsigned char)*s, style, e), f);
    fputc('"', f);
}

/* Measures first, so a buffer that is too small is left without half an escape. */
int dt_json_quote(char *buf, size_t size, const char *s, enum dt_json_style style, size_t *len)
{
    char e[6];
    size_t need = 3; /* the two quotes and the NUL */
    for (const char *p = s; *p; p++)
        need += escape_byte((unsigned char)*p, style, e);
    if (need > size) {
        if (size > 0)
            buf[0] = 0;
        return dt_error_set(DT_ENOMEM, "a JSON string needs %zu bytes, the buffer has %zu", need, size);
    }
    char *o = buf;
    *o++ = '"';
    for (; *s; s++)
        o += escape_byte((unsigned char)*s, style, o);
    *o++ = '"';
    *o = 0;
    *len = (size_t)(o - buf);
    return 0;
}
