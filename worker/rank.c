/* rank.c - where a rank starts: one rank of the bundled trainer, from its
 * environment to its exit status (rank.h).
 *
 * A rank learns everything from its environment, as torchrun's ranks do:
 * its place (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE), its attempt
 * (DTRAIN_RESTART_COUNT), the run directory (DTRAIN_RUN_DIR), where the
 * coordinator is and its token (dt_store_connect_env), and the knobs of the
 * agent and the tests; read_env() reads them all, in one place.  Then it
 * loads the spec, connects to the coordinator's store, builds the
 * communicator and hands both to the trainer (trainer.h).  Without
 * WORLD_SIZE it trains as a single process.  A fatal error goes to stderr
 * and, when TORCHELASTIC_ERROR_FILE is set, into that report.
 *
 * Not for training logic (trainer*.c) or for parsing a command line (the
 * command is launcher/cli/cmd_worker.c).
 */
#include "worker/rank.h"

#include "base/clock.h"
#include "base/env.h"
#include "base/error.h"
#include "base/fs.h"
#include "base/json_escape.h"
#include "base/log.h"
#include "comm/comm.h"
#include "comm/store.h"
#include "spec/jobspec.h"
#include "worker/heartbeat.h"
#include "worker/heartbeat_fault.h"
#include "worker/kernels.h"
#include "worker/trace.h"
#include "worker/trainer.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void dt_rank_fix_blas(char *const argv[])
{
    const char *want = dt_kernels_cpu_blas_coretype();
    if (!want)
        return;
    setenv("OPENBLAS_CORETYPE", want, 1);
    execv("/proc/self/exe", argv);
    dt_log_warn("could not re-run with OPENBLAS_CORETYPE=%s; OpenBLAS keeps its slow Prescott kernels", want);
}

/* --- the environment ----------------------------------------------------- */

/* What the agent (or the tests) told this rank; NULL strings when unset. */
struct rank_env {
    int rank, world, local_rank, local_world, restart;
    int threads; /* OMP_NUM_THREADS: caps the kernel threads as it caps PyTorch's; 0: the cores split */
    int bench;   /* DTRAIN_BENCH_ALLREDUCE: all-reduces timed after training (benchmarks) */
    bool elastic;                 /* DTRAIN_ELASTIC=1: an elastic round (the agent says so) */
    int elastic_max_nodes;        /* DTRAIN_ELASTIC_MAX_NODES: the largest node count of the range */
    const char *run_dir;          /* DTRAIN_RUN_DIR */
    const char *sample_log;       /* DTRAIN_SAMPLE_LOG: a directory, one file per round and rank (tests) */
    const char *trace_steps;      /* DTRAIN_TRACE: `dtrain launch --trace` when the spec names no window */
    struct dt_heartbeat_fault fault; /* DTRAIN_FAULT (heartbeat_fault.h) */
};

/* torchrun's rank variables, checked (env.h). */
static int env_int(const char *name, int dflt, int *out) { return dt_env_int(name, dflt, 0, 1 << 20, out); }

static const char *env_str(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

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
    if (!rc)
        rc = dt_heartbeat_fault_from_env(e->rank, e->restart, &e->fault);
    if (!rc)
        rc = env_int("OMP_NUM_THREADS", 0, &e->threads);
    if (!rc)
        rc = env_int("DTRAIN_BENCH_ALLREDUCE", 0, &e->bench);
    const char *el = getenv("DTRAIN_ELASTIC");
    e->elastic = el && strcmp(el, "1") == 0;
    if (!rc && e->elastic)
        rc = env_int("DTRAIN_ELASTIC_MAX_NODES", 0, &e->elastic_max_nodes);
    e->run_dir = getenv("DTRAIN_RUN_DIR");
    e->sample_log = env_str("DTRAIN_SAMPLE_LOG");
    e->trace_steps = env_str("DTRAIN_TRACE");
    return rc;
}

/* --- the store and the communicator -------------------------------------- */

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

/* The heartbeat (heartbeat.h) on a connection of its own: the agent's
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

/* --- training ------------------------------------------------------------ */

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
 * checkpoint, and the rank exits with DT_RANK_EXIT_REQUEUE: the batch script
 * requeues the job and the next run resumes. */
