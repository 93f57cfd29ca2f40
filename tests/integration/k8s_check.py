#!/usr/bin/env python3
"""k8s_check.py SPEC MANIFEST - does a rendered manifest say what the job spec says?

Read with PyYAML, a YAML 1.1 reader (the strictest about retyping: `yes`, `on`
and `0123` are not strings to it), so a value that was not quoted where it had
to be shows up here as a bool or an int.  Checks the objects, their names and
namespace, the ConfigMap holding the spec byte for byte, the token, the Indexed
Job's counts and failure policy, and every env value, volume and resource the
spec's kubernetes section asks for.  Prints what is wrong; exit 1 if anything is.
"""
import re
import sys

import yaml

SIGNALS = {"SIGHUP": 1, "SIGINT": 2, "SIGQUIT": 3, "SIGABRT": 6, "SIGKILL": 9, "SIGSEGV": 11,
           "SIGPIPE": 13, "SIGALRM": 14, "SIGTERM": 15, "SIGBUS": 7, "SIGFPE": 8, "SIGUSR1": 10,
           "SIGUSR2": 12, "SIGILL": 4}
problems = []


def expect(cond, what):
    if not cond:
        problems.append(what)


def exit_code(key):
    return int(key) if not isinstance(key, str) or key.isdigit() else 128 + SIGNALS[key]


