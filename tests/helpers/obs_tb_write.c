/* obs_tb_write.c - test helper: turns a run's metrics.jsonl into a TensorBoard
 * event file, the way the trainer logs scalars, so
 * tests/integration/test_obs_tensorboard.sh can read it back with the tensorboard package and compare every value.
 *
 *   obs_tb_write RUN_DIR     writes RUN_DIR/events.out.tfevents.<time>.<host>
 *
 * Tags: "train/<field>" for the fields of a training row, "eval/<field>" for
 * those of an evaluation row (one with test_accuracy); "step" and "epoch"
 * are not scalars.  Rows are written in file order: TensorBoard drops data
 * when a step goes backwards (it takes that for a restart).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/json.h"
#include "worker/tbevents.h"

static int row(struct dt_tb_writer *w, json_t *r)
{
    double step;
    const char *key;
    json_t *m;
    if (!dt_json_get_num(r, "step", &step))
        return dt_error_set(DT_EINVAL, "row without step");
    const char *group = json_object_get(r, "test_accuracy") ? "eval" : "train";
    json_object_foreach (r, key, m) {
        if (!json_is_number(m) || !strcmp(key, "step") || !strcmp(key, "epoch"))
            continue;
        char tag[128];
        snprintf(tag, sizeof tag, "%s/%s", group, key);
        int rc = dt_tb_scalar(w, tag, (int64_t)step, (float)json_number_value(m));
        if (rc)
            return rc;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: obs_tb_write RUN_DIR\n");
        return 2;
    }
    char path[4200], *text = NULL;
    size_t len;
    struct dt_tb_writer *w = NULL;
    snprintf(path, sizeof path, "%s/metrics.jsonl", argv[1]);
    int rc = dt_json_read_file(path, 1 << 28, &text, &len);
    if (!rc)
        rc = dt_tb_open(argv[1], &w);
    char *src = text;
    for (int line = 1; !rc && *src; line++) {
        char *nl = strchr(src, '\n');
        json_t *r = NULL;
        rc = dt_json_parse(src, nl ? (size_t)(nl - src) : strlen(src), path, line, &r);
        if (!rc)
            rc = row(w, r);
        json_decref(r);
        src = nl ? nl + 1 : src + strlen(src);
    }
    int rc2 = dt_tb_close(w);
    rc = rc ? rc : rc2;
    free(text);
    if (rc) {
        fprintf(stderr, "obs_tb_write: %s\n", dt_error_last());
        return 1;
    }
    return 0;
}
