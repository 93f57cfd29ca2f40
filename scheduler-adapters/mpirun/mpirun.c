/* mpirun.c - the mpirun adapter: `scheduler: mpirun` behind struct dt_adapter.
 *
 * render prints the mpirun line (mpirun_argv.c) with the variables it passes
 * on; the launch's plan is mpirun_submit.c; discover, here, tells an agent
 * started by mpirun (or by srun --mpi=pmix) its node from the MPI launcher's variables
 * and the coordinator from what the launcher settled (DTRAIN_COORD_HOST,
 * DTRAIN_COORD_PORT, DTRAIN_RUN_ID), falling back to the spec: the first
 * host of the job and rendezvous.port.  status and cancel (`dtrain
 * status/cancel RUN`) go through the `dtrain launch` that runs mpirun
 * (launch.json): it is alive or not, SIGTERM to it stops mpirun and with it
 * every agent or rank; status also names mpirun's pid, found among the
 * launcher's descendants.  The last section keeps Open MPI's daemon on a
 * failed node's host from outliving the job for long.
 *
 * Not for running anything.
 */
#include "scheduler-adapters/mpirun/mpirun_internal.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "base/proc.h"
#include "scheduler-adapters/run_record.h"
#include "scheduler-adapters/adapter.h"

/* What the agents are told by `dtrain launch`, as -x NAME. */
static const char *const agent_names[] = {"DTRAIN_JOB_TOKEN", "DTRAIN_COORD_HOST", "DTRAIN_COORD_PORT",
                                          "DTRAIN_RUN_ID", NULL};

const char *const *dt_mpirun__agent_exports(const struct dt_job *job)
{
    return job->rendezvous.auth == DT_AUTH_NONE ? agent_names + 1 : agent_names;
}

static int check(const struct dt_job *job)
{
    struct dt_placement pl;
    dt_placement_resolve(job, DT_PLACE_SPEC, &pl);
    if (dt_mpirun_ranks_are_mpi(job) && pl.nproc < 1)
        return dt_error_set(DT_EINVAL, "%s: nproc_per_node: gpu with backend: mpi; mpirun needs a number of ranks "
                                       "per node", job->path);
    return 0;
}

/* A spec that is not its file as written (${VAR}, --set, another
 * scheduler's spec) is what every host must read, and mpirun's hosts read a
 * file: the output writes it first, next to the spec (<stem>.given.yaml, on
 * the file system the hosts share with it), from a here-document, and the
 * line names that file.  Nothing the output reads is left behind by render. */
static int put_given(const struct dt_job *job, const char *job_path, char *given, size_t size, FILE *out)
{
    size_t n = strlen(job_path);
    if (n > 5 && strcmp(job_path + n - 5, ".yaml") == 0)
        n -= 5;
    else if (n > 4 && strcmp(job_path + n - 4, ".yml") == 0)
        n -= 4;
    if ((size_t)snprintf(given, size, "%.*s.given.yaml", (int)n, job_path) >= size)
        return dt_error_set(DT_EINVAL, "%s: the path is too long", job_path);
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    if (!m)
        return dt_error_set(DT_ENOMEM, "out of memory rendering the mpirun line");
    dt_job_print(job, m);
    if (fclose(m) != 0) {
        free(text);
        return dt_error_set(DT_ENOMEM, "out of memory rendering the mpirun line");
    }
    fputs("# The job as given (${VAR}, --set, or a spec for another scheduler), which every host's agent\n"
          "# reads: written next to the spec first, on the file system the hosts share with it.\n"
          "cat >",
          out);
    dt_adapter_put_word(out, given);
    fputs(" <<", out);
    dt_adapter_put_heredoc(out, "DTRAIN_JOB_SPEC", text);
    free(text);
    return 0;
}

