/* specgen.h - the job spec's generated files, written from the key tables (internal to spec/gen/).
 *
 * `make generated` runs build/specgen, which writes configs/job.schema.json,
 * configs/reference.yaml and the key tables of docs/dtrain.1 and README.md
 * from the tables of spec/jobspec.c, jobspec_trainer.c and jobspec_sched.c:
 * each key's name, type, range, default and help are said there once.
 * tests/integration/test_generated.sh fails when a committed file differs
 * from what the tables give.
 *
 * Texts in the tables mark literal words `like this`; each writer turns
 * that into its own markup (troff's bold, Markdown's code, nothing in a YAML
 * comment, kept as is in JSON descriptions).
 *
 * Not for reading specs: the generator only walks the tables.
 */
#ifndef DT_SPECGEN_H
#define DT_SPECGEN_H

#include "spec/jobspec_keys.h"

#include <stdio.h>

/* How a text's `code` and non-ASCII characters are written. */
enum dt_gen_markup {
    DT_GEN_PLAIN, /* backquotes dropped (YAML comments) */
    DT_GEN_MAN,   /* troff: \fBcode\fR, \(<= for ≤, ... */
    DT_GEN_MD,    /* Markdown table cells: `code` kept, '|' escaped */
};

/* The writers; each returns 0, or a DT_E* code with dt_error_last() set. */
int dt_gen_schema(FILE *out);
int dt_gen_reference(FILE *out);
/* Copies `in` to `out`, replacing the lines between the BEGIN and END
 * markers (troff comments in the man page, HTML comments in README.md)
 * with the key tables; the markers stay. */
int dt_gen_man(FILE *in, FILE *out);
int dt_gen_markdown(FILE *in, FILE *out);

/* Writes `text` in `markup`; DT_EINVAL for a character the man page cannot say. */
int dt_gen_put(FILE *out, const char *text, enum dt_gen_markup markup);

/* The value's form in words, `code` marked: "integer 1–65536", "`cpu` | `cuda`". */
void dt_gen_form(const struct dt_spec_key *k, char *buf, size_t size);

/* The first sentence of `text` (to its first ". ", or all of it) into buf. */
void dt_gen_first_sentence(const char *text, char *buf, size_t size);

/* True for a key whose value is a mapping of keys the tables describe. */
int dt_gen_is_section(const struct dt_spec_key *k);

#endif
