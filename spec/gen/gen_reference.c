/* gen_reference.c - configs/reference.yaml: every key of a job spec with its default or an example.
 *
 * Keys come in table order, each with its default (`def`) or, where it has
 * none, the table's example value, and the first sentence of its help as a
 * comment; a list of mappings shows one item.  Keys whose example would clash
 * with another's (command beside trainer, a toleration's value beside
 * operator Exists) are written commented out, so the file is a valid spec:
 * `dtrain validate` and the JSON Schema both accept it.
 *
 * Not for --print (spec/jobspec_print.c writes a loaded job).
 */
#include "spec/gen/specgen.h"

#include "base/error.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define COMMENT_COL 34
#define WIDTH 110

static const char header[] =
    "# reference.yaml - every key of a dtrain job spec, each set to its default or to an example value.\n"
    "#\n"
    "# Generated from the key tables (spec/jobspec.c, jobspec_trainer.c, jobspec_sched.c) by\n"
    "# `make generated`: edit those, not this file.  Copy the parts you need;\n"
    "# `dtrain validate configs/reference.yaml` checks a spec, `dtrain validate --print job.yaml` shows\n"
    "# one with every default filled in, and `man dtrain` (JOB SPEC) says more about each key.\n"
    "# \"(example)\" marks a value that is not the default; keys commented out would clash with\n"
    "# others shown here (command with trainer, the keys of token data with images).\n"
    "# Unknown keys are errors, so a typo never silently changes a job.\n"
    "# Formats: durations 30s, 10m, 500ms, 1h30m; sizes 25MB, 512KiB, 1GiB, 64Gi\n"
    "# (K/M/G/T are powers of 1000, Ki/Mi/Gi/Ti powers of 1024).  YAML 1.2: only\n"
    "# true/false are booleans.\n"
    "\n";

/* YAML 1.1 readers take these plain words for booleans; a string key's value is quoted. */
static const char *shown_value(const struct dt_spec_key *k, char *buf, size_t size)
{
    static const char *const bools[] = {"y", "n", "yes", "no", "on", "off", NULL};
    const char *v = k->def ? k->def : k->example;
    for (int i = 0; v && k->type != DT_KT_BOOL && bools[i]; i++)
        if (strcasecmp(v, bools[i]) == 0) {
            snprintf(buf, size, "\"%s\"", v);
            return buf;
        }
    return v;
}

/* "(required) local | slurm | ...: Where the job runs." */
static void comment_text(const struct dt_spec_key *k, char *buf, size_t size)
{
    char first[512], words[256] = "";
    dt_gen_first_sentence(k->help, first, sizeof first);
    if (k->names && !dt_gen_is_section(k)) {
        size_t used = 0;
        for (int i = 0; k->names[i] && used < sizeof words; i++)
            used += (size_t)snprintf(words + used, sizeof words - used, "%s%s", i ? " | " : "", k->names[i]);
        if (used < sizeof words)
            snprintf(words + used, sizeof words - used, ". ");
    }
    const char *tag = k->flags & DT_KF_REQUIRED ? "(required) " : !k->def && k->example ? "(example) " : "";
    snprintf(buf, size, "%s%s%s", tag, words, first);
}

/* `line` then the comment (its `code` marks dropped) from COMMENT_COL, or two
 * spaces after a longer line, wrapped at WIDTH under itself. */
static void put_line(FILE *out, const char *line, const char *comment)
{
    char plain[1024];
    size_t used = 0;
    for (const char *c = comment; *c && used + 1 < sizeof plain; c++)
        if (*c != '`')
            plain[used++] = *c;
    plain[used] = '\0';
    size_t col = strlen(line) + 2 > COMMENT_COL ? strlen(line) + 2 : COMMENT_COL;
    size_t room = WIDTH > col + 22 ? WIDTH - col - 2 : 20;
    fputs(line, out);
    for (const char *p = plain; *p;) {
        size_t n = strlen(p);
        if (n > room) { /* at the last space that fits, or the first when none does */
            for (n = room; n > 0 && p[n] != ' '; n--)
                ;
            n = n ? n : strcspn(p, " ");
        }
        fprintf(out, "%*s# %.*s\n", (int)(p == plain ? col - strlen(line) : col), "", (int)n, p);
        for (p += n; *p == ' '; p++)
            ;
    }
    if (!plain[0])
        fputc('\n', out);
}

static int put_section(FILE *out, const struct dt_spec_section *sec, int indent);

/* One key: "<indent>[# ][- ]name: value   # comment", and a section's keys under it. */
static int put_key(FILE *out, const struct dt_spec_key *k, int indent, const char *lead)
{
    char line[1024], comment[1024], q[64];
    int hash = k->doc & DT_DOC_REF_COMMENT;
    const char *v = dt_gen_is_section(k) ? NULL : shown_value(k, q, sizeof q);
    snprintf(line, sizeof line, "%*s%s%s%s:%s%s", indent, "", hash ? "# " : "", lead, k->name, v ? " " : "",
             v ? v : "");
    comment_text(k, comment, sizeof comment);
    put_line(out, line, comment);
    int rc = 0, inner = indent + (int)strlen(lead) + 2;
    if (rc == 0 && (k->type == DT_KT_SECTION || k->type == DT_KT_SECTION_PTR))
        rc = put_section(out, k->sub, inner);
    if (rc == 0 && k->type == DT_KT_SECLIST) { /* one item: its first key after "- " */
        const struct dt_spec_section *s = k->sub;
        if (s->keys[0].doc & DT_DOC_REF_COMMENT)
            return dt_error_set(DT_EINVAL, "specgen: %s: the first key of an item cannot be commented out",
                                k->name);
        for (size_t i = 0; rc == 0 && i < s->n_keys; i++)
            rc = put_key(out, &s->keys[i], i ? inner + 2 : inner, i ? "" : "- ");
    }
    return rc;
}

static int put_section(FILE *out, const struct dt_spec_section *sec, int indent)
{
    for (size_t i = 0; i < sec->n_keys; i++) {
        int rc = put_key(out, &sec->keys[i], indent, "");
        if (rc)
            return rc;
    }
    return 0;
}

int dt_gen_reference(FILE *out)
{
    fputs(header, out);
    return put_section(out, &dt_jobspec_root, 0);
}
