/* gen_text.c - the words the generated files share: a key's form, numbers as people write them, markup.
 *
 * A key's form comes from its type, range and words ("integer 1–65536",
 * "duration, > 0, ≤ 24h", "`cpu` | `cuda`"), so a range changed in a table
 * changes every document; custom keys say theirs in the table (`form`).
 *
 * Not for the documents' layout (gen_docs.c, gen_reference.c, gen_schema.c).
 */
#include "spec/gen/specgen.h"

#include "base/error.h"

#include <math.h>
#include <string.h>

int dt_gen_is_section(const struct dt_spec_key *k)
{
    return k->type == DT_KT_SECTION || k->type == DT_KT_SECTION_PTR || k->type == DT_KT_SECLIST;
}

/* 65536, 10^12, 9.2·10^18: powers of ten from a billion up as such. */
static const char *number(double x, char *buf, size_t size)
{
    if (fabs(x) >= 1e9) {
        int e = (int)floor(log10(fabs(x)));
        double m = x / pow(10, e);
        if (fabs(m - round(m)) < 1e-9 && round(m) == 1)
            snprintf(buf, size, "10^%d", e);
        else
            snprintf(buf, size, "%g·10^%d", m, e);
    } else {
        snprintf(buf, size, "%.15g", x);
    }
    return buf;
}

/* Seconds as a duration's text: 24h, 10m, 90s, 500ms. */
static const char *duration(double s, char *buf, size_t size)
{
    if (s >= 3600 && fmod(s, 3600) == 0)
        snprintf(buf, size, "%gh", s / 3600);
    else if (s >= 60 && fmod(s, 60) == 0 && s < 3600)
        snprintf(buf, size, "%gm", s / 60);
    else if (s < 1 && s > 0)
        snprintf(buf, size, "%gms", s * 1000);
    else
        snprintf(buf, size, "%gs", s);
    return buf;
}

/* The range in words: "1–65536", "> 0", "≥ 0", "in [0, 1)", "≤ 24h"; "" when none applies. */
static void range(const struct dt_spec_key *k, char *buf, size_t size)
{
    char a[48], b[48];
    int lo = k->flags & DT_KF_LO, hi = k->flags & DT_KF_HI, lox = k->flags & DT_KF_LO_X,
        hix = k->flags & DT_KF_HI_X;
    int dur = k->type == DT_KT_DURATION, mb = k->type == DT_KT_SIZE_MB;
    const char *unit = mb ? " MiB" : "";
    if (dur) {
        duration(k->lo, a, sizeof a);
        duration(k->hi, b, sizeof b);
    } else {
        number(k->lo, a, sizeof a);
        number(k->hi, b, sizeof b);
    }
    buf[0] = '\0';
    if (lo && hi && !lox && !hix && k->type != DT_KT_NUM)
        snprintf(buf, size, "%s%s–%s%s", a, dur ? "" : unit, b, unit);
    else if (lo && hi)
        snprintf(buf, size, "in %s%s, %s%s%s", lox ? "(" : "[", a, b, hix ? ")" : "]", unit);
    else if (lo)
        snprintf(buf, size, "%s %s%s", lox ? ">" : "≥", a, unit);
    else if (hi)
        snprintf(buf, size, "%s %s%s", hix ? "<" : "≤", b, unit);
}

/* "`a` | `b` | `c`" */
static void words(const char *const *names, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; names[i] && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s`%s`", i ? " | " : "", names[i]);
}

static const char *type_word(const struct dt_spec_key *k)
{
    switch (k->type) {
    case DT_KT_STR:
    case DT_KT_CHARS:
        return "string";
    case DT_KT_INT:
    case DT_KT_I64:
    case DT_KT_U64:
        return "integer";
    case DT_KT_NUM:
        return "number";
    case DT_KT_BOOL:
        return "boolean";
    case DT_KT_DURATION:
        return "duration";
    case DT_KT_SIZE_MB:
        return "size (a bare number is MiB)";
    case DT_KT_BYTES:
        return "size (a bare number is bytes)";
    case DT_KT_STRLIST:
        return "list of strings";
    case DT_KT_STRMAP:
        return k->flags & DT_KF_ENVNAME ? "mapping NAME → value" : "mapping name → value";
    case DT_KT_SECLIST:
        return "list of mappings";
    default:
        return "mapping";
    }
}