static int render(const struct dt_job *job, const char *job_path, FILE *out)
{
    bool mpi = dt_mpirun_ranks_are_mpi(job);
    if (check(job) < 0)
        return DT_EINVAL;
    struct dt_placement pl;
    dt_placement_resolve(job, DT_PLACE_SPEC, &pl);
    char given[4096];
    if (job->derived) {
        int rc = put_given(job, job_path, given, sizeof given, out);
        if (rc)
            return rc;
        job_path = given;
    }
    const char *none[] = {NULL};
    struct dt_mpirun_call call = {.dtrain = "dtrain", .job_path = job_path,
                                  .export_names = mpi ? none : dt_mpirun__agent_exports(job),
                                  .rank_wrapper = true};
    struct dt_mpirun_line l;
    int rc = dt_mpirun_build(job, &pl, &call, &l);
    if (rc)
        return rc;
    fprintf(out, "# dtrain render mpirun: job %s, %d node%s\n", job->name, job->nodes, job->nodes == 1 ? "" : "s");
    if (mpi) {
        fprintf(out, "# backend: mpi: mpirun starts all %d ranks itself.  Run it with `dtrain launch ", pl.world);
        dt_adapter_put_comment(out, job_path); /* a path's newline must not end the comment */
        fprintf(out, "`, which\n"
                     "# hosts the coordinator, adds --tag-output and passes the ranks' environment (the job\n"
                     "# token included) as -x NAME; by hand the ranks have no coordinator to report to.\n");
    } else {
        fprintf(out, "# One `dtrain agent` per node; node 0's agent hosts the coordinator.  mpirun passes these\n"
                     "# on with -x NAME (the token never appears on a command line):\n");
        if (job->rendezvous.auth != DT_AUTH_NONE)
            fprintf(out, "#   export DTRAIN_JOB_TOKEN=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \\n')\n");
        char host[256];
        if (dt_mpirun_first_host(job->mpirun, host, sizeof host) < 0)
            snprintf(host, sizeof host, "<first host>");
        fputs("#   export DTRAIN_COORD_HOST=", out);
        dt_adapter_put_comment(out, host[0] ? host : "$(hostname)");
        fputs("   # node 0, as every node reaches it\n", out);
        if (job->rendezvous.port > 0)
            fprintf(out, "#   export DTRAIN_COORD_PORT=%d\n", job->rendezvous.port);
        else
            fprintf(out, "#   export DTRAIN_COORD_PORT=29500   # a free port on that host\n");
        fprintf(out, "#   export DTRAIN_RUN_ID=$(date -u +%%Y%%m%%d-%%H%%M%%S)-manual\n");
    }
    dt_mpirun__print_line(out, l.argv);
    dt_mpirun_line_free(&l);
    return 0;
}

/* The first host of a Slurm node list: "gpu[07-09,12],cpu1" -> "gpu07". */
static void slurm_first_host(const char *list, char *out, size_t size)
{
    size_t pre = strcspn(list, ",[");
    if (list[pre] != '[') {
        snprintf(out, size, "%.*s", (int)pre, list);
        return;
    }
    const char *r = list + pre + 1;
    snprintf(out, size, "%.*s%.*s", (int)pre, list, (int)strcspn(r, "-,]"), r);
}

/* This host by name, loopback, or one of its IPv4 addresses (hosts named by address). */
bool dt_mpirun__is_here(const char *h)
{
    char me[256] = "";
    gethostname(me, sizeof me - 1);
    if (!strcmp(h, "localhost") || !strncmp(h, "127.", 4) || !strcmp(h, me))
        return true;
    struct in_addr want;
    struct ifaddrs *ifs = NULL;
    if (inet_pton(AF_INET, h, &want) != 1 || getifaddrs(&ifs) != 0)
        return false;
    bool found = false;
    for (struct ifaddrs *i = ifs; i && !found; i = i->ifa_next)
        found = i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
                ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr == want.s_addr;
    freeifaddrs(ifs);
    return found;
}

