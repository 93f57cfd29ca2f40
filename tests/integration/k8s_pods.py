#!/usr/bin/env python3
"""k8s_pods.py MANIFEST DIR INDEX... - runs pods of a rendered Indexed Job as local processes.

Each pod gets what the manifest (and the Job controller) would give it, nothing from
this shell:
  - its files: every projected ConfigMap/Secret key of the volume mounted at a path
    under DIR/pod-<i>/<mountPath> (e.g. DIR/pod-0/etc/dtrain/job.yaml), with the mode the
    manifest gives it (items[].mode, defaultMode, else Kubernetes' 0644; with the pod's
    securityContext.fsGroup, that group and group-readable, as the kubelet makes them), and
    the command's arguments and env values that name a mounted path rewritten to it;
  - its environment: the container's env (value, or downward-API fieldRef: the Job's
    UID label -> a fixed fake UID, status.podIP -> 127.0.0.1), plus what Kubernetes
    adds: JOB_COMPLETION_INDEX, HOSTNAME=<job>-<i>, KUBERNETES_SERVICE_HOST/PORT, and PATH (the image's; here the
    directory of $DTRAIN first); DTRAIN_HOSTS_FILE=DIR/hosts stands in for cluster DNS;
  - its name: "127.0.0.1 <job>-<i>.<service> <job>-<i>" is appended to DIR/hosts when
    the pod starts, as DNS learns a pod's name only once it runs;
  - its working directory: DIR/pod-<i>/work (the image's WORKDIR).
With --netns NC (scripts/netns-cluster.sh, its DTN_TAG in this environment) pod <i>
runs on namespace host <i+1> instead, as on a node of its own: status.podIP is that
host's address, and the pod's name goes into every host's /etc/hosts when it starts
(`NC name`), so the rendered headless-service name (<job>-0.<service>) resolves through
the real resolver to node 0's address, as cluster DNS would make it; no DTRAIN_HOSTS_FILE.
--host I=H runs pod I on host H instead (a replacement pod the Job controller placed on
another node).  Pods start in the order given, --delay seconds apart; each one's stdout and
stderr go to DIR/pod-<i>.out/.err.  A pod of an index run again (the Job controller's
replacement of a lost pod) is another k8s_pods.py run with --again: DIR/hosts is kept (the
other pods' names stay known) and the pod's files are DIR/pod-<i>.again (a new pod has a fresh
filesystem), its output DIR/pod-<i>.again.out/.err.  Waits for all and prints "pod <i> exit <status>" for each; exits
with the first non-zero status (or 0).
"""
import argparse
import os
import subprocess
import sys
import time

import yaml

FAKE_UID = "3f2a9c1b-e4d7-4a1e-9c55-0123456789ab"
FIELDS = {"metadata.labels['batch.kubernetes.io/controller-uid']": FAKE_UID, "status.podIP": "127.0.0.1"}


def with_modes(data, src, default_mode):
    """{path: (text, mode)}: a source's keys as files, with Kubernetes' modes (items[].mode,
    else defaultMode, else 0644) and items[] choosing keys and paths."""
    items = src.get("items")
    if not items:
        return {k: (v, default_mode) for k, v in data.items()}
    return {i["path"]: (data[i["key"]], i.get("mode", default_mode)) for i in items}


