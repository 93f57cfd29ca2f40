/* agent_summary.c - what the agent tells a person after a run: the
 * first-failure report on the console, <run dir>/summary.json, and the
 * closing line (with a trainer's findings, as `dtrain report` words them).
 *
 * summary.json is built as one jansson document (base/json.h) and written in
 * the layout put_value describes, which readers have grepped since the first
 * version.
 *
 * Not for deciding anything: the supervision loop (agent_supervise.c) fills
 * struct dt_agent_result; this file only renders it.
 */
#include "launcher/agent/agent_internal.h"

#include "base/error.h"
#include "base/json.h"
#include "base/json_escape.h"
#include "base/log.h"
#include "base/proc.h"
#include "launcher/report/report.h"
#include "spec/jobspec.h"
#include "spec/placement.h"
#include "base/fs.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *status_name(enum dt_agent_status s)
{
    switch (s) {
    case DT_AGENT_SUCCEEDED:
        return "succeeded";
    case DT_AGENT_FAILED:
        return "failed";
    case DT_AGENT_INTERRUPTED:
        return "interrupted";
    }
    return "unknown";
}

/* --- summary.json: the document ------------------------------------------ */

/* Appends key: v to *o, v's reference taken even on failure; a failure
 * (out of memory: every constructor returns NULL then) frees *o and leaves
 * it NULL, so a run of adds ends with the whole object or none. */
static void add(json_t **o, const char *key, json_t *v)
{
    if (json_object_set_new(*o, key, v)) {
        json_decref(*o);
        *o = NULL;
    }
}

/* add for arrays. */
static void append(json_t **a, json_t *v)
{
    if (json_array_append_new(*a, v)) {
        json_decref(*a);
        *a = NULL;
    }
}

/* Seconds to the microsecond, as the summary has always given them; null
 * for a time that is no number (JSON has no NaN). */
static json_t *seconds(double s)
{
    return isfinite(s) ? json_real(round(s * 1e6) / 1e6) : json_null();
}

static json_t *str_or_null(const char *s)
{
    return s[0] ? dt_json_str(s) : json_null();
}

static json_t *int_or_null(bool known, json_int_t v)
{
    return known ? json_integer(v) : json_null();
}

/* exit_code and signal as two members, one of them null, so tools need not
 * decode 128+n; core_dumped beside a signal only. */
static void add_status(json_t **o, bool exited, int wstatus)
{
    char tmp[32];
    bool sig = exited && WIFSIGNALED(wstatus);
    add(o, "exit_code", int_or_null(exited && !sig, dt_proc_exit_status(wstatus)));
    add(o, "signal",
        sig ? dt_json_str(dt_proc_signal_name(WTERMSIG(wstatus), tmp, sizeof tmp)) : json_null());
    if (sig)
        add(o, "core_dumped", json_boolean(WCOREDUMP(wstatus)));
}

static json_t *rank_json(const struct dt_agent_rank_result *r, int local_rank)
{
    json_t *o = json_object();
    add(&o, "rank", json_integer(r->rank));
    add(&o, "local_rank", json_integer(local_rank));
    /* pid 0: never started, or (mpirun) no record of it reached us */
    add(&o, "pid", int_or_null(r->pid > 0, r->pid));
    add_status(&o, r->exited, r->wstatus);
    add(&o, "stopped_by_dtrain", json_boolean(r->stopped_by_agent));
    add(&o, "spawn_s", seconds(r->spawn_s));
    add(&o, "exit_s", r->exited ? seconds(r->exit_s) : json_null());
    return o;
}

/* This node's ranks, then (node 0 of a multi-node job) the other nodes'. */
static json_t *ranks_json(const struct dt_agent_result *res, const struct dt_agent_attempt *at)
{
    json_t *a = json_array();
    for (int i = 0; i < res->nproc; i++)
        append(&a, rank_json(&at->ranks[i], i));
    for (int i = 0; i < at->n_others; i++)
        append(&a, rank_json(&at->others[i], dt_placement_local_rank_of(res->nproc, at->others[i].rank)));
    return a;
}

