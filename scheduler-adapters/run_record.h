/* run_record.h - what `dtrain launch` leaves in a run directory so that another
 * terminal finds the job again: <run dir>/launch.json and <run dir>/job.yaml.
 *
 *   launch.json  who launched what where: the scheduler, the launcher's pid
 *                (with its start time, so a reused pid is never taken for it)
 *                and host, the scheduler's handle (Slurm job id, Kubernetes
 *                Job name and namespace), the spec's path, the job's shape.
 *   job.yaml     the spec as launched, every default filled in (`dtrain
 *                validate --print`), so `dtrain launch --resume` can compare
 *                a new spec with what the run trained.
 *
 * Both are written at submit time, before a rank runs, by whoever knows the
 * handle: the launcher for a job it hosts (local, mpirun with backend: mpi),
 * the adapter after sbatch, kubectl apply or choosing mpirun's run id.
 * `dtrain status/logs/cancel/list` read them (launcher/cli/run_info.c) and hand
 * the record to the adapter's status and cancel ops (adapter.h).
 *
 * A record is a claim, not a command: in a shared log directory anyone may
 * have planted one.  So reading it checks what can be checked (the
 * scheduler's handle by its syntax, numbers by their range, the file a
 * regular one that is not a link), says whether the caller alone could have
 * written it (trusted), and nothing is signalled on its word alone: the
 * launcher it names must be a process of the caller, with the recorded start
 * time, running dtrain, and holding this run directory open (which the
 * launcher does for its whole life, from dt_run_record_write on).
 *
 * Not for how the run ended: summary.json (the agent) says that.
 */
#ifndef DT_RUN_RECORD_H
#define DT_RUN_RECORD_H

#include "scheduler-adapters/adapter.h"
#include "spec/jobspec.h"

#include <limits.h>
#include <stdbool.h>

#define DT_RUN_RECORD_FILE "launch.json"
#define DT_RUN_RECORD_SPEC "job.yaml"

struct dt_run_record {
    char scheduler[32]; /* the adapter's name: local, slurm, kubernetes, mpirun */
    char name[128];     /* the job's name */
    char run_id[64];
    char run_dir[PATH_MAX];    /* absolute */
    char spec[PATH_MAX];       /* the spec file launched, absolute when it could be resolved */
    char host[256];            /* where `dtrain launch` ran */
    int pid;                   /* the `dtrain launch` process (the local job's agent) */
    long long pid_start;       /* its start time, /proc/<pid>/stat field 22 (clock ticks since boot) */
    char job_id[128];          /* the scheduler's handle: Slurm job id, Kubernetes Job name; "" */
    char namespace_name[128];  /* Kubernetes: the Job's namespace; "" */
    int nodes, nproc_per_node; /* nproc_per_node 0: per node's GPUs (gpu) */
    double started_unix;
    /* Set by dt_run_record_read, never written: */
    bool trusted;                        /* the run directory and launch.json are the caller's, writable by
                                            no one else */
    char distrust[160];                  /* why not, when !trusted */
    unsigned long long dir_dev, dir_ino; /* the directory the record was read from */
};

/* Fills the fields every launch shares from job, run_dir and run_id (the
 * launcher's pid, its start time and host, the spec's path, the shape); the
 * scheduler's handle is the caller's to add. */
void dt_run_record_init(struct dt_run_record *r, const struct dt_job *job, const char *run_dir,
                        const char *run_id);

/* Writes <run_dir>/job.yaml (the loaded job printed) and <run_dir>/launch.json,
 * each atomically, 0600. */
int dt_run_record_write(const struct dt_run_record *r, const struct dt_job *job);

/* Opens (creating it if needed) the run directory <log_dir>/<name>-<run_id>,
 * then dt_run_record_init with the scheduler's handle job_id (may be NULL)
 * and dt_run_record_write: what an adapter that names the run directory
 * itself calls once it knows the handle.  A failure is only a warning for the
 * caller to print: the job runs without a record. */
int dt_run_record_begin(const struct dt_job *job, const char *log_dir, const char *run_id, const char *job_id,
                        struct dt_run_record *r);

/* Reads <run_dir>/launch.json (a regular file, not through a link, at most
 * 64 KiB); DT_ENOTFOUND when there is none, DT_EPROTO for a record whose
 * handle is no id of its scheduler or whose numbers are out of range. */
int dt_run_record_read(const char *run_dir, struct dt_run_record *r);

/* <run_dir>/job.yaml loaded (read with dt_fs_read_whole, so a FIFO
 * or link planted under its name is refused, not waited on). */
int dt_run_record_load_spec(const char *run_dir, struct dt_job **job);

/* The syntax of the handles a record may carry: a Slurm job id (digits, or
 * <job>_<task> of an array) and a Kubernetes name (a DNS-1123 label). */
bool dt_run_record_slurm_id_ok(const char *id);
bool dt_run_record_k8s_name_ok(const char *name);

/* The launcher the record names, verified: on this host, a process of the
 * caller (real and effective uid), with the recorded start time, whose
 * executable is named as this one (dtrain), and which holds open the run
 * directory the record was read from.  Returns a descriptor of its
 * /proc/<pid> directory (a signal through it reaches that process or none),
 * or DT_ENOTFOUND when it has exited (or the pid is another process's now),
 * DT_EUNSUPPORTED when it ran on another host, DT_EAUTH naming the claim
 * that failed. */
int dt_run_record_launcher_open(const struct dt_run_record *r);

/* True while the verified launcher of the record runs. */
bool dt_run_record_launcher_alive(const struct dt_run_record *r);

/* The status and cancel ops of a job its launcher hosts (local, mpirun):
 * the launcher alive or not, where it runs ("dtrain launch pid N on HOST"). */
void dt_run_record_launcher_state(const struct dt_run_record *r, struct dt_adapter_state *out);
/* SIGTERM to the verified launcher (dt_run_record_launcher_open), which
 * stops its ranks (or mpirun) as for Ctrl-C; if it still runs after wait_s,
 * a second SIGTERM (kill at once) and up to 5 s more.  0 once it is gone (or
 * had ended); DT_EUNSUPPORTED when it ran on another host; DT_EAUTH when the
 * process is not the run's launcher (nothing is signalled); DT_ETIMEDOUT when
 * it outlives both. */
int dt_run_record_stop_launcher(const struct dt_run_record *r, double wait_s);

/* This machine's start time of pid (/proc/<pid>/stat field 22), or -1. */
long long dt_run_record_pid_start(int pid);

#endif
