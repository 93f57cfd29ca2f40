/* json_escape.c - JSON string escapes (see json_escape.h).
 *
 * RFC 8259 section 7: inside a string '"', '\\' and the control characters
 * U+0000..U+001F must be escaped, as \uXXXX or (for some) a two-character
 * form like \n; anything else may be written as it is.  A code point above
 * U+FFFF is written as a UTF-16 surrogate pair, high (D800..DBFF) then low
 * (DC00..DFFF); either alone is no character and has no UTF-8 form.
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

/* Exactly 4 hex digits, as JSON has them: sscanf("%4x") would take a sign,
 * spaces or "0x", and first runs strlen over the rest of the text. */
static int hex4(const char *s, const char *end, unsigned *cp)
{
    if (end - s < 4)
        return -1;
    *cp = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        unsigned d = c >= '0' && c <= '9'   ? (unsigned)(c - '0')
                     : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
                     : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10)
                                            : 16u;
        if (d > 15)
            return -1;
        *cp = *cp << 4 | d;
    }
    return 0;
}

static char *put_utf8(char *o, unsigned cp)
{
    if (cp < 0x80) {
        *o++ = (char)cp;
    } else if (cp < 0x800) {
        *o++ = (char)(0xC0 | cp >> 6);
        *o++ = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        *o++ = (char)(0xE0 | cp >> 12);
        *o++ = (char)(0x80 | ((cp >> 6) & 0x3F));
        *o++ = (char)(0x80 | (cp & 0x3F));
    } else {
        *o++ = (char)(0xF0 | cp >> 18);
        *o++ = (char)(0x80 | ((cp >> 12) & 0x3F));
        *o++ = (char)(0x80 | ((cp >> 6) & 0x3F));
        *o++ = (char)(0x80 | (cp & 0x3F));
    }
    return o;
}

size_t dt_json_decode_u(const char *s, const char *end, char **o, const char **why)
{
    unsigned cp, lo;
    size_t used = 5;
    if (hex4(s + 1, end, &cp)) {
        *why = "\\u must be followed by 4 hex digits";
        return 0;
    }
    if (cp >= 0xD800 && cp < 0xDC00) {
        const char *n = s + 5;
        if (end - n < 6 || n[0] != '\\' || n[1] != 'u' || hex4(n + 2, end, &lo) || lo < 0xDC00 ||
            lo > 0xDFFF) {
            *why = "a \\u high surrogate must be followed by a low one";
            return 0;
        }
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        used = 11;
    } else if (cp >= 0xDC00 && cp < 0xE000) {
        *why = "a lone \\u low surrogate";
        return 0;
    } else if (cp == 0) {
        *why = "\\u0000 (a NUL character) is not allowed: dtrain's strings are C strings";
        return 0;
    }
    *o = put_utf8(*o, cp);
    return used;
}
