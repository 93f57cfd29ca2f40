/* kubernetes_template.c - kubernetes.pod_template: the user's pod template merged into the rendered one.
 *
 * The escape hatch for every pod field dtrain has no key for (affinity,
 * topologySpreadConstraints, securityContext, an RDMA resource, sidecars):
 * `pod_template` is a PodTemplateSpec mapping ({metadata, spec}) merged into
 * the template dtrain renders, by these rules (a subset of kubectl's
 * strategic merge):
 *   - mappings merge key by key, recursively;
 *   - lists of mappings identified by a key merge item by item on it:
 *     containers, initContainers, volumes, env (by name), volumeMounts (by
 *     mountPath); an item with a new key is appended;
 *   - every other list and every scalar from the template replaces dtrain's
 *     (tolerations given here replace kubernetes.tolerations).
 * What the job depends on is refused rather than merged: restartPolicy
 * (podFailurePolicy needs Never), subdomain (the pods' DNS names), the agent
 * container's image, command and args, dtrain's volumes and labels.  The
 * merged template is checked against the API schemas by the tests, as every
 * rendered manifest is (tests/integration/test_kubernetes.sh).
 *
 * Done on trees: the rendered template is written, read back with the spec's
 * YAML reader, merged, and written again as block YAML (typed plain scalars
 * plain, strings through dt_k8s_str).
 *
 * kubernetes.job_spec is merged the same way into the Job's spec (its own
 * fields, not the template's), refusing the fields the job rests on.
 *
 * Not for the template dtrain renders itself (kubernetes_pod.c).
 */
#include "scheduler-adapters/kubernetes/kubernetes.h"

#include "base/error.h"
#include "spec/jobspec_yaml.h"

#include <stdlib.h>
#include <string.h>

/* ---- refusing what the job depends on ---- */

static const struct dt_ynode *at(const struct dt_ynode *map, const char *key)
{
    return map && map->kind == DT_Y_MAP ? dt_ymap_get(map, key) : NULL;
}

static const struct dt_ynode *named_item(const struct dt_ynode *seq, const char *key, const char *name)
{
    for (size_t i = 0; seq && seq->kind == DT_Y_SEQ && i < seq->n; i++) {
        const struct dt_ynode *v = at(seq->items[i], key);
        if (v && v->kind == DT_Y_SCALAR && strcmp(v->text, name) == 0)
            return seq->items[i];
    }
    return NULL;
}

static int refuse(const struct dt_job *job, const char *path, const char *why)
{
    return dt_error_set(DT_EINVAL, "%s: kubernetes.pod_template.%s: %s", job->path, path, why);
}

static int check_template(const struct dt_job *job, const struct dt_ynode *t)
{
    static const char *const own_labels[] = {"app.kubernetes.io/name", "app.kubernetes.io/instance",
                                             "app.kubernetes.io/managed-by", DT_K8S_RUN_LABEL, NULL};
    for (size_t i = 0; i < t->n; i++) {
        const char *k = dt_ymap_key(t, i)->text;
        if (strcmp(k, "metadata") != 0 && strcmp(k, "spec") != 0)
            return refuse(job, k, "a pod template has only metadata and spec");
        if (dt_ymap_val(t, i)->kind != DT_Y_MAP)
            return refuse(job, k, "expected a mapping");
    }
    const struct dt_ynode *meta = at(t, "metadata"), *spec = at(t, "spec");
    for (int i = 0; own_labels[i]; i++)
        if (at(at(meta, "labels"), own_labels[i]))
            return refuse(job, "metadata.labels",
                          "dtrain sets app.kubernetes.io/name, instance and managed-by and "
                          DT_K8S_RUN_LABEL " itself: the Service selects the pods by them");
    if (at(meta, "name") || at(meta, "namespace"))
        return refuse(job, "metadata",
                      "the pods' name and namespace come from the Job (name, "
                      "kubernetes.namespace)");
    if (at(spec, "restartPolicy"))
        return refuse(job, "spec.restartPolicy",
                      "must stay Never: the Job's podFailurePolicy requires it, "
                      "and the agent restarts the ranks (max_restarts)");
    if (at(spec, "subdomain") || at(spec, "hostname"))
        return refuse(job, "spec",
                      "subdomain and hostname name the pods under the headless Service, "
                      "which the agents use to find pod 0");
    const struct dt_ynode *agent = named_item(at(spec, "containers"), "name", DT_K8S_CONTAINER);
    if (at(agent, "image") || at(agent, "command") || at(agent, "args"))
        return refuse(job, "spec.containers[agent]",
                      "the agent's image is kubernetes.image and its command "
                      "is dtrain's (`dtrain agent " DT_K8S_SPEC_PATH "`)");
    const struct dt_ynode *vols = at(spec, "volumes");
    if (named_item(vols, "name", "dtrain-job") || named_item(vols, "name", "dshm") ||
        named_item(vols, "name", DT_K8S_LOG_VOLUME))
        return refuse(job, "spec.volumes",
                      "dtrain-job, dshm and " DT_K8S_LOG_VOLUME " are dtrain's volumes (shm_size sizes dshm, "
                      "log_volume is " DT_K8S_LOG_VOLUME ")");
    return 0;
}