/* The global rank of at->ranks[i]; null for no rank (i < 0). */
static json_t *rank_or_null(const struct dt_agent_attempt *at, int i)
{
    return i >= 0 ? json_integer(at->ranks[i].rank) : json_null();
}

static json_t *attempt_json(const struct dt_agent_result *res, int a)
{
    const struct dt_agent_attempt *at = &res->attempts[a];
    json_t *o = json_object();
    add(&o, "attempt", json_integer(a));
    add(&o, "start_s", seconds(at->start_s));
    add(&o, "end_s", seconds(at->end_s));
    add(&o, "leftover_processes", json_integer(at->leftovers));
    add(&o, "first_failed_rank", rank_or_null(at, at->first_failed));
    add(&o, "hung_rank", rank_or_null(at, at->hung));
    /* An elastic job's round (docs/elastic.md): written only for one, so the
     * attempts of other jobs read as they did. */
    if (at->round_nodes > 0) {
        json_t *r = json_object();
        add(&r, "nodes", json_integer(at->round_nodes));
        add(&r, "world_size", json_integer(at->round_nodes * res->nproc));
        add(&r, "ended_by", dt_json_str(at->round_end));
        add(&r, "reason", dt_json_str(at->round_why));
        add(&o, "round", r);
    }
    add(&o, "ranks", ranks_json(res, at));
    return o;
}

/* An elastic job's rounds told apart: how many ended for a membership
 * change (not counted against max_restarts) and how many for a failure
 * that was restarted (counted). */
static void add_round_counts(json_t **doc, const struct dt_agent_result *res)
{
    int membership = 0, restarts = 0, rounds = 0;
    for (int a = 0; a < res->n_attempts; a++) {
        const struct dt_agent_attempt *at = &res->attempts[a];
        rounds += at->round_nodes > 0;
        membership += strcmp(at->round_end, "membership") == 0;
        restarts += strcmp(at->round_end, "restart") == 0;
    }
    if (rounds == 0)
        return;
    add(doc, "membership_changes", json_integer(membership));
    add(doc, "failure_restarts", json_integer(restarts));
}

static json_t *hang_json(const struct dt_agent_failure *ff)
{
    if (!ff->hung)
        return json_null();
    json_t *o = json_object();
    add(&o, "rank", json_integer(ff->rank));
    add(&o, "step", int_or_null(ff->hung_step >= 0, ff->hung_step));
    add(&o, "detected_s", seconds(ff->hang_detected_s));
    add(&o, "reason", dt_json_str(ff->hang_reason));
    add(&o, "report", str_or_null(ff->hang_report));
    add(&o, "traceback", str_or_null(ff->hang_traceback));
    return o;
}

static json_t *failure_json(const struct dt_agent_result *res)
{
    const struct dt_agent_failure *ff = &res->first_failure;
    if (!res->have_failure)
        return json_null();
    char desc[160];
    dt_proc_describe(ff->wstatus, true, desc, sizeof desc);
    json_t *o = json_object(), *tail = json_array();
    add(&o, "attempt", json_integer(ff->attempt));
    add(&o, "rank", json_integer(ff->rank));
    add(&o, "node", json_integer(ff->node));
    add(&o, "host", str_or_null(ff->host));
    add_status(&o, true, ff->wstatus);
    add(&o, "time_s", seconds(ff->time_s));
    add(&o, "description", dt_json_str(desc));
    add(&o, "error_file", str_or_null(ff->error_file));
    add(&o, "error_message", str_or_null(ff->error_message));
    add(&o, "error_traceback", str_or_null(ff->error_traceback));
    add(&o, "oom_killer", ff->oom_killer < 0 ? json_null() : json_boolean(ff->oom_killer));
    add(&o, "final", json_boolean(ff->final));
    add(&o, "hang", hang_json(ff));
    for (int i = 0; i < ff->n_tail; i++)
        append(&tail, dt_json_str(ff->tail[i]));
    add(&o, "stderr_tail", tail);
    return o;
}

