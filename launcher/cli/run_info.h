/* run_info.h - what a run directory and its scheduler say about one run:
 * `dtrain status`, `dtrain logs`, `dtrain cancel` and `dtrain list` read runs
 * through here.
 *
 * A run is named by its directory, or by a handle found in a log directory:
 * the scheduler's job id (Slurm), the Job's name (Kubernetes), the run id,
 * or the job's name (its newest run).  Its state joins three sources:
 * launch.json (scheduler-adapters/run_record.h) and the scheduler's answer
 * through the adapter's status op while the job is there; summary.json once
 * the agent has written how it ended; metrics.jsonl for the step.  A run
 * made before launch.json existed, or by `dtrain agent` alone, is read from
 * its files only.
 *
 * Not for what a run contains in detail (`dtrain report`, launcher/report/).
 */
#ifndef DT_RUN_INFO_H
#define DT_RUN_INFO_H

#include "scheduler-adapters/adapter.h"
#include "scheduler-adapters/run_record.h"

#include <limits.h>
#include <stdbool.h>

struct dt_run_info {
    char dir[PATH_MAX];
    bool have_record;
    struct dt_run_record rec;
    bool asked; /* the adapter's status op answered into sched */
    struct dt_adapter_state sched;
    bool have_summary;           /* summary.json */
    char ended[32];              /* its status: succeeded, failed, interrupted; "" without one */
    int exit_status;             /* its exit_status, -1 without one */
    int world_size, nnodes;      /* 0 when unknown */
    int attempt;                 /* the newest attempt_<k>/, -1 before any */
    long long step, total_steps; /* the last training row of metrics.jsonl; -1 when none (total_steps
                                    alone: rows that do not say it) */
    char state[32]; /* pending, running, succeeded, failed, interrupted, cancelled, lost, unknown */
};

/* The run directory a handle names: a directory as it is, else the run in
 * log_dir (NULL: "runs") whose directory name, run id, scheduler job id or
 * job name (its newest run) is the handle.  DT_ENOTFOUND saying where it
 * looked otherwise. */
int dt_run_info_find(const char *handle, const char *log_dir, char *dir, size_t size);

/* Reads what dir says; with ask, the scheduler too (the adapter's status
 * op: a pid check for local and mpirun, scontrol or kubectl otherwise). */
int dt_run_info_load(const char *dir, bool ask, struct dt_run_info *out);

/* s as it is safe to print on a terminal: control characters (C0, DEL, C1
 * as UTF-8 U+0080..U+009F) and bytes that are no UTF-8 written as \xNN, so
 * a planted record or directory name cannot move the cursor, retitle the
 * window or rewrite the lines above.  Returns buf (cut at size). */
const char *dt_run_info_shown(const char *s, char *buf, size_t size);

/* True while the run is queued or running. */
bool dt_run_info_active(const struct dt_run_info *in);

/* The adapter of a run's record, with a sentence when it has none or the
 * record names no adapter built in. */
const struct dt_adapter *dt_run_info_adapter(const struct dt_run_info *in);

#endif