/* ---- merging ---- */

/* The key identifying items of list `name`, or NULL when the list replaces. */
static const char *merge_key(const char *name)
{
    static const char *const by_name[] = {"containers", "initContainers", "volumes", "env", NULL};
    for (int i = 0; by_name[i]; i++)
        if (strcmp(name, by_name[i]) == 0)
            return "name";
    return strcmp(name, "volumeMounts") == 0 ? "mountPath" : NULL;
}

static int grow(struct dt_ynode *node, size_t slots)
{
    struct dt_ynode **items = realloc(node->items, slots * sizeof *items);
    if (!items)
        return dt_error_set(DT_ENOMEM, "render kubernetes: out of memory merging pod_template");
    node->items = items;
    return 0;
}

static int merge(struct dt_ynode **base, struct dt_ynode **tmpl, const char *name, const char *path);

/* Items of *tmpl merged into *base on `key`; both are lists. */
static int merge_list(struct dt_ynode *base, struct dt_ynode *tmpl, const char *key, const char *path)
{
    for (size_t i = 0; i < tmpl->n; i++) {
        const struct dt_ynode *id = at(tmpl->items[i], key);
        if (!id || id->kind != DT_Y_SCALAR)
            return dt_error_set(DT_EINVAL,
                                "render kubernetes: kubernetes.pod_template.%s[%zu]: expected a "
                                "mapping with %s (items of this list merge by it)",
                                path, i, key);
        size_t j = 0;
        while (j < base->n && !(at(base->items[j], key) && at(base->items[j], key)->kind == DT_Y_SCALAR &&
                                strcmp(at(base->items[j], key)->text, id->text) == 0))
            j++;
        if (j < base->n) {
            int rc = merge(&base->items[j], &tmpl->items[i], NULL, path);
            if (rc)
                return rc;
            continue;
        }
        if (grow(base, base->n + 1))
            return DT_ENOMEM;
        base->items[base->n++] = tmpl->items[i];
        tmpl->items[i] = NULL;
    }
    return 0;
}

/* *tmpl into *base by the rules above; what is taken from tmpl is stolen
 * (its slot set to NULL), so each tree can then be freed on its own. */
static int merge(struct dt_ynode **base, struct dt_ynode **tmpl, const char *name, const char *path)
{
    struct dt_ynode *b = *base, *t = *tmpl;
    const char *key = name ? merge_key(name) : NULL;
    if (b->kind == DT_Y_SEQ && t->kind == DT_Y_SEQ && key)
        return merge_list(b, t, key, path);
    if (b->kind != DT_Y_MAP || t->kind != DT_Y_MAP) {
        dt_yaml_free(b);
        *base = t;
        *tmpl = NULL;
        return 0;
    }
    for (size_t i = 0; i < t->n; i++) {
        const char *k = t->items[2 * i]->text;
        char sub[512];
        snprintf(sub, sizeof sub, "%s%s%s", path, *path ? "." : "", k);
        size_t j = 0;
        while (j < b->n && strcmp(b->items[2 * j]->text, k) != 0)
            j++;
        if (j < b->n) {
            int rc = merge(&b->items[2 * j + 1], &t->items[2 * i + 1], k, sub);
            if (rc)
                return rc;
            continue;
        }
        if (grow(b, 2 * (b->n + 1)))
            return DT_ENOMEM;
        b->items[2 * b->n] = t->items[2 * i];
        b->items[2 * b->n + 1] = t->items[2 * i + 1];
        t->items[2 * i] = t->items[2 * i + 1] = NULL;
        b->n++;
    }
    return 0;
}

/* ---- writing the tree ---- */

static void put_scalar(FILE *out, const struct dt_ynode *s)
{
    if (s->plain && dt_yaml_plain_typed(s->text))
        fputs(*s->text ? s->text : "null", out);
    else
        dt_k8s_str(out, s->text);
}