static int coordinator(const struct dt_job *job, char *const *env, int nnodes, struct dt_adapter_node *out)
{
    const char *h = dt_adapter_getenv(env, "DTRAIN_COORD_HOST"), *list = dt_adapter_getenv(env, "SLURM_JOB_NODELIST");
    int rc = 0;
    if (h && *h)
        snprintf(out->coord_host, sizeof out->coord_host, "%s", h);
    else if ((rc = dt_mpirun_first_host(job->mpirun, out->coord_host, sizeof out->coord_host)) < 0)
        return rc;
    if (!out->coord_host[0] && list && *list)
        slurm_first_host(list, out->coord_host, sizeof out->coord_host);
    if (!out->coord_host[0] && nnodes == 1)
        snprintf(out->coord_host, sizeof out->coord_host, "127.0.0.1");
    if (!out->coord_host[0])
        return dt_error_set(DT_ENOTFOUND, "%s: which host runs the coordinator?  DTRAIN_COORD_HOST is not set, "
                                          "and neither mpirun.hosts, mpirun.hostfile nor SLURM_JOB_NODELIST names "
                                          "the first host (start the job with dtrain launch, which sets it)",
                            job->path);
    const char *p = dt_adapter_getenv(env, "DTRAIN_COORD_PORT");
    if (p && *p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (*end || v < 1 || v > 65535)
            return dt_error_set(DT_EINVAL, "DTRAIN_COORD_PORT=%s is not a port (1-65535)", p);
        out->coord_port = (int)v;
    } else if (job->rendezvous.port > 0) {
        out->coord_port = job->rendezvous.port;
    } else {
        return dt_error_set(DT_ENOTFOUND, "%s: rendezvous.port is 0 (pick one) and DTRAIN_COORD_PORT is not set: "
                                          "agents started by an MPI launcher must agree on the coordinator's port "
                                          "before any starts (dtrain launch sets it)",
                            job->path);
    }
    return 0;
}

/* ---- Open MPI's daemon after a failed node ---- */

/* An agent started by mpirun is a child of Open MPI's daemon on its host
 * (orted; prted in Open MPI 5).  When the host was cut off, its agent ends
 * ("lost the coordinator"), but the daemon, which must tell mpirun first,
 * waits on a connection whose data is never acknowledged: the kernel's
 * retransmissions (net.ipv4.tcp_retries2, about 15 minutes), as Open MPI's
 * keepalives only probe idle connections.  So an agent that exits non-zero
 * leaves a watcher: if the same daemon still runs heartbeat_timeout +
 * grace_period + 10 s later (the time `dtrain launch` gives mpirun itself
 * after an abort), it is sent SIGTERM, then SIGKILL.  A reachable mpirun has
 * ended its daemons long before; the watcher then finds them gone.  The
 * watcher is a shell named dtrain-daemon-guard in `ps`, not a second
 * `dtrain agent` command line. */
static struct {
    pid_t pid;               /* the daemon (this agent's parent), 0 when not under one */
    unsigned long long born; /* its start time, /proc/PID/stat field 22: a pid may be reused */
    double after_s;
} daemon_guard;

/* The start time of process pid, 0 if it is gone. */
static unsigned long long born(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof buf - 1);
    if (fd >= 0)
        close(fd);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    const char *p = strrchr(buf, ')'); /* the name may hold blanks; fields 3.. follow it */
    unsigned long long t = 0;
    for (int field = 2; p && *p && field < 22; p++)
        field += *p == ' ';
    if (p)
        sscanf(p, "%llu", &t);
    return t;
}

static void end_lingering_daemon(int status, void *arg)
{
    (void)arg;
    if (status == 0 || daemon_guard.pid <= 1 || fork() != 0)
        return;
    setsid(); /* out of the agent's process group, its output nowhere */
    int fd = open("/dev/null", O_RDWR);
    for (int i = 0; fd >= 0 && i < 3; i++)
        dup2(fd, i);
    char pid[32], start[32], after[32];
    snprintf(pid, sizeof pid, "%d", (int)daemon_guard.pid);
    snprintf(start, sizeof start, "%llu", daemon_guard.born);
    snprintf(after, sizeof after, "%.1f", daemon_guard.after_s);
    /* field 22 of /proc/PID/stat: the same process (the name, orted or prted, has no blank) */
    execl("/bin/sh", "sh", "-c",
          "sleep \"$3\"; for s in TERM KILL; do [ \"$(cut -d' ' -f22 /proc/$1/stat 2>/dev/null)\" = \"$2\" ] "
          "|| "
          "exit 0; kill -$s \"$1\"; sleep 2; done",
          "dtrain-daemon-guard", pid, start, after, (char *)NULL);
    _exit(0);
}