def files_of(docs, volume):
    """{relative path: (text, mode)} of a projected or configMap/secret volume."""
    out = {}
    projected = volume.get("projected", {})
    default_mode = projected.get("defaultMode", 0o644)
    sources = projected.get("sources") or [volume]
    for src in sources:
        if "configMap" in src:
            cm = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == src["configMap"]["name"])
            out.update(with_modes(cm.get("data") or {}, src["configMap"], default_mode))
        elif "secret" in src:
            name = src["secret"].get("name") or src["secret"].get("secretName")
            sec = next(d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"] == name)
            out.update(with_modes(sec.get("stringData") or {}, src["secret"], default_mode))
        elif "emptyDir" in src:
            pass
        else:
            sys.exit(f"k8s_pods: volume {volume['name']}: only ConfigMap, Secret and emptyDir are simulated")
    return out


def pod_setup(docs, job, index, root, pod_ip="127.0.0.1", suffix=""):
    pod = job["spec"]["template"]["spec"]
    c = pod["containers"][0]
    pdir = os.path.join(root, f"pod-{index}{suffix}")
    volumes = {v["name"]: v for v in pod.get("volumes") or []}
    remap = {}
    for m in c.get("volumeMounts") or []:
        v = volumes[m["name"]]
        if "emptyDir" in v:  # /dev/shm: the host's own tmpfs stands in
            continue
        local = pdir + m["mountPath"]
        os.makedirs(local, exist_ok=True)
        fs_group = (pod.get("securityContext") or {}).get("fsGroup")
        for rel, (text, mode) in files_of(docs, v).items():
            with open(os.path.join(local, rel), "w", encoding="utf-8") as f:
                f.write(text)
            if fs_group is not None:  # the kubelet: the pod's group owns the volume, and may read it
                os.chown(os.path.join(local, rel), -1, fs_group)
                mode |= 0o040
            os.chmod(os.path.join(local, rel), mode)
        remap[m["mountPath"]] = local

    def local_path(s):
        for mount, local in remap.items():
            if s == mount or s.startswith(mount + "/"):
                return local + s[len(mount):]
        return s

    name = job["metadata"]["name"]
    env = {"PATH": os.path.dirname(os.environ["DTRAIN"]) + ":/usr/local/bin:/usr/bin:/bin",
           "HOSTNAME": f"{name}-{index}", "JOB_COMPLETION_INDEX": str(index),
           "KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443",
           "DTRAIN_HOSTS_FILE": os.path.join(root, "hosts")}
    fields = dict(FIELDS, **{"status.podIP": pod_ip})
    for e in c.get("env") or []:
        if "valueFrom" in e:
            env[e["name"]] = fields[e["valueFrom"]["fieldRef"]["fieldPath"]]
        else:
            env[e["name"]] = local_path(e["value"])
    argv = [local_path(a) for a in c["command"] + (c.get("args") or [])]
    work = os.path.join(pdir, "work")
    os.makedirs(work, exist_ok=True)
    return argv, env, work, [f"{name}-{index}.{pod['subdomain']}", f"{name}-{index}"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("manifest")
    ap.add_argument("dir")
    ap.add_argument("indexes", nargs="+", type=int)
    ap.add_argument("--delay", type=float, default=0.0)
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--netns", metavar="NC", help="run pod i on host i+1 of scripts/netns-cluster.sh NC")
    ap.add_argument("--host", action="append", default=[], metavar="I=H", help="with --netns: pod I on host H")
    ap.add_argument("--again", action="store_true", help="replacement pods: keep DIR/hosts, files in pod-<i>.again")
    a = ap.parse_args()
    host_of = {int(i): int(h) for i, h in (x.split("=") for x in a.host)}
    docs = [d for d in yaml.safe_load_all(open(a.manifest, encoding="utf-8")) if d]
    job = next(d for d in docs if d["kind"] == "Job")
    suffix = ".again" if a.again else ""
    if not a.again:
        open(os.path.join(a.dir, "hosts"), "w").close()
    procs = {}
    for n, i in enumerate(a.indexes):
        if n:
            time.sleep(a.delay)
        host = str(host_of.get(i, i + 1))
        ip = subprocess.check_output([a.netns, "addr", host], text=True).strip() if a.netns else "127.0.0.1"
        argv, env, work, names = pod_setup(docs, job, i, a.dir, ip, suffix)
        if a.netns:  # the host's own /etc/hosts, no override; the pod's environment exactly
            del env["DTRAIN_HOSTS_FILE"]
            subprocess.check_call([a.netns, "name", host] + names)
            argv = [a.netns, "exec", host, "env", "-i"] + [f"{k}={v}" for k, v in env.items()] + argv
            env = dict(os.environ)
        else:
            with open(os.path.join(a.dir, "hosts"), "a") as f:
                f.write(f"127.0.0.1 {' '.join(names)}\n")
        out = open(os.path.join(a.dir, f"pod-{i}{suffix}.out"), "w")
        err = open(os.path.join(a.dir, f"pod-{i}{suffix}.err"), "w")
        procs[i] = subprocess.Popen(argv, env=env, cwd=work, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + a.timeout
    first = 0
    for i, p in procs.items():
        try:
            rc = p.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            rc = p.wait()
            print(f"pod {i} killed after the {a.timeout}s limit")
        rc = rc if rc >= 0 else 128 - rc
        print(f"pod {i} exit {rc}")
        first = first or rc
    return first


if __name__ == "__main__":
    sys.exit(main())