static void put_node(FILE *out, const struct dt_ynode *n, int ind, int inline_first);

/* After "key:" or "-": a scalar or an empty collection on the same line,
 * else the collection on the next lines at `ind`. */
static void put_value(FILE *out, const struct dt_ynode *v, int ind)
{
    if (v->kind == DT_Y_SCALAR) {
        fputc(' ', out);
        put_scalar(out, v);
        fputc('\n', out);
    } else if (v->n == 0) {
        fputs(v->kind == DT_Y_MAP ? " {}\n" : " []\n", out);
    } else {
        fputc('\n', out);
        put_node(out, v, ind, 0);
    }
}

static void put_node(FILE *out, const struct dt_ynode *n, int ind, int inline_first)
{
    for (size_t i = 0; i < n->n; i++) {
        if (!(inline_first && i == 0))
            dt_k8s_indent(out, ind);
        if (n->kind == DT_Y_MAP) {
            dt_k8s_str(out, n->items[2 * i]->text);
            fputc(':', out);
            put_value(out, n->items[2 * i + 1], ind + 2);
            continue;
        }
        const struct dt_ynode *item = n->items[i];
        if (item->kind == DT_Y_MAP && item->n > 0) {
            fputs("- ", out);
            put_node(out, item, ind + 2, 1);
        } else {
            fputc('-', out);
            put_value(out, item, ind + 2);
        }
    }
}

/* `mine` (the rendered mapping, len bytes) with the spec's flow-YAML `user`
 * (kubernetes.<key>) merged in, written at `ind`; `check` refuses first. */
static int merge_put(const struct dt_job *job, const char *mine, size_t len, const char *user, const char *key,
                     int (*check)(const struct dt_job *, const struct dt_ynode *), int ind, FILE *out)
{
    struct dt_ynode *tmpl = NULL, *base = NULL;
    char what[64];
    snprintf(what, sizeof what, "kubernetes.%s", key);
    int rc = dt_yaml_parse(user, strlen(user), what, &tmpl);
    if (rc == 0)
        rc = check(job, tmpl);
    if (rc == 0)
        rc = dt_yaml_parse(mine, len, "the rendered manifest", &base);
    if (rc == 0)
        rc = merge(&base, &tmpl, NULL, "");
    if (rc == 0)
        put_node(out, base, ind, 0);
    dt_yaml_free(base);
    dt_yaml_free(tmpl);
    return rc;
}

int dt_k8s_put_template(const struct dt_job *job, const struct dt_k8s_names *nm, int ind, FILE *out)
{
    char *mine = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&mine, &len);
    if (!m)
        return dt_error_set(DT_ENOMEM, "render kubernetes: out of memory");
    fputs("metadata:\n", m);
    dt_k8s_put_metadata_maps(job, nm, 2, DT_K8S_META_NOTES | DT_K8S_META_POD, m);
    fputs("spec:\n", m);
    dt_k8s_put_pod_spec(job, nm, 2, m);
    int rc = fclose(m) ? dt_error_set(DT_ENOMEM, "render kubernetes: out of memory")
                       : merge_put(job, mine, len, job->kubernetes->pod_template, "pod_template", check_template,
                                   ind, out);
    free(mine);
    return rc;
}

/* kubernetes.job_spec: the Job's own fields dtrain has no key for
 * (ttlSecondsAfterFinished, activeDeadlineSeconds, suspend for a queue);
 * the ones the job's shape and restart budget rest on are refused. */
static int check_job_spec(const struct dt_job *job, const struct dt_ynode *t)
{
    static const char *const own[] = {"template", "completions", "parallelism", "completionMode", "backoffLimit",
                                      "backoffLimitPerIndex", "maxFailedIndexes", "podFailurePolicy",
                                      "podReplacementPolicy", "successPolicy", "selector", "manualSelector",
                                      NULL};
    for (int i = 0; own[i]; i++)
        if (at(t, own[i]))
            return dt_error_set(DT_EINVAL,
                                "%s: kubernetes.job_spec.%s: dtrain sets it (nodes, an Indexed Job, one restart "
                                "budget from max_restarts and restart_policy; the pods through pod_template)",
                                job->path, own[i]);
    return 0;
}

int dt_k8s_put_job_spec(const struct dt_job *job, const char *head, size_t len, int ind, FILE *out)
{
    return merge_put(job, head, len, job->kubernetes->job_spec, "job_spec", check_job_spec, ind, out);
}
