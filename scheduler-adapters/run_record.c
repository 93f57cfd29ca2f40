/* run_record.c - launch.json and job.yaml in a run directory (see run_record.h).
 *
 * Not for reading what the ranks wrote (launcher/cli/run_info.c).
 */
#include "scheduler-adapters/run_record.h"

#include "base/error.h"
#include "base/fs.h"
#include "base/json.h"
#include "base/run_dir.h"
#include "spec/jobspec_yaml.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define RECORD_MAX_BYTES (64 * 1024)

void dt_run_record_init(struct dt_run_record *r, const struct dt_job *job, const char *run_dir,
                        const char *run_id)
{
    memset(r, 0, sizeof *r);
    snprintf(r->scheduler, sizeof r->scheduler, "%s", dt_scheduler_name(job->scheduler));
    snprintf(r->name, sizeof r->name, "%s", job->name);
    snprintf(r->run_id, sizeof r->run_id, "%s", run_id);
    snprintf(r->run_dir, sizeof r->run_dir, "%s", run_dir);
    if (!realpath(job->path, r->spec))
        snprintf(r->spec, sizeof r->spec, "%s", job->path);
    gethostname(r->host, sizeof r->host - 1);
    r->pid = (int)getpid();
    r->pid_start = dt_run_record_pid_start(r->pid);
    r->nodes = job->nodes;
    r->nproc_per_node = job->nproc_per_node;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    r->started_unix = (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* --- writing ------------------------------------------------------------- */

static void hold_run_dir(const char *run_dir);

static int put_spec(void *ctx, FILE *f)
{
    const struct dt_job *job = ctx;
    fputs("# The spec as `dtrain launch` ran it (", f);
    dt_adapter_put_comment(f, job->path); /* a path's newline must not end the comment */
    fputs("), every default filled in.\n", f);
    dt_job_print(job, f);
    return ferror(f) ? dt_error_set(DT_EIO, "cannot write the spec snapshot") : 0;
}

/* launch.json, one member a line (readers such as tests and scripts grep it); started_unix to
 * the millisecond: 13 significant digits hold seconds since 1970 to 2286 with three decimals. */
static int put_record(void *ctx, FILE *f)
{
    const struct dt_run_record *r = ctx;
    const char *const keys[] = {"scheduler", "name", "run_id", "run_dir",
                                "spec",      "host", "job_id", "namespace"};
    const char *const values[] = {r->scheduler, r->name, r->run_id, r->run_dir,
                                  r->spec,      r->host, r->job_id, r->namespace_name};
    json_t *o = json_object();
    int bad = !o;
    for (size_t i = 0; !bad && i < sizeof keys / sizeof *keys; i++)
        bad = json_object_set_new(o, keys[i], dt_json_str(values[i]));
    if (!bad)
        bad = json_object_set_new(o, "pid", json_integer(r->pid)) ||
              json_object_set_new(o, "pid_start", json_integer(r->pid_start)) ||
              json_object_set_new(o, "nodes", json_integer(r->nodes)) ||
              json_object_set_new(o, "nproc_per_node", json_integer(r->nproc_per_node)) ||
              json_object_set_new(o, "started_unix", json_real(round(r->started_unix * 1e3) / 1e3)) ||
              json_object_set_new(o, "version", json_integer(1));
    if (!bad)
        bad = json_dumpf(o, f, JSON_INDENT(2) | JSON_REAL_PRECISION(13)) != 0 || fputc('\n', f) == EOF;
    json_decref(o);
    return bad || ferror(f) ? dt_error_set(DT_EIO, "cannot write the launch record") : 0;
}

static int write_private(const char *dir, const char *file, dt_fs_write_fn fn, void *ctx)
{
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    mode_t old = umask(0077); /* DT_RUN_DIR_FILE_MODE: what a run directory holds is its user's */
    int rc = dt_fs_write_atomic(path, false, fn, ctx);
    umask(old);
    return rc < 0 ? dt_error_prefix("%s", path) : 0;
}

int dt_run_record_write(const struct dt_run_record *r, const struct dt_job *job)
{
    int rc = write_private(r->run_dir, DT_RUN_RECORD_SPEC, put_spec, (void *)job);
    if (rc == 0)
        rc = write_private(r->run_dir, DT_RUN_RECORD_FILE, put_record, (void *)r);
    if (rc == 0 && r->pid == (int)getpid())
        hold_run_dir(r->run_dir);
    return rc;
}

int dt_run_record_begin(const struct dt_job *job, const char *log_dir, const char *run_id, const char *job_id,
                        struct dt_run_record *r)
{
    char dir[PATH_MAX];
    int rc = dt_run_dir_open(log_dir, job->name, run_id, dir, sizeof dir);
    if (rc < 0)
        return rc;
    dt_run_record_init(r, job, dir, run_id);
    snprintf(r->job_id, sizeof r->job_id, "%s", job_id ? job_id : "");
    return dt_run_record_write(r, job);
}

/* --- reading ------------------------------------------------------------- */

int dt_run_record_load_spec(const char *run_dir, struct dt_job **job)
{
    char path[PATH_MAX + 32], *text = NULL;
    size_t len = 0;
    snprintf(path, sizeof path, "%s/%s", run_dir, DT_RUN_RECORD_SPEC);
    *job = NULL;
    int rc = dt_fs_read_whole(AT_FDCWD, NULL, path, DT_FS_NOFOLLOW, DT_YAML_MAX_BYTES, &text, &len);
    if (rc == 0 && strlen(text) != len)
        rc = dt_error_set(DT_EINVAL, "%s: a NUL byte in the spec", path);
    if (rc == 0)
        rc = dt_job_load_string(text, len, path, job);
    free(text);
    return rc;
}

bool dt_run_record_slurm_id_ok(const char *id)
{
    /* A job id, or an array task's <job>_<task> (squeue's and scancel's form). */
    size_t job = strspn(id, "0123456789");
    if (job == 0 || job > 20)
        return false;
    if (!id[job])
        return true;
    size_t task = id[job] == '_' ? strspn(id + job + 1, "0123456789") : 0;
    return task > 0 && task <= 20 && !id[job + 1 + task];
}

bool dt_run_record_k8s_name_ok(const char *name)
{
    /* A DNS-1123 label (RFC 1123): what Kubernetes takes for a Job's and a namespace's name. */
    size_t n = strlen(name);
    if (n == 0 || n > 63 || strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789-") != n)
        return false;
    return name[0] != '-' && name[n - 1] != '-';
}

static void get_str(const json_t *o, const char *key, char *out, size_t size)
{
    const char *s = json_string_value(json_object_get(o, key));
    snprintf(out, size, "%s", s ? s : "");
}

/* An integer member within [min, max]; absent is 0 (not recorded),
 * anything else refuses the record. */
static bool get_int(const json_t *o, const char *key, long long min, long long max, long long *out)
{
    const json_t *v = json_object_get(o, key);
    *out = 0;
    if (!v)
        return true;
    if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max)
        return false;
    *out = json_integer_value(v);
    return true;
}

/* The members that are numbers, refused outside what a launch writes, so
 * nothing later multiplies or casts a planted 1e300: a pid (pid 0 is no
 * process), the spec's bounds on nodes (65536) and nproc_per_node (1024,
 * or -1 for "gpu", DT_NPROC_GPU; never 0). */
static int get_numbers(const json_t *o, const char *path, struct dt_run_record *r)
{
    long long pid, nodes, nproc, start;
    const char *bad = !get_int(o, "pid", 1, INT_MAX, &pid)                         ? "pid"
                      : !get_int(o, "nodes", 1, 65536, &nodes)                     ? "nodes"
                      : !get_int(o, "nproc_per_node", DT_NPROC_GPU, 1024, &nproc) ? "nproc_per_node"
                      : json_object_get(o, "nproc_per_node") && nproc == 0         ? "nproc_per_node"
                      : !get_int(o, "pid_start", -1, LLONG_MAX, &start)            ? "pid_start"
                                                                                    : NULL;
    double t = 0;
    if (!bad && json_object_get(o, "started_unix") &&
        (!dt_json_get_num(o, "started_unix", &t) || !(t >= 0 && t < 1e11)))
        bad = "started_unix";
    if (bad)
        return dt_error_set(DT_EPROTO, "%s: member %s is out of range or not a number", path, bad);
    r->pid = (int)pid;
    r->nodes = (int)nodes;
    r->nproc_per_node = (int)nproc;
    r->pid_start = json_object_get(o, "pid_start") ? start : -1;
    r->started_unix = t;
    return 0;
}

/* The scheduler's handle is passed to scancel, scontrol and kubectl: only
 * the syntax of an id of that scheduler is taken, so no record can slip an
 * option ("--me") or another object's name into their command lines. */
static int check_handle(const struct dt_run_record *r, const char *path)
{
    if (strcmp(r->scheduler, "slurm") == 0 && r->job_id[0] && !dt_run_record_slurm_id_ok(r->job_id))
        return dt_error_set(DT_EPROTO, "%s: job_id '%s' is not a Slurm job id (digits, or <job>_<task>)",
                            path, r->job_id);
    if (strcmp(r->scheduler, "kubernetes") == 0 &&
        (!dt_run_record_k8s_name_ok(r->job_id) || !dt_run_record_k8s_name_ok(r->namespace_name)))
        return dt_error_set(DT_EPROTO,
                            "%s: job_id '%s' or namespace '%s' is not a Kubernetes name (a DNS-1123 label: "
                            "lowercase letters, digits and '-', at most 63)",
                            path, r->job_id, r->namespace_name);
    return 0;
}

/* Whether the run directory and its record are the caller's alone: owned by
 * it, writable by no one else.  A record in a shared log directory that
 * someone else made (or could have changed) says what they wrote. */
static void judge(struct dt_run_record *r, const struct stat *dir, const struct stat *file)
{
    uid_t me = getuid();
    const struct stat *who[] = {dir, file};
    const char *what[] = {"the run directory", DT_RUN_RECORD_FILE};
    r->trusted = true;
    for (int i = 0; i < 2 && r->trusted; i++) {
        if (who[i]->st_uid != me)
            snprintf(r->distrust, sizeof r->distrust, "%s belongs to uid %u, not to you (uid %u)", what[i],
                     (unsigned)who[i]->st_uid, (unsigned)me);
        else if (who[i]->st_mode & 022)
            snprintf(r->distrust, sizeof r->distrust, "%s is writable by others (mode %03o)", what[i],
                     (unsigned)(who[i]->st_mode & 0777));
        else
            continue;
        r->trusted = false;
    }
}

static int parse_record(const char *text, size_t len, const char *path, struct dt_run_record *r)
{
    json_t *o = NULL;
    int rc = dt_json_parse(text, len, path, 1, &o);
    if (rc < 0)
        return rc;
    if (!json_is_object(o)) {
        json_decref(o);
        return dt_error_set(DT_EPROTO, "%s: not a JSON object", path);
    }
    get_str(o, "scheduler", r->scheduler, sizeof r->scheduler);
    get_str(o, "name", r->name, sizeof r->name);
    get_str(o, "run_id", r->run_id, sizeof r->run_id);
    get_str(o, "run_dir", r->run_dir, sizeof r->run_dir);
    get_str(o, "spec", r->spec, sizeof r->spec);
    get_str(o, "host", r->host, sizeof r->host);
    get_str(o, "job_id", r->job_id, sizeof r->job_id);
    get_str(o, "namespace", r->namespace_name, sizeof r->namespace_name);
    rc = get_numbers(o, path, r);
    json_decref(o);
    if (rc == 0 && (!r->scheduler[0] || !r->run_dir[0]))
        rc = dt_error_set(DT_EPROTO, "%s: no scheduler or run_dir in it", path);
    return rc ? rc : check_handle(r, path);
}

int dt_run_record_read(const char *run_dir, struct dt_run_record *r)
{
    memset(r, 0, sizeof *r);
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/%s", run_dir, DT_RUN_RECORD_FILE);
    int dfd = open(run_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return dt_error_set_errno(errno == ENOENT ? DT_ENOTFOUND : DT_EIO, errno, "cannot open %s", run_dir);
    struct stat dir, file;
    char *text = NULL;
    size_t len = 0;
    int rc = fstat(dfd, &dir) == 0 ? 0 : dt_error_set_errno(DT_EIO, errno, "cannot stat %s", run_dir);
    if (rc == 0)
        rc = dt_fs_read_whole(dfd, run_dir, DT_RUN_RECORD_FILE, DT_FS_NOFOLLOW, RECORD_MAX_BYTES, &text, &len);
    if (rc == 0 && fstatat(dfd, DT_RUN_RECORD_FILE, &file, AT_SYMLINK_NOFOLLOW) != 0)
        rc = dt_error_set_errno(DT_EIO, errno, "cannot stat %s", path);
    close(dfd);
    if (rc == 0)
        rc = parse_record(text, len, path, r);
    free(text);
    if (rc < 0)
        return rc;
    r->dir_dev = (unsigned long long)dir.st_dev;
    r->dir_ino = (unsigned long long)dir.st_ino;
    judge(r, &dir, &file);
    return 0;
}

/* --- the launcher's process, verified ------------------------------------ */

/* The run directory, held open for as long as the launcher that wrote the
 * record lives: what ties the process to this run in /proc/<pid>/fd (a pid,
 * a start time and an executable can all be read and copied into a planted
 * record; an open descriptor of the run directory cannot be given to
 * another process). */
static int held_run_dir = -1;

static void hold_run_dir(const char *run_dir)
{
    int fd = open(run_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return;
    if (held_run_dir >= 0)
        close(held_run_dir);
    held_run_dir = fd;
}

/* Up to size-1 bytes of /proc/<pid>/<name> through the process's directory. */
static ssize_t proc_read(int pfd, const char *name, char *buf, size_t size)
{
    int fd = openat(pfd, name, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, size - 1);
    close(fd);
    if (n >= 0)
        buf[n] = 0;
    return n;
}

/* Field 22 of a stat line: the start time in clock ticks since boot. */
static long long stat_start(const char *line)
{
    /* The command name may hold spaces and ')': fields count from the last ')'. */
    const char *p = strrchr(line, ')');
    if (p)
        p++; /* the space before field 3 */
    for (int field = 2; p && field < 21; field++)
        p = strchr(p + 1, ' ');
    return p ? strtoll(p + 1, NULL, 10) : -1;
}

long long dt_run_record_pid_start(int pid)
{
    char path[64], line[1024];
    snprintf(path, sizeof path, "/proc/%d", pid);
    int pfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ssize_t n = pfd >= 0 ? proc_read(pfd, "stat", line, sizeof line) : -1;
    if (pfd >= 0)
        close(pfd);
    return n > 0 ? stat_start(line) : -1;
}

/* Real and effective uid of the process, from its status file. */
static bool owned_by_caller(int pfd)
{
    char buf[4096];
    if (proc_read(pfd, "status", buf, sizeof buf) <= 0)
        return false;
    const char *u = strstr(buf, "\nUid:");
    unsigned long real, eff;
    return u && sscanf(u + 5, "%lu %lu", &real, &eff) == 2 && real == (unsigned long)getuid() &&
           eff == (unsigned long)getuid();
}

/* The file name of an executable link's target, " (deleted)" left out (a
 * dtrain rebuilt while its job runs is still that dtrain). */
static bool exe_name(int dfd, const char *link, char *out, size_t size)
{
    char target[PATH_MAX];
    ssize_t n = readlinkat(dfd, link, target, sizeof target - 1);
    if (n <= 0)
        return false;
    target[n] = 0;
    char *del = strstr(target, " (deleted)");
    if (del && !del[10])
        *del = 0;
    const char *base = strrchr(target, '/');
    base = base ? base + 1 : target;
    if (strlen(base) >= size)
        return false;
    memcpy(out, base, strlen(base) + 1);
    return true;
}

static bool is_dtrain(int pfd)
{
    char theirs[NAME_MAX + 1], mine[NAME_MAX + 1];
    return exe_name(pfd, "exe", theirs, sizeof theirs) &&
           exe_name(AT_FDCWD, "/proc/self/exe", mine, sizeof mine) && strcmp(theirs, mine) == 0;
}

/* Does the process hold the directory (dev, ino) open? */
static bool holds_dir(int pfd, unsigned long long dev, unsigned long long ino)
{
    int fdd = openat(pfd, "fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fdd >= 0 ? fdopendir(fdd) : NULL;
    if (!d) {
        if (fdd >= 0)
            close(fdd);
        return false;
    }
    bool found = false;
    struct stat st;
    for (struct dirent *e; !found && (e = readdir(d));)
        found = e->d_name[0] != '.' && fstatat(dirfd(d), e->d_name, &st, 0) == 0 && S_ISDIR(st.st_mode) &&
                (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
    closedir(d);
    return found;
}

/* What the record claims, checked against the process: a sentence for the first claim that fails. */
static int verify(const struct dt_run_record *r, int pfd)
{
    char line[1024];
    if (proc_read(pfd, "stat", line, sizeof line) <= 0)
        return dt_error_set(DT_ENOTFOUND, "pid %d has exited", r->pid);
    if (stat_start(line) != r->pid_start)
        return dt_error_set(DT_ENOTFOUND,
                            "pid %d is another process now (its start time is not the record's)", r->pid);
    if (!owned_by_caller(pfd))
        return dt_error_set(DT_EAUTH, "pid %d is not a process of yours", r->pid);
    if (!is_dtrain(pfd))
        return dt_error_set(DT_EAUTH, "pid %d is not a dtrain (its executable is another program)", r->pid);
    if (!holds_dir(pfd, r->dir_dev, r->dir_ino))
        return dt_error_set(DT_EAUTH,
                            "pid %d is a dtrain, but not this run's launcher (it does not hold the "
                            "run directory open)",
                            r->pid);
    return 0;
}

int dt_run_record_launcher_open(const struct dt_run_record *r)
{
    char host[256] = "", path[64];
    gethostname(host, sizeof host - 1);
    if (strcmp(host, r->host) != 0)
        return dt_error_set(DT_EUNSUPPORTED, "it was launched on %s, not here (%s)", r->host, host);
    if (r->pid <= 1 || r->pid_start <= 0 || !r->dir_ino)
        return dt_error_set(DT_EAUTH,
                            "launch.json names no process that can be checked (pid %d, pid_start %lld)",
                            r->pid, r->pid_start);
    snprintf(path, sizeof path, "/proc/%d", r->pid);
    /* Everything is read through this directory: if the pid dies and is
     * reused meanwhile, reads through it fail instead of describing the new
     * process, and a signal sent through it (pidfd_send_signal) reaches the
     * process that was checked or none. */
    int pfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (pfd < 0)
        return dt_error_set(DT_ENOTFOUND, "pid %d has exited", r->pid);
    int rc = verify(r, pfd);
    if (rc < 0) {
        close(pfd);
        return rc;
    }
    return pfd;
}

bool dt_run_record_launcher_alive(const struct dt_run_record *r)
{
    int pfd = dt_run_record_launcher_open(r);
    if (pfd < 0) {
        dt_error_clear();
        return false;
    }
    close(pfd);
    return true;
}

/* --- a launcher that hosts its job --------------------------------------- */

void dt_run_record_launcher_state(const struct dt_run_record *r, struct dt_adapter_state *out)
{
    memset(out, 0, sizeof *out);
    out->known = true;
    out->active = dt_run_record_launcher_alive(r);
    snprintf(out->state, sizeof out->state, "%s", out->active ? "running" : "ended");
    snprintf(out->where, sizeof out->where, "dtrain launch pid %d on %s", r->pid, r->host);
}

/* 0, or -errno: ESRCH once the process is gone. */
static int send_signal(int pfd, int pid, int sig)
{
#ifdef SYS_pidfd_send_signal
    if (syscall(SYS_pidfd_send_signal, pfd, sig, NULL, 0) == 0)
        return 0;
    if (errno != ENOSYS && errno != EINVAL && errno != EBADF)
        return -errno;
#endif
    /* A kernel before 5.1: the checks were made a moment ago, and the pid
     * stays this process's while it is not reaped. */
    return kill(pid, sig) == 0 ? 0 : -errno;
}

static bool gone_within(int pfd, int pid, double wait_s)
{
    struct timespec tick = {0, 50 * 1000 * 1000};
    for (double t = 0; t < wait_s; t += 0.05) {
        if (send_signal(pfd, pid, 0) == -ESRCH)
            return true;
        nanosleep(&tick, NULL);
    }
    return send_signal(pfd, pid, 0) == -ESRCH;
}

int dt_run_record_stop_launcher(const struct dt_run_record *r, double wait_s)
{
    int pfd = dt_run_record_launcher_open(r);
    if (pfd == DT_ENOTFOUND)
        return 0; /* it has ended */
    if (pfd < 0)
        return dt_error_prefix("%s: not signalled", r->run_dir);
    int rc = send_signal(pfd, r->pid, SIGTERM);
    if (rc < 0 && rc != -ESRCH) {
        close(pfd);
        return dt_error_set_errno(DT_EIO, -rc, "cannot signal dtrain launch (pid %d) of %s", r->pid,
                                  r->run_dir);
    }
    bool gone = gone_within(pfd, r->pid, wait_s);
    if (!gone) { /* a second signal: the launcher kills what is left at once */
        send_signal(pfd, r->pid, SIGTERM);
        gone = gone_within(pfd, r->pid, 5);
    }
    close(pfd);
    return gone ? 0
                : dt_error_set(DT_ETIMEDOUT, "dtrain launch (pid %d) of %s still runs %g s after SIGTERM",
                               r->pid, r->run_dir, wait_s + 5);
}
