/* mpirun_rank.c - where a process stands in a job an MPI launcher started,
 * and `dtrain mpirank -- PROGRAM ...`: what mpirun starts for each rank of a
 * backend: mpi job.
 *
 * The place.  Open MPI's mpirun sets OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,
 * LOCAL_SIZE}; under `srun --mpi=pmix` Open MPI processes get no
 * OMPI_COMM_WORLD_*, only PMIX_RANK, and the sizes come from Slurm
 * (SLURM_NTASKS, SLURM_LOCALID, SLURM_TASKS_PER_NODE "2(x3)").  A task of
 * an srun step without MPI (slurm.tasks: per_rank) has only Slurm's:
 * SLURM_PROCID, SLURM_STEP_NUM_TASKS, SLURM_LOCALID, SLURM_NODEID.  An agent
 * reads its node from here (mpirun.c's discover); a rank its rank.
 *
 * The rank.
 * mpirun cannot give each rank its own RANK, and tells the launcher which rank
 * failed first only in a message it does not always print (Open MPI 4.1 drops
 * its "first process to do so" report now and then when it tears the job
 * down).  So each rank runs under this small parent: it sets the torchrun
 * variables from OMPI_COMM_WORLD_* (any program, not only `dtrain worker`,
 * sees RANK, LOCAL_RANK, ...), runs the program as its child, passes on every
 * signal mpirun sends, and when the program ends writes
 *   <run dir>/attempt_<k>/rank_<r>.exit   "wstatus=N stopped=0|1 pid=P time_ns=T"
 * (T: CLOCK_REALTIME) before ending the same way.  rank_<r>.pid ("pid=P") is
 * written as the program starts: mpirun follows its SIGTERM with a SIGKILL
 * one second later (odls_base_sigkill_timeout), and on a busy host that can
 * land between our waitpid and the .exit record, so the launcher still knows
 * which process the rank was.  stopped=1 means mpirun had
 * signalled the rank first, i.e. it did not fail by itself.  The launcher
 * reads these files for the first failure and the per-rank table of
 * summary.json; without them (a run directory not shared with other hosts) it
 * falls back to mpirun's report.
 *
 * The program, not this parent, is the MPI process: MPI_Init finds its
 * launcher through the inherited PMIx variables, as under `mpirun sh -c ...`.
 *
 * The same parent runs each rank of a Slurm step with slurm.tasks: per_rank
 * (scheduler-adapters/slurm/slurm_ranks.c), where srun, not mpirun, starts
 * the ranks; the records and the reading of them (dt_mpirun_rank_ends) are
 * the same.
 *
 * Not for agents (they supervise their own ranks).
 */
#include "scheduler-adapters/mpirun/mpirun.h"
#include "base/clock.h"
#include "base/error.h"
#include "base/fs.h"
#include "scheduler-adapters/adapter.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* --- the place, as the MPI launcher says --------------------------------- */

static int read_int(char *const *env, const char *name, int lo, int *out, bool *present)
{
    const char *v = dt_adapter_getenv(env, name);
    *present = v != NULL;
    if (!v)
        return 0;
    char *end;
    long x = strtol(v, &end, 10);
    /* SLURM_TASKS_PER_NODE is "2(x3),1": its first count is this node's on a uniform job. */
    bool tasks = !strcmp(name, "SLURM_TASKS_PER_NODE") && (*end == '(' || *end == ',');
    if (end == v || (*end && !tasks) || x < lo || x > 1 << 24)
        return dt_error_set(DT_EINVAL, "environment variable %s=%s is not a number >= %d", name, v, lo);
    *out = (int)x;
    return 0;
}

static int read_ompi(char *const *env, struct dt_mpirun_place *p)
{
    bool have;
    int rc = read_int(env, "OMPI_COMM_WORLD_SIZE", 1, &p->size, &have);
    if (!rc && !have)
        rc = dt_error_set(DT_ENOTFOUND, "OMPI_COMM_WORLD_RANK is set but OMPI_COMM_WORLD_SIZE is not");
    if (!rc)
        rc = read_int(env, "OMPI_COMM_WORLD_RANK", 0, &p->rank, &have);
    if (!rc)
        rc = read_int(env, "OMPI_COMM_WORLD_LOCAL_RANK", 0, &p->local_rank, &have);
    if (!rc)
        rc = read_int(env, "OMPI_COMM_WORLD_LOCAL_SIZE", 1, &p->local_size, &have);
    return rc;
}