static volatile sig_atomic_t stop_request;

static void on_usr1(int sig)
{
    (void)sig;
    stop_request = 1;
}

static void say_done(const struct dt_metrics_summary *s, bool stopped)
{
    if (stopped)
        printf("stopped at step %lld of %lld on SIGUSR1 after a checkpoint; exiting with %d to be requeued\n",
               (long long)s->steps, (long long)s->total_steps, DT_RANK_EXIT_REQUEUE);
    else if (s->seq_len > 0) /* a token run: its loss is on the validation set */
        printf("done: %lld steps, final loss %.4f, val loss %.4f, %.0f tokens/s\n", (long long)s->steps,
               s->final_loss, s->test_loss, s->samples_per_s * s->seq_len);
    else
        printf("done: %lld steps, final loss %.4f, test accuracy %.4f, %.0f samples/s\n", (long long)s->steps,
               s->final_loss, s->test_accuracy, s->samples_per_s);
}

static int train(const struct dt_job *job, const struct rank_env *e, struct dt_comm *comm, const int64_t ph[3],
                 struct step_hook *hook, bool *stopped)
{
    struct dt_trainer_options o = {.comm = comm, .run_dir = e->run_dir, .threads = e->threads,
                                   .bench_allreduce = e->bench, .local_world = e->local_world,
                                   .quiet = e->rank != 0, .elastic = e->elastic, .after_step = after_step,
                                   .step_done = step_done, .ctx = hook, .stop_request = &stop_request};
    char sample_log[4200];
    o.elastic_max_world = e->elastic_max_nodes * (e->local_world > 0 ? e->local_world : 1);
    if (e->sample_log) {
        snprintf(sample_log, sizeof sample_log, "%s/samples_%d_%d.txt", e->sample_log, e->restart, e->rank);
        o.sample_log = sample_log;
    }
    struct dt_trainer_spec spec = *job->trainer;
    if (e->trace_steps && spec.trace.last_step < 0 && dt_trace_parse_steps(e->trace_steps, &spec.trace))
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
    if (!rc && e->rank == 0)
        say_done(&s, *stopped);
    dt_trainer_destroy(t);
    return rc;
}

/* --- the failure report -------------------------------------------------- */

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

int dt_rank_fail(int rank)
{
    fprintf(stderr, "dtrain worker: rank %d: %s\n", rank, dt_error_last());
    const char *path = getenv("TORCHELASTIC_ERROR_FILE");
    if (!path || !*path)
        return 1;
    /* On the stack: the failure being reported may be running out of memory.
     * The message is dt_error_last(), well under this. */
    char text[4096];
    snprintf(text, sizeof text, "DtrainWorkerError: rank %d: %s", rank, dt_error_last());
    if (dt_fs_write_atomic(path, false, put_error, text))
        dt_log_warn("cannot write the error report: %s", dt_error_last());
    return 1;
}

/* --- the rank ------------------------------------------------------------ */

static int load(const char *spec_path, struct dt_job **job)
{
    int rc = dt_job_load(spec_path, job);
    if (!rc && !(*job)->trainer)
        rc = dt_error_set(DT_EINVAL, "%s: the job has no trainer: section (it runs a command)", spec_path);
    return rc;
}

int dt_rank_main(const char *spec_path)
{
    struct rank_env e = {0};
    struct dt_job *job = NULL;
    struct dt_store *store = NULL;
    struct dt_comm *comm = NULL;
    struct step_hook hook = {0};
    int rc = read_env(&e);
    hook.fault = e.fault;
    if (!rc)
        rc = load(spec_path, &job);
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
        dt_rank_fail(e.rank);
        if (comm)
            dt_comm_abort(comm);
    }
    fflush(stdout);
    dt_heartbeat_stop(hook.hb);
    dt_comm_destroy(comm);
    if (store)
        dt_store_close(store);
    dt_job_free(job);
    return rc ? 1 : stopped ? DT_RANK_EXIT_REQUEUE : 0;
}
