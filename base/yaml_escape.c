/* yaml_escape.c - YAML double-quoted scalars (see yaml_escape.h).
 *
 * YAML 1.2 section 5.1: a document may hold only x09, x0A, x0D, x20-x7E,
 * x85, xA0-xD7FF, xE000-xFFFD and x10000-x10FFFF; anything else must be
 * escaped, and readers refuse it raw (libyaml: "control characters are not
 * allowed").  Escapes name code points (\x80 is U+0080, two bytes of UTF-8),
 * so invalid UTF-8 has no escape that reads back as the same bytes.
 */
#include "base/yaml_escape.h"

#include "base/error.h"

/* Length of the UTF-8 character at s (left bytes remain) with its code
 * point in *cp, or 0 when the bytes there are not one (RFC 3629 section 3):
 * a stray continuation byte, a lead byte C0, C1 or F5-FF, a sequence cut
 * short, an overlong form, a surrogate, or a value above U+10FFFF. */
static size_t utf8_char(const unsigned char *s, size_t left, unsigned *cp)
{
    static const unsigned least[] = {0, 0, 0x80, 0x800, 0x10000};
    unsigned c = s[0];
    size_t n = c < 0x80                 ? 1
               : c >= 0xC2 && c <= 0xDF ? 2
               : c >= 0xE0 && c <= 0xEF ? 3
               : c >= 0xF0 && c <= 0xF4 ? 4
                                        : 0;
    if (n == 0 || n > left)
        return 0;
    unsigned v = n == 1 ? c : c & (0x7Fu >> n);
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        v = v << 6 | (s[i] & 0x3Fu);
    }
    if (v < least[n] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        return 0;
    *cp = v;
    return n;
}

/* Beyond what section 5.1 forbids (C0 but tab, LF and CR; DEL; C1 but NEL;
 * U+FFFE, U+FFFF): tab, LF and CR, so a scalar stays on one line (a raw
 * break is folded into a space); NEL, LS and PS, which YAML 1.1 readers,
 * libyaml and Kubernetes' go-yaml among them, take as line breaks and fold
 * with the spaces around them; the BOM, which section 5.2 allows only in
 * quoted scalars and says "should be escaped on output". */
static int must_escape(unsigned cp)
{
    return cp < 0x20 || (cp >= 0x7F && cp <= 0x9F) || cp == 0x2028 || cp == 0x2029 || cp == 0xFEFF ||
           cp == 0xFFFE || cp == 0xFFFF;
}

static void put_escape(FILE *f, unsigned cp, enum dt_yaml_style style)
{
    if (style == DT_YAML_SHORT_WS && (cp == '\n' || cp == '\t'))
        fputs(cp == '\n' ? "\\n" : "\\t", f);
    else if (cp < 0x80)
        fprintf(f, "\\x%02x", cp);
    else
        fprintf(f, "\\u%04x", cp);
}

/* Checks the whole string first, so a refused one leaves no half scalar. */
int dt_yaml_put_quoted(FILE *f, const char *s, size_t len, enum dt_yaml_style style)
{
    const unsigned char *u = (const unsigned char *)s;
    unsigned cp;
    for (size_t i = 0, n; i < len; i += n)
        if (!(n = utf8_char(u + i, len - i, &cp)))
            return dt_error_set(DT_EINVAL,
                                "byte %zu (0x%02x) is not part of a UTF-8 character, and YAML "
                                "can hold only Unicode text",
                                i, u[i]);
    fputc('"', f);
    for (size_t i = 0, n; i < len; i += n) {
        n = utf8_char(u + i, len - i, &cp);
        if (cp == '"' || cp == '\\')
            fprintf(f, "\\%c", (int)cp);
        else if (must_escape(cp))
            put_escape(f, cp, style);
        else
            fwrite(u + i, 1, n, f);
    }
    fputc('"', f);
    return 0;
}

int dt_yaml_block_ok(const char *s, size_t len)
{
    const unsigned char *u = (const unsigned char *)s;
    unsigned cp;
    for (size_t i = 0, n; i < len; i += n)
        if (!(n = utf8_char(u + i, len - i, &cp)) || (must_escape(cp) && cp != '\t' && cp != '\n'))
            return 0;
    return 1;
}

size_t dt_yaml_char(const char *s, size_t len, int *unsafe)
{
    unsigned cp;
    size_t n = utf8_char((const unsigned char *)s, len, &cp);
    *unsafe = !n || must_escape(cp);
    return n ? n : 1;
}
