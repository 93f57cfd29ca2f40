/* test_kubernetes.c - the Kubernetes adapter's pieces: YAML scalars that read
 * back as written, quantities, the failure policy from restart_policy, render's
 * refusals, discover from the pod's environment (waiting for pod 0's name), and
 * the launch's plan, carried out by the launcher, without and with a (fake)
 * kubectl.  The manifests as a whole are validated against the API schemas in
 * tests/integration/test_kubernetes.sh. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"
#include "launcher/cli/cli.h"
#include "spec/jobspec.h"
#include "scheduler-adapters/adapter.h"
#include "scheduler-adapters/kubernetes/kubernetes.h"
#include "base/clock.h"

static const struct dt_adapter *k8s(void)
{
    const struct dt_adapter *a = dt_adapter_by_name("k8s");
    assert_non_null(a);
    assert_ptr_equal(a, dt_adapter_by_name("kubernetes"));
    assert_ptr_equal(a, dt_adapter_for(DT_SCHED_KUBERNETES));
    return a;
}

static struct dt_job *load(const char *text)
{
    struct dt_job *job = NULL;
    if (dt_job_load_string(text, strlen(text), "job.yaml", &job))
        fail_msg("%s", dt_error_last());
    return job;
}

#define SPEC(extra)                                                                                          \
    "name: fmnist\nscheduler: kubernetes\nnodes: 2\nnproc_per_node: 2\ncommand: [\"true\"]\n" extra          \
    "kubernetes:\n  image: img\n"
/* The same with keys of the kubernetes section ("  gang: kueue\n"). */
#define SPECK(keys) SPEC("") keys

/* What a writer gives for s, as a string. */
static char *emit(void (*fn)(FILE *, const char *), const char *s)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    fn(m, s);
    fclose(m);
    return buf;
}

static void str_quotes_what_yaml_would_retype(void **state)
{
    (void)state;
    static const char *const quoted[] = {"yes", "No", "ON", "off", "y", "n", "True", "false", "null", "~",
                                         "0123", "1e3", "12:30", ":", "a: b", "- x", "", " lead", "#c",
                                         "x y", "[a]", "{a}", "*ref", "&a", "!tag", "%p", "@a", "`a", ".inf",
                                         "-1", "0x1F", "a#b", "1_000", NULL};
    for (int i = 0; quoted[i]; i++) {
        char *out = emit(dt_k8s_str, quoted[i]);
        if (out[0] != '"')
            fail_msg("'%s' written bare as %s", quoted[i], out);
        free(out);
    }
    static const char *const plain[] = {"fmnist", "/etc/dtrain/job.yaml", "NVIDIA-H200", "nvidia.com/gpu",
                                        "Equal", "a_b", NULL};
    for (int i = 0; plain[i]; i++) {
        char *out = emit(dt_k8s_str, plain[i]);
        assert_string_equal(out, plain[i]);
        free(out);
    }
    char *out = emit(dt_k8s_str, "say \"hi\"\\\n\t\x01");
    assert_string_equal(out, "\"say \\\"hi\\\"\\\\\\n\\t\\x01\"");
    free(out);
    /* YAML 1.2 section 5.1 allows no C1 control raw; libyaml folds NEL and U+2028 as breaks. */
    out = emit(dt_k8s_str, "a\xc2\x80\xc2\x85 \xe2\x80\xa8 \x7f\xc3\xa9");
    assert_string_equal(out, "\"a\\u0080\\u0085 \\u2028 \\x7f\xc3\xa9\"");
    free(out);
}

static char *block(const char *text, size_t len)
{
    char *buf = NULL;
    size_t n = 0;
    FILE *m = open_memstream(&buf, &n);
    dt_k8s_block(m, 2, text, len);
    fclose(m);
    return buf;
}