/* The node whose agent was lost, as node 0's coordinator saw it; null when none. */
static json_t *lost_node_json(const struct dt_agent_lost_node *l)
{
    if (l->node < 0 || !l->reason[0])
        return json_null();
    json_t *o = json_object();
    add(&o, "node", json_integer(l->node));
    add(&o, "host", dt_json_str(l->host));
    add(&o, "detected_s", seconds(l->detected_s));
    add(&o, "reason", dt_json_str(l->reason));
    return o;
}

/* The bundled trainer's figures (rank 0 writes <run dir>/trainer_summary.json,
 * worker/metrics.c): the four a person looks for first are copied to the top
 * level, the whole object goes under "trainer".  Jobs that run a command have
 * no such file, and a file that is no JSON object (a trainer killed while
 * writing it) is left out: neither is written. */
static void add_trainer(json_t **doc, const char *run_dir)
{
    static const char *const keys[] = {"final_loss", "test_accuracy", "steps", "samples_per_s"};
    char path[PATH_MAX + 32];
    json_t *t = NULL;
    snprintf(path, sizeof path, "%s/trainer_summary.json", run_dir);
    if (dt_json_load_run_file(path, 1 << 20, &t) || !json_is_object(t)) {
        json_decref(t);
        dt_error_clear();
        return;
    }
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (json_object_get(t, keys[i]))
            add(doc, keys[i], json_incref(json_object_get(t, keys[i])));
    add(doc, "trainer", t);
}

static json_t *command_json(const char *const *argv)
{
    json_t *a = json_array();
    for (int i = 0; argv[i]; i++)
        append(&a, dt_json_str(argv[i]));
    return a;
}

/* Where the ranks meet: the coordinator's address and how it is guarded.
 * (Members a node adds about its own endpoints go here too.) */
static void add_coordinator(json_t **doc, const struct dt_agent_config *cfg)
{
    add(doc, "coordinator", dt_json_str(cfg->master_addr));
    add(doc, "coordinator_port", json_integer(cfg->master_port));
    add(doc, "auth", json_string(cfg->token ? "token" : "none"));
    /* The ranks' MASTER_PORT on 127.0.0.1 when it was the node's store endpoint. */
    if (cfg->endpoint)
        add(doc, "store_endpoint_port", json_integer(cfg->store_port));
}

/* summary.json as one document, members in the order readers have known. */
static json_t *summary_json(const struct dt_agent_config *cfg, const struct dt_agent_result *res)
{
    char when[32] = "", tmp[32];
    time_t t = (time_t)res->started_unix;
    struct tm tm;
    if (gmtime_r(&t, &tm))
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    json_t *doc = json_object();
    add(&doc, "name", dt_json_str(cfg->job->name));
    add(&doc, "run_id", dt_json_str(cfg->run_id));
    add(&doc, "run_dir", dt_json_str(cfg->run_dir));
    add(&doc, "status", json_string(status_name(res->status)));
    add(&doc, "exit_status", json_integer(res->exit_status));
    add(&doc, "interrupted_by",
        res->interrupt_signal ? dt_json_str(dt_proc_signal_name(res->interrupt_signal, tmp, sizeof tmp))
                              : json_null());
    bool requeue = res->status == DT_AGENT_INTERRUPTED && res->exit_status == DT_AGENT_EXIT_REQUEUE;
    add(&doc, "requeue", requeue ? json_string(res->requeue_stopped ? "stopped" : "checkpointed") : json_null());
    add(&doc, "started_at", json_string(when));
    add(&doc, "started_unix", seconds(res->started_unix));
    add(&doc, "wall_seconds", seconds(res->wall_s));
    add_coordinator(&doc, cfg);
    add(&doc, "world_size", json_integer(cfg->nnodes * cfg->nproc));
    add(&doc, "nnodes", json_integer(cfg->nnodes));
    add(&doc, "nproc_per_node", json_integer(cfg->nproc));
    add(&doc, "max_restarts", json_integer(cfg->job->max_restarts));
    add(&doc, "n_attempts", json_integer(res->n_attempts));
    add(&doc, "command", command_json(cfg->argv));
    add(&doc, "first_failure", failure_json(res));
    add(&doc, "coordinator_lost", str_or_null(res->coordinator_lost));
    add(&doc, "lost_node", lost_node_json(&res->lost_node));
    add(&doc, "write_error", str_or_null(res->write_error));
    add_round_counts(&doc, res);
    json_t *attempts = json_array();
    for (int a = 0; a < res->n_attempts; a++)
        append(&attempts, attempt_json(res, a));
    add(&doc, "attempts", attempts);
    add_trainer(&doc, cfg->run_dir);
    add(&doc, "version", json_integer(1));
    return doc;
}

