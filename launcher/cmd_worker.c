/* cmd_worker.c - `dtrain worker job.yaml`: one rank of the bundled trainer.
 *
 * `dtrain launch` runs this as every rank's command when the job has a
 * `trainer:` section.  It is the bridge between the launcher's world and the
 * worker library: it loads the spec, reads the rank's environment (RANK,
 * WORLD_SIZE, LOCAL_WORLD_SIZE, DTRAIN_RUN_DIR, DTRAIN_RESTART_COUNT),
 * connects to the coordinator's store, builds the communicator and hands both
 * to the trainer (worker/trainer.h).  Run by hand without WORLD_SIZE, it
 * trains as a single process in the current directory.  A fatal error goes
 * to stderr and, when TORCHELASTIC_ERROR_FILE is set, into that report.
 *
 * Not for training logic: that lives in worker/.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm.h"
#include "base/env.h"
#include "base/error.h"
#include "base/fs.h"
#include "base/json_escape.h"
#include "base/log.h"
#include "comm/store.h"
#include "launcher/cli.h"
#include "spec/jobspec.h"
#include "worker/heartbeat.h"
#include "worker/kernels.h"
#include "worker/heartbeat_fault.h"
#include "scheduler-adapters/mpirun/mpirun.h"
#include "worker/trace.h"
#include "worker/trainer.h"
#include "base/clock.h"

static void usage(FILE *out)
{
    fprintf(out, "Usage: dtrain worker JOB.yaml\n\n"
                 "Runs one rank of the bundled trainer described by the job's trainer: section.\n"
                 "`dtrain launch` starts it on every rank; by hand (no WORLD_SIZE set) it trains as a\n"
                 "single process and writes metrics.jsonl, checkpoints/ and trainer_summary.json in\n"
                 "$DTRAIN_RUN_DIR or the current directory.\n");
}

/* OpenBLAS may have picked kernels far below this CPU (kernels.h): run
 * again with the right ones.  exec keeps the pid, so the agent supervising
 * this rank sees no difference. */
static void fix_blas_kernels(const char *spec)
{
    const char *want = dt_kernels_cpu_blas_coretype();
    if (!want)
        return;
    setenv("OPENBLAS_CORETYPE", want, 1);
    char *const argv[] = {"dtrain", "worker", (char *)spec, NULL};
    execv("/proc/self/exe", argv);
    dt_log_warn("could not re-run with OPENBLAS_CORETYPE=%s; OpenBLAS keeps its slow Prescott kernels", want);
}

/* torchrun's rank variables, checked (env.h). */
static int env_int(const char *name, int dflt, int *out) { return dt_env_int(name, dflt, 0, 1 << 20, out); }

struct rank_env {
    int rank, world, local_rank, local_world, restart;
};

static int read_env(struct rank_env *e)
{
    int rc = env_int("WORLD_SIZE", 0, &e->world);
    if (!rc)
        rc = env_int("RANK", 0, &e->rank);
    if (!rc)
        rc = env_int("LOCAL_RANK", e->rank, &e->local_rank);
    if (!rc)
        rc = env_int("LOCAL_WORLD_SIZE", e->world > 0 ? e->world : 1, &e->local_world);
    if (!rc)
        rc = env_int("DTRAIN_RESTART_COUNT", 0, &e->restart);
    if (!rc && e->world > 0 && e->rank >= e->world)
        rc = dt_error_set(DT_EINVAL, "RANK=%d is not below WORLD_SIZE=%d", e->rank, e->world);
    return rc;
}

/* Store and communicator for a launched rank; none for a lone process.
 * ph[0..2] get the start, store-connected and communicator-ready times (traces). */
static int connect(const struct dt_job *job, const struct rank_env *e, struct dt_store **store,
                   struct dt_comm **comm, int64_t ph[3])
{
    ph[0] = ph[1] = ph[2] = dt_clock_ns();
    if (e->world == 0)
        return 0;
    double timeout = job->rendezvous.timeout_s > 0 ? job->rendezvous.timeout_s : 60;
    int rc = dt_store_connect_env(timeout, store);
    ph[1] = ph[2] = dt_clock_ns();
    if (rc)
        return dt_error_prefix("rank %d: connecting to the coordinator", e->rank);
    /* A fresh key namespace per restart, so a new round never meets the old one's keys. */
    char prefix[64];
    snprintf(prefix, sizeof prefix, "trainer/%d/", e->restart);
    /* auto on GPUs is nccl (comm.c's auto picks among CPU backends); rank i
     * of a host takes GPU local_rank (cuda_device -1). */
    bool cuda = job->trainer && job->trainer->device == DT_DEVICE_CUDA;
    const char *backend = cuda && job->backend == DT_BACKEND_AUTO ? "nccl" : dt_backend_name(job->backend);
    /* A collective stalled for heartbeat_timeout (and 2 s) names its peer.  The 2 s let the agent's
     * watchdog, which sees a silent rank's heartbeat up to ~1 s late on another node, name a hung
     * rank with its report first; the deadline catches what it cannot see (a stuck compute thread
     * beside a live heartbeat, a stalled network). */
    double hb = job->rendezvous.heartbeat_timeout_s;
    struct dt_comm_options o = {.backend = backend,
                                .rank = e->rank,
                                .world = e->world,
                                .local_rank = e->local_rank,
                                .local_world = e->local_world,
                                .store = *store,
                                .key_prefix = prefix,
                                .timeout_s = timeout,
                                .op_timeout_s = hb > 0 ? hb + 2 : 0,
                                /* rank 0's checkpoint write, announced (dt_comm_busy), may take this long */
                                .busy_limit_s = timeout,
                                .cuda_device = -1};
    rc = dt_comm_init(&o, comm);
    ph[2] = dt_clock_ns();
    return rc ? dt_error_prefix("rank %d: building the %s communicator", e->rank, o.backend) : 0;
}