static void block_keeps_every_byte(void **state)
{
    (void)state;
    struct {
        const char *in, *out;
    } cases[] = {
        {"a: 1\nb: 2\n", "|\n  a: 1\n  b: 2\n"},
        {"a: 1", "|-\n  a: 1\n"},
        {"a: 1\n\n\n", "|+\n  a: 1\n\n\n"},
        {"  indented\nx\n", "|2\n    indented\n  x\n"},
        {"\nafter blank\n", "|2\n\n  after blank\n"},
        {"a\n\nb\n", "|\n  a\n\n  b\n"},
        {"crlf\r\n", "\"crlf\\x0d\\n\"\n"},
        {"", "\"\"\n"},
        {"c1\xc2\x9b\n", "\"c1\\u009b\\n\"\n"},
        {"nel\xc2\x85x\n", "\"nel\\u0085x\\n\"\n"},
        {"ls\xe2\x80\xa8x\n", "\"ls\\u2028x\\n\"\n"},
        {"\xef\xbb\xbfx: 1\n", "\"\\ufeffx: 1\\n\"\n"},
        {"caf\xc3\xa9\n", "|\n  caf\xc3\xa9\n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out = block(cases[i].in, strlen(cases[i].in));
        assert_string_equal(out, cases[i].out);
        free(out);
    }
    /* No escape reads back as a byte outside a UTF-8 character: refused, nothing written. */
    char *buf = NULL;
    size_t n = 0;
    FILE *m = open_memstream(&buf, &n);
    assert_int_equal(dt_k8s_block(m, 2, "a: \xff\n", 6), DT_EINVAL);
    fclose(m);
    assert_int_equal(n, 0);
    free(buf);
}

/* The ConfigMap holds the spec file as it is now; one that is no longer
 * UTF-8 (libyaml loaded it as UTF-8) is refused, not written as bad YAML. */
static void render_refuses_a_spec_file_not_utf8(void **state)
{
    (void)state;
    char dir[] = "/tmp/test_kubernetes.XXXXXX", path[64];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/job.yaml", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(SPEC("# caf\xe9\n"), f);
    fclose(f);
    struct dt_job *job = load(SPEC(""));
    char *buf = NULL;
    size_t n = 0;
    FILE *m = open_memstream(&buf, &n);
    assert_int_equal(k8s()->render(job, path, m), DT_EINVAL);
    fclose(m);
    char want[160];
    snprintf(want, sizeof want, "render kubernetes: the ConfigMap's copy of %s: byte 85 (0xe9) is not part", path);
    assert_non_null(strstr(dt_error_last(), want));
    free(buf);
    dt_job_free(job);
    remove(path);
    rmdir(dir);
}

static void bytes_as_quantities(void **state)
{
    (void)state;
    struct {
        uint64_t b;
        const char *q;
    } cases[] = {{1ULL << 30, "\"1Gi\""}, {64ULL << 30, "\"64Gi\""}, {1536ULL << 20, "\"1536Mi\""},
                 {1ULL << 40, "\"1Ti\""}, {1000, "\"1000\""},        {4096, "\"4Ki\""}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *buf = NULL;
        size_t n = 0;
        FILE *m = open_memstream(&buf, &n);
        dt_k8s_bytes(m, cases[i].b);
        fclose(m);
        assert_string_equal(buf, cases[i].q);
        free(buf);
    }
}

static char *render(const char *spec, int *rc)
{
    struct dt_job *job = load(spec);
    char *buf = NULL;
    size_t n = 0;
    FILE *m = open_memstream(&buf, &n);
    *rc = k8s()->render(job, NULL, m);
    fclose(m);
    dt_job_free(job);
    return buf;
}

static void failure_policy_follows_restart_policy(void **state)
{
    (void)state;
    int rc;
    char *out = render(SPEC("restart_policy: {on_exit: {3: fail, 1: fail, 75: retry}}\n"), &rc);
    assert_int_equal(rc, 0);
    /* No restarts: the first pod failure ends the Job, as the agents' job ends. */
    assert_non_null(strstr(out, "  backoffLimit: 0\n"));
    assert_null(strstr(out, "backoffLimitPerIndex"));
    assert_non_null(strstr(out, "action: FailJob\n        onExitCodes:\n          containerName: agent\n"
                                "          operator: In\n          values: [1, 3]\n"));
    assert_null(strstr(out, "NotIn"));
    free(out);
    out = render(SPEC("restart_policy: {on_exit: {SIGKILL: retry, 75: retry}, default: fail}\n"), &rc);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "operator: NotIn\n          values: [75, 137]\n"));
    free(out);
    out = render(SPEC("restart_policy: {default: fail}\n"), &rc);
    assert_non_null(strstr(out, "operator: NotIn\n          values: [0]\n"));
    free(out);
    /* Only the disruption rule: every failure retries within backoffLimit. */
    out = render(SPEC(""), &rc);
    assert_null(strstr(out, "onExitCodes"));
    assert_non_null(strstr(out, "type: DisruptionTarget"));
    free(out);
    /* Restarts left: a lost agent's pod (SIGKILL: 137) is replaced up to
     * max_restarts times per node and its new agent joins the next round;
     * any other status is the job's end, which fails the Job at once (no
     * (4+1)^2 runs), as does a node out of replacements. */
    out = render(SPEC("max_restarts: 4\nrestart_policy: {on_exit: {3: fail, 1: fail, 75: retry}}\n"), &rc);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "  backoffLimitPerIndex: 4\n  maxFailedIndexes: 0\n  podReplacementPolicy: Failed\n"));
    assert_null(strstr(out, "backoffLimit: 0"));
    assert_non_null(strstr(out, "      - action: Ignore\n        onPodConditions:\n          - type: DisruptionTarget\n"
                                "            status: \"True\"\n"
                                "      - action: Count\n        onExitCodes:\n          containerName: agent\n"
                                "          operator: In\n          values: [137]\n"
                                "      - action: FailJob\n        onExitCodes:\n          containerName: agent\n"
                                "          operator: NotIn\n          values: [0]\n"));
    free(out);
    /* 137 marked fail: a lost agent ends the job too, so nothing is counted */
    out = render(SPEC("max_restarts: 2\nrestart_policy: {on_exit: {SIGKILL: fail}}\n"), &rc);
    assert_null(strstr(out, "action: Count"));
    assert_non_null(strstr(out, "action: FailJob\n        onExitCodes:\n          containerName: agent\n"
                                "          operator: NotIn\n          values: [0]\n"));
    free(out);
}

/* nodes: MIN:MAX: an Indexed Job of MAX pods whose lost pods are replaced
 * (their agents join as newcomers), which may lose MAX - MIN of them for
 * good, and which succeeds when pod 0 (the coordinator's) does. */
static void elastic_job(void **state)
{
    (void)state;
    int rc;
    char *out = render("name: el\nscheduler: kubernetes\nnodes: 2:4\ncommand: [\"true\"]\nkubernetes: {image: i}\n",
                       &rc);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "  completions: 4\n  parallelism: 4\n  backoffLimitPerIndex: 0\n"
                                "  maxFailedIndexes: 2\n  podReplacementPolicy: Failed\n"
                                "  successPolicy:\n    rules:\n      - succeededIndexes: \"0\"\n"));
    assert_non_null(strstr(out, "action: Count"));
    free(out);
}

