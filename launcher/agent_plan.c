/* agent_plan.c - what an agent settles before it starts a coordinator or a rank.
 *
 * Shared by the local adapter's `dtrain launch` and by `dtrain agent`: how
 * many ranks this node runs (nproc_per_node: gpu counts the GPUs it may
 * use), whether the spec's command exists here (say so once, not once per
 * rank and again after every restart), the program each rank runs, the
 * environment defaults worth a line, and the closing line of a run.
 *
 * Not for running ranks (agent_supervise.c) or for the spec itself (jobspec.h).
 */
#include "launcher/agent.h"

#include "base/error.h"
#include "base/log.h"
#include "base/proc.h"
#include "spec/jobspec.h"
#include "launcher/report.h"
#include "base/fs.h"

#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The GPUs this process may use, as CUDA would count them. */
static int count_gpus(void)
{
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    if (cvd) {
        int n = 0;
        for (const char *p = cvd; *p; p++)
            if (*p != ',' && (p == cvd || p[-1] == ','))
                n++;
        return n;
    }
    DIR *d = opendir("/dev");
    if (!d)
        return 0;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        if (strncmp(de->d_name, "nvidia", 6) == 0 && de->d_name[6] >= '0' && de->d_name[6] <= '9')
            n++;
    closedir(d);
    return n;
}

int dt_agent_plan_nproc(const struct dt_job *job, int *nproc)
{
    *nproc = job->nproc_per_node;
    if (*nproc != DT_NPROC_GPU)
        return 0;
    *nproc = count_gpus();
    if (*nproc == 0)
        return dt_error_set(DT_EINVAL,
                            "%s: nproc_per_node: gpu, but this machine shows no GPU "
                            "(no /dev/nvidia<N>, or CUDA_VISIBLE_DEVICES is empty)",
                            job->path);
    return 0;
}

int dt_agent_plan_check_command(const struct dt_job *job)
{
    if (!job->command || dt_fs_on_path(job->command[0]))
        return 0;
    return dt_error_set(DT_ENOTFOUND, "%s: command: '%s' %s", job->path, job->command[0],
                        strchr(job->command[0], '/') ? "does not exist or is not executable"
                                                     : "was not found on PATH");
}

void dt_agent_plan_say_env(const struct dt_job *job, int nproc)
{
    bool omp = getenv("OMP_NUM_THREADS") != NULL;
    for (int i = 0; i < job->n_env; i++) {
        if (strcmp(job->env[i].name, "OMP_NUM_THREADS") == 0)
            omp = true;
        if (dt_job_env_is_reserved(job->env[i].name))
            dt_log_warn("%s: env: %s is set by dtrain for each rank; the value in the spec is ignored",
                        job->path, job->env[i].name);
    }
    if (!omp && nproc > 1)
        dt_log_info("OMP_NUM_THREADS is not set: each rank gets OMP_NUM_THREADS=1, as under torchrun "
                    "(set it under env: to change that)");
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

void dt_agent_print_outcome(const struct dt_agent_config *cfg, const struct dt_agent_result *res)
{
    char tmp[32], attempts[48] = "", where[PATH_MAX + 64];
    if (res->n_attempts > 1)
        snprintf(attempts, sizeof attempts, " (%d attempts)", res->n_attempts);
    /* Only node 0 writes summary.json (it alone hears every node's ranks). */
    if (cfg->node_rank == 0)
        snprintf(where, sizeof where, "logs and summary.json in %s", cfg->run_dir);
    else
        snprintf(where, sizeof where, "this node's logs in %s (node 0 writes summary.json)", cfg->run_dir);
    if (res->status == DT_AGENT_SUCCEEDED)
        dt_log_info("job %s succeeded in %.2f s%s; %s", cfg->job->name, res->wall_s, attempts, where);
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