static void guard_daemon(const struct dt_job *job)
{
    char path[64], comm[32] = "";
    pid_t parent = getppid();
    snprintf(path, sizeof path, "/proc/%d/comm", (int)parent);
    FILE *f = fopen(path, "r");
    if (f) {
        if (!fgets(comm, sizeof comm, f))
            comm[0] = 0;
        fclose(f);
    }
    if (strcmp(comm, "orted\n") != 0 && strcmp(comm, "prted\n") != 0)
        return;
    double hb = job->rendezvous.heartbeat_timeout_s > 0 ? job->rendezvous.heartbeat_timeout_s
                                                        : job->rendezvous.timeout_s;
    daemon_guard.pid = parent;
    daemon_guard.born = born(parent);
    daemon_guard.after_s = hb + job->grace_period_s + 10;
    if (daemon_guard.born)
        on_exit(end_lingering_daemon, NULL);
}

static int discover(const struct dt_job *job, char *const *env, struct dt_adapter_node *out)
{
    struct dt_mpirun_place p;
    memset(out, 0, sizeof *out);
    int rc = dt_mpirun_read_place(env, &p);
    if (rc)
        return dt_error_prefix("dtrain agent under mpirun");
    if (p.size != job->nodes)
        return dt_error_set(DT_EINVAL, "%s: the MPI launcher started %d agents but the spec says nodes: %d (mpirun "
                                       "needs -np %d --map-by ppr:1:node; see dtrain render mpirun)",
                            job->path, p.size, job->nodes, job->nodes);
    out->node_rank = p.rank;
    out->nnodes = p.size;
    if ((rc = coordinator(job, env, p.size, out)) < 0)
        return rc;
    guard_daemon(job);
    const char *jid = dt_adapter_getenv(env, "OMPI_MCA_ess_base_jobid");
    if (!jid)
        jid = dt_adapter_getenv(env, "SLURM_JOB_ID");
    snprintf(out->job_id, sizeof out->job_id, "%s", jid ? jid : "");
    const char *run = dt_adapter_getenv(env, "DTRAIN_RUN_ID");
    if (run && *run)
        snprintf(out->run_id, sizeof out->run_id, "%s", run);
    else if (jid && *jid)
        snprintf(out->run_id, sizeof out->run_id, "mpi-%s", jid);
    else
        return dt_error_set(DT_ENOTFOUND, "neither DTRAIN_RUN_ID nor the launcher's job id (OMPI_MCA_ess_base_jobid, "
                                          "SLURM_JOB_ID) is set: the agents cannot agree on a run directory");
    return 0;
}

/* --- dtrain status and cancel -------------------------------------------- */

/* mpirun among pid's descendants (its child, or a guard's child with
 * backend: mpi), or 0: one /proc scan per generation, three at most. */
static int find_mpirun(int pid)
{
    static const char *const names[] = {"mpirun", "mpiexec", "orterun", "prterun", NULL};
    int gen[64] = {pid}, n = 1;
    for (int depth = 0; depth < 3 && n > 0; depth++) {
        int next[64], m = 0;
        DIR *d = opendir("/proc");
        for (struct dirent *e; d && (e = readdir(d));) {
            struct dt_proc_stat st;
            if (e->d_name[0] < '1' || e->d_name[0] > '9' || dt_proc_stat_read(e->d_name, &st) < 0)
                continue;
            for (int i = 0; i < n; i++) {
                if (st.ppid != gen[i])
                    continue;
                for (int k = 0; names[k]; k++)
                    if (strcmp(st.comm, names[k]) == 0) {
                        closedir(d);
                        return atoi(e->d_name);
                    }
                if (m < 64)
                    next[m++] = atoi(e->d_name);
            }
        }
        if (d)
            closedir(d);
        memcpy(gen, next, sizeof(int) * (size_t)m);
        n = m;
    }
    return 0;
}

static int status(const struct dt_run_record *rec, struct dt_adapter_state *out)
{
    dt_run_record_launcher_state(rec, out);
    int mpirun = out->active ? find_mpirun(rec->pid) : 0;
    size_t len = strlen(out->where);
    if (mpirun > 0)
        snprintf(out->where + len, sizeof out->where - len, ", mpirun pid %d", mpirun);
    return 0;
}

const struct dt_adapter dt_adapter_mpirun = {
    .name = "mpirun",
    .scheduler = DT_SCHED_MPIRUN,
    .render = render,
    .check = check,
    .plan = dt_mpirun__plan,
    .discover = discover,
    .status = status,
    .cancel = dt_run_record_stop_launcher,
};