/* --- summary.json: the text ---------------------------------------------- */

/* Reals in 15 significant digits: the trainer's figures (%.9g) read as
 * themselves, and so do seconds below 10^9 rounded to the microsecond.  A
 * Unix time (10^9 s and up: started_unix) gets 16, its ten digits before the
 * point and the microsecond after. */
static size_t dump_flags(const json_t *v)
{
    int digits = json_is_real(v) && fabs(json_real_value(v)) >= 1e9 ? 16 : 15;
    return JSON_ENCODE_ANY | JSON_REAL_PRECISION(digits);
}

static int put_value(FILE *f, json_t *v, int indent);

/* An object's members as "key": value, between open and close, sep between them. */
static int put_members(FILE *f, json_t *o, int indent, const char *open, const char *sep, const char *close)
{
    const char *key;
    json_t *v;
    int bad = fputs(open, f) == EOF;
    size_t n = 0;
    json_object_foreach (o, key, v) {
        if (n++)
            fputs(sep, f);
        dt_json_put_str(f, key, DT_JSON_SHORT_WS);
        bad = bad || fputs(": ", f) == EOF || put_value(f, v, indent);
    }
    return bad || fputs(close, f) == EOF;
}

/* The layout tests and scripts grep: the document one member a line; an
 * array of objects (the attempts, an attempt's ranks) one element a line, two
 * columns further in; any other object on one line, an array of objects in it
 * spread as just said; the rest as jansson writes it, ", " and ": " between
 * members.  So a rank, a first failure or a lost node is one line
 * ("first_failure": {"attempt": 0, "rank": 3, ...), as it always was. */
static int put_value(FILE *f, json_t *v, int indent)
{
    size_t i;
    json_t *x;
    int bad = 0;
    if (json_is_object(v))
        return put_members(f, v, indent, "{", ", ", "}");
    if (!json_is_object(json_array_get(v, 0)))
        return json_dumpf(v, f, dump_flags(v));
    json_array_foreach (v, i, x) {
        bad = bad || fprintf(f, "%s\n%*s", i ? "," : "[", indent + 2, "") < 0 || put_value(f, x, indent + 2);
    }
    return bad || fprintf(f, "\n%*s]", indent, "") < 0;
}

int dt_agent_write_summary_to(FILE *f, const struct dt_agent_config *cfg, const struct dt_agent_result *res)
{
    json_t *doc = summary_json(cfg, res);
    if (!doc)
        return dt_error_set(DT_ENOMEM, "out of memory building the run summary");
    errno = 0;
    int bad = put_members(f, doc, 2, "{\n  ", ",\n  ", "\n}\n");
    int e = errno;
    json_decref(doc);
    if (!bad && !ferror(f))
        return 0;
    return e ? dt_error_set_errno(DT_EIO, e, "writing the run summary failed")
             : dt_error_set(DT_EIO, "writing the run summary failed");
}

struct summary_out {
    const struct dt_agent_config *cfg;
    const struct dt_agent_result *res;
};

static int write_summary(void *ctx, FILE *f)
{
    const struct summary_out *o = ctx;
    return dt_agent_write_summary_to(f, o->cfg, o->res);
}

