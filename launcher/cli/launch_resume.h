/* launch_resume.h - the run directory of a `dtrain launch`: a new one, or the
 * one `--resume RUN_DIR` continues.
 *
 * A new run of a job the launcher hosts (local, mpirun's MPI ranks) gets its
 * directory here, before node 0's agent starts, so that launch.json and the
 * spec snapshot (scheduler-adapters/run_record.h) are there from the start.
 *
 * --resume RUN_DIR continues a run in its own directory: the same run id, so
 * the trainer's relative checkpoint.dir is the run's and `resume: auto` picks
 * up its newest checkpoint; the rank logs of the new launch are appended
 * after a marker line (agent.h).  It is refused when the new spec's model or
 * data differ from the run's snapshot (job.yaml), naming the keys, since the
 * checkpoint would then be another model's or would continue another data
 * order; any other key (steps, epochs, the optimizer, restarts) may change.
 *
 * Not for the checkpoint itself (worker/ckpt.c) or what the trainer checks
 * when it loads one (seed, world size).
 */
#ifndef DT_LAUNCH_RESUME_H
#define DT_LAUNCH_RESUME_H

#include "spec/jobspec.h"

#include <stddef.h>
#include <stdio.h>

/* Writes to out, one per line ("trainer.model.hidden: [64] in the run, [128]
 * now"), each leaf key under the given prefixes (NULL-terminated, dotted)
 * whose value differs between the two jobs as `dtrain validate --print`
 * writes them, a key present in one only included.  Returns how many
 * differ, or a negative DT_E* code. */
int dt_launch_spec_diff(const struct dt_job *was, const struct dt_job *now, const char *const *prefixes,
                        FILE *out);

/* --resume RUN_DIR for job: checks RUN_DIR is a run of this job's name with
 * a spec snapshot whose model and data match, and gives the log directory
 * and run id that name it again.  DT_EINVAL with the reason (the differing
 * keys listed) otherwise. */
int dt_launch_resume_check(const struct dt_job *job, const char *run_dir, char *log_dir, size_t log_dir_size,
                           char *run_id, size_t run_id_size);

/* The run directory for node 0 hosted here: <log_dir>/<name>-<run_id> for a
 * given run_id (--resume), else a new one whose id goes into run_id (at least
 * DT_RUN_ID_MAX bytes); then launch.json and job.yaml in it.  Its path goes
 * into dir (at least PATH_MAX bytes): the ranks read the spec from its
 * job.yaml, which only this user can change. */
int dt_launch_run_dir(const struct dt_job *job, const char *log_dir, char *run_id, size_t run_id_size,
                      char *dir);

#endif
