/* agent_summary.c - what the agent tells a person after a run: the
 * first-failure report on the console, <run dir>/summary.json, and the
 * closing line (with a trainer's findings, as `dtrain report` words them).
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
#include "base/fs.h"

#include <errno.h>
#include <limits.h>
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

/* Error messages and tracebacks keep their lines and tabs readable here. */
static void json_str(FILE *f, const char *s)
{
    dt_json_put_str(f, s, DT_JSON_SHORT_WS);
}

/* exit_code and signal as two fields, one of them null, so tools need not decode 128+n. */
static void json_status(FILE *f, bool exited, int wstatus)
{
    char tmp[32];
    if (!exited) {
        fputs("\"exit_code\": null, \"signal\": null", f);
    } else if (WIFSIGNALED(wstatus)) {
        fputs("\"exit_code\": null, \"signal\": ", f);
        json_str(f, dt_proc_signal_name(WTERMSIG(wstatus), tmp, sizeof tmp));
        fprintf(f, ", \"core_dumped\": %s", WCOREDUMP(wstatus) ? "true" : "false");
    } else {
        fprintf(f, "\"exit_code\": %d, \"signal\": null", dt_proc_exit_status(wstatus));
    }
}

static void json_rank(FILE *f, const struct dt_agent_rank_result *r, int local_rank)
{
    fprintf(f, "        {\"rank\": %d, \"local_rank\": %d, \"pid\": ", r->rank, local_rank);
    if (r->pid > 0) /* 0: never started, or (mpirun) no record of it reached us */
        fprintf(f, "%d, ", r->pid);
    else
        fputs("null, ", f);
    json_status(f, r->exited, r->wstatus);
    fprintf(f, ", \"stopped_by_dtrain\": %s, \"spawn_s\": %.6f, \"exit_s\": ",
            r->stopped_by_agent ? "true" : "false", r->spawn_s);
    if (r->exited)
        fprintf(f, "%.6f}", r->exit_s);
    else
        fputs("null}", f);
}

/* An elastic job's round (docs/elastic.md): written only for one, so the
 * attempts of other jobs read as they did. */
static void json_round(FILE *f, const struct dt_agent_result *res, const struct dt_agent_attempt *at)
{
    if (at->round_nodes <= 0)
        return;
    fprintf(f, ",\n      \"round\": {\"nodes\": %d, \"world_size\": %d, \"ended_by\": ", at->round_nodes,
            at->round_nodes * res->nproc);
    json_str(f, at->round_end);
    fputs(", \"reason\": ", f);
    json_str(f, at->round_why);
    fputs("}", f);
}

/* An elastic job's rounds told apart: how many ended for a membership
 * change (not counted against max_restarts) and how many for a failure
 * that was restarted (counted). */
static void json_round_counts(FILE *f, const struct dt_agent_result *res)
{
    int membership = 0, restarts = 0, rounds = 0;
    for (int a = 0; a < res->n_attempts; a++) {
        const struct dt_agent_attempt *at = &res->attempts[a];
        rounds += at->round_nodes > 0;
        membership += strcmp(at->round_end, "membership") == 0;
        restarts += strcmp(at->round_end, "restart") == 0;
    }
    if (rounds > 0)
        fprintf(f, "  \"membership_changes\": %d,\n  \"failure_restarts\": %d,\n", membership, restarts);
}

static void json_attempts(FILE *f, const struct dt_agent_result *res)
{
    fputs("  \"attempts\": [\n", f);
    for (int a = 0; a < res->n_attempts; a++) {
        const struct dt_agent_attempt *at = &res->attempts[a];
        fprintf(f,
                "    {\"attempt\": %d, \"start_s\": %.6f, \"end_s\": %.6f, \"leftover_processes\": %d,\n"
                "      \"first_failed_rank\": ",
                a, at->start_s, at->end_s, at->leftovers);
        if (at->first_failed >= 0)
            fprintf(f, "%d", at->ranks[at->first_failed].rank);
        else
            fputs("null", f);
        fputs(", \"hung_rank\": ", f);
        if (at->hung >= 0)
            fprintf(f, "%d", at->ranks[at->hung].rank);
        else
            fputs("null", f);
        json_round(f, res, at);
        fputs(", \"ranks\": [\n", f);
        for (int i = 0; i < res->nproc; i++) {
            json_rank(f, &at->ranks[i], i);
            fputs(i + 1 < res->nproc || at->n_others > 0 ? ",\n" : "\n", f);
        }
        for (int i = 0; i < at->n_others; i++) { /* every node runs nproc ranks: local = rank % nproc */
            json_rank(f, &at->others[i], res->nproc > 0 ? at->others[i].rank % res->nproc : 0);
            fputs(i + 1 < at->n_others ? ",\n" : "\n", f);
        }
        fprintf(f, "      ]}%s\n", a + 1 < res->n_attempts ? "," : "");
    }
    fputs("  ],\n", f);
}