static void render_refuses_what_kubernetes_would(void **state)
{
    (void)state;
    int rc;
    struct {
        const char *spec, *msg;
    } cases[] = {
        {"name: x\nnodes: 2\ncommand: [\"true\"]\n", "needs a kubernetes: section"},
        {"name: x\nnproc_per_node: gpu\ncommand: [\"true\"]\nkubernetes: {image: i}\n",
         "nproc_per_node: gpu starts one rank per GPU, but kubernetes.gpus_per_node is not set, so the pods ask "
         "for no GPU"},
        {"name: x\ncommand: [\"true\"]\nkubernetes: {image: i, env: {JOB_COMPLETION_INDEX: \"3\"}}\n",
         "kubernetes.env.JOB_COMPLETION_INDEX: the manifest sets"},
        {"name: x\ncommand: [\"true\"]\nkubernetes: {image: i, volumes: [{name: dshm, mount_path: /a, pvc: p}]}\n",
         "'dshm' is the name of a volume dtrain adds"},
        {"name: x\ncommand: [\"true\"]\nkubernetes: {image: i, volumes: [{name: a, mount_path: /etc/dtrain, "
         "pvc: p}]}\n",
         "dtrain mounts /etc/dtrain itself"},
        {"name: x\ncommand: [\"true\"]\nkubernetes: {image: i, volumes: [{name: a, mount_path: /a, pvc: p}, "
         "{name: a, mount_path: /b, pvc: q}]}\n",
         "volumes[1].name: 'a' is also volumes[0]'s"},
        {"name: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\nnodes: 12\ncommand: [\"true\"]\n"
         "kubernetes: {image: i}\n",
         "over Kubernetes' 63: shorten the job's name"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out = render(cases[i].spec, &rc);
        assert_int_equal(rc, DT_EINVAL);
        if (!strstr(dt_error_last(), cases[i].msg))
            fail_msg("case %zu: '%s' lacks '%s'", i, dt_error_last(), cases[i].msg);
        assert_string_equal(out, ""); /* nothing half-written */
        free(out);
    }
}

/* kubernetes.labels on every object and the pods (the Service still selects
 * by dtrain's own), annotations on the Job and the pods, imagePullSecrets. */
static void labels_annotations_pull_secrets(void **state)
{
    (void)state;
    int rc;
    char *out = render("name: q\ncommand: [\"true\"]\nkubernetes:\n  image: img\n"
                       "  labels: {kueue.x-k8s.io/queue-name: team-a, tier: \"1\"}\n"
                       "  annotations: {example.com/note: \"a: b\"}\n  image_pull_secrets: [regcred, other]\n",
                       &rc);
    assert_int_equal(rc, 0);
    const char *job = strstr(out, "kind: Job\n");
    assert_non_null(job);
    assert_non_null(strstr(job, "\n  labels:\n    app.kubernetes.io/name: q\n    app.kubernetes.io/instance: "
                                "q\n    app.kubernetes.io/managed-by: dtrain\n    kueue.x-k8s.io/queue-name: "
                                "team-a\n    tier: \"1\"\n  annotations:\n    example.com/note: \"a: b\"\nspec:\n"));
    assert_non_null(strstr(job, "  template:\n    metadata:\n      labels:\n        app.kubernetes.io/name: q\n"));
    assert_non_null(strstr(job, "        tier: \"1\"\n      annotations:\n        example.com/note: \"a: b\"\n    spec:\n"));
    assert_non_null(strstr(job, "\n      imagePullSecrets:\n        - name: regcred\n        - name: other\n"));
    const char *svc = strstr(out, "kind: Service\n");
    assert_non_null(svc);
    assert_true(strstr(svc, "kueue.x-k8s.io/queue-name") < job); /* on the Service's metadata */
    assert_true(strstr(svc, "annotations:") > job); /* annotations on the Job, not the Service */
    const char *sel = strstr(svc, "  selector:\n");
    assert_non_null(sel);
    assert_true(strstr(sel, "queue-name") > job); /* but not in its selector */
    free(out);
    out = render(SPEC(""), &rc);
    assert_null(strstr(out, "annotations:"));
    assert_null(strstr(out, "imagePullSecrets"));
    free(out);
}

static void auth_none_has_no_secret(void **state)
{
    (void)state;
    int rc;
    char *out = render(SPEC("rendezvous: {auth: none, port: 29411}\n"), &rc);
    assert_int_equal(rc, 0);
    assert_null(strstr(out, "kind: Secret"));
    assert_null(strstr(out, "DTRAIN_JOB_TOKEN_FILE"));
    assert_non_null(strstr(out, "containerPort: 29411"));
    free(out);
    out = render(SPEC(""), &rc);
    assert_non_null(strstr(out, "kind: Secret"));
    assert_non_null(strstr(out, "value: /etc/dtrain/token"));
    assert_non_null(strstr(out, "containerPort: 29500"));
    /* the token file 0400 (256): the agent refuses one others may read */
    assert_non_null(strstr(out, "- key: token\n                      path: token\n                      mode: 256\n"));
    free(out);
}

/* Clean-up: a TTL on the Job by default; the objects a launch makes after
 * the Job are owned by it (its uid), so Kubernetes deletes them with it. */
static void ttl_and_owner_references(void **state)
{
    (void)state;
    int rc;
    char *out = render(SPEC(""), &rc);
    assert_non_null(strstr(out, "  podReplacementPolicy: Failed\n  ttlSecondsAfterFinished: 86400\n"));
    assert_null(strstr(out, "ownerReferences")); /* rendered by hand: no uid yet */
    assert_non_null(strstr(out, "# The objects have no owner references"));
    free(out);
    struct dt_job *job = load("name: t\nscheduler: kubernetes\ncommand: [\"true\"]\n"
                              "kubernetes: {image: i, ttl_after_finished: 0s}\n");
    char *buf = NULL;
    size_t n = 0;
    FILE *m = open_memstream(&buf, &n);
    assert_int_equal(k8s()->render(job, NULL, m), 0);
    fclose(m);
    assert_null(strstr(buf, "ttlSecondsAfterFinished"));
    free(buf);
    dt_job_free(job);
    const char *bad = "name: t\ncommand: [\"true\"]\nkubernetes: {image: i, ttl_after_finished: 30s}\n";
    assert_int_equal(dt_job_load_string(bad, strlen(bad), "t.yaml", &job), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "ttl_after_finished: expected 0s (the finished Job stays) or at least 60s"));
    job = load(SPEC(""));
    struct dt_k8s_render_opts rest = {.launch_id = "0123456789ab", .run_id = "0123456789ab",
                                      .owner_uid = "c0ffee00-1111-2222-3333-444455556666", .token = "t",
                                      .parts = DT_K8S_PART_REST},
                              first = {.launch_id = "0123456789ab", .run_id = "0123456789ab",
                                       .parts = DT_K8S_PART_JOB};
    m = open_memstream(&buf, &n);
    assert_int_equal(dt_k8s_render_with(job, NULL, &rest, m), 0);
    fclose(m);
    assert_null(strstr(buf, "\nkind: Job\n")); /* the owner reference's kind only */
    const char *owner = "  ownerReferences:\n    - apiVersion: batch/v1\n      kind: Job\n"
                        "      name: fmnist-0123456789ab\n      uid: c0ffee00-1111-2222-3333-444455556666\n";
    const char *kinds[] = {"kind: ConfigMap\n", "kind: Secret\n", "kind: Service\n"};
    for (size_t i = 0; i < 3; i++) {
        const char *at = strstr(buf, kinds[i]), *next = at ? strstr(at + 1, "\n---\n") : NULL;
        const char *o = at ? strstr(at, owner) : NULL;
        if (!o || (next && o > next))
            fail_msg("%sowned by the Job? in:\n%s", kinds[i], buf);
    }
    free(buf);
    m = open_memstream(&buf, &n);
    assert_int_equal(dt_k8s_render_with(job, NULL, &first, m), 0);
    fclose(m);
    assert_non_null(strstr(buf, "\nkind: Job\n"));
    assert_null(strstr(buf, "kind: ConfigMap"));
    assert_null(strstr(buf, "ownerReferences"));
    free(buf);
    dt_job_free(job);
}

/* Every pod carries the job's name (the same for every launch) and the run
 * id in a label of its own; the Service selects this launch's pods. */
static void labels_stable_and_per_run(void **state)
{
    (void)state;
    struct dt_job *job = load(SPEC(""));
    char *buf = NULL;
    size_t n = 0;
    FILE *m = open_memstream(&buf, &n);
    assert_int_equal(dt_k8s_render_run(job, NULL, "0123456789ab", "ba9876543210", m), 0);
    fclose(m);
    const char *tmpl = strstr(buf, "  template:\n    metadata:\n      labels:\n");
    assert_non_null(tmpl);
    assert_non_null(strstr(tmpl, "        app.kubernetes.io/name: fmnist\n"
                                 "        app.kubernetes.io/instance: fmnist-0123456789ab\n"
                                 "        app.kubernetes.io/managed-by: dtrain\n"
                                 "        dtrain/run-id: ba9876543210\n"));
    assert_non_null(strstr(buf, "  selector:\n    app.kubernetes.io/name: fmnist\n"
                                "    app.kubernetes.io/instance: fmnist-0123456789ab\n  ports:"));
    free(buf);
    dt_job_free(job);
    const char *bad = "name: t\ncommand: [\"true\"]\nkubernetes: {image: i, labels: {dtrain/run-id: x}}\n";
    assert_int_equal(dt_job_load_string(bad, strlen(bad), "t.yaml", &job), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "dtrain or the Job controller sets this label itself"));
}