def check_policy(spec, job):
    rp = spec.get("restart_policy") or {}
    on_exit = {exit_code(k): v for k, v in (rp.get("on_exit") or {}).items()}
    default = rp.get("default", "retry")
    rules = job["spec"]["podFailurePolicy"]["rules"]
    expect(rules[0] == {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
           f"first rule ignores disruptions: {rules[0]}")
    exit_rules = [r for r in rules if "onExitCodes" in r]

    def rule(action, op, values):
        return {"action": action, "onExitCodes": {"containerName": "agent", "operator": op, "values": values}}
    if replaces_pods(spec):
        # a lost agent (SIGKILL, 137) is counted and its pod replaced; any other status ends the Job
        lost_fails = on_exit.get(137, default) == "fail"
        want = ([] if lost_fails else [rule("Count", "In", [137])]) + [rule("FailJob", "NotIn", [0])]
    elif default == "retry":
        fail = sorted(c for c, a in on_exit.items() if a == "fail")
        want = [rule("FailJob", "In", fail)] if fail else []
    else:
        retry = sorted(c for c, a in on_exit.items() if a == "retry") or [0]
        want = [rule("FailJob", "NotIn", retry)]
    expect(exit_rules == want, f"exit-code rules {exit_rules} != {want}")


def node_range(spec):
    """(MIN, MAX) of nodes: N or MIN:MAX (a YAML 1.1 reader takes 2:4 for the sexagesimal 124:
    the text is read raw, into spec["_nodes"])."""
    n = str(spec.get("_nodes", "1"))
    lo, _, hi = n.partition(":")
    return int(lo), int(hi or lo)


def replaces_pods(spec):
    lo, hi = node_range(spec)
    return spec.get("max_restarts", 0) > 0 or lo < hi


def seconds(v):
    """A dtrain duration (24h, 90m, 3600s, 1h30m) in whole seconds."""
    m = re.fullmatch(r"((\d+)h)?((\d+)m)?((\d+)s)?", str(v))
    if not m:
        sys.exit(f"k8s_check: cannot read the duration {v!r}")
    return int(m.group(2) or 0) * 3600 + int(m.group(4) or 0) * 60 + int(m.group(6) or 0)


def check_job_head(spec, k, js):
    lo, hi = node_range(spec)
    expect(js["completionMode"] == "Indexed" and js["completions"] == hi and js["parallelism"] == hi,
           "Indexed, completions = parallelism = nodes (an elastic job's MAX)")
    if replaces_pods(spec):
        # each node's pod replaced up to max_restarts times; the job may lose MAX - MIN for good
        expect(js.get("backoffLimitPerIndex") == spec.get("max_restarts", 0) and js.get("maxFailedIndexes") == hi - lo
               and "backoffLimit" not in js, f"per-index backoff {js.get('backoffLimitPerIndex')}, "
               f"maxFailedIndexes {js.get('maxFailedIndexes')}")
    else:  # one restart budget, the agents'
        expect(js.get("backoffLimit") == 0, f"backoffLimit {js.get('backoffLimit')} != 0")
    if lo < hi:  # an elastic job succeeds with pod 0, the coordinator's
        expect(js.get("successPolicy") == {"rules": [{"succeededIndexes": "0"}]}, f"successPolicy {js.get('successPolicy')}")
    else:
        expect("successPolicy" not in js, "successPolicy only for an elastic job")
    ttl = (k.get("job_spec") or {}).get("ttlSecondsAfterFinished", seconds(k.get("ttl_after_finished", "24h")))
    expect(js.get("ttlSecondsAfterFinished") == (ttl or None), f"ttlSecondsAfterFinished {js.get('ttlSecondsAfterFinished')}")
    kueue = k.get("gang") == "kueue"
    expect(js.get("suspend", False) == (kueue or (k.get("job_spec") or {}).get("suspend", False)),
           f"suspend {js.get('suspend')} (gang: kueue suspends the Job for Kueue)")


def check_pod_group(spec, k, docs, name):
    groups = [d for d in docs if d["kind"] == "PodGroup"]
    gang = k.get("gang", "none")
    if gang not in ("volcano", "coscheduling"):
        expect(not groups, f"no PodGroup without gang: {gang}")
        return
    expect(len(groups) == 1, f"one PodGroup for gang: {gang}")
    if not groups:
        return
    g = groups[0]
    api = {"volcano": "scheduling.volcano.sh/v1beta1", "coscheduling": "scheduling.x-k8s.io/v1alpha1"}[gang]
    # the CRDs' own spec fields (volcano's PodGroupSpec, scheduler-plugins' PodGroupSpec): nothing else
    allowed = {"volcano": {"minMember", "minTaskMember", "queue", "priorityClassName", "minResources"},
               "coscheduling": {"minMember", "minResources", "scheduleTimeoutSeconds"}}[gang]
    expect(g["apiVersion"] == api and g["metadata"]["name"] == name, f"PodGroup {g['apiVersion']} {g['metadata']['name']}")
    expect(set(g) == {"apiVersion", "kind", "metadata", "spec"} and set(g["spec"]) <= allowed,
           f"PodGroup fields {sorted(g)} / {sorted(g['spec'])}")
    expect(g["spec"]["minMember"] == node_range(spec)[0], f"PodGroup minMember {g['spec']['minMember']}")
    if gang == "volcano":
        expect(g["spec"].get("queue") == k.get("queue"), f"PodGroup queue {g['spec'].get('queue')}")
    else:
        expect(isinstance(g["spec"].get("scheduleTimeoutSeconds"), int), "scheduleTimeoutSeconds")


def check_pod(spec, k, pod):
    c = pod["containers"][0]
    expect(pod["restartPolicy"] == "Never" and pod["subdomain"] == spec["name"], "restartPolicy/subdomain")
    grace = pod.get("terminationGracePeriodSeconds")  # the spec's grace_period (30s) and 15 s more
    expect(grace == 45 if "grace_period" not in spec else isinstance(grace, int) and grace > 15,
           f"terminationGracePeriodSeconds {grace}")
    logs = k.get("log_volume")  # run directories on it: the agent's --log-dir
    want_cmd = ["dtrain", "agent", "/etc/dtrain/job.yaml"] + (["--log-dir", "/var/log/dtrain"] if logs else [])
    if spec.get("setup"):  # the lines in the container's shell, which then execs the agent
        script = "set -e\n" + "".join(line + "\n" for line in spec["setup"]) + 'exec "$@"\n'
        want_cmd = ["/bin/sh", "-c", script, "dtrain-setup"] + want_cmd
    expect(c["command"] == want_cmd, f"command {c['command']}")
    expect(c["image"] == k["image"], f"image {c['image']!r}")
    env = {e["name"]: e for e in c["env"]}
    for name, value in (k.get("env") or {}).items():
        got = env.get(name, {}).get("value")
        expect(isinstance(got, str) and got == str(value), f"env {name}: {got!r} != {value!r}")
    expect(env.get("DTRAIN_K8S_NAME", {}).get("value") == spec["name"], "DTRAIN_K8S_NAME is the objects' name")
    expect("DTRAIN_K8S_RUN_ID" not in env, "render leaves the run id to the Job's UID")
    uid = env["DTRAIN_JOB_UID"]["valueFrom"]["fieldRef"]["fieldPath"]
    expect(uid == "metadata.labels['batch.kubernetes.io/controller-uid']", f"uid fieldPath {uid!r}")
    auth = (spec.get("rendezvous") or {}).get("auth", "token")
    expect(("DTRAIN_JOB_TOKEN_FILE" in env) == (auth == "token"), "token file env iff auth: token")
    lim = (c.get("resources") or {}).get("limits") or {}
    if k.get("gpus_per_node"):
        expect(lim.get("nvidia.com/gpu") == k["gpus_per_node"], f"gpus {lim}")
    for key in ("node_selector",):
        expect(pod.get("nodeSelector") == k.get(key), f"nodeSelector {pod.get('nodeSelector')}")
    expect(pod.get("serviceAccountName") == k.get("service_account"), "serviceAccountName")
    tmpl_sched = ((k.get("pod_template") or {}).get("spec") or {}).get("schedulerName")
    expect(pod.get("schedulerName") == (tmpl_sched or ("volcano" if k.get("gang") == "volcano" else None)),
           f"schedulerName {pod.get('schedulerName')}")
    expect(pod.get("priorityClassName") == k.get("priority_class"), "priorityClassName")
    expect(len(pod.get("tolerations") or []) == len(k.get("tolerations") or []), "tolerations")
    secrets = [s["name"] for s in pod.get("imagePullSecrets") or []]
    expect(secrets == (k.get("image_pull_secrets") or []), f"imagePullSecrets {secrets}")
    vols = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    expect(vols["dshm"]["emptyDir"]["medium"] == "Memory" and mounts["dshm"]["mountPath"] == "/dev/shm", "dshm")
    secrets = [s["secret"] for s in vols["dtrain-job"]["projected"]["sources"] if "secret" in s]
    if auth == "token":  # the agent refuses a token file its group or others may read
        items = secrets[0].get("items") if secrets else None
        expect(items == [{"key": "token", "path": "token", "mode": 0o400}], f"token file mode 0400: {items}")
    tmpl = (k.get("pod_template") or {}).get("spec") or {}
    for key, want in tmpl.items():  # what dtrain does not set itself comes through as written
        if key not in ("containers", "initContainers", "volumes"):
            expect(pod.get(key) == want, f"pod_template spec.{key}: {pod.get(key)!r} != {want!r}")
    by_name = {x["name"]: x for x in pod["containers"]}
    for tc in tmpl.get("containers") or []:
        got = by_name.get(tc["name"], {})
        for key, want in tc.items():
            if key in ("env", "volumeMounts"):  # merged by name / mountPath with dtrain's
                mk = "name" if key == "env" else "mountPath"
                have = {x[mk]: x for x in got.get(key) or []}
                expect(all(have.get(x[mk]) == x for x in want), f"pod_template container {tc['name']} {key}")
            elif key != "resources":
                expect(got.get(key) == want, f"pod_template container {tc['name']}.{key}: {got.get(key)!r}")
    for tv in tmpl.get("volumes") or []:
        expect(vols.get(tv["name"]) == tv, f"pod_template volume {tv['name']}")
    if logs:
        src = {"persistentVolumeClaim": {"claimName": logs["pvc"]}} if "pvc" in logs else \
              {"hostPath": {"path": logs["host_path"]}}
        expect(vols.get("dtrain-logs") == {"name": "dtrain-logs", **src}, f"log volume {vols.get('dtrain-logs')}")
        expect(mounts.get("dtrain-logs", {}).get("mountPath") == "/var/log/dtrain", "log volume mount")
    for v in k.get("volumes") or []:
        expect(v["name"] in vols and mounts.get(v["name"], {}).get("mountPath") == v["mount_path"],
               f"volume {v['name']}")
        expect(bool(mounts.get(v["name"], {}).get("readOnly")) == bool(v.get("read_only")),
               f"volume {v['name']} readOnly")


def main(spec_path, manifest_path):
    raw = open(spec_path, encoding="utf-8").read()
    spec = yaml.safe_load(raw)
    spec["_nodes"] = yaml.load(raw, Loader=yaml.BaseLoader).get("nodes", "1")  # every scalar a string
    k = spec["kubernetes"]
    ns = k.get("namespace", "default")
    docs = [d for d in yaml.safe_load_all(open(manifest_path, encoding="utf-8")) if d]
    kinds = [d["kind"] for d in docs]
    auth = (spec.get("rendezvous") or {}).get("auth", "token")
    group = ["PodGroup"] if k.get("gang") in ("volcano", "coscheduling") else []
    want_kinds = ["ConfigMap"] + (["Secret"] if auth == "token" else []) + ["Service"] + group + ["Job"]
    expect(kinds == want_kinds, f"kinds {kinds} != {want_kinds}")
    by = {d["kind"]: d for d in docs}
    for d in docs:
        expect(d["metadata"]["namespace"] == ns, f"{d['kind']} namespace {d['metadata']['namespace']!r} != {ns!r}")
        expect("ownerReferences" not in d["metadata"], f"{d['kind']}: no owner references in a manifest applied by hand")
    held = by["ConfigMap"]["data"]["job.yaml"]
    if spec.get("scheduler") == "kubernetes":
        expect(held == raw, "ConfigMap job.yaml is the spec byte for byte")
    else:
        pod_spec = yaml.safe_load(held)
        expect(pod_spec["scheduler"] == "kubernetes" and pod_spec["name"] == spec["name"],
               "ConfigMap job.yaml: the spec with scheduler: kubernetes")
    if "Secret" in by:
        expect(re.fullmatch(r"[0-9a-f]{64}", str(by["Secret"]["stringData"]["token"])), "token is 64 hex")
    svc = by["Service"]["spec"]
    expect(svc["clusterIP"] == "None" and svc["publishNotReadyAddresses"] is True, "headless Service")
    job = by["Job"]
    js = job["spec"]
    check_job_head(spec, k, js)
    expect(svc["selector"].items() <= js["template"]["metadata"]["labels"].items(), "Service selects the Job's pods")
    expect(by["Service"]["metadata"]["name"] == spec["name"], "Service is named after the job")
    # app.kubernetes.io/name: the job's name, the same for every launch; instance: the objects' name
    own = {"app.kubernetes.io/name": spec["name"], "app.kubernetes.io/instance": job["metadata"]["name"],
           "app.kubernetes.io/managed-by": "dtrain"}
    want_labels = {**own, **{str(a): str(b) for a, b in (k.get("labels") or {}).items()}}
    want_notes = {str(a): str(b) for a, b in (k.get("annotations") or {}).items()}
    for d in docs:
        if d["kind"] != "Job":
            expect(d["metadata"]["labels"] == want_labels, f"{d['kind']} labels {d['metadata']['labels']}")
    tmeta = (k.get("pod_template") or {}).get("metadata") or {}  # merged into the pod template's
    gang = k.get("gang")
    job_extra = {"labels": {"kueue.x-k8s.io/queue-name": k["queue"]}} if gang == "kueue" else {}
    pod_extra = {"labels": {**(tmeta.get("labels") or {})}, "annotations": {**(tmeta.get("annotations") or {})}}
    if gang == "coscheduling":
        pod_extra["labels"]["scheduling.x-k8s.io/pod-group"] = job["metadata"]["name"]
    if gang == "volcano":
        pod_extra["annotations"]["scheduling.k8s.io/group-name"] = job["metadata"]["name"]
    for what, meta, extra in (("Job", job["metadata"], job_extra), ("pod template", js["template"]["metadata"], pod_extra)):
        expect(meta["labels"] == {**want_labels, **(extra.get("labels") or {})}, f"{what} labels {meta['labels']}")
        expect((meta.get("annotations") or {}) == {**want_notes, **(extra.get("annotations") or {})},
               f"{what} annotations {meta.get('annotations')}")
    expect(svc["selector"] == {k2: own[k2] for k2 in ("app.kubernetes.io/name", "app.kubernetes.io/instance")},
           f"the Service selects by the job's and the objects' names: {svc['selector']}")
    for key, want in (k.get("job_spec") or {}).items():  # merged into the Job's spec as written
        expect(js.get(key) == want, f"job_spec.{key}: {js.get(key)!r} != {want!r}")
    check_pod_group(spec, k, docs, job["metadata"]["name"])
    check_policy(spec, job)
    check_pod(spec, k, js["template"]["spec"])
    for p in problems:
        print(f"{manifest_path}: {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
