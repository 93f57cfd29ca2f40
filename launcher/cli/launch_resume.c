/* launch_resume.c - a new run directory, or the one --resume continues (see launch_resume.h).
 *
 * The comparison goes through `dtrain validate --print`'s text of both jobs
 * (spec/jobspec_print.c), parsed back into trees: every default is written
 * out, so a key left out in one spec and written with its default in the
 * other is no difference, and a new key in the spec tables needs no code here.
 *
 * Not for launching (cmd_launch.c) or for the record's format (run_record.c).
 */
#include "launcher/cli/launch_resume.h"

#include "base/error.h"
#include "base/log.h"
#include "base/run_dir.h"
#include "scheduler-adapters/run_record.h"
#include "spec/jobspec_yaml.h"

#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* What a resumed run must keep: the checkpoint is this model's, and the
 * data order it continues is this data's. */
static const char *const kept[] = {"trainer.model", "trainer.data", NULL};

/* --- the comparison ------------------------------------------------------ */

static int printed_tree(const struct dt_job *job, struct dt_ynode **root)
{
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    if (!m)
        return dt_error_set(DT_ENOMEM, "out of memory");
    dt_job_print(job, m);
    fclose(m);
    int rc = dt_yaml_parse(text, len, job->path, root);
    free(text);
    return rc;
}

/* The node at a dotted path of mappings, or NULL. */
static const struct dt_ynode *at(const struct dt_ynode *n, const char *path)
{
    char key[128];
    while (n && *path) {
        size_t k = strcspn(path, ".");
        if (k >= sizeof key || n->kind != DT_Y_MAP)
            return NULL;
        memcpy(key, path, k);
        key[k] = 0;
        n = dt_ymap_get(n, key);
        path += k + (path[k] == '.');
    }
    return n;
}

static char *flow(const struct dt_ynode *n)
{
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    if (!m)
        return NULL;
    if (n)
        dt_yaml_put_flow(m, n);
    else
        fputs("(absent)", m);
    fclose(m);
    return text;
}

static int diff_leaf(const char *path, const struct dt_ynode *a, const struct dt_ynode *b, FILE *out)
{
    char *fa = flow(a), *fb = flow(b);
    int differ = !fa || !fb || strcmp(fa, fb) != 0;
    if (differ)
        fprintf(out, "%s: %s in the run, %s now\n", path, fa ? fa : "?", fb ? fb : "?");
    free(fa);
    free(fb);
    return differ;
}

/* Mappings are walked key by key (either side's keys); anything else is one leaf. */
static int diff_node(const char *path, const struct dt_ynode *a, const struct dt_ynode *b, FILE *out)
{
    if (!a || !b || a->kind != DT_Y_MAP || b->kind != DT_Y_MAP)
        return diff_leaf(path, a, b, out);
    int n = 0;
    for (int side = 0; side < 2; side++) {
        const struct dt_ynode *m = side ? b : a, *other = side ? a : b;
        for (size_t i = 0; i < m->n; i++) {
            const char *key = dt_ymap_key(m, i)->text;
            if (side && dt_ymap_get(other, key))
                continue; /* a key both have was compared from a's side */
            char sub[512];
            snprintf(sub, sizeof sub, "%s.%s", path, key);
            n += side ? diff_node(sub, NULL, dt_ymap_val(m, i), out)
                      : diff_node(sub, dt_ymap_val(m, i), dt_ymap_get(other, key), out);
        }
    }
    return n;
}

int dt_launch_spec_diff(const struct dt_job *was, const struct dt_job *now, const char *const *prefixes,
                        FILE *out)
{
    struct dt_ynode *a = NULL, *b = NULL;
    int rc = printed_tree(was, &a);
    if (rc == 0)
        rc = printed_tree(now, &b);
    for (int i = 0; rc >= 0 && prefixes[i]; i++) {
        const struct dt_ynode *x = at(a, prefixes[i]), *y = at(b, prefixes[i]);
        if (x || y)
            rc += diff_node(prefixes[i], x, y, out);
    }
    dt_yaml_free(a);
    dt_yaml_free(b);
    return rc;
}

