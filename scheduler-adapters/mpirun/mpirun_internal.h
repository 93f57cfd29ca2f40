/* mpirun_internal.h - shared by the mpirun adapter's files only.
 *
 * mpirun.c is the table entry (render, discover); mpirun_submit.c is the plan
 * in both shapes; mpirun_output.c reads what mpirun prints.  Not for other
 * adapters.
 */
#ifndef DT_MPIRUN_INTERNAL_H
#define DT_MPIRUN_INTERNAL_H

#include "scheduler-adapters/adapter.h"
#include "scheduler-adapters/mpirun/mpirun.h"
#include "spec/placement.h"

/* -x names an agent needs from the launcher (mpirun.c). */
const char *const *dt_mpirun__agent_exports(const struct dt_job *job);

/* Writes argv as one shell line, quoting what needs it (mpirun_argv.c). */
void dt_mpirun__print_line(FILE *out, char *const *argv);

/* True for a name of this machine: localhost, 127.x, or its host name. */
bool dt_mpirun__is_here(const char *host);

/* A --tag-output line of a rank: its rank, stream and text without the tag
 * (and without tags that arrived inside it: then the text is copied to
 * scratch, DT_LINES_MAX + 1 bytes).  False for mpirun's own lines. */
bool dt_mpirun__untag(const char *line, size_t len, char *scratch, int *rank, bool *is_err, const char **text,
                      size_t *text_len);

/* The adapter's plan (mpirun_submit.c). */
int dt_mpirun__plan(const struct dt_job *job, const struct dt_adapter_launch *opts,
                    struct dt_adapter_plan *out);

#endif
