/* fuzz_trace_merge.c - libFuzzer target for `dtrain trace merge`
 * (dt_trace_merge, launcher/report/trace_merge.h) over a run directory.
 *
 * The input is a run directory cut at form feeds (tests/fuzz/scratch_dir.h):
 * summary.json, then trace_rank0.json, trace_rank1.json, trace_rank2.json.
 * The merge must succeed or fail with a message that names the file; never
 * a crash, a leak or a hang.  What it writes must itself be a trace the
 * merge accepts: JSON, a "traceEvents" array of objects with a "ph" string
 * and a numeric "pid", whatever numbers the inputs held.
 *
 * Not for the JSON grammar itself (fuzz_json.c).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/json.h"
#include "launcher/report/trace_merge.h"
#include "tests/fuzz/scratch_dir.h"

static const char *const files[] = {"summary.json", "trace_rank0.json", "trace_rank1.json",
                                    "trace_rank2.json"};

static void check_merged(const char *path)
{
    json_t *doc, *e;
    size_t i;
    double pid;
    if (dt_json_load_file(path, (size_t)1 << 30, &doc))
        abort();
    json_t *ev = json_object_get(doc, "traceEvents");
    if (!json_is_array(ev))
        abort();
    json_array_foreach (ev, i, e)
        if (!json_is_string(json_object_get(e, "ph")) || !dt_json_get_num(e, "pid", &pid))
            abort();
    json_decref(doc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static FILE *devnull;
    if (!devnull && !(devnull = fopen("/dev/null", "w")))
        abort();
    const char *dir = scratch_files(data, size, files, 4);
    char out[512], *inputs[1] = {(char *)dir};
    snprintf(out, sizeof out, "%s/trace_merged.json", dir);
    unlink(out);
    int merged = 0;
    if (dt_trace_merge(inputs, 1, dir, out, devnull, &merged)) {
        if (!strstr(dt_error_last(), dir))
            abort(); /* the user must be told which file is wrong */
    } else {
        check_merged(out);
    }
    dt_error_clear();
    return 0;
}