/* kubernetes.gang: Kueue (the Job suspended, labelled with its queue),
 * Volcano or scheduler-plugins PodGroups whose minimum is the nodes the job
 * starts with. */
static void gang_scheduling(void **state)
{
    (void)state;
    int rc;
    char *out = render(SPECK("  gang: kueue\n  queue: team-a\n"), &rc);
    assert_int_equal(rc, 0);
    const char *job = strstr(out, "kind: Job\n");
    assert_non_null(job);
    assert_non_null(strstr(job, "    kueue.x-k8s.io/queue-name: team-a\n"));
    assert_non_null(strstr(job, "  suspend: true\n"));
    assert_true(strstr(out, "queue-name") > job); /* the Job's label, where Kueue looks */
    assert_null(strstr(out, "PodGroup"));
    free(out);
    out = render("name: g\nscheduler: kubernetes\nnodes: 2:3\ncommand: [\"true\"]\n"
                 "kubernetes: {image: i, gang: volcano, queue: q1}\n", &rc);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "apiVersion: scheduling.volcano.sh/v1beta1\nkind: PodGroup\nmetadata:\n  name: g\n"));
    assert_non_null(strstr(out, "spec:\n  minMember: 2\n  queue: q1\n"));
    assert_non_null(strstr(out, "      annotations:\n        scheduling.k8s.io/group-name: g\n    spec:\n"));
    assert_non_null(strstr(out, "      schedulerName: volcano\n"));
    assert_true(strstr(out, "kind: PodGroup") < strstr(out, "kind: Job"));
    free(out);
    out = render(SPECK("  gang: coscheduling\n"), &rc);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "apiVersion: scheduling.x-k8s.io/v1alpha1\nkind: PodGroup\n"));
    assert_non_null(strstr(out, "spec:\n  minMember: 2\n  scheduleTimeoutSeconds: "));
    assert_non_null(strstr(out, "        scheduling.x-k8s.io/pod-group: fmnist\n"));
    assert_null(strstr(out, "schedulerName"));
    free(out);
    struct dt_job *bad = NULL;
    const char *specs[][2] = {
        {"name: t\ncommand: [a]\nkubernetes: {image: i, gang: kueue}\n", "kueue admits a Job to a LocalQueue"},
        {"name: t\ncommand: [a]\nkubernetes: {image: i, queue: q}\n", "but gang is none"},
        {"name: t\ncommand: [a]\nkubernetes: {image: i, gang: kueue, queue: q, labels: {kueue.x-k8s.io/queue-name: "
         "q}}\n", "the queue is named twice"},
    };
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(dt_job_load_string(specs[i][0], strlen(specs[i][0]), "t.yaml", &bad), DT_EINVAL);
        if (!strstr(dt_error_last(), specs[i][1]))
            fail_msg("'%s' lacks '%s'", dt_error_last(), specs[i][1]);
    }
}

/* The JobSet restarts its Job max_restarts times, but not when the agents
 * ended the job (a FailJob rule): the two budgets do not multiply. */
static void jobset_restarts(void **state)
{
    (void)state;
    struct dt_job *job = load(SPEC("max_restarts: 3\n"));
    char *buf = NULL;
    size_t n = 0;
    FILE *m = open_memstream(&buf, &n);
    assert_int_equal(dt_k8s_render_jobset(job, NULL, m), 0);
    fclose(m);
    assert_non_null(strstr(buf, "spec:\n  failurePolicy:\n    maxRestarts: 3\n    rules:\n"
                                "      - name: the-job-ended\n        action: FailJobSet\n"
                                "        onJobFailureReasons: [PodFailurePolicy]\n  ttlSecondsAfterFinished: 86400\n"));
    /* once: the JobSet's; its Job goes with it */
    assert_null(strstr(strstr(buf, "ttlSecondsAfterFinished") + 1, "ttlSecondsAfterFinished"));
    free(buf);
    dt_job_free(job);
}

/* A launch names every object <name>-<run id> (a Job is immutable: launching
 * again must not meet the last one) and tells the pods both; render keeps the
 * job's name.  A long name is cut so the pod hostnames stay DNS labels. */
static void launch_names_objects_by_run_id(void **state)
{
    (void)state;
    struct dt_job *job = load(SPEC(""));
    char *buf = NULL;
    size_t n = 0;
    FILE *m = open_memstream(&buf, &n);
    assert_int_equal(dt_k8s_render_run(job, NULL, "0123456789ab", "0123456789ab", m), 0);
    fclose(m);
    const char *want[] = {"kind: ConfigMap\nmetadata:\n  name: fmnist-0123456789ab-spec\n",
                          "kind: Secret\nmetadata:\n  name: fmnist-0123456789ab-token\n",
                          "kind: Service\nmetadata:\n  name: fmnist-0123456789ab\n",
                          "kind: Job\nmetadata:\n  name: fmnist-0123456789ab\n",
                          "app.kubernetes.io/instance: fmnist-0123456789ab\n",
                          "subdomain: fmnist-0123456789ab\n",
                          "- name: DTRAIN_K8S_NAME\n              value: fmnist-0123456789ab\n",
                          "- name: DTRAIN_K8S_RUN_ID\n              value: \"0123456789ab\"\n",
                          "name: fmnist-0123456789ab-spec\n",
                          "\n    name: \"fmnist\"\n"}; /* the spec itself keeps its name */
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!strstr(buf, want[i]))
            fail_msg("launch render lacks '%s'", want[i]);
    assert_null(strstr(buf, "name: fmnist\n  namespace"));
    free(buf);
    int rc;
    buf = render(SPEC(""), &rc);
    assert_non_null(strstr(buf, "kind: Job\nmetadata:\n  name: fmnist\n"));
    assert_non_null(strstr(buf, "- name: DTRAIN_K8S_NAME\n              value: fmnist\n"));
    assert_null(strstr(buf, "DTRAIN_K8S_RUN_ID"));
    free(buf);
    dt_job_free(job);
    /* 55 characters and 12 nodes: "<name>-<id>-11" must fit in 63, and the
     * cut (at 47) falls just after a '-', which is dropped too. */
    job = load("name: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-bbbbbbbb\nnodes: 12\ncommand: [\"true\"]\n"
               "kubernetes: {image: i}\n");
    char name[96];
    dt_k8s_object_name(job, "0123456789ab", name, sizeof name);
    assert_int_equal(strlen(name) + 3, 62);
    assert_string_equal(name, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-0123456789ab"); /* no "--" */
    dt_k8s_object_name(job, NULL, name, sizeof name);
    assert_string_equal(name, job->name);
    m = open_memstream(&buf, &n);
    assert_int_equal(dt_k8s_render_run(job, NULL, "0123456789ab", "0123456789ab", m), 0);
    fclose(m);
    free(buf);
    dt_job_free(job);
}