/* --- --resume ------------------------------------------------------------ */

/* RUN_DIR split into its log directory and the run id after "<name>-". */
static int split_run_dir(const struct dt_job *job, const char *run_dir, char *log_dir, size_t log_dir_size,
                         char *run_id, size_t run_id_size)
{
    char abs[PATH_MAX];
    struct stat st;
    if (!realpath(run_dir, abs) || stat(abs, &st) != 0 || !S_ISDIR(st.st_mode))
        return dt_error_set(DT_EINVAL, "--resume %s: no such run directory", run_dir);
    char *slash = strrchr(abs, '/');
    const char *base = slash + 1;
    size_t k = strlen(job->name);
    if (strncmp(base, job->name, k) != 0 || base[k] != '-' || !base[k + 1])
        return dt_error_set(DT_EINVAL,
                            "--resume %s: not a run of job '%s' (its directory would be named %s-<run id>); "
                            "the spec's name must be the run's",
                            run_dir, job->name, job->name);
    snprintf(run_id, run_id_size, "%s", base + k + 1);
    *slash = 0;
    snprintf(log_dir, log_dir_size, "%s", slash == abs ? "/" : abs);
    return 0;
}

static int compare(const struct dt_job *job, const char *run_dir, const char *dir, const char *snapshot)
{
    struct dt_job *was = NULL;
    /* Read through a checked open: a FIFO or link planted as job.yaml is refused, never waited on. */
    if (dt_run_record_load_spec(dir, &was) < 0)
        return dt_error_prefix("--resume %s: the run's spec snapshot does not load", run_dir);
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    int n = m ? dt_launch_spec_diff(was, job, kept, m) : dt_error_set(DT_ENOMEM, "out of memory");
    if (m)
        fclose(m);
    dt_job_free(was);
    if (n > 0) {
        if (len && text[len - 1] == '\n')
            text[len - 1] = 0;
        n = dt_error_set(DT_EINVAL,
                         "--resume %s: %s changes the model or the data of the run (its checkpoints "
                         "are of what %s records); %d key%s differ%s:\n%s",
                         run_dir, job->path, snapshot, n, n == 1 ? "" : "s", n == 1 ? "s" : "", text);
    }
    free(text);
    return n < 0 ? n : 0;
}

int dt_launch_resume_check(const struct dt_job *job, const char *run_dir, char *log_dir, size_t log_dir_size,
                           char *run_id, size_t run_id_size)
{
    int rc = split_run_dir(job, run_dir, log_dir, log_dir_size, run_id, run_id_size);
    if (rc < 0)
        return rc;
    char dir[PATH_MAX + 16], snapshot[PATH_MAX + 32];
    snprintf(dir, sizeof dir, "%s/%s-%s", log_dir, job->name, run_id);
    snprintf(snapshot, sizeof snapshot, "%s/%s", dir, DT_RUN_RECORD_SPEC);
    struct stat st;
    if (lstat(snapshot, &st) != 0)
        return dt_error_set(DT_EINVAL,
                            "--resume %s: it has no %s, the spec snapshot `dtrain launch` leaves in a run "
                            "directory, so its model and data cannot be checked",
                            run_dir, DT_RUN_RECORD_SPEC);
    return compare(job, run_dir, dir, snapshot);
}

int dt_launch_run_dir(const struct dt_job *job, const char *log_dir, char *run_id, size_t run_id_size,
                      char *dir)
{
    int rc = 0;
    if (!run_id[0])
        rc = dt_run_dir_create(log_dir, job->name, run_id, run_id_size, dir, PATH_MAX);
    struct dt_run_record rec;
    if (rc == 0)
        rc = dt_run_record_begin(job, log_dir, run_id, NULL, &rec);
    if (rc == 0)
        snprintf(dir, PATH_MAX, "%s", rec.run_dir);
    return rc;
}
