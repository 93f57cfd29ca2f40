/* json_escape.c - JSON string escapes (see json_escape.h).
 *
 * RFC 8259 section 7: inside a string '"', '\\' and the control characters
 * U+0000..U+001F must be escaped, as \uXXXX or (for some) a two-character
 * form like \n; anything else may be written as it is.  Section 8.1: the
 * text is UTF-8, and readers (jansson, Python's json) refuse anything else,
 * so a byte that starts no well-formed UTF-8 character (a rank's stderr in
 * Latin-1, a line cut inside a character) is written as U+FFFD, the
 * replacement character, as Python's errors="replace" does.
 */
#include "base/json_escape.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"

/* Bytes of the well-formed UTF-8 character at s, 1 to 4, or 0 if there is
 * none (Unicode's table 3-7: no overlong forms, no surrogates, nothing past
 * U+10FFFF).  s ends with a NUL, which no continuation byte matches. */
static size_t utf8_len(const unsigned char *s)
{
    unsigned char c = s[0];
    size_t n = c < 0x80                 ? 1
               : c >= 0xc2 && c <= 0xdf ? 2
               : c >= 0xe0 && c <= 0xef ? 3
               : c >= 0xf0 && c <= 0xf4 ? 4
                                        : 0;
    unsigned char lo = c == 0xe0 ? 0xa0 : c == 0xf0 ? 0x90 : 0x80; /* the second byte's range */
    unsigned char hi = c == 0xed ? 0x9f : c == 0xf4 ? 0x8f : 0xbf;
    for (size_t i = 1; i < n; i++)
        if (s[i] < (i == 1 ? lo : 0x80) || s[i] > (i == 1 ? hi : 0xbf))
            return 0;
    return n;
}

/* The escaped form of the character at *s at e (room for 6); advances *s
 * past it and returns the form's length.  The one place that decides how a
 * byte is written, for both writers below. */
static size_t escape_char(const unsigned char **s, enum dt_json_style style, char *e)
{
    static const char hex[] = "0123456789abcdef";
    unsigned char c = **s;
    size_t n = utf8_len(*s);
    *s += n ? n : 1;
    if (n == 0) {
        memcpy(e, "\xef\xbf\xbd", 3); /* U+FFFD */
        return 3;
    }
    if (c == '"' || c == '\\') {
        e[0] = '\\';
        e[1] = (char)c;
        return 2;
    }
    if (c >= 0x20) {
        memcpy(e, *s - n, n);
        return n;
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
    for (const unsigned char *p = (const unsigned char *)s; *p;)
        fwrite(e, 1, escape_char(&p, style, e), f);
    fputc('"', f);
}

/* Measures first, so a buffer that is too small is left without half an escape. */
int dt_json_quote(char *buf, size_t size, const char *s, enum dt_json_style style, size_t *len)
{
    char e[6];
    size_t need = 3; /* the two quotes and the NUL */
    for (const unsigned char *p = (const unsigned char *)s; *p;)
        need += escape_char(&p, style, e);
    if (need > size) {
        if (size > 0)
            buf[0] = 0;
        return dt_error_set(DT_ENOMEM, "a JSON string needs %zu bytes, the buffer has %zu", need, size);
    }
    char *o = buf;
    *o++ = '"';
    for (const unsigned char *p = (const unsigned char *)s; *p;)
        o += escape_char(&p, style, o);
    *o++ = '"';
    *o = 0;
    *len = (size_t)(o - buf);
    return 0;
}

char *dt_json_utf8(const char *s)
{
    size_t need = 1;
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        size_t n = utf8_len(p);
        need += n ? n : 3;
        p += n ? n : 1;
    }
    char *out = malloc(need), *o = out;
    for (const unsigned char *p = (const unsigned char *)s; out && *p;) {
        size_t n = utf8_len(p);
        memcpy(o, n ? (const char *)p : "\xef\xbf\xbd", n ? n : 3); /* U+FFFD */
        o += n ? n : 3;
        p += n ? n : 1;
    }
    if (out)
        *o = 0;
    return out;
}