/* --resume: the objects are named by the new launch (the old Job may still
 * exist), the pods get the run's id (its directory on log_volume continues). */
static void resume_names_objects_by_launch_and_pods_by_run(void **state)
{
    (void)state;
    struct dt_job *job = load(SPEC(""));
    char *buf = NULL;
    size_t n = 0;
    FILE *m = open_memstream(&buf, &n);
    assert_int_equal(dt_k8s_render_run(job, NULL, "0123456789ab", "ba9876543210", m), 0);
    fclose(m);
    assert_non_null(strstr(buf, "kind: Job\nmetadata:\n  name: fmnist-0123456789ab\n"));
    assert_non_null(strstr(buf, "- name: DTRAIN_K8S_NAME\n              value: fmnist-0123456789ab\n"));
    assert_non_null(strstr(buf, "- name: DTRAIN_K8S_RUN_ID\n              value: ba9876543210\n"));
    assert_null(strstr(buf, "fmnist-ba9876543210"));
    free(buf);
    /* Only a run something of which outlives its pods can continue. */
    assert_int_equal(dt_k8s_resume_check(job), DT_EUNSUPPORTED);
    assert_non_null(strstr(dt_error_last(), "kubernetes.log_volume"));
    dt_job_free(job);
    job = load("name: v\ncommand: [\"true\"]\nkubernetes: {image: i, log_volume: {pvc: runs}}\n");
    assert_int_equal(dt_k8s_resume_check(job), 0);
    dt_job_free(job);
}

/* pod_template: mappings merge, env merges by name, tolerations replace;
 * what the job depends on is refused with a sentence, nothing written. */
#define TPL(t) "name: t\ncommand: [\"true\"]\nkubernetes:\n  image: img\n  env: {A: \"1\"}\n" \
               "  tolerations: [{key: k, operator: Exists}]\n  pod_template: " t "\n"

static void pod_template_merges(void **state)
{
    (void)state;
    int rc;
    char *out = render(TPL("{spec: {priorityClassName: hi, tolerations: [{key: z, operator: Exists}], "
                           "containers: [{name: agent, env: [{name: A, value: \"2\"}, {name: B, value: b}], "
                           "stdin: false}], nodeSelector: {}}}"),
                       &rc);
    assert_int_equal(rc, 0);
    const char *want[] = {"      priorityClassName: hi\n",
                          "      tolerations:\n        - key: z\n          operator: Exists\n",
                          "            - name: A\n              value: \"2\"\n            - name: B\n"
                          "              value: b\n",
                          "          stdin: false\n", "      nodeSelector: {}\n",
                          "          command:\n            - dtrain\n"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!strstr(out, want[i]))
            fail_msg("merged template lacks '%s':\n%s", want[i], out);
    assert_null(strstr(out, "key: k\n")); /* the template's tolerations replaced the spec's */
    assert_null(strstr(out, "value: \"1\""));
    free(out);
    struct {
        const char *tpl, *msg;
    } bad[] = {
        {"{kind: Pod}", "kubernetes.pod_template.kind: a pod template has only metadata and spec"},
        {"{spec: {restartPolicy: OnFailure}}", "pod_template.spec.restartPolicy: must stay Never"},
        {"{spec: {subdomain: x}}", "subdomain and hostname name the pods"},
        {"{spec: {containers: [{name: agent, command: [sh]}]}}",
         "pod_template.spec.containers[agent]: the agent's image is kubernetes.image"},
        {"{spec: {volumes: [{name: dshm, emptyDir: {}}]}}", "dtrain-job, dshm and dtrain-logs are dtrain's volumes"},
        {"{metadata: {labels: {app.kubernetes.io/instance: y}}}", "the Service selects the pods by them"},
        {"{spec: {containers: [{image: x}]}}",
         "pod_template.spec.containers[0]: expected a mapping with name (items of this list merge by it)"},
        {"{spec: []}", "kubernetes.pod_template.spec: expected a mapping"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char spec[512];
        snprintf(spec, sizeof spec, TPL("%s"), bad[i].tpl);
        out = render(spec, &rc);
        assert_int_equal(rc, DT_EINVAL);
        if (!strstr(dt_error_last(), bad[i].msg))
            fail_msg("case %zu: '%s' lacks '%s'", i, dt_error_last(), bad[i].msg);
        assert_string_equal(out, ""); /* nothing half-written */
        free(out);
    }
}

/* job_spec: the Job's own fields merged in; what the job rests on refused. */
static void job_spec_merges(void **state)
{
    (void)state;
    int rc;
    char *out = render("name: t\ncommand: [\"true\"]\nkubernetes: {image: i, job_spec: {ttlSecondsAfterFinished: "
                       "600, suspend: true}}\n",
                       &rc);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "\nspec:\n  completionMode: Indexed\n"));
    assert_non_null(strstr(out, "  backoffLimit: 0\n"));
    assert_non_null(strstr(out, "          status: \"True\"\n")); /* still a string after the round trip */
    /* job_spec's TTL wins over ttl_after_finished's; its other fields are added */
    assert_non_null(strstr(out, "  ttlSecondsAfterFinished: 600\n"));
    assert_null(strstr(out, "ttlSecondsAfterFinished: 86400"));
    assert_non_null(strstr(out, "  suspend: true\n  template:\n"));
    free(out);
    out = render("name: t\ncommand: [\"true\"]\nkubernetes: {image: i, job_spec: {backoffLimit: 6}}\n", &rc);
    assert_int_equal(rc, DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "kubernetes.job_spec.backoffLimit: dtrain sets it"));
    assert_string_equal(out, "");
    free(out);
}