static void json_failure(FILE *f, const struct dt_agent_result *res)
{
    const struct dt_agent_failure *ff = &res->first_failure;
    if (!res->have_failure) {
        fputs("  \"first_failure\": null,\n", f);
        return;
    }
    char desc[160];
    dt_proc_describe(ff->wstatus, true, desc, sizeof desc);
    fprintf(f, "  \"first_failure\": {\"attempt\": %d, \"rank\": %d, \"node\": %d, \"host\": ", ff->attempt,
            ff->rank, ff->node);
    if (ff->host[0])
        json_str(f, ff->host);
    else
        fputs("null", f);
    fputs(", ", f);
    json_status(f, true, ff->wstatus);
    fprintf(f, ", \"time_s\": %.6f, \"description\": ", ff->time_s);
    json_str(f, desc);
    fputs(", \"error_file\": ", f);
    if (ff->error_file[0])
        json_str(f, ff->error_file);
    else
        fputs("null", f);
    fputs(", \"error_message\": ", f);
    if (ff->error_message[0])
        json_str(f, ff->error_message);
    else
        fputs("null", f);
    fputs(", \"error_traceback\": ", f);
    if (ff->error_traceback[0])
        json_str(f, ff->error_traceback);
    else
        fputs("null", f);
    fprintf(f, ", \"oom_killer\": %s", ff->oom_killer < 0 ? "null" : ff->oom_killer ? "true" : "false");
    fprintf(f, ", \"final\": %s, \"hang\": ", ff->final ? "true" : "false");
    if (ff->hung) {
        fprintf(f, "{\"rank\": %d, \"step\": ", ff->rank);
        if (ff->hung_step >= 0)
            fprintf(f, "%lld", (long long)ff->hung_step);
        else
            fputs("null", f);
        fprintf(f, ", \"detected_s\": %.6f, \"reason\": ", ff->hang_detected_s);
        json_str(f, ff->hang_reason);
        fputs(", \"report\": ", f);
        if (ff->hang_report[0])
            json_str(f, ff->hang_report);
        else
            fputs("null", f);
        fputs("}", f);
    } else {
        fputs("null", f);
    }
    fputs(", \"stderr_tail\": [", f);
    for (int i = 0; i < ff->n_tail; i++) {
        json_str(f, ff->tail[i]);
        if (i + 1 < ff->n_tail)
            fputs(", ", f);
    }
    fputs("]},\n", f);
}

/* The node whose agent was lost, as node 0's coordinator saw it; null when none. */
static void json_lost_node(FILE *f, const struct dt_agent_lost_node *l)
{
    if (l->node < 0 || !l->reason[0]) {
        fputs("null", f);
        return;
    }
    fprintf(f, "{\"node\": %d, \"host\": ", l->node);
    json_str(f, l->host);
    fprintf(f, ", \"detected_s\": %.6f, \"reason\": ", l->detected_s);
    json_str(f, l->reason);
    fputs("}", f);
}

/* The bundled trainer's figures (rank 0 writes <run dir>/trainer_summary.json,
 * worker/metrics.c): the four a person looks for first are copied to the top
 * level, the whole object goes under "trainer" as the file has it.  Jobs that
 * run a command have no such file, and a file that is no JSON object (a
 * trainer killed while writing it) is left out: neither is written.  Numbers
 * are copied in 15 digits, so each one the trainer wrote (%.9g) reads as
 * itself. */