void dt_gen_form(const struct dt_spec_key *k, char *buf, size_t size)
{
    char r[128];
    if (k->form) {
        snprintf(buf, size, "%s", k->form);
        return;
    }
    if (k->names) {
        words(k->names, buf, size);
        return;
    }
    range(k, r, sizeof r);
    if (k->type == DT_KT_STRLIST)
        snprintf(buf, size, "%s%s", type_word(k), k->flags & DT_KF_LO ? ", at least one" : "");
    else if (k->type == DT_KT_BYTES || !r[0])
        snprintf(buf, size, "%s", type_word(k));
    else if (k->type == DT_KT_DURATION || k->type == DT_KT_SIZE_MB)
        snprintf(buf, size, "%s, %s", type_word(k), r);
    else
        snprintf(buf, size, "%s %s", type_word(k), r);
}

void dt_gen_first_sentence(const char *text, char *buf, size_t size)
{
    const char *end = text;
    /* "e.g. " and "i.e. " go on with the sentence */
    while ((end = strstr(end, ". ")) && end - text >= 3 &&
           (!strncmp(end - 3, "e.g", 3) || !strncmp(end - 3, "i.e", 3)))
        end += 2;
    size_t n = end ? (size_t)(end - text) + 1 : strlen(text);
    snprintf(buf, size, "%.*s", (int)n, text);
}

/* troff's names of the few non-ASCII characters the tables use. */
static const char *man_char(const char *s, size_t *len)
{
    static const struct {
        const char *utf8, *troff;
    } map[] = {{"–", "\\(en"}, {"—", "\\(em"}, {"≤", "\\(<="}, {"≥", "\\(>="}, {"→", "\\(->"},
               {"×", "\\(mu"}, {"π", "\\(*p"}, {"·", "\\(md"}, {"−", "\\-"},   {"±", "\\(+-"}};
    for (size_t i = 0; i < sizeof map / sizeof *map; i++) {
        size_t n = strlen(map[i].utf8);
        if (strncmp(s, map[i].utf8, n) == 0) {
            *len = n;
            return map[i].troff;
        }
    }
    return NULL;
}

static int put_man(FILE *out, const char *text)
{
    int code = 0;
    if (*text == '.' || *text == '\'')
        fputs("\\&", out);
    for (const char *p = text; *p; p++) {
        size_t len;
        const char *t;
        if (*p == '`') {
            fputs((code = !code) ? "\\fB" : "\\fR", out);
        } else if (*p == '\\') {
            fputs("\\e", out);
        } else if (*p == '-' && code) {
            fputs("\\-", out);
        } else if ((unsigned char)*p < 0x80) {
            fputc(*p, out);
        } else if ((t = man_char(p, &len))) {
            fputs(t, out);
            p += len - 1;
        } else {
            return dt_error_set(DT_EINVAL, "specgen: the man page has no name for the character at \"%.20s\"",
                                p);
        }
    }
    return 0;
}

/* Length of a "docs/<name>.md" at p, or 0: README.md links it. */
static size_t doc_path(const char *p)
{
    if (strncmp(p, "docs/", 5))
        return 0;
    size_t n = 5 + strspn(p + 5, "abcdefghijklmnopqrstuvwxyz0123456789_-");
    return strncmp(p + n, ".md", 3) == 0 && n > 5 ? n + 3 : 0;
}

int dt_gen_put(FILE *out, const char *text, enum dt_gen_markup markup)
{
    if (markup == DT_GEN_MAN)
        return put_man(out, text);
    int code = 0;
    for (const char *p = text; *p; p++) {
        size_t link = markup == DT_GEN_MD && !code ? doc_path(p) : 0;
        if (link) {
            fprintf(out, "[%.*s](%.*s)", (int)link, p, (int)link, p);
            p += link - 1;
            continue;
        }
        code ^= *p == '`';
        if (*p == '`' && markup == DT_GEN_PLAIN)
            continue;
        if (*p == '|' && markup == DT_GEN_MD)
            fputc('\\', out);
        fputc(*p, out);
    }
    return 0;
}
