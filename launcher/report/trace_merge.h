/* trace_merge.h - the merge behind `dtrain trace merge`, apart from its
 * command line (cmd_trace.c) so that tests and the fuzz target run it in
 * their own process.
 *
 * Not for recording traces (worker/trace.h) or for the command line's
 * defaults (which output file, whether the argument is a run directory).
 */
#ifndef DT_TRACE_MERGE_H
#define DT_TRACE_MERGE_H

#include <stdio.h>

/* Merges the traces named by inputs (files, or run directories whose
 * trace_rank<N>.json are taken) into out.  run_dir, when not NULL, is where
 * summary.json gives the launch row.  Each rank's time per step and any
 * straggler are printed on says.  *merged gets the number of traces merged.
 * On error the message names the file (and line and column). */
int dt_trace_merge(char *const *inputs, int n_inputs, const char *run_dir, const char *out, FILE *says,
                   int *merged);

#endif