/* The task's place on its node, as Slurm exports it to every task of a step
 * (srun, PMIx or not). */
static int read_slurm_node(char *const *env, struct dt_mpirun_place *p)
{
    bool have;
    int rc = read_int(env, "SLURM_LOCALID", 0, &p->local_rank, &have);
    if (!rc)
        rc = read_int(env, "SLURM_TASKS_PER_NODE", 1, &p->local_size, &have);
    if (!rc)
        rc = read_int(env, "SLURM_NODEID", 0, &p->node, &have);
    return rc;
}

static int read_pmix(char *const *env, struct dt_mpirun_place *p)
{
    bool have;
    int rc = read_int(env, "PMIX_RANK", 0, &p->rank, &have);
    if (!rc)
        rc = read_int(env, "SLURM_NTASKS", 1, &p->size, &have);
    if (!rc && !have)
        rc = read_int(env, "SLURM_NPROCS", 1, &p->size, &have);
    if (!rc && !have)
        return dt_error_set(DT_ENOTFOUND, "PMIX_RANK is set but not the world size: neither SLURM_NTASKS nor "
                                          "SLURM_NPROCS is (dtrain reads PMIx ranks under srun --mpi=pmix)");
    return rc ? rc : read_slurm_node(env, p);
}

/* A task of an srun step: SLURM_STEP_ID says it is one (the batch shell has
 * SLURM_PROCID=0 and the job's SLURM_NTASKS too, and is no rank). */
static int read_slurm(char *const *env, struct dt_mpirun_place *p)
{
    bool have;
    int rc = read_int(env, "SLURM_PROCID", 0, &p->rank, &have);
    if (!rc)
        rc = read_int(env, "SLURM_STEP_NUM_TASKS", 1, &p->size, &have);
    if (!rc && !have)
        rc = read_int(env, "SLURM_NTASKS", 1, &p->size, &have);
    if (!rc && !have)
        return dt_error_set(DT_ENOTFOUND, "SLURM_PROCID is set but neither SLURM_STEP_NUM_TASKS nor SLURM_NTASKS");
    return rc ? rc : read_slurm_node(env, p);
}

int dt_mpirun_read_place(char *const *env, struct dt_mpirun_place *out)
{
    struct dt_mpirun_place p = {.local_size = 1, .node = -1};
    int rc;
    if (dt_adapter_getenv(env, "OMPI_COMM_WORLD_RANK"))
        rc = read_ompi(env, &p);
    else if (dt_adapter_getenv(env, "PMIX_RANK"))
        rc = read_pmix(env, &p);
    else if (dt_adapter_getenv(env, "SLURM_PROCID") && dt_adapter_getenv(env, "SLURM_STEP_ID"))
        rc = read_slurm(env, &p);
    else
        return dt_error_set(DT_ENOTFOUND,
                            "neither OMPI_COMM_WORLD_RANK (mpirun), PMIX_RANK (srun --mpi=pmix) nor "
                            "SLURM_PROCID in a step (srun) is set: this process was not started by "
                            "an MPI launcher or srun");
    if (rc)
        return rc;
    if (p.rank >= p.size)
        return dt_error_set(DT_EINVAL, "the MPI launcher says rank %d of %d", p.rank, p.size);
    if (p.local_rank >= p.local_size)
        p.local_size = p.local_rank + 1;
    *out = p;
    return 0;
}

static int set_int(const char *name, int v)
{
    char buf[16];
    snprintf(buf, sizeof buf, "%d", v);
    return setenv(name, buf, 1) ? dt_error_set(DT_ENOMEM, "cannot set %s", name) : 0;
}

/* slurm.tasks: per_rank: the agent that hosts the coordinator runs srun, so
 * the coordinator is on srun's host, whose address Slurm gives every task
 * (as for per_node's agents, slurm.c): it works where node names do not resolve. */
static int coord_at_launch_node(void)
{
    const char *ip = getenv("SLURM_LAUNCH_NODE_IPADDR"), *port = getenv("MASTER_PORT");
    if (!getenv(DT_MPIRUN_COORD_AT_LAUNCH_NODE) || !ip || !*ip || !port)
        return 0;
    char addr[320];
    snprintf(addr, sizeof addr, strchr(ip, ':') ? "[%s]:%s" : "%s:%s", ip, port);
    if (setenv("MASTER_ADDR", ip, 1) || setenv("DTRAIN_COORD_ADDR", addr, 1))
        return dt_error_set(DT_ENOMEM, "cannot set MASTER_ADDR");
    return 0;
}