/* The heartbeat (worker/heartbeat.h) on a connection of its own: the agent's
 * watchdog reads it, and it ends this rank when the coordinator is gone.
 * Five reports per heartbeat_timeout, so one late report is no alarm. */
static int start_heartbeat(const struct dt_job *job, const struct rank_env *e, struct dt_heartbeat **hb)
{
    *hb = NULL;
    if (e->world == 0)
        return 0;
    double lost = job->rendezvous.timeout_s > 0 ? job->rendezvous.timeout_s : 60;
    double every = job->rendezvous.heartbeat_timeout_s > 0 ? job->rendezvous.heartbeat_timeout_s / 5 : 5;
    struct dt_store *s;
    int rc = dt_store_connect_env(lost, &s);
    if (rc)
        return dt_error_prefix("rank %d: connecting the heartbeat to the coordinator", e->rank);
    struct dt_heartbeat_options o = {.rank = e->rank, .interval_s = every < 0.05 ? 0.05 : every > 5 ? 5 : every,
                                     .lost_after_s = lost};
    rc = dt_heartbeat_start(&o, s, hb);
    if (rc)
        dt_store_close(s);
    return rc;
}

struct step_hook {
    struct dt_heartbeat *hb;
    struct dt_heartbeat_fault fault;
};

/* The heartbeat's step: published before the step's checkpoint (trainer.h). */
static void step_done(void *ctx, int64_t step)
{
    struct step_hook *h = ctx;
    dt_heartbeat_step(h->hb, step);
}

static void after_step(void *ctx, struct dt_model *m, int64_t step)
{
    (void)m;
    struct step_hook *h = ctx;
    dt_heartbeat_fault_after_step(&h->fault, step);
}

/* SIGUSR1: a scheduler's time limit is near (Slurm's --signal, passed on by
 * the agent).  The trainer stops at a step every rank agrees on, after a
 * checkpoint, and the rank exits with EXIT_REQUEUE (EX_TEMPFAIL, "try again
 * later"): the batch script requeues the job and the next run resumes. */
#define EXIT_REQUEUE 75
static volatile sig_atomic_t stop_request;

static void on_usr1(int sig)
{
    (void)sig;
    stop_request = 1;
}

static int train(const struct dt_job *job, const struct rank_env *e, struct dt_comm *comm, const int64_t ph[3],
                 struct step_hook *hook, bool *stopped)
{
    /* OMP_NUM_THREADS (the launcher sets 1 per rank, as torchrun does) caps the
     * kernel threads, as it caps PyTorch's intra-op threads; unset, the trainer
     * splits the cores among the host's ranks. */
    int threads = 0, bench = 0;
    if (env_int("OMP_NUM_THREADS", 0, &threads) || env_int("DTRAIN_BENCH_ALLREDUCE", 0, &bench))
        return DT_EINVAL;
    struct dt_trainer_options o = {.comm = comm, .run_dir = getenv("DTRAIN_RUN_DIR"), .threads = threads,
                                   .bench_allreduce = bench, .local_world = e->local_world, .quiet = e->rank != 0,
                                   .after_step = after_step, .step_done = step_done, .ctx = hook, .stop_request = &stop_request};
    /* An elastic round (the agent says so), and the sample log tests read
     * (DTRAIN_SAMPLE_LOG: a directory, one file per round and rank). */
    const char *el = getenv("DTRAIN_ELASTIC"), *log_dir = getenv("DTRAIN_SAMPLE_LOG");
    char sample_log[4200];
    o.elastic = el && strcmp(el, "1") == 0;
    if (o.elastic && env_int("DTRAIN_ELASTIC_MAX_NODES", 0, &o.elastic_max_world))
        return DT_EINVAL;
    o.elastic_max_world *= e->local_world > 0 ? e->local_world : 1;
    if (log_dir && *log_dir) {
        snprintf(sample_log, sizeof sample_log, "%s/samples_%d_%d.txt", log_dir, e->restart, e->rank);
        o.sample_log = sample_log;
    }
    struct dt_trainer_spec spec = *job->trainer;
    const char *steps = getenv("DTRAIN_TRACE"); /* `dtrain launch --trace` when the spec names no window */
    if (steps && *steps && spec.trace.last_step < 0 && dt_trace_parse_steps(steps, &spec.trace))
        return dt_error_prefix("DTRAIN_TRACE");
    struct dt_trainer *t;
    int rc = dt_trainer_create(&spec, &o, &t);
    if (rc)
        return rc;
    if (e->world > 0) {
        dt_trace_span(dt_trainer_trace(t), DT_TRACE_LAUNCH, "store connect", ph[0], ph[1]);
        dt_trace_span(dt_trainer_trace(t), DT_TRACE_LAUNCH, "communicator init", ph[1], ph[2]);
    }
    struct dt_metrics_summary s;
    rc = dt_trainer_run(t, &s);
    *stopped = !rc && dt_trainer_stopped(t);
    if (*stopped && e->rank == 0)
        printf("stopped at step %lld of %lld on SIGUSR1 after a checkpoint; exiting with %d to be requeued\n",
               (long long)s.steps, (long long)s.total_steps, EXIT_REQUEUE);
    else if (!rc && e->rank == 0 && s.seq_len > 0) /* a token run: its loss is on the validation set */
        printf("done: %lld steps, final loss %.4f, val loss %.4f, %.0f tokens/s\n", (long long)s.steps,
               s.final_loss, s.test_loss, s.samples_per_s * s.seq_len);
    else if (!rc && e->rank == 0)
        printf("done: %lld steps, final loss %.4f, test accuracy %.4f, %.0f samples/s\n", (long long)s.steps,
               s.final_loss, s.test_accuracy, s.samples_per_s);
    dt_trainer_destroy(t);
    return rc;
}

