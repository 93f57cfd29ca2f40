/* adapter.c - the table of scheduler adapters and the helpers they share.
 *
 * One line per adapter: a new scheduler is a new file plus its line here.
 */
#include "scheduler-adapters/adapter.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Each adapter file defines one of these; list it below when it lands. */
extern const struct dt_adapter dt_adapter_local;
extern const struct dt_adapter dt_adapter_kubernetes;
extern const struct dt_adapter dt_adapter_slurm;
extern const struct dt_adapter dt_adapter_mpirun;

static const struct dt_adapter *const adapters[] = {
    &dt_adapter_local,
    &dt_adapter_kubernetes,
    &dt_adapter_slurm,
    &dt_adapter_mpirun,
    NULL,
};

const struct dt_adapter *dt_adapter_for(enum dt_scheduler s)
{
    for (size_t i = 0; adapters[i]; i++)
        if (adapters[i]->scheduler == s)
            return adapters[i];
    return NULL;
}

const struct dt_adapter *dt_adapter_by_name(const char *name)
{
    if (strcmp(name, "k8s") == 0)
        name = "kubernetes";
    for (size_t i = 0; adapters[i]; i++)
        if (strcmp(adapters[i]->name, name) == 0)
            return adapters[i];
    return NULL;
}

const char *dt_adapter_getenv(char *const *env, const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; env && env[i]; i++)
        if (strncmp(env[i], name, n) == 0 && env[i][n] == '=')
            return env[i] + n + 1;
    return NULL;
}

char *dt_adapter_setup_script(const struct dt_job *job)
{
    if (!job->setup)
        return NULL;
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    if (!m)
        return NULL;
    fputs("set -e\n", m);
    for (int i = 0; i < job->n_setup; i++)
        fprintf(m, "%s\n", job->setup[i]);
    fputs("exec \"$@\"\n", m);
    if (fclose(m) != 0) {
        free(text);
        return NULL;
    }
    return text;
}