int dt_agent__write_summary(const struct dt_agent_config *cfg, const struct dt_agent_result *res,
                           const char *path)
{
    struct summary_out o = {cfg, res};
    return dt_fs_write_atomic(path, false, write_summary, &o);
}

/* Each line of text as "  > line", cut to DT_AGENT_TAIL_WIDTH as the stderr tail is. */
static void print_quoted(int fd, const char *text)
{
    for (const char *line = text; *line;) {
        size_t n = strcspn(line, "\n");
        int shown = n < DT_AGENT_TAIL_WIDTH ? (int)n : DT_AGENT_TAIL_WIDTH;
        dprintf(fd, "  > %.*s%s\n", shown, line, (size_t)shown < n ? "..." : "");
        line += n + (line[n] == '\n');
    }
}

void dt_agent__print_failure(const struct dt_agent_config *cfg, const struct dt_agent_result *res)
{
    if (!res->have_failure)
        return;
    const struct dt_agent_failure *ff = &res->first_failure;
    int fd = cfg->err_fd > 0 ? cfg->err_fd : STDERR_FILENO;
    char desc[160];
    /* "often the OOM killer" is a guess; not needed when the cgroup told us. */
    dt_proc_describe(ff->wstatus, ff->oom_killer < 0 && !ff->hung, desc, sizeof desc);
    if (ff->hung) {
        char step[32] = "";
        if (ff->hung_step >= 0)
            snprintf(step, sizeof step, " at step %lld", (long long)ff->hung_step);
        snprintf(desc, sizeof desc, "hung%s, killed by dtrain's watchdog", step);
    }
    dprintf(fd, "dtrain: error: rank %d failed first (attempt %d, %.2f s after the start): %s\n", ff->rank,
            ff->attempt, ff->time_s, desc);
    if (ff->hung)
        dprintf(fd, "dtrain: rank %d was %s; states, stacks and last log lines: %s\n", ff->rank, ff->hang_reason,
                ff->hang_report[0] ? ff->hang_report : "(the report could not be written)");
    if (ff->hung && ff->hang_traceback[0]) {
        dprintf(fd, "dtrain: where rank %d's Python threads were (faulthandler; all of it in the report):\n",
                ff->rank);
        print_quoted(fd, ff->hang_traceback);
    }
    if (ff->oom_killer == 1)
        dprintf(
            fd,
            "dtrain: the kernel's out-of-memory killer ran in this job's memory cgroup during the attempt: "
            "rank %d most likely used more memory than the machine or the cgroup limit allows\n",
            ff->rank);
    else if (ff->oom_killer == 0)
        dprintf(fd, "dtrain: it was not the out-of-memory killer (the memory cgroup counted no OOM kill); "
                    "something outside dtrain sent SIGKILL\n");
    if (ff->n_tail == 0) {
        dprintf(fd, "dtrain: rank %d wrote nothing on stderr (log: %s/attempt_%d/rank_%d.err)\n", ff->rank,
                cfg->run_dir, ff->attempt, ff->rank);
    } else {
        dprintf(fd, "dtrain: last %d line%s of rank %d's stderr (all of it: %s/attempt_%d/rank_%d.err):\n",
                ff->n_tail, ff->n_tail == 1 ? "" : "s", ff->rank, cfg->run_dir, ff->attempt, ff->rank);
        for (int i = 0; i < ff->n_tail; i++)
            dprintf(fd, "  | %s\n", ff->tail[i]);
    }
    if (ff->error_file[0] && !ff->error_message[0])
        dprintf(fd, "dtrain: rank %d also wrote an error report: %s\n", ff->rank, ff->error_file);
    if (ff->error_message[0]) {
        dprintf(fd, "dtrain: rank %d's error report (%s) says:\n", ff->rank, ff->error_file);
        print_quoted(fd, ff->error_message);
    }
    if (ff->error_traceback[0]) {
        if (ff->traceback_left_out > 0)
            dprintf(fd, "dtrain: the end of its traceback (%d earlier line%s in the report):\n",
                    ff->traceback_left_out, ff->traceback_left_out == 1 ? "" : "s");
        else
            dprintf(fd, "dtrain: its traceback:\n");
        print_quoted(fd, ff->error_traceback);
    }
}

