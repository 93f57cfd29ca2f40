/* obs_tb_write.c - test helper: turns a run's metrics.jsonl into a TensorBoard
 * event file, the way the trainer logs scalars, so tests/integration/test_obs.sh
 * can read it back with the tensorboard package and compare every value.
 *
 *   obs_tb_write RUN_DIR     writes RUN_DIR/events.out.tfevents.<time>.<host>
 *
 * Tags: "train/<field>" for the fields of a training row, "eval/<field>" for
 * those of an evaluation row (one with test_accuracy); "step" and "epoch"
 * are not scalars.  Rows are written in file order: TensorBoard drops data
 * when a step goes backwards (it takes that for a restart).
 */
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "launcher/report_json.h"
#include "worker/tbevents.h"

static int row(struct dt_tb_writer *w, const struct dt_json *r)
{
    double step;
    if (!dt_json_get_num(r, "step", &step))
        return dt_error_set(DT_EINVAL, "row without step");
    const char *group = dt_json_get(r, "test_accuracy") ? "eval" : "train";
    for (const struct dt_json *m = r->child; m; m = m->next) {
        if (m->type != DT_JSON_NUMBER || !strcmp(m->key, "step") || !strcmp(m->key, "epoch"))
            continue;
        char tag[128];
        snprintf(tag, sizeof tag, "%s/%s", group, m->key);
        int rc = dt_tb_scalar(w, tag, (int64_t)step, (float)m->num);
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
    char path[4200], *src;
    size_t len;
    struct dt_json_arena a = {0};
    struct dt_tb_writer *w = NULL;
    snprintf(path, sizeof path, "%s/metrics.jsonl", argv[1]);
    int rc = dt_json_read_file(&a, path, 1 << 28, &src, &len);
    if (!rc)
        rc = dt_tb_open(argv[1], &w);
    for (int line = 1; !rc && *src; line++) {
        char *nl = strchr(src, '\n');
        struct dt_json *r;
        rc = dt_json_parse(&a, src, nl ? (size_t)(nl - src) : strlen(src), path, line, &r);
        if (!rc)
            rc = row(w, r);
        src = nl ? nl + 1 : src + strlen(src);
    }
    int rc2 = dt_tb_close(w);
    rc = rc ? rc : rc2;
    dt_json_arena_free(&a);
    if (rc) {
        fprintf(stderr, "obs_tb_write: %s\n", dt_error_last());
        return 1;
    }
    return 0;
}
