/* jobspec_print.c - writes a loaded job back out as YAML, defaults included (`dtrain validate --print`).
 *
 * Walks the same key tables as the parser, so every key the parser knows is
 * printed and nothing else.  The output is meant to load back to an equal
 * job: strings are double-quoted with escapes and numbers use the shortest
 * text that reads back to the same double.
 *
 * Not for messages (jobspec_values.c) or for rendering scheduler files.
 */
#include "base/yaml_escape.h"
#include "spec/jobspec.h"
#include "spec/jobspec_keys.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define FIELD(obj, k, T) ((const T *)((const char *)(obj) + (k)->off))
#define COUNT(obj, k) (*(const int *)((const char *)(obj) + (k)->aux))

/* A loaded job's strings came through libyaml, which decodes only to UTF-8,
 * so the writer's refusal of anything else cannot happen here. */
static void put_quoted(const char *s, FILE *out)
{
    (void)dt_yaml_put_quoted(out, s, strlen(s), DT_YAML_HEX);
}

const char *dt_spec_shortest(double x, char *buf, size_t size)
{
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, size, "%.*g", prec, x);
        if (strtod(buf, NULL) == x)
            break;
    }
    return buf;
}

static void put_number(double x, FILE *out)
{
    char buf[40];
    fputs(dt_spec_shortest(x, buf, sizeof buf), out);
}

/* Durations and sizes take no exponent, so they are written in fixed point. */
static void put_fixed(double x, const char *unit, FILE *out)
{
    char buf[64];
    snprintf(buf, sizeof buf, "%.9f", x);
    char *end = buf + strlen(buf) - 1;
    while (*end == '0')
        *end-- = '\0';
    if (*end == '.')
        *end = '\0';
    fprintf(out, "%s%s", buf, unit);
}

static void put_duration(double s, FILE *out)
{
    if (s < 1)
        put_fixed(s * 1000, "ms", out);
    else
        put_fixed(s, "s", out);
}

static void put_strlist(char *const *list, FILE *out) /* NULL-terminated */
{
    fputc('[', out);
    for (size_t i = 0; list[i]; i++) {
        if (i)
            fputs(", ", out);
        put_quoted(list[i], out);
    }
    fputc(']', out);
}

static int is_section(const struct dt_spec_key *k)
{
    return k->type == DT_KT_SECTION || k->type == DT_KT_SECTION_PTR || k->type == DT_KT_SECLIST ||
           k->type == DT_KT_STRMAP;
}

/* Writes a scalar or flow value; returns 0 when the key is unset and is left out. */
static int put_value(const struct dt_spec_key *k, const void *obj, FILE *out)
{
    char buf[512];
    switch (k->type) {
    case DT_KT_STR:
        if (!*FIELD(obj, k, char *))
            return 0;
        put_quoted(*FIELD(obj, k, char *), out);
        return 1;
    case DT_KT_CHARS:
        put_quoted(FIELD(obj, k, char), out);
        return 1;
    case DT_KT_INT:
        if ((k->flags & DT_KF_ZERO_UNSET) && !*FIELD(obj, k, int))
            return 0;
        fprintf(out, "%d", *FIELD(obj, k, int));
        return 1;
    case DT_KT_I64:
        if (((k->flags & DT_KF_ZERO_UNSET) && !*FIELD(obj, k, int64_t)) ||
            ((k->flags & DT_KF_NEG_UNSET) && *FIELD(obj, k, int64_t) < 0))
            return 0;
        fprintf(out, "%lld", (long long)*FIELD(obj, k, int64_t));
        return 1;
    case DT_KT_U64:
        fprintf(out, "%llu", (unsigned long long)*FIELD(obj, k, uint64_t));
        return 1;
    case DT_KT_NUM:
        if ((k->flags & DT_KF_ZERO_UNSET) && *FIELD(obj, k, double) == 0)
            return 0;
        put_number(*FIELD(obj, k, double), out);
        return 1;
    case DT_KT_BOOL:
        fputs(*FIELD(obj, k, bool) ? "true" : "false", out);
        return 1;
    case DT_KT_ENUM:
        if ((k->flags & DT_KF_ZERO_UNSET) && !*FIELD(obj, k, int))
            return 0;
        fputs(k->names[*FIELD(obj, k, int)], out);
        return 1;
    case DT_KT_DURATION:
        put_duration(*FIELD(obj, k, double), out);
        return 1;
    case DT_KT_SIZE_MB:
        put_fixed(*FIELD(obj, k, double), "MiB", out);
        return 1;
    case DT_KT_BYTES:
        if (!*FIELD(obj, k, uint64_t))
            return 0;
        fprintf(out, "%llu", (unsigned long long)*FIELD(obj, k, uint64_t));
        return 1;
    case DT_KT_STRLIST:
        if (!*FIELD(obj, k, char **))
            return 0;
        put_strlist((char *const *)*FIELD(obj, k, char **), out);
        return 1;
    case DT_KT_YAML:
        if (!*FIELD(obj, k, char *))
            return 0;
        fputs(*FIELD(obj, k, char *), out); /* flow YAML already */
        return 1;
    case DT_KT_CUSTOM:
        if (!k->print(obj, buf, sizeof buf))
            return 0;
        fputs(buf, out);
        return 1;
    default:
        return 0;
    }
}

