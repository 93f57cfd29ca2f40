/* slurm.h - the Slurm adapter's parts (render, plan, discover) and the facts they share.
 *
 * The adapter itself is `dt_adapter_slurm` (adapter.h's contract), defined in
 * slurm.c; render is slurm_render.c, the launch's plan (sbatch, Slurm's
 * commands, following the job) slurm_submit.c.  These functions are public
 * so the unit tests reach them with their own environments and without a
 * cluster.
 *
 * One job spec becomes one sbatch script: one task per node (the agent),
 * `srun --kill-on-bad-exit=1 dtrain agent job.yaml` in the body; node 0's
 * agent hosts the coordinator at the batch host's address (the batch script
 * and node 0 are on the first node of the allocation) and a port every node
 * computes alike.  The job token travels in the job's environment.
 *
 * Not for the agent's work (launcher/agent/agent.h) or hostlist syntax (hostlist.h).
 */
#ifndef DT_SLURM_H
#define DT_SLURM_H

#include "scheduler-adapters/adapter.h"

#include <stdbool.h>
#include <stdio.h>

/* Without rendezvous.port the coordinator's port is derived from the job id,
 * PORT_BASE + id % PORT_SPAN: every node computes it before any talks, it is
 * below Linux's ephemeral range (32768-60999), and jobs that share a node
 * differ unless their ids are PORT_SPAN apart. */
#define DT_SLURM_PORT_BASE 20000
#define DT_SLURM_PORT_SPAN 10000

/* The exit status that asks for a requeue: EX_TEMPFAIL (sysexits.h), "try
 * again later".  The trainer exits with it after the checkpoint it writes on
 * SIGUSR1; the batch script requeues the job when it sees it. */
#define DT_SLURM_EXIT_REQUEUE 75

/* `dtrain launch --resume`: the run id the job's run directory is named by
 * instead of its own SLURM_JOB_ID, in sbatch's environment (so a requeue
 * keeps it), which the batch script and, through srun, every agent see. */
#define DT_SLURM_RUN_ID_ENV "DTRAIN_SLURM_RUN_ID"

extern const struct dt_adapter dt_adapter_slurm;

/* The sbatch script for job (job_path as the nodes should open it). */
int dt_slurm_render(const struct dt_job *job, const char *job_path, FILE *out);
/* adapter.h's check: what render and launch refuse in the spec alone. */
int dt_slurm_check(const struct dt_job *job);
/* The same with the spec's text (spec, not NULL) embedded: the job writes it
 * into its run directory and runs that copy (`dtrain launch`). */
int dt_slurm_render_script(const struct dt_job *job, const char *job_path, const char *spec, FILE *out);

/* Where this agent stands, from SLURM_* in env (see slurm.c). */
int dt_slurm_discover(const struct dt_job *job, char *const *env, struct dt_adapter_node *out);

/* The coordinator's port: rendezvous.port, or derived from the job id. */
int dt_slurm_port(const struct dt_job *job, const char *job_id, int *port);

/* `dtrain launch`'s plan: the script to write, sbatch to run, then (its
 * finish) follow the job, stream its output, exit with its outcome. */
int dt_slurm_plan(const struct dt_job *job, const struct dt_adapter_launch *opts,
                  struct dt_adapter_plan *out);
/* adapter.h's dry_run: sbatch's line and the script the plan writes, with the spec it carries. */
int dt_slurm_dry_run(const struct dt_job *job, const struct dt_adapter_launch *opts, FILE *out);

/* `dtrain status` and `dtrain cancel` of a launched job (launch.json's job id):
 * scontrol/sacct, and scancel followed until the job's state is final. */
struct dt_run_record;
struct dt_adapter_state;
int dt_slurm_status(const struct dt_run_record *rec, struct dt_adapter_state *out);
int dt_slurm_cancel(const struct dt_run_record *rec, double wait_s);

/* Runs a Slurm client command (PATH lookup; envp NULL = this environment),
 * capturing stdout and stderr; killed after timeout_s.  Returns its exit
 * status (128 + signal), or a negative DT_E* code when it could not run or
 * timed out (DT_ENOTFOUND: not installed). */
int dt_slurm_cmd(char *const argv[], char *const envp[], double timeout_s, char *out, size_t out_size,
                 char *err, size_t err_size);

/* Parses `scontrol show job -o` output into the state word ("RUNNING",
 * "COMPLETED", ...), the exit code (ExitCode=N:S: N, or 128 + S when a
 * signal ended it) and the node list; fields not present are left as they are. */
struct dt_slurm_job_info {
    char state[32];
    char reason[128];
    char nodes[1024];
    int exit_status; /* -1 until known */
    int restarts;
};
void dt_slurm_parse_job_info(const char *text, struct dt_slurm_job_info *info);
/* True for a state after which the job runs no more (COMPLETED, FAILED, CANCELLED, TIMEOUT, ...). */
bool dt_slurm_state_final(const char *state);

#endif
