/* slurm_jobinfo.c - Slurm's client commands (sbatch, scontrol, sacct,
 * scancel): running one, and reading a job's state from their answers.
 *
 * A command's stdout and stderr are captured (cut to the buffers' size),
 * stdin is /dev/null, and one that does not finish in time is killed: a
 * slurmctld that does not answer must not hang `dtrain launch`.
 *
 * `scontrol show job -o ID` prints one line of Key=Value fields (while the
 * job is known to slurmctld, MinJobAge after it ends); `sacct -n -X -P -o
 * State,ExitCode,NodeList -j ID` prints "STATE|N:S|nodes" where accounting
 * is configured.  ExitCode=N:S is the batch script's exit code N, or the
 * signal S that ended it; the launcher exits with N, or 128 + S.
 *
 * Not for deciding what a state means (slurm_follow.c) or for rank
 * processes (only the agent forks those).
 */
#include "scheduler-adapters/slurm.h"

#include "base/error.h"
#include "base/proc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void copy_out(char *to, size_t size, const char *from)
{
    if (size > 0)
        snprintf(to, size, "%s", from ? from : "");
}

int dt_slurm_cmd(char *const argv[], char *const envp[], double timeout_s, char *out, size_t out_size,
                 char *err, size_t err_size)
{
    struct dt_proc_run r = {
        .argv = argv, .envp = envp, .io = {DT_PROC_CAPTURE, DT_PROC_CAPTURE}, .timeout_s = timeout_s};
    int rc = dt_proc_run(&r);
    copy_out(out, out_size, r.captured[0]);
    copy_out(err, err_size, r.captured[1]);
    free(r.captured[0]);
    free(r.captured[1]);
    if (rc == DT_ETIMEDOUT)
        return dt_error_set(DT_ETIMEDOUT, "%s did not answer within %g s (is slurmctld up?)", argv[0], timeout_s);
    if (rc == DT_ENOTFOUND)
        return dt_error_set(DT_ENOTFOUND,
                            "%s was not found on PATH: `dtrain launch` of a scheduler: slurm job "
                            "runs where Slurm's client commands are installed (Debian: slurm-client)",
                            argv[0]);
    return rc;
}

/* The value of " key=" (or key= at the start) up to the next space. */
static int field(const char *text, const char *key, char *out, size_t size)
{
    size_t k = strlen(key);
    for (const char *p = text; (p = strstr(p, key)) != NULL; p += k) {
        if (p != text && p[-1] != ' ' && p[-1] != '\n')
            continue;
        if (p[k] != '=')
            continue;
        const char *v = p + k + 1;
        size_t n = strcspn(v, " \n");
        if (n >= size)
            n = size - 1;
        memcpy(out, v, n);
        out[n] = 0;
        return 0;
    }
    return -1;
}

/* "N:S" -> N, or 128 + S when a signal ended it. */
static int exit_status(const char *v)
{
    char *end;
    long n = strtol(v, &end, 10);
    if (end == v || *end != ':')
        return -1;
    long s = strtol(end + 1, NULL, 10);
    if (n == 0 && s > 0 && s < 128)
        return 128 + (int)s;
    return n >= 0 && n < 256 ? (int)n : -1;
}

static void parse_sacct(const char *text, struct dt_slurm_job_info *info)
{
    /* STATE|N:S|nodes; "CANCELLED by 0" carries its cause after a space */
    char line[1200];
    snprintf(line, sizeof line, "%s", text);
    line[strcspn(line, "\n")] = 0;
    char *bar1 = strchr(line, '|'), *bar2 = bar1 ? strchr(bar1 + 1, '|') : NULL;
    if (!bar1 || !bar2)
        return;
    *bar1 = *bar2 = 0;
    size_t n = strcspn(line, " ");
    if (n >= sizeof info->state)
        n = sizeof info->state - 1;
    memcpy(info->state, line, n);
    info->state[n] = 0;
    info->exit_status = exit_status(bar1 + 1);
    snprintf(info->nodes, sizeof info->nodes, "%s", bar2 + 1);
}

void dt_slurm_parse_job_info(const char *text, struct dt_slurm_job_info *info)
{
    char v[1024];
    if (!strstr(text, "JobState=")) {
        parse_sacct(text, info);
        return;
    }
    field(text, "JobState", info->state, sizeof info->state);
    field(text, "Reason", info->reason, sizeof info->reason);
    if (field(text, "NodeList", v, sizeof v) == 0 && strcmp(v, "(null)") != 0)
        snprintf(info->nodes, sizeof info->nodes, "%s", v);
    if (field(text, "ExitCode", v, sizeof v) == 0)
        info->exit_status = exit_status(v);
    if (field(text, "Restarts", v, sizeof v) == 0)
        info->restarts = atoi(v);
}

bool dt_slurm_state_final(const char *state)
{
    static const char *const final[] = {"COMPLETED",     "FAILED",       "CANCELLED", "TIMEOUT",
                                        "NODE_FAIL",     "PREEMPTED",    "BOOT_FAIL", "DEADLINE",
                                        "OUT_OF_MEMORY", "SPECIAL_EXIT", "REVOKED",   NULL};
    for (int i = 0; final[i]; i++)
        if (strcmp(state, final[i]) == 0)
            return true;
    return false;
}
