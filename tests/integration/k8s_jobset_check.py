#!/usr/bin/env python3
"""k8s_jobset_check.py MANIFEST OUT SPEC - a rendered JobSet manifest, checked as Kubernetes would.

The JobSet document against tests/fixtures/jobset-v1alpha2.schema.json (the JobSet CRD's
fields, vendored: kubernetes-validate has no CRD schemas), and dtrain's shape of it: one
replicated Job, one replica, failurePolicy.maxRestarts the spec's max_restarts (with a rule that
fails the JobSet when the agents ended the job: the budgets do not multiply), the TTL on the
JobSet and not on its Job,
the pods' subdomain the JobSet's network.subdomain, and DTRAIN_K8S_NAME naming the Job the
JobSet creates ("<jobset>-<replicated job>-0"), whose pod 0 is the coordinator.  Writes OUT:
the other documents and the replicated Job's template as the batch/v1 Job the JobSet
controller creates, for kubernetes-validate to check against the Kubernetes schemas.  Prints
what is wrong; exit 1 if anything is.
"""
import json
import os
import sys

import jsonschema
import yaml

here = os.path.dirname(os.path.abspath(__file__))
schema = json.load(open(os.path.join(here, "..", "fixtures", "jobset-v1alpha2.schema.json")))
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
problems = []
js = [d for d in docs if d.get("kind") == "JobSet"]
if len(js) != 1:
    sys.exit(f"expected one JobSet, got {len(js)}")
js = js[0]
for e in jsonschema.Draft202012Validator(schema).iter_errors(js):
    problems.append(f"JobSet schema: {'/'.join(map(str, e.absolute_path))}: {e.message}")
spec = js.get("spec") or {}
rjobs = spec.get("replicatedJobs") or []
if len(rjobs) != 1 or rjobs[0].get("replicas") != 1:
    problems.append(f"expected one replicated Job of one replica: {rjobs}")
job_spec = yaml.safe_load(open(sys.argv[3])) if len(sys.argv) > 3 else {}
restarts = job_spec.get("max_restarts", 0)
fp = spec.get("failurePolicy") or {}
if fp.get("maxRestarts") != restarts:
    problems.append(f"failurePolicy.maxRestarts {fp.get('maxRestarts')} != max_restarts {restarts}")
ended = [{"name": "the-job-ended", "action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"]}]
if (fp.get("rules") or []) != (ended if restarts else []):
    problems.append(f"failurePolicy.rules {fp.get('rules')}: the job's own end (PodFailurePolicy) must fail the JobSet")
ttl = ((job_spec.get("kubernetes") or {}).get("job_spec") or {}).get("ttlSecondsAfterFinished")
if "ttlSecondsAfterFinished" not in spec:
    problems.append("the JobSet has no ttlSecondsAfterFinished")
net = spec.get("network") or {}
job_name = f"{js['metadata']['name']}-{rjobs[0]['name']}-0" if rjobs else "?"
if net.get("subdomain") != job_name or net.get("enableDNSHostnames") is not True:
    problems.append(f"network: {net}, want DNS hostnames under subdomain {job_name}")
job = {"apiVersion": "batch/v1", "kind": "Job",
       "metadata": {"name": job_name, "namespace": js["metadata"].get("namespace", "default")},
       "spec": rjobs[0]["template"]["spec"] if rjobs else {}}
pod = job["spec"].get("template", {}).get("spec", {})
if "ttlSecondsAfterFinished" in job["spec"] and ttl is None:
    problems.append("the JobSet's Job has its own TTL: the JobSet's deletes it")
if pod.get("subdomain") != job_name:
    problems.append(f"pod subdomain {pod.get('subdomain')!r} != {job_name}")
env = {e["name"]: e.get("value") for e in (pod.get("containers") or [{}])[0].get("env") or []}
if env.get("DTRAIN_K8S_NAME") != job_name:
    problems.append(f"DTRAIN_K8S_NAME {env.get('DTRAIN_K8S_NAME')!r} != {job_name} (node 0 is <it>-0.<it>)")
with open(sys.argv[2], "w") as f:
    yaml.safe_dump_all([d for d in docs if d is not js] + [job], f)
for p in problems:
    print(p)
sys.exit(1 if problems else 0)
