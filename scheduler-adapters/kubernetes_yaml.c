/* kubernetes_yaml.c - writing YAML scalars that read back as what was meant.
 *
 * The trap is YAML's implicit typing: `yes`, `on`, `y`, `True` become
 * booleans under YAML 1.1 readers (PyYAML, older Go yaml), `0123` an octal or
 * decimal number, `1e3` a float, `12:30` a sexagesimal integer, `~` null, and
 * `a: b` or `- x` change structure.  Rather than enumerating YAML's grammar,
 * a string is written plain only when it starts with a letter or '/' and
 * holds only letters, digits and ". _ / -", and is not one of the
 * boolean/null words; everything else is double-quoted, which every reader
 * takes as a string, with comm/yaml_escape's escapes.
 *
 * Not for reading YAML (spec/jobspec_yaml.c does that).
 */
#include "scheduler-adapters/kubernetes_internal.h"

#include "base/yaml_escape.h"

#include <string.h>
#include <strings.h>

static const char *const typed_words[] = {"y", "n", "yes", "no", "true", "false", "on", "off", "null", NULL};

static int plain_ok(const char *s)
{
    if (!((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z') || s[0] == '/'))
        return 0;
    if (s[strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._/-")])
        return 0;
    for (int i = 0; typed_words[i]; i++)
        if (strcasecmp(s, typed_words[i]) == 0)
            return 0;
    return 1;
}

/* A loaded job's strings came through libyaml, which decodes only to UTF-8,
 * so the writer's refusal of anything else cannot happen here. */
void dt_k8s_str(FILE *out, const char *s)
{
    if (plain_ok(s))
        fputs(s, out);
    else
        (void)dt_yaml_put_quoted(out, s, strlen(s), DT_YAML_SHORT_WS);
}

void dt_k8s_indent(FILE *out, int ind)
{
    fprintf(out, "%*s", ind, "");
}

int dt_k8s_block(FILE *out, int ind, const char *text, size_t len)
{
    const unsigned char *s = (const unsigned char *)text;
    if (len == 0 || !dt_yaml_block_ok(text, len)) {
        int rc = dt_yaml_put_quoted(out, text, len, DT_YAML_SHORT_WS);
        if (rc == 0)
            fputc('\n', out);
        return rc;
    }
    size_t trailing = 0;
    while (trailing < len && s[len - 1 - trailing] == '\n')
        trailing++;
    /* Chomping: "-" drops the one newline a block would add, "" keeps one, "+" keeps all.
     * An explicit indentation indicator when the content itself starts with
     * a space or an empty line, which would otherwise set the indentation. */
    fputc('|', out);
    if (s[0] == ' ' || s[0] == '\n')
        fputc('2', out);
    fputs(trailing == 0 ? "-\n" : trailing == 1 ? "\n" : "+\n", out);
    size_t i = 0;
    while (i < len) {
        const unsigned char *nl = memchr(s + i, '\n', len - i);
        size_t end = nl ? (size_t)(nl - s) : len;
        if (end > i) {
            dt_k8s_indent(out, ind);
            fwrite(s + i, 1, end - i, out);
        }
        fputc('\n', out);
        i = end + 1;
    }
    return 0;
}

void dt_k8s_bytes(FILE *out, uint64_t bytes)
{
    static const char *const units[] = {"Ei", "Pi", "Ti", "Gi", "Mi", "Ki"};
    for (int u = 0; u < 6; u++) {
        uint64_t scale = 1ULL << (10 * (6 - u));
        if (bytes >= scale && bytes % scale == 0) {
            fprintf(out, "\"%llu%s\"", (unsigned long long)(bytes / scale), units[u]);
            return;
        }
    }
    fprintf(out, "\"%llu\"", (unsigned long long)bytes);
}

void dt_k8s_labels(const struct dt_job *job, int ind, FILE *out)
{
    dt_k8s_indent(out, ind);
    fputs("app.kubernetes.io/name: dtrain\n", out);
    dt_k8s_indent(out, ind);
    fputs("app.kubernetes.io/instance: ", out);
    dt_k8s_str(out, job->name);
    fputc('\n', out);
    dt_k8s_indent(out, ind);
    fputs("app.kubernetes.io/managed-by: dtrain\n", out);
}
