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
    if default == "retry":
        fail = sorted(c for c, a in on_exit.items() if a == "fail")
        want = [{"action": "FailJob", "onExitCodes": {"containerName": "agent", "operator": "In",
                                                      "values": fail}}] if fail else []
    else:
        retry = sorted(c for c, a in on_exit.items() if a == "retry") or [0]
        want = [{"action": "FailJob", "onExitCodes": {"containerName": "agent", "operator": "NotIn",
                                                      "values": retry}}]
    expect(exit_rules == want, f"exit-code rules {exit_rules} != {want}")


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
    k = spec["kubernetes"]
    ns = k.get("namespace", "default")
    docs = [d for d in yaml.safe_load_all(open(manifest_path, encoding="utf-8")) if d]
    kinds = [d["kind"] for d in docs]
    auth = (spec.get("rendezvous") or {}).get("auth", "token")
    want_kinds = ["ConfigMap"] + (["Secret"] if auth == "token" else []) + ["Service", "Job"]
    expect(kinds == want_kinds, f"kinds {kinds} != {want_kinds}")
    by = {d["kind"]: d for d in docs}
    for d in docs:
        expect(d["metadata"]["namespace"] == ns, f"{d['kind']} namespace {d['metadata']['namespace']!r} != {ns!r}")
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
    nodes = spec.get("nodes", 1)
    js = job["spec"]
    expect(js["completionMode"] == "Indexed" and js["completions"] == nodes and js["parallelism"] == nodes,
           "Indexed, completions = parallelism = nodes")
    # One restart budget: max_restarts in the pods (the agents), none by the Job controller.
    expect(js["backoffLimit"] == 0, f"backoffLimit {js['backoffLimit']} != 0 (the agents hold the restart budget)")
    expect(svc["selector"].items() <= js["template"]["metadata"]["labels"].items(), "Service selects the Job's pods")
    expect(by["Service"]["metadata"]["name"] == spec["name"], "Service is named after the job")
    own = {"app.kubernetes.io/name": "dtrain", "app.kubernetes.io/instance": job["metadata"]["name"],
           "app.kubernetes.io/managed-by": "dtrain"}
    want_labels = {**own, **{str(a): str(b) for a, b in (k.get("labels") or {}).items()}}
    want_notes = {str(a): str(b) for a, b in (k.get("annotations") or {}).items()}
    for d in docs:
        expect(d["metadata"]["labels"] == want_labels, f"{d['kind']} labels {d['metadata']['labels']}")
    tmeta = (k.get("pod_template") or {}).get("metadata") or {}  # merged into the pod template's
    for what, meta, extra in (("Job", job["metadata"], {}), ("pod template", js["template"]["metadata"], tmeta)):
        expect(meta["labels"] == {**want_labels, **(extra.get("labels") or {})}, f"{what} labels {meta['labels']}")
        expect((meta.get("annotations") or {}) == {**want_notes, **(extra.get("annotations") or {})},
               f"{what} annotations {meta.get('annotations')}")
    expect(svc["selector"] == own, f"the Service selects by dtrain's labels only: {svc['selector']}")
    for key, want in (k.get("job_spec") or {}).items():  # merged into the Job's spec as written
        expect(js.get(key) == want, f"job_spec.{key}: {js.get(key)!r} != {want!r}")
    check_policy(spec, job)
    check_pod(spec, k, js["template"]["spec"])
    for p in problems:
        print(f"{manifest_path}: {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
