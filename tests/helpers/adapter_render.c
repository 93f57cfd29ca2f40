/* adapter_render.c - test helper: `adapter_render SCHEDULER JOB.yaml` writes what
 * the adapter's render writes (as `dtrain render` does), so the Kubernetes
 * tests can check manifests without depending on the CLI's wiring.
 * Exit 0, or 2 with the error on stderr. */
#include "comm/error.h"
#include "launcher/jobspec.h"
#include "scheduler-adapters/adapter.h"

#include <stdio.h>

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: adapter_render SCHEDULER JOB.yaml\n");
        return 2;
    }
    const struct dt_adapter *a = dt_adapter_by_name(argv[1]);
    if (!a || !a->render) {
        fprintf(stderr, "adapter_render: no adapter renders '%s'\n", argv[1]);
        return 2;
    }
    struct dt_job *job = NULL;
    if (dt_job_load(argv[2], &job) || a->render(job, argv[2], stdout)) {
        fprintf(stderr, "adapter_render: %s\n", dt_error_last());
        dt_job_free(job);
        return 2;
    }
    dt_job_free(job);
    return fflush(stdout) == 0 ? 0 : 2;
}