int dt_mpirun_rank_env(void)
{
    bool asked = getenv("DTRAIN_MPI_RANKS") != NULL;
    if (!asked && getenv("RANK"))
        return 0;
    struct dt_mpirun_place p;
    int rc = dt_mpirun_read_place(environ, &p);
    if (rc == DT_ENOTFOUND && !asked) {
        dt_error_clear();
        return 0;
    }
    if (rc)
        return dt_error_prefix("reading this rank's place from the MPI launcher");
    /* ppr:K:node places ranks node by node, so the node is rank / K where the launcher does not say. */
    int node = p.node >= 0 ? p.node : p.rank / p.local_size;
    const char *names[] = {"RANK",       "LOCAL_RANK", "WORLD_SIZE",      "LOCAL_WORLD_SIZE",
                           "GROUP_RANK", "ROLE_RANK",  "ROLE_WORLD_SIZE", "DTRAIN_NODE_RANK"};
    int values[] = {p.rank, p.local_rank, p.size, p.local_size, node, p.rank, p.size, node};
    for (size_t i = 0; i < sizeof values / sizeof *values && rc == 0; i++)
        rc = set_int(names[i], values[i]);
    const char *dir = getenv("DTRAIN_RUN_DIR"), *restart = getenv("DTRAIN_RESTART_COUNT");
    if (rc == 0 && dir) {
        char path[4200];
        snprintf(path, sizeof path, "%s/attempt_%s/rank_%d.error.json", dir, restart ? restart : "0", p.rank);
        if (setenv("TORCHELASTIC_ERROR_FILE", path, 1) || setenv("DTRAIN_ERROR_FILE", path, 1))
            rc = dt_error_set(DT_ENOMEM, "cannot set TORCHELASTIC_ERROR_FILE");
    }
    if (rc == 0)
        rc = coord_at_launch_node();
    return rc ? rc : 1;
}

/* --- how each rank ended, as its records say ----------------------------- */

/* A rank's record in the run directory, opened as a run file (base/fs.h):
 * a FIFO there is refused, not waited on, a link not followed; NULL when
 * there is none or it is refused (the rank then has no record). */
static FILE *open_record(const char *dir, int q, const char *ext)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/rank_%d.%s", dir, q, ext);
    int fd = dt_fs_open_read(AT_FDCWD, path, DT_FS_NOFOLLOW, NULL);
    FILE *f = fd >= 0 ? fdopen(fd, "r") : NULL;
    if (fd >= 0 && !f)
        close(fd);
    dt_error_clear();
    return f;
}

/* What `dtrain mpirank` wrote for rank q: how it ended, whether mpirun had
 * stopped it, and when (CLOCK_REALTIME ns).  -1 when there is no record. */
static int read_exit(const char *dir, int q, int *ws, int *stopped, int *pid, long long *t_ns)
{
    FILE *f = open_record(dir, q, "exit");
    if (!f)
        return -1;
    int n = fscanf(f, "wstatus=%d stopped=%d pid=%d time_ns=%lld", ws, stopped, pid, t_ns);
    fclose(f);
    return n == 4 ? 0 : -1;
}

/* The pid `dtrain mpirank` recorded when rank q's program started, or 0. */
static int read_pid(const char *dir, int q)
{
    FILE *f = open_record(dir, q, "pid");
    if (!f)
        return 0;
    int pid = 0;
    if (fscanf(f, "pid=%d", &pid) != 1 || pid < 0)
        pid = 0;
    fclose(f);
    return pid;
}

int dt_mpirun_rank_ends(const char *dir, int world, int status, struct dt_adapter_rank_end *ends)
{
    int first = -1;
    long long first_t = 0;
    for (int q = 0; q < world; q++) {
        int ws, stopped, pid;
        long long t;
        if (read_exit(dir, q, &ws, &stopped, &pid, &t) != 0) {
            /* killed before it could say how it ended: stopped, unless its launcher succeeded */
            ends[q] = (struct dt_adapter_rank_end){.pid = read_pid(dir, q), .stopped = status != 0};
            continue;
        }
        ends[q] = (struct dt_adapter_rank_end){.pid = pid,
                                               .exited = true,
                                               .wstatus = ws,
                                               .stopped = stopped != 0,
                                               .exit_unix = (double)t * 1e-9};
        if (!stopped && ws != 0 && (first < 0 || t < first_t)) {
            first = q;
            first_t = t;
        }
    }
    return first;
}

