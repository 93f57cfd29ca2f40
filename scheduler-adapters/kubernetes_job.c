/* kubernetes_job.c - the Indexed Job: how many pods, and what a pod's failure means.
 *
 * completions = parallelism = nodes with completionMode Indexed: pod i gets
 * JOB_COMPLETION_INDEX=i and hostname <name>-i, and a failed pod is replaced
 * with the same index (podReplacementPolicy Failed: the replacement starts
 * only once the old pod is gone, so two agents never claim one node rank).
 *
 * podFailurePolicy carries restart_policy over to pods (the agent exits
 * with the job's status: the failing rank's code, or 128+signal):
 *   - DisruptionTarget (preemption, eviction, node drain): Ignore, the pod is
 *     replaced without counting against backoffLimit;
 *   - codes restart_policy marks `fail`: FailJob, at once;
 *   - every other failure counts against backoffLimit = max_restarts.
 * When `otherwise: fail`, the codes marked `retry` are the exceptions, so one
 * FailJob rule with NotIn says it (NotIn only matches non-zero codes; [0]
 * stands in for "no exceptions", since In/NotIn need at least one value).
 *
 * Not for the pod's containers and volumes (kubernetes_pod.c).
 */
#include "scheduler-adapters/kubernetes_internal.h"

#include <stdlib.h>

static int cmp_int(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

/* The codes whose action is `want`, ascending (Kubernetes requires order). */
static int codes_with(const struct dt_job *job, enum dt_exit_action want, int codes[256])
{
    int n = 0;
    for (int i = 0; i < job->restart_policy.n_on_exit; i++)
        if (job->restart_policy.on_exit[i].action == want)
            codes[n++] = job->restart_policy.on_exit[i].code;
    qsort(codes, (size_t)n, sizeof codes[0], cmp_int);
    return n;
}

static void put_exit_rule(const char *action, const char *op, const int *codes, int n, FILE *out)
{
    fprintf(out, "      - action: %s\n        onExitCodes:\n          containerName: %s\n"
                 "          operator: %s\n          values: [",
            action, DT_K8S_CONTAINER, op);
    for (int i = 0; i < n; i++)
        fprintf(out, "%s%d", i ? ", " : "", codes[i]);
    fputs("]\n", out);
}

static void put_failure_policy(const struct dt_job *job, FILE *out)
{
    int codes[256];
    fputs("  podFailurePolicy:\n    rules:\n"
          "      - action: Ignore\n        onPodConditions:\n"
          "          - type: DisruptionTarget\n            status: \"True\"\n",
          out);
    if (job->restart_policy.otherwise == DT_EXIT_RETRY) {
        int n = codes_with(job, DT_EXIT_FAIL, codes);
        if (n > 0)
            put_exit_rule("FailJob", "In", codes, n, out);
    } else {
        int n = codes_with(job, DT_EXIT_RETRY, codes);
        if (n == 0)
            codes[n++] = 0;
        put_exit_rule("FailJob", "NotIn", codes, n, out);
    }
}

void dt_k8s_put_job(const struct dt_job *job, FILE *out)
{
    dt_k8s_put_meta(job, "Job", "", out);
    fprintf(out,
            "spec:\n  completionMode: Indexed\n  completions: %d\n  parallelism: %d\n"
            "  backoffLimit: %d\n  podReplacementPolicy: Failed\n",
            job->nodes, job->nodes, job->max_restarts);
    put_failure_policy(job, out);
    fputs("  template:\n    metadata:\n      labels:\n", out);
    dt_k8s_labels(job, 8, out);
    fputs("    spec:\n", out);
    dt_k8s_put_pod_spec(job, 6, out);
}