/* log_volume: the run directories on a volume, the agent told so. */
static void log_volume_holds_the_runs(void **state)
{
    (void)state;
    int rc;
    char *out = render("name: t\ncommand: [\"true\"]\nkubernetes: {image: i, log_volume: {pvc: runs}}\n", &rc);
    assert_int_equal(rc, 0);
    const char *want[] = {"command: [dtrain, agent, /etc/dtrain/job.yaml, --log-dir, /var/log/dtrain]\n",
                          "            - name: dtrain-logs\n              mountPath: /var/log/dtrain\n",
                          "        - name: dtrain-logs\n          persistentVolumeClaim:\n            claimName: runs\n"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!strstr(out, want[i]))
            fail_msg("lacks '%s':\n%s", want[i], out);
    free(out);
    out = render("name: t\ncommand: [\"true\"]\nkubernetes: {image: i, log_volume: {host_path: /x},"
                 " volumes: [{name: a, mount_path: /var/log/dtrain, pvc: p}]}\n",
                 &rc);
    assert_int_equal(rc, DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "volumes[0].mount_path: dtrain mounts /var/log/dtrain itself"));
    free(out);
    out = render(SPEC(""), &rc);
    assert_null(strstr(out, "--log-dir"));
    free(out);
}

/* The kubelet's SIGKILL comes after the job's grace period and 15 s more. */
static void pod_grace_follows_grace_period(void **state)
{
    (void)state;
    int rc;
    char *out = render(SPEC(""), &rc);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "\n      terminationGracePeriodSeconds: 45\n"));
    free(out);
    out = render(SPEC("grace_period: 2m0.5s\n"), &rc);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "terminationGracePeriodSeconds: 136\n")); /* ceil(120.5) + 15 */
    free(out);
}

/* A spec written for another scheduler still makes pods that discover as
 * pods: the ConfigMap holds it with scheduler: kubernetes and a fixed port. */
static void other_scheduler_spec_becomes_a_pod_spec(void **state)
{
    (void)state;
    int rc;
    char *out = render("name: loc\nnodes: 2\ncommand: [\"true\"]\nkubernetes: {image: img}\n", &rc);
    assert_int_equal(rc, 0);
    const char *start = strstr(out, "  job.yaml: |\n");
    assert_non_null(start);
    start += strlen("  job.yaml: |\n");
    const char *end = strstr(start, "\n---");
    assert_non_null(end);
    char text[4096];
    size_t n = 0;
    for (const char *p = start; p < end && n + 2 < sizeof text; p++) /* strip the block's 4-space indent */
        if (!((p == start || p[-1] == '\n') && strncmp(p, "    ", 4) == 0))
            text[n++] = *p;
        else
            p += 3;
    text[n++] = '\n';
    text[n] = 0;
    struct dt_job *job = NULL;
    if (dt_job_load_string(text, n, "configmap", &job))
        fail_msg("%s\n%s", dt_error_last(), text);
    assert_int_equal(job->scheduler, DT_SCHED_KUBERNETES);
    assert_int_equal(job->rendezvous.port, 29500);
    assert_int_equal(job->nodes, 2);
    dt_job_free(job);
    free(out);
}

/* ---- discover ---- */

static char hosts[64];

static int cleanup(void **state)
{
    (void)state;
    unsetenv("DTRAIN_HOSTS_FILE");
    if (hosts[0])
        unlink(hosts);
    hosts[0] = 0;
    return 0;
}