/* --- dtrain mpirank ------------------------------------------------------ */

static volatile sig_atomic_t child_pid;
static volatile sig_atomic_t stopped;

static const int passed_on[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGCONT};
#define N_PASSED (int)(sizeof passed_on / sizeof *passed_on)

static void pass_on(int sig)
{
    if (sig != SIGCONT && sig != SIGUSR1 && sig != SIGUSR2)
        stopped = 1;
    if (child_pid > 0)
        kill(child_pid, sig);
}

static int put_line(void *line, FILE *f)
{
    fputs(line, f);
    return 0;
}

/* <run dir>/attempt_<k>/rank_<r>.<what>, written whole or not at all.  Best
 * effort: the launcher falls back on mpirun's own report without it. */
static void write_record(int rank, const char *what, const char *line)
{
    const char *dir = getenv("DTRAIN_RUN_DIR"), *k = getenv("DTRAIN_RESTART_COUNT");
    if (!dir)
        return;
    char path[4200];
    snprintf(path, sizeof path, "%s/attempt_%s/rank_%d.%s", dir, k ? k : "0", rank, what);
    dt_fs_write_atomic(path, false, put_line, (void *)line);
}

static void write_exit_file(int rank, int wstatus, pid_t pid)
{
    char line[128];
    snprintf(line, sizeof line, "wstatus=%d stopped=%d pid=%d time_ns=%lld\n", wstatus, (int)stopped,
             (int)pid, (long long)dt_clock_wall_ns());
    write_record(rank, "exit", line);
}

/* Signal handling has a window: mpirun may stop the job (a peer failed in its
 * first milliseconds) before our child exists.  So the handlers go in before
 * anything else, the passed-on signals are blocked across fork() (a handler
 * running between fork and `child_pid = pid` would find no one to signal),
 * and a stop that came before the child did is passed on to it at once.
 * Either way the rank ends through waitpid and leaves its .exit record. */
static void block_passed_on(int how)
{
    sigset_t set;
    sigemptyset(&set);
    for (int i = 0; i < N_PASSED; i++)
        sigaddset(&set, passed_on[i]);
    sigprocmask(how, &set, NULL);
}

int dt_mpirun_rank_main(char *const *argv)
{
    struct sigaction sa = {.sa_handler = pass_on, .sa_flags = SA_RESTART};
    for (int i = 0; i < N_PASSED; i++)
        sigaction(passed_on[i], &sa, NULL);
    int rc = dt_mpirun_rank_env();
    if (rc < 0) {
        fprintf(stderr, "dtrain mpirank: %s\n", dt_error_last());
        return 1;
    }
    const char *rs = getenv("RANK");
    int rank = rs ? atoi(rs) : 0;
    fflush(NULL);
    block_passed_on(SIG_BLOCK);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "dtrain mpirank: rank %d: cannot fork: %s\n", rank, strerror(errno));
        return 1;
    }
    if (pid == 0) {
        for (int i = 0; i < N_PASSED; i++)
            signal(passed_on[i], SIG_DFL);
        block_passed_on(SIG_UNBLOCK);
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* mpirun's SIGKILL reaches only us */
        execvp(argv[0], argv);
        fprintf(stderr, "dtrain: rank %d: cannot run %s: %s\n", rank, argv[0], strerror(errno));
        _exit(127);
    }
    child_pid = pid;
    char line[32];
    snprintf(line, sizeof line, "pid=%d\n", (int)pid);
    write_record(rank, "pid", line);
    if (stopped)
        kill(pid, SIGTERM);
    block_passed_on(SIG_UNBLOCK);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    write_exit_file(rank, st, pid);
    if (WIFSIGNALED(st)) {
        /* End as the program did, so mpirun reports the same signal. */
        signal(WTERMSIG(st), SIG_DFL);
        prctl(PR_SET_DUMPABLE, 0); /* the program already dumped core if it was going to */
        kill(getpid(), WTERMSIG(st));
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}