/* A trainer job ends with what limited it (report_html.c's findings: data
 * waits, exposed communication, an idle GPU, a straggler rank), the same
 * sentences `dtrain report` prints, so nobody has to ask for them. */
static void print_findings(const char *run_dir)
{
    char path[PATH_MAX + 32], buf[4096];
    snprintf(path, sizeof path, "%s/trainer_summary.json", run_dir);
    if (access(path, R_OK) != 0) {
        /* a script's progress rows (docs/progress.md): curves, no step-time split */
        snprintf(path, sizeof path, "%s/metrics.jsonl", run_dir);
        if (access(path, R_OK) == 0)
            dt_log_info("curves of the progress rows: dtrain report %s", run_dir);
        return;
    }
    struct dt_report r;
    if (dt_report_load(run_dir, &r)) {
        dt_log_warn("no run findings: %s", dt_error_last());
        dt_error_clear();
        return;
    }
    dt_report_diagnose(&r, buf, sizeof buf);
    dt_report_free(&r);
    for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n"))
        dt_log_info("%s", line);
    dt_log_info("curves and the step-time split: dtrain report %s", run_dir);
}

void dt_agent__print_outcome(const struct dt_agent_config *cfg, const struct dt_agent_result *res)
{
    char tmp[32], attempts[48] = "", where[2 * PATH_MAX + 4700];
    if (res->n_attempts > 1)
        snprintf(attempts, sizeof attempts, " (%d attempts)", res->n_attempts);
    /* Only node 0 writes summary.json (it alone hears every node's ranks). */
    if (res->write_error[0])
        snprintf(where, sizeof where, "%s; what could be written is in %s", res->write_error, cfg->run_dir);
    else if (cfg->node_rank == 0)
        snprintf(where, sizeof where, "logs and summary.json in %s", cfg->run_dir);
    else
        snprintf(where, sizeof where, "this node's logs in %s (node 0 writes summary.json)", cfg->run_dir);
    /* One success line per job, node 0's: another node's would repeat it in the
     * batch output a launcher follows (Slurm's, mpirun's). */
    if (res->status == DT_AGENT_SUCCEEDED)
        dt_log(cfg->node_rank == 0 ? DT_LOG_INFO : DT_LOG_DEBUG, "job %s succeeded in %.2f s%s; %s", cfg->job->name,
               res->wall_s, attempts, where);
    else if (res->requeue_stopped)
        dt_log_info("job %s: the ranks were stopped on %s after %.2f s (not every rank catches it), to be "
                    "requeued (exit status %d); %s",
                    cfg->job->name, dt_proc_signal_name(res->interrupt_signal, tmp, sizeof tmp), res->wall_s,
                    DT_AGENT_EXIT_REQUEUE, where);
    else if (res->status == DT_AGENT_INTERRUPTED && res->exit_status == DT_AGENT_EXIT_REQUEUE)
        dt_log_info("job %s: the ranks checkpointed and stopped on %s after %.2f s, to be requeued (exit "
                    "status %d); %s",
                    cfg->job->name, dt_proc_signal_name(res->interrupt_signal, tmp, sizeof tmp), res->wall_s,
                    DT_AGENT_EXIT_REQUEUE, where);
    else if (res->status == DT_AGENT_INTERRUPTED)
        dt_log_warn("job %s interrupted by %s after %.2f s; %s", cfg->job->name,
                    dt_proc_signal_name(res->interrupt_signal, tmp, sizeof tmp), res->wall_s, where);
    else
        dt_log_error("job %s failed with exit status %d after %.2f s%s; %s", cfg->job->name, res->exit_status,
                     res->wall_s, attempts, where);
    /* Node 0 for the findings too: it is rank 0's node, which writes trainer_summary.json. */
    if (res->status == DT_AGENT_SUCCEEDED && cfg->node_rank == 0)
        print_findings(cfg->run_dir);
}