static void json_trainer(FILE *f, const char *run_dir)
{
    static const char *const keys[] = {"final_loss", "test_accuracy", "steps", "samples_per_s"};
    char path[4200], *text = NULL;
    size_t len = 0;
    json_t *doc = NULL;
    snprintf(path, sizeof path, "%s/trainer_summary.json", run_dir);
    if (dt_json_read_file(path, 1 << 20, &text, &len) || dt_json_parse(text, len, path, 1, &doc) ||
        !json_is_object(doc)) {
        json_decref(doc);
        free(text);
        return;
    }
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        json_t *v = json_object_get(doc, keys[i]);
        if (!v)
            continue;
        fprintf(f, "  \"%s\": ", keys[i]);
        json_dumpf(v, f, JSON_ENCODE_ANY | JSON_REAL_PRECISION(15));
        fputs(",\n", f);
    }
    while (len > 0 && strchr(" \t\r\n", text[len - 1]))
        len--;
    fputs("  \"trainer\": ", f);
    for (size_t c = 0; c < len; c++) /* indented one level deeper, as the rest of the file */
        fputs(text[c] == '\n' ? "\n  " : (char[2]){text[c], 0}, f);
    fputs(",\n", f);
    json_decref(doc);
    free(text);
}

int dt_agent_write_summary_to(FILE *f, const struct dt_agent_config *cfg, const struct dt_agent_result *res)
{
    char when[32] = "";
    char tmp[32];
    time_t t = (time_t)res->started_unix;
    struct tm tm;
    if (gmtime_r(&t, &tm))
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    fputs("{\n  \"name\": ", f);
    json_str(f, cfg->job->name);
    fputs(",\n  \"run_id\": ", f);
    json_str(f, cfg->run_id);
    fputs(",\n  \"run_dir\": ", f);
    json_str(f, cfg->run_dir);
    fprintf(f, ",\n  \"status\": \"%s\",\n  \"exit_status\": %d,\n  \"interrupted_by\": ",
            status_name(res->status), res->exit_status);
    if (res->interrupt_signal)
        json_str(f, dt_proc_signal_name(res->interrupt_signal, tmp, sizeof tmp));
    else
        fputs("null", f);
    fprintf(f, ",\n  \"started_at\": \"%s\",\n  \"started_unix\": %.6f,\n  \"wall_seconds\": %.6f,\n", when,
            res->started_unix, res->wall_s);
    fputs("  \"coordinator\": ", f);
    json_str(f, cfg->master_addr);
    fprintf(f, ",\n  \"coordinator_port\": %d,\n  \"auth\": \"%s\",\n", cfg->master_port,
            cfg->token ? "token" : "none");
    fprintf(f,
            "  \"world_size\": %d,\n  \"nnodes\": %d,\n  \"nproc_per_node\": %d,\n"
            "  \"max_restarts\": %d,\n  \"n_attempts\": %d,\n  \"command\": [",
            cfg->nnodes * cfg->nproc, cfg->nnodes, cfg->nproc, cfg->job->max_restarts, res->n_attempts);
    for (int i = 0; cfg->argv[i]; i++) {
        json_str(f, cfg->argv[i]);
        if (cfg->argv[i + 1])
            fputs(", ", f);
    }
    fputs("],\n", f);
    json_failure(f, res);
    fputs("  \"coordinator_lost\": ", f);
    if (res->coordinator_lost[0])
        json_str(f, res->coordinator_lost);
    else
        fputs("null", f);
    fputs(",\n  \"lost_node\": ", f);
    json_lost_node(f, &res->lost_node);
    fputs(",\n  \"write_error\": ", f);
    if (res->write_error[0])
        json_str(f, res->write_error);
    else
        fputs("null", f);
    fputs(",\n", f);
    json_round_counts(f, res);
    json_attempts(f, res);
    json_trainer(f, cfg->run_dir);
    fputs("  \"version\": 1\n}\n", f);
    return ferror(f) ? dt_error_set(DT_EIO, "writing the run summary failed") : 0;
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
    if (access(path, R_OK) != 0)
        return;
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
