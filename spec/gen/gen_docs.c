/* gen_docs.c - the key tables of docs/dtrain.1 (JOB SPEC) and README.md (Job spec reference).
 *
 * Both documents keep their prose; the lines between two markers are the
 * tables' and are rewritten whole: a section for the top level, then one for
 * each top-level section (rendezvous, trainer, slurm, ...) with every key
 * under it, each as "form; default. help" (the man page) or a row of
 * key | type | default | meaning (README.md).
 *
 * Not for the schema or reference.yaml (gen_schema.c, gen_reference.c).
 */
#include "spec/gen/specgen.h"

#include "base/error.h"

#include <stdlib.h>
#include <string.h>

#define MAN_BEGIN ".\\\" BEGIN KEYS"
#define MAN_END ".\\\" END KEYS"
#define MD_BEGIN "<!-- BEGIN KEYS"
#define MD_END "<!-- END KEYS"

struct doc {
    FILE *out;
    enum dt_gen_markup markup;
    int rc;
};

/* "default `25`", "required", "default none", or "" */
static void default_words(const struct dt_spec_key *k, char *buf, size_t size)
{
    if (k->flags & DT_KF_REQUIRED)
        snprintf(buf, size, "required");
    else if (k->def)
        snprintf(buf, size, "default `%s`", k->def);
    else if (k->unset)
        snprintf(buf, size, "default %s", k->unset);
    else
        buf[0] = '\0';
}

static void put(struct doc *d, const char *text)
{
    int rc = dt_gen_put(d->out, text, d->markup);
    if (rc && !d->rc)
        d->rc = rc;
}

static void man_entry(struct doc *d, const char *path, const struct dt_spec_key *k)
{
    char form[512], def[256];
    dt_gen_form(k, form, sizeof form);
    default_words(k, def, sizeof def);
    fprintf(d->out, ".TP\n.B ");
    put(d, path);
    fputc('\n', d->out);
    put(d, form);
    if (def[0]) {
        fputs("; ", d->out);
        put(d, def);
    }
    fputs(". ", d->out);
    put(d, k->help);
    fputc('\n', d->out);
}

static void md_row(struct doc *d, const char *path, const struct dt_spec_key *k)
{
    char form[512], def[256];
    dt_gen_form(k, form, sizeof form);
    default_words(k, def, sizeof def);
    const char *shown = k->flags & DT_KF_REQUIRED ? "required" : k->def ? def + 8 : k->unset ? k->unset : "—";
    fputs("| `", d->out);
    put(d, path);
    fputs("` | ", d->out);
    put(d, form);
    fputs(" | ", d->out);
    put(d, shown);
    fputs(" | ", d->out);
    put(d, k->help);
    fputs(" |\n", d->out);
}

static void entry(struct doc *d, const char *path, const struct dt_spec_key *k)
{
    if (d->markup == DT_GEN_MAN)
        man_entry(d, path, k);
    else
        md_row(d, path, k);
}

/* Every key under `sec`, depth first, named from `prefix`. */
static void entries(struct doc *d, const struct dt_spec_section *sec, const char *prefix)
{
    for (size_t i = 0; i < sec->n_keys; i++) {
        const struct dt_spec_key *k = &sec->keys[i];
        char path[256];
        snprintf(path, sizeof path, "%s%s%s", prefix, *prefix ? "." : "", k->name);
        entry(d, path, k);
        if (k->type == DT_KT_SECLIST)
            strncat(path, "[]", sizeof path - strlen(path) - 1);
        if (dt_gen_is_section(k))
            entries(d, k->sub, path);
    }
}

static void heading(struct doc *d, const char *name, int top)
{
    if (d->markup == DT_GEN_MAN)
        fprintf(d->out, ".SS %s\n", name);
    else
        fprintf(d->out, "### %s%s%s\n\n| key | type | default | meaning |\n|---|---|---|---|\n",
                top ? "" : "`", name, top ? "" : "`");
}

static void tables(struct doc *d)
{
    const struct dt_spec_section *root = &dt_jobspec_root;
    heading(d, "Top level", 1);
    for (size_t i = 0; i < root->n_keys; i++)
        entry(d, root->keys[i].name, &root->keys[i]);
    for (size_t i = 0; i < root->n_keys; i++) {
        const struct dt_spec_key *k = &root->keys[i];
        if (!dt_gen_is_section(k))
            continue;
        if (d->markup == DT_GEN_MD)
            fputc('\n', d->out);
        heading(d, k->name, 0);
        /* the man page names keys in full (rendezvous.port), README.md within the section (port) */
        entries(d, k->sub, d->markup == DT_GEN_MAN ? k->name : "");
    }
    if (d->markup == DT_GEN_MD) /* the table ends before the END marker */
        fputc('\n', d->out);
}

/* Copies `in` to `out` with the lines between the markers replaced by the tables. */
static int splice(FILE *in, FILE *out, struct doc *d, const char *begin, const char *end, const char *what)
{
    char *line = NULL;
    size_t cap = 0;
    int state = 0; /* 0 before the tables, 1 inside, 2 after */
    while (getline(&line, &cap, in) >= 0) {
        if (state == 1 && strncmp(line, end, strlen(end)) == 0)
            state = 2;
        if (state != 1)
            fputs(line, out);
        if (state == 0 && strncmp(line, begin, strlen(begin)) == 0) {
            state = 1;
            tables(d);
        }
    }
    free(line);
    if (state != 2)
        return dt_error_set(DT_EINVAL, "specgen: %s has no %s line%s", what, state ? end : begin,
                            state ? " after its BEGIN line" : "");
    return d->rc;
}

int dt_gen_man(FILE *in, FILE *out)
{
    struct doc d = {.out = out, .markup = DT_GEN_MAN};
    return splice(in, out, &d, MAN_BEGIN, MAN_END, "the man page");
}

int dt_gen_markdown(FILE *in, FILE *out)
{
    struct doc d = {.out = out, .markup = DT_GEN_MD};
    return splice(in, out, &d, MD_BEGIN, MD_END, "the Markdown file");
}