/* A value as read back goes through ${VAR} interpolation again (jobspec_source.c), so
 * every '$' of a value that is not verbatim is written '$$': the output loads back to
 * the same job.  Inside a quoted scalar '$' has no YAML meaning, so doubling is safe. */
static void put_dollars(const char *text, const struct dt_spec_key *k, FILE *out)
{
    for (; *text; text++) {
        if (*text == '$' && !(k->flags & DT_KF_VERBATIM))
            fputc('$', out);
        fputc(*text, out);
    }
}

static void put_section(const struct dt_spec_key *k, const void *sub, int indent, FILE *out)
{
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    if (!mem)
        return;
    dt_spec_print(k->sub, sub, indent + 2, mem);
    fclose(mem);
    if (len)
        fprintf(out, "%*s%s:\n%s", indent, "", k->name, text);
    else
        fprintf(out, "%*s%s: {}\n", indent, "", k->name);
    free(text);
}

static void put_block(const struct dt_spec_key *k, const void *obj, int indent, FILE *out)
{
    if (k->type == DT_KT_SECTION) {
        put_section(k, FIELD(obj, k, char), indent, out);
    } else if (k->type == DT_KT_SECTION_PTR) {
        if (*FIELD(obj, k, void *))
            put_section(k, *FIELD(obj, k, void *), indent, out);
    } else if (k->type == DT_KT_STRMAP) {
        const struct dt_env_entry *e = *FIELD(obj, k, struct dt_env_entry *);
        if (!e || COUNT(obj, k) == 0)
            return;
        fprintf(out, "%*s%s:\n", indent, "", k->name);
        for (int i = 0; i < COUNT(obj, k); i++) {
            fprintf(out, "%*s", indent + 2, "");
            put_quoted(e[i].name, out);
            fputs(": ", out);
            char *v = NULL;
            size_t vlen = 0;
            FILE *mem = open_memstream(&v, &vlen);
            if (mem) {
                put_quoted(e[i].value, mem);
                fclose(mem);
                put_dollars(v, k, out);
                free(v);
            }
            fputc('\n', out);
        }
    } else if (k->type == DT_KT_SECLIST) {
        const char *arr = *FIELD(obj, k, char *);
        if (!arr || COUNT(obj, k) == 0)
            return;
        fprintf(out, "%*s%s:\n", indent, "", k->name);
        for (int i = 0; i < COUNT(obj, k); i++) {
            fprintf(out, "%*s-\n", indent + 2, "");
            dt_spec_print(k->sub, arr + (size_t)i * k->sub->size, indent + 4, out);
        }
    }
}

void dt_spec_print(const struct dt_spec_section *sec, const void *obj, int indent, FILE *out)
{
    for (size_t i = 0; i < sec->n_keys; i++) {
        const struct dt_spec_key *k = &sec->keys[i];
        if (is_section(k)) {
            put_block(k, obj, indent, out);
            continue;
        }
        char *text = NULL;
        size_t len = 0;
        FILE *mem = open_memstream(&text, &len);
        if (!mem)
            continue;
        int set = put_value(k, obj, mem);
        fclose(mem);
        if (set) {
            fprintf(out, "%*s%s: ", indent, "", k->name);
            put_dollars(text, k, out);
            fputc('\n', out);
        }
        free(text);
    }
}
