/* fuzz_jobspec.c - libFuzzer entry for the job spec loader.
 *
 * Any bytes must give either a job or an error with a message; never a crash,
 * a leak or a hang.  A loaded job is also printed and loaded again, so the
 * --print writer is fuzzed with every shape the parser accepts.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/error.h"
#include "spec/jobspec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct dt_job *job = NULL;
    int rc = dt_job_load_string((const char *)data, size, "fuzz.yaml", &job);
    if (rc) {
        if (job || !dt_error_last()[0])
            abort(); /* a failure must leave no job and always a message */
        return 0;
    }
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (f) {
        dt_job_print(job, f);
        fclose(f);
        struct dt_job *again = NULL;
        if (dt_job_load_string(text, len, "printed.yaml", &again))
            abort(); /* what --print writes must load back */
        dt_job_free(again);
        free(text);
    }
    dt_job_free(job);
    return 0;
}