static void write_hosts(const char *text)
{
    FILE *f = fopen(hosts, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void use_hosts(const char *text)
{
    snprintf(hosts, sizeof hosts, "/tmp/dtrain-k8s-hosts.%d", (int)getpid());
    write_hosts(text);
    setenv("DTRAIN_HOSTS_FILE", hosts, 1);
}

static void discover_reads_the_pod(void **state)
{
    (void)state;
    struct dt_job *job = load(SPEC("rendezvous: {port: 29411}\n"));
    use_hosts("127.0.0.1 fmnist-0.fmnist fmnist-1.fmnist\n");
    char *env[] = {"JOB_COMPLETION_INDEX=1", "DTRAIN_JOB_UID=3f2a9c1b-e4d7-4a1e-9c55-0123456789ab", NULL};
    struct dt_adapter_node node;
    assert_int_equal(k8s()->discover(job, env, &node), 0);
    assert_int_equal(node.node_rank, 1);
    assert_int_equal(node.nnodes, 2);
    assert_string_equal(node.coord_host, "fmnist-0.fmnist");
    assert_int_equal(node.coord_port, 29411);
    assert_string_equal(node.run_id, "3f2a9c1be4d7");
    assert_string_equal(node.job_id, "fmnist");
    dt_job_free(job);
    /* nodes: MIN:MAX: pod 0 is node 0, every other pod gets its place from the rounds */
    job = load("name: fmnist\nscheduler: kubernetes\nnodes: 1:3\ncommand: [a]\nrendezvous: {port: 29411}\n"
               "kubernetes: {image: i}\n");
    char *late[] = {"JOB_COMPLETION_INDEX=2", "DTRAIN_JOB_UID=3f2a9c1b-e4d7-4a1e-9c55-0123456789ab", NULL};
    assert_int_equal(k8s()->discover(job, late, &node), 0);
    assert_int_equal(node.node_rank, -1);
    assert_int_equal(node.nnodes, 3);
    char *first[] = {"JOB_COMPLETION_INDEX=0", "DTRAIN_JOB_UID=3f2a9c1b-e4d7-4a1e-9c55-0123456789ab", NULL};
    assert_int_equal(k8s()->discover(job, first, &node), 0);
    assert_int_equal(node.node_rank, 0);
    dt_job_free(job);
}

/* A launched Job's pods: the objects' name and the launch's run id from env. */
static void discover_reads_a_launched_pod(void **state)
{
    (void)state;
    struct dt_job *job = load(SPEC(""));
    use_hosts("127.0.0.1 fmnist-0123456789ab-0.fmnist-0123456789ab\n");
    char *env[] = {"JOB_COMPLETION_INDEX=1", "DTRAIN_JOB_UID=3f2a9c1b-e4d7-4a1e-9c55-0123456789ab",
                   "DTRAIN_K8S_NAME=fmnist-0123456789ab", "DTRAIN_K8S_RUN_ID=0123456789ab", NULL};
    struct dt_adapter_node node;
    assert_int_equal(k8s()->discover(job, env, &node), 0);
    assert_string_equal(node.coord_host, "fmnist-0123456789ab-0.fmnist-0123456789ab");
    assert_string_equal(node.run_id, "0123456789ab");
    assert_string_equal(node.job_id, "fmnist-0123456789ab");
    char *bad[][5] = {{"JOB_COMPLETION_INDEX=0", "DTRAIN_JOB_UID=ab", "DTRAIN_K8S_NAME=Bad_Name", NULL},
                      {"JOB_COMPLETION_INDEX=0", "DTRAIN_JOB_UID=ab", "DTRAIN_K8S_RUN_ID=xyz", NULL}};
    const char *msg[] = {"DTRAIN_K8S_NAME='Bad_Name' is not a Kubernetes object name",
                         "DTRAIN_K8S_RUN_ID='xyz' is not a run id"};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(k8s()->discover(job, bad[i], &node), DT_EINVAL);
        if (!strstr(dt_error_last(), msg[i]))
            fail_msg("'%s' lacks '%s'", dt_error_last(), msg[i]);
    }
    dt_job_free(job);
}

static void discover_names_bad_variables(void **state)
{
    (void)state;
    struct dt_job *job = load(SPEC(""));
    use_hosts("127.0.0.1 fmnist-0.fmnist\n");
    struct {
        char *env[3];
        const char *msg;
    } cases[] = {
        {{"DTRAIN_JOB_UID=ab", NULL}, "JOB_COMPLETION_INDEX is not set"},
        {{"JOB_COMPLETION_INDEX=2", "DTRAIN_JOB_UID=ab", NULL}, "JOB_COMPLETION_INDEX='2' is not a node rank"},
        {{"JOB_COMPLETION_INDEX=1x", "DTRAIN_JOB_UID=ab", NULL}, "JOB_COMPLETION_INDEX='1x'"},
        {{"JOB_COMPLETION_INDEX=0", NULL}, "DTRAIN_JOB_UID is not set or empty"},
        {{"JOB_COMPLETION_INDEX=0", "DTRAIN_JOB_UID=", NULL}, "DTRAIN_JOB_UID is not set or empty"},
        {{"JOB_COMPLETION_INDEX=0", "DTRAIN_JOB_UID=x;y", NULL}, "is not a Kubernetes UID"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct dt_adapter_node node;
        assert_int_equal(k8s()->discover(job, cases[i].env, &node), DT_EINVAL);
        if (!strstr(dt_error_last(), cases[i].msg))
            fail_msg("case %zu: '%s' lacks '%s'", i, dt_error_last(), cases[i].msg);
    }
    dt_job_free(job);
}

static void *publish_later(void *arg)
{
    (void)arg;
    usleep(400 * 1000);
    write_hosts("127.0.0.1 fmnist-0.fmnist\n");
    return NULL;
}

/* Pod 0's name appears only once it runs: discover waits for it, and after
 * rendezvous.timeout says what is probably missing. */
static void discover_waits_for_pod_0(void **state)
{
    (void)state;
    struct dt_job *job = load("name: fmnist\nscheduler: kubernetes\nnodes: 2\ncommand: [\"true\"]\n"
                              "rendezvous: {timeout: 20s}\nkubernetes: {image: i, namespace: team}\n");
    use_hosts("# nothing yet\n");
    char *env[] = {"JOB_COMPLETION_INDEX=1", "DTRAIN_JOB_UID=ab", NULL};
    struct dt_adapter_node node;
    pthread_t t;
    pthread_create(&t, NULL, publish_later, NULL);
    double t0 = dt_clock_s();
    assert_int_equal(k8s()->discover(job, env, &node), 0);
    double waited = dt_clock_s() - t0;
    pthread_join(t, NULL);
    assert_true(waited > 0.3 && waited < 10);
    dt_job_free(job);

    job = load("name: nobody\nscheduler: kubernetes\nnodes: 2\ncommand: [\"true\"]\n"
               "rendezvous: {timeout: 0.5s}\nkubernetes: {image: i, namespace: team}\n");
    t0 = dt_clock_s();
    assert_int_equal(k8s()->discover(job, env, &node), DT_ETIMEDOUT);
    waited = dt_clock_s() - t0;
    assert_true(waited >= 0.5 && waited < 15); /* one slow DNS answer at most past the deadline */
    const char *want[] = {"the coordinator's name 'nobody-0.nobody' did not resolve within 0.5s",
                          "is pod 0 of Job 'nobody' running", "Service 'nobody' exist in namespace 'team'"};
    for (int i = 0; i < 3; i++)
        if (!strstr(dt_error_last(), want[i]))
            fail_msg("'%s' lacks '%s'", dt_error_last(), want[i]);
    dt_job_free(job);
}

/* ---- the launch's plan, carried out as `dtrain launch` does ---- */

static void submit_without_kubectl_says_how(void **state)
{
    (void)state;
    struct dt_job *job = load(SPEC(""));
    char *path = strdup(getenv("PATH"));
    setenv("PATH", "/nonexistent", 1);
    struct dt_adapter_launch opts = {0};
    int st = dt_cli_launch_plan(job, k8s(), &opts);
    setenv("PATH", path, 1);
    free(path);
    assert_int_equal(st, 2);
    assert_non_null(strstr(dt_error_last(), "kubectl is not on PATH"));
    assert_non_null(strstr(dt_error_last(), "dtrain render kubernetes job.yaml > job.k8s.yaml"));
    dt_job_free(job);
}

/* A kubectl that records what it was asked and plays a Job that ends with
 * `outcome` on the second look (Complete, or Failed with agents exiting 0 and 3). */
static const char fake_kubectl[] =
    "#!/bin/sh\n"
    "d=$(dirname \"$0\")\n"
    "echo \"$*\" >> \"$d/calls\"\n"
    "case \"$*\" in\n"
    "  'apply -f - -o jsonpath={.metadata.uid}') cat > \"$d/applied-job\";\n"
    "     printf c0ffee00-1111-2222-3333-444455556666 ;;\n"
    "  'apply -f -') cat > \"$d/applied\" ;;\n"
    "  *exitCode*) printf '0 3 ' ;;\n"
    "  'get pods'*) printf 'fmnist-0-abc=Running fmnist-1-def=Running ' ;;\n"
    "  'get job/fmnist'*) [ \"$(cat \"$d/outcome\")\" = INT ] && kill -INT $PPID;\n"
    "     n=$(cat \"$d/n\" 2>/dev/null || echo 0); echo $((n+1)) > \"$d/n\";\n"
    "     [ \"$n\" -ge 1 ] && printf '%s' \"$(cat \"$d/outcome\")\" ;;\n"
    "  logs*) echo '[pod/fmnist-0-abc/agent] hello' ;;\n"
    "esac\n";

static bool fake_detach; /* submit as `dtrain launch --detach` */

static int submit_with_fake(const char *outcome, char *dir, char **applied, char **calls)
{
    char path[512], file[600];
    snprintf(dir, 64, "/tmp/dtrain-kubectl.XXXXXX");
    assert_non_null(mkdtemp(dir));
    snprintf(file, sizeof file, "%s/kubectl", dir);
    FILE *f = fopen(file, "w");
    fputs(fake_kubectl, f);
    fclose(f);
    chmod(file, 0755);
    snprintf(file, sizeof file, "%s/outcome", dir);
    f = fopen(file, "w");
    fputs(outcome, f);
    fclose(f);
    char *old = strdup(getenv("PATH"));
    snprintf(path, sizeof path, "%s:%s", dir, old);
    setenv("PATH", path, 1);
    /* Loaded from a file, as `dtrain launch` does: the ConfigMap holds the file's text. */
    snprintf(file, sizeof file, "%s/job.yaml", dir);
    f = fopen(file, "w");
    fputs(SPEC(""), f);
    fclose(f);
    struct dt_job *job = NULL;
    assert_int_equal(dt_job_load(file, &job), 0);
    struct dt_adapter_launch opts = {.detach = fake_detach};
    int st = dt_cli_launch_plan(job, k8s(), &opts);
    if (st == 2)
        print_error("submit: %s\n", dt_error_last());
    setenv("PATH", old, 1);
    free(old);
    dt_job_free(job);
    /* applied: the Job's manifest (applied first), then what it owns */
    char *bufs[2] = {calloc(1, 1 << 17), calloc(1, 1 << 16)};
    const char *names[3] = {"applied-job", "applied", "calls"};
    size_t at = 0;
    for (int i = 0; i < 3; i++) {
        snprintf(file, sizeof file, "%s/%s", dir, names[i]);
        f = fopen(file, "r");
        assert_non_null(f);
        if (i < 2)
            at += fread(bufs[0] + at, 1, (1 << 16) - 1, f);
        else
            fread(bufs[1], 1, (1 << 16) - 1, f);
        fclose(f);
    }
    *applied = bufs[0];
    *calls = bufs[1];
    return st;
}

static void remove_dir(const char *dir)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

static void submit_applies_and_follows(void **state)
{
    (void)state;
    char dir[64], *applied, *calls;
    assert_int_equal(submit_with_fake("SuccessCriteriaMet Complete", dir, &applied, &calls), 0);
    assert_non_null(strstr(applied, "kind: Job"));
    assert_non_null(strstr(applied, "kind: Secret"));
    /* the Job first, its uid then owning the rest */
    assert_true(strstr(applied, "kind: Job") < strstr(applied, "kind: ConfigMap"));
    assert_non_null(strstr(calls, "apply -f - -o jsonpath={.metadata.uid}\napply -f -\n"));
    assert_non_null(strstr(applied, "      uid: c0ffee00-1111-2222-3333-444455556666\n"));
    assert_non_null(strstr(calls, "get pods -n default -l app.kubernetes.io/instance=fmnist"));
    assert_non_null(strstr(calls, "logs -f --prefix -n default -l app.kubernetes.io/instance=fmnist"));
    /* The Job is fmnist-<12 hex>, and that is the name followed. */
    const char *at = strstr(applied, "kind: Job\nmetadata:\n  name: fmnist-");
    assert_non_null(at);
    char first[64], want[96];
    assert_int_equal(sscanf(at + strlen("kind: Job\nmetadata:\n  name: "), "%63s", first), 1);
    assert_int_equal(strlen(first), strlen("fmnist-") + 12);
    assert_int_equal(strspn(first + 7, "0123456789abcdef"), 12);
    snprintf(want, sizeof want, "get job/%s -n default", first);
    assert_non_null(strstr(calls, want));
    snprintf(want, sizeof want, "instance=%s ", first);
    assert_non_null(strstr(calls, want));
    free(applied);
    free(calls);
    remove_dir(dir);

    /* Launching again: another name, so the first (immutable) Job is never met. */
    assert_int_equal(submit_with_fake("FailureTarget Failed", dir, &applied, &calls), 3);
    assert_non_null(strstr(calls, "exitCode"));
    assert_non_null(strstr(applied, "name: fmnist-"));
    assert_null(strstr(applied, first));
    free(applied);
    free(calls);
    remove_dir(dir);
}

/* Ctrl-C while following deletes this launch's objects (exit 128 + SIGINT);
 * --detach applies and returns, following nothing. */
static void submit_ctrl_c_deletes_and_detach_leaves(void **state)
{
    (void)state;
    char dir[64], *applied, *calls;
    assert_int_equal(submit_with_fake("INT", dir, &applied, &calls), 130);
    const char *del = strstr(calls, "delete job,service,configmap,secret -n default -l "
                                    "app.kubernetes.io/instance=fmnist-");
    if (!del)
        fail_msg("no kubectl delete of the launch's objects in:\n%s", calls);
    assert_non_null(strstr(del, " --wait=false\n"));
    free(applied);
    free(calls);
    remove_dir(dir);

    fake_detach = true;
    int st = submit_with_fake("SuccessCriteriaMet Complete", dir, &applied, &calls);
    fake_detach = false;
    assert_int_equal(st, 0);
    assert_non_null(strstr(applied, "kind: Job"));
    assert_string_equal(calls, "apply -f - -o jsonpath={.metadata.uid}\napply -f -\n"); /* nothing followed */
    free(applied);
    free(calls);
    remove_dir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(str_quotes_what_yaml_would_retype),
        cmocka_unit_test(block_keeps_every_byte),
        cmocka_unit_test(render_refuses_a_spec_file_not_utf8),
        cmocka_unit_test(bytes_as_quantities),
        cmocka_unit_test(failure_policy_follows_restart_policy),
        cmocka_unit_test(elastic_job),
        cmocka_unit_test(ttl_and_owner_references),
        cmocka_unit_test(labels_stable_and_per_run),
        cmocka_unit_test(gang_scheduling),
        cmocka_unit_test(jobset_restarts),
        cmocka_unit_test(render_refuses_what_kubernetes_would),
        cmocka_unit_test(auth_none_has_no_secret),
        cmocka_unit_test(labels_annotations_pull_secrets),
        cmocka_unit_test(launch_names_objects_by_run_id),
        cmocka_unit_test(resume_names_objects_by_launch_and_pods_by_run),
        cmocka_unit_test(pod_template_merges),
        cmocka_unit_test(log_volume_holds_the_runs),
        cmocka_unit_test(job_spec_merges),
        cmocka_unit_test(pod_grace_follows_grace_period),
        cmocka_unit_test(other_scheduler_spec_becomes_a_pod_spec),
        cmocka_unit_test_teardown(discover_reads_the_pod, cleanup),
        cmocka_unit_test_teardown(discover_reads_a_launched_pod, cleanup),
        cmocka_unit_test_teardown(discover_names_bad_variables, cleanup),
        cmocka_unit_test_teardown(discover_waits_for_pod_0, cleanup),
        cmocka_unit_test(submit_without_kubectl_says_how),
        cmocka_unit_test(submit_applies_and_follows),
        cmocka_unit_test(submit_ctrl_c_deletes_and_detach_leaves),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