/* The failure report the agent reads (launcher/agent/agent_error_file.c), in the
 * format PyTorch's @record writes to TORCHELASTIC_ERROR_FILE, so the
 * launcher's "rank N failed first" report quotes the trainer's own sentence.
 * Written through dt_fs_write_atomic: its name is predictable
 * (attempt_<k>/rank_<r>.error.json), and a symlink there must not be
 * written through.  A failure to write it is logged, not fatal: the message
 * is on stderr too. */
static int put_error(void *ctx, FILE *f)
{
    fputs("{\"message\": {\"message\": ", f);
    dt_json_put_str(f, ctx, DT_JSON_U);
    fprintf(f, ", \"extraInfo\": {\"py_callstack\": \"\", \"timestamp\": \"%lld\"}}}\n",
            (long long)time(NULL));
    return 0;
}

static void write_error_file(int rank, const char *msg)
{
    const char *path = getenv("TORCHELASTIC_ERROR_FILE");
    if (!path || !*path)
        return;
    /* On the stack: the failure being reported may be running out of memory.
     * msg is dt_error_last(), well under this. */
    char text[4096];
    snprintf(text, sizeof text, "DtrainWorkerError: rank %d: %s", rank, msg);
    if (dt_fs_write_atomic(path, false, put_error, text))
        dt_log_warn("cannot write the error report: %s", dt_error_last());
}

static int run(int argc, char **argv)
{
    if (argc != 2)
        return dt_cli_usage_error("worker", "expects one argument, the job spec");
    dt_log_level_from_env();
    fix_blas_kernels(argv[1]);
    struct rank_env e = {0};
    struct dt_job *job = NULL;
    struct dt_store *store = NULL;
    struct dt_comm *comm = NULL;
    struct step_hook hook = {0};
    /* Started by mpirun itself (backend: mpi): the rank is MPI's. */
    int rc = dt_mpirun_rank_env();
    if (rc >= 0)
        rc = read_env(&e);
    if (!rc)
        rc = dt_heartbeat_fault_from_env(e.rank, e.restart, &hook.fault);
    if (!rc)
        rc = dt_job_load(argv[1], &job);
    if (!rc && !job->trainer)
        rc = dt_error_set(DT_EINVAL, "%s: the job has no trainer: section (it runs a command)", argv[1]);
    int64_t phases[3];
    bool stopped = false;
    struct sigaction sa = {.sa_handler = on_usr1, .sa_flags = SA_RESTART};
    sigaction(SIGUSR1, &sa, NULL);
    /* A file-size limit (ulimit -f) then fails the write with EFBIG, which
     * the error names with the file, instead of killing the rank silently. */
    signal(SIGXFSZ, SIG_IGN);
    if (!rc)
        rc = connect(job, &e, &store, &comm, phases);
    if (!rc)
        rc = start_heartbeat(job, &e, &hook.hb);
    if (!rc)
        rc = train(job, &e, comm, phases, &hook, &stopped);
    if (rc) {
        fprintf(stderr, "dtrain worker: rank %d: %s\n", e.rank, dt_error_last());
        write_error_file(e.rank, dt_error_last());
        if (comm)
            dt_comm_abort(comm);
    }
    fflush(stdout);
    dt_heartbeat_stop(hook.hb);
    dt_comm_destroy(comm);
    if (store)
        dt_store_close(store);
    dt_job_free(job);
    return rc ? 1 : stopped ? EXIT_REQUEUE : 0;
}

const struct dt_cli_command dt_cli_worker = {
    .name = "worker",
    .summary = "run one rank of the bundled trainer (started by launch)",
    .run = run,
    .usage = usage,
};
