/* test_jobspec_errors.c - a wide table of bad job specs, each with the exact file:line:column
 * of its error and a distinctive part of the message: YAML-level problems (tabs, NUL bytes,
 * aliases, duplicate keys, nesting), unknown keys with suggestions, types, ranges and the
 * rules between keys, for every section. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "spec/jobspec.h"

struct bad_case {
    const char *yaml;
    int line, col;
    const char *needle;
};

#define HEAD "name: t\ncommand: [a]\n"
#define THEAD "name: t\ntrainer:\n"

static const struct bad_case bad_cases[] = {
    /* YAML level */
    {"", 1, 1, "the file is empty"},
    {"# only a comment\n\n", 1, 1, "the file is empty"},
    {"---\n", 1, 1, "the file is empty"},
    {"- a\n- b\n", 1, 1, "top level must be a mapping"},
    {"just text\n", 1, 1, "top level must be a mapping"},
    {"name: t\n\tcommand: [a]\n", 2, 1, "indentation uses spaces, not tabs"},
    {"name: t\nrendezvous:\n\ttimeout: 3s\n", 3, 1, "not tabs"},
    {"name: [a\n", 2, 1, "YAML syntax error"},
    {"name: \"abc\n", 2, 1, "YAML syntax error"},
    {"a: &x [1]\nb: *x\n", 1, 4, "anchors"},
    {"a: *x\n", 1, 4, "aliases"},
    {"name: !!int 3\n", 1, 7, "tags"},
    {"name: t\n---\nname: u\n", 2, 1, "a second YAML document"},
    {"name: t\ncommand: [a]\nname: u\n", 3, 1, "duplicate key 'name' (first set at line 1)"},
    {HEAD "env: {A: 1, A: 2}\n", 3, 13, "duplicate key 'A'"},
    {"? [a, b]\n: c\n", 1, 3, "mapping key must be a plain name"},
    {"name: \"a\\0b\"\n", 1, 7, "NUL character"},
    {"name: t\x00\n", 1, 8, "NUL byte"},
    {"name: \xc3\x28\n", 1, 8, "UTF-8"},
    {"a: [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]\n", 1, 35,
     "nesting deeper"},
    /* unknown keys and suggestions */
    {"name: t\nnproc_pernode: 4\ncommand: [a]\n", 2, 1,
     "unknown key 'nproc_pernode' in the top level; did you mean 'nproc_per_node'?"},
    {HEAD "Nodes: 2\n", 3, 1, "did you mean 'nodes'?"},
    {HEAD "nproc-per-node: 2\n", 3, 1, "did you mean 'nproc_per_node'?"},
    {HEAD "max_restart: 2\n", 3, 1, "did you mean 'max_restarts'?"},
    {HEAD "evn: {A: b}\n", 3, 1, "unknown key 'evn' in the top level; did you mean 'env'?"},
    {HEAD "rendezvous:\n  tmeout: 3s\n", 4, 3, "unknown key 'tmeout' in rendezvous; did you mean 'timeout'?"},
    {HEAD "timeout: 3s\n", 3, 1, "belongs in another section: rendezvous.timeout"},
    {HEAD "zzzzqqq: 1\n", 3, 1, "known keys: name, scheduler"},
    {THEAD "  optimiser: {lr: 1}\n", 3, 3, "did you mean 'optimizer'?"},
    {THEAD "  optimizer: {learning_rate: 1}\n", 3, 15, "unknown key 'learning_rate' in trainer.optimizer"},
    {THEAD "  model: {hiden: [3]}\n", 3, 11, "did you mean 'hidden'?"},
    {THEAD "  data: {batchsize: 3}\n", 3, 10, "did you mean 'batch_size'?"},
    {HEAD "slurm: {partion: gpu}\n", 3, 9, "did you mean 'partition'?"},
    {HEAD "kubernetes: {image: x, namespce: a}\n", 3, 24, "did you mean 'namespace'?"},
    {HEAD "mpirun: {host: [a]}\n", 3, 10, "did you mean 'hosts'?"},
    {HEAD "rendezvous: {timeout:3s}\n", 3, 14,
     "unknown key 'timeout:3s' in rendezvous; write 'timeout: 3s' (YAML needs a space after the colon)"},
    {"name:t\n", 1, 1, "got a single value (YAML needs a space after each ':')"},
    {HEAD "rendezvous:\ntimeout: 3s\n", 3, 12,
     "rendezvous: expected a mapping of keys (key: value), got nothing (null) (indent its keys under it"},
    {HEAD "rendezvous: port:3\n", 3, 13, "(YAML needs a space after each ':')"},
    /* required, exclusive */
    {"command: [a]\n", 1, 1, "missing required key 'name' in the top level"},
    {"name: t\n", 1, 1, "neither command nor trainer"},
    {"name: t\ncommand: [a]\ntrainer: {}\n", 3, 1, "both command and trainer"},
    {"name: t\ntrainer: {}\ncommand: [a]\n", 3, 1, "both command and trainer"},
    /* types and ranges at the top */
    {"name: Upper\ncommand: [a]\n", 1, 7, "DNS-1123 label"},
    {"name: -x\ncommand: [a]\n", 1, 7, "DNS-1123 label"},
    {"name: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\ncommand: [a]\n", 1, 7,
     "(too long)"},
    {"name: [x]\ncommand: [a]\n", 1, 7, "name: expected a non-empty string, got a list"},
    {"name: \"\"\ncommand: [a]\n", 1, 7, "expected a non-empty string"},
    {HEAD "scheduler: slrum\n", 3, 12, "got 'slrum'; did you mean 'slurm'?"},
    {HEAD "backend: NCCL\n", 3, 10, "did you mean 'nccl'?"},
    {THEAD "  device: gpu\n", 3, 11, "one of cpu, cuda, got 'gpu'; NVIDIA GPUs are device: cuda"},
    {HEAD "scheduler: pbs\n", 3, 12, "expected one of local, slurm, kubernetes, mpirun, got 'pbs'"},
    {HEAD "nodes: 0\n", 3, 8, "nodes: expected an integer from 1 to 65536, got '0'"},
    {HEAD "nodes: -1\n", 3, 8, "from 1 to 65536"},
    {HEAD "nodes: 2.5\n", 3, 8, "nodes: expected an integer, got '2.5'"},
    {HEAD "nodes: \"2\"\n", 3, 8, "remove the quotes"},
    {HEAD "nodes: 99999999999999999999\n", 3, 8, "expected an integer"},
    {HEAD "nodes:\n", 3, 7, "got nothing (null)"},
    {HEAD "nproc_per_node: cpu\n", 3, 17, "expected an integer or \"gpu\", got 'cpu'"},
    {HEAD "nproc_per_node: 0\n", 3, 17, "from 1 to 1024"},
    {HEAD "backend: gloo\n", 3, 10, "one of auto, tcp, shm, nccl, mpi"},
    {HEAD "backend: mpi\n", 3, 10, "mpi needs scheduler: mpirun"},
    {HEAD "backend: shm\nnodes: 2\n", 3, 10, "shm works only within one node"},
    {"name: t\ncommand: python train.py\n", 2, 10, "to run a shell line write [sh, -c"},
    {"name: t\ncommand: []\n", 2, 10, "at least 1 item"},
    {"name: t\ncommand: [a, [b]]\n", 2, 14, "one item is not a string"},
    {"name: t\ncommand: [a, ~]\n", 2, 14, "one item is not a string"},
    {HEAD "env: [A]\n", 3, 6, "expected a mapping of names to values"},
    {HEAD "env: {1A: x}\n", 3, 7, "'1A' is not an environment variable name"},
    {HEAD "env: {A-B: x}\n", 3, 7, "is not an environment variable name"},
    {HEAD "env: {A: }\n", 3, 10, "write \"\" for an empty value"},
    {HEAD "env: {A: [1]}\n", 3, 10, "expected a string value, got a list"},
    {HEAD "env: {MASTER_PORT: 1}\n", 3, 7, "MASTER_PORT is set by dtrain"},
    {HEAD "env: {A: 1, DTRAIN_JOB_TOKEN: x}\n", 3, 13, "DTRAIN_JOB_TOKEN is set by dtrain"},
    {HEAD "max_restarts: -1\n", 3, 15, "max_restarts: expected an integer from 0 to 10000"},
    {HEAD "grace_period: 0s\n", 3, 15, "grace_period: expected a duration in (0, 3600], got '0s'"},
    {HEAD "grace_period: 2h\n", 3, 15, "expected a duration in (0, 3600], got '2h'"},
    {HEAD "grace_period: 5\n", 3, 15, "(add a unit: 5s)"},
    {HEAD "grace_perid: 5s\n", 3, 1, "did you mean 'grace_period'?"},
    {HEAD "log_dir: 3\nrendezvous: 1\n", 4, 13, "rendezvous: expected a mapping of keys"},
    {HEAD "rendezvous: {port: 65536}\n", 3, 20,
     "rendezvous.port: expected an integer from 0 to 65535, got '65536'"},
    {HEAD "rendezvous: {port: -1}\n", 3, 20, "from 0 to 65535"},
    {HEAD "rendezvous:\n  timeout: abc\n", 4, 12,
     "rendezvous.timeout: expected a duration like 30s, 10m or 500ms, got 'abc'"},
    {HEAD "rendezvous: {timeout: 60}\n", 3, 23, "(add a unit: 60s)"},
    {HEAD "rendezvous: {timeout: 0s}\n", 3, 23, "expected a duration in (0, 86400], got '0s'"},
    {HEAD "rendezvous: {timeout: 5 s}\n", 3, 23, "expected a duration like"},
    {HEAD "rendezvous: {timeout: 1e3s}\n", 3, 23, "expected a duration like"},
    {HEAD "rendezvous: {heartbeat_timeout: -3s}\n", 3, 33, "expected a duration like"},
    {HEAD "rendezvous: {auth: off}\n", 3, 20, "one of token, none"},
    {HEAD "restart_policy: {on_exit: {42: stop}}\n", 3, 32, "42: expected fail or retry, got 'stop'"},
    {HEAD "restart_policy: {on_exit: {0: fail}}\n", 3, 28, "exit code from 1 to 255"},
    {HEAD "restart_policy: {on_exit: {256: fail}}\n", 3, 28, "exit code from 1 to 255"},
    {HEAD "restart_policy: {on_exit: {137: fail, SIGKILL: retry}}\n", 3, 39, "exit code 137 is listed twice"},
    {HEAD "restart_policy: {on_exit: [42]}\n", 3, 27, "like {42: fail}"},
    {HEAD "restart_policy: {default: never}\n", 3, 27, "one of retry, fail"},
    /* trainer */
    {THEAD "  epochs: 0\n", 3, 11, "trainer.epochs: expected an integer from 1"},
    {THEAD "  epochs: 2\n  steps: 10\n", 4, 3, "trainer: set either epochs or steps, not both"},
    {THEAD "  steps: 10\n  model: {}\n  epochs: 2\n", 5, 3, "set either epochs or steps"},
    {THEAD "  steps: 0\n", 3, 10, "trainer.steps: expected an integer from 1"},
    {THEAD "  model: {type: gpt}\n", 3, 17, "one of mlp, gpt2, got 'gpt'"},
    {THEAD "  model: {hidden: []}\n", 3, 19, "from 1 to 16 items, got 0"},
    {THEAD "  model: {hidden: [10, 0]}\n", 3, 24,
     "trainer.model.hidden: expected an integer from 1 to 65536, got '0'"},
    {THEAD "  model: {hidden: [10, x]}\n", 3, 24, "expected a list of integers, got 'x'"},
    {THEAD "  model: {hidden: 10}\n", 3, 19, "like [1024, 1024]"},
    {THEAD "  model: {activation: tanh}\n", 3, 23, "one of relu, gelu"},
    {THEAD "  data: {dataset: cifar10}\n", 3, 19, "one of fashion-mnist"},
    {THEAD "  data: {batch_size: 0}\n", 3, 22, "trainer.data.batch_size: expected an integer from 1"},
    {THEAD "  data: {workers: 65}\n", 3, 19, "from 0 to 64"},
    {THEAD "  data: {prefetch: 0}\n", 3, 20, "from 1 to 64"},
    {THEAD "  data: {shuffle: yes}\n", 3, 19, "expected true or false, got 'yes'"},
    {THEAD "  data: {path: }\n", 3, 16, "got nothing"},
    {THEAD "  optimizer: {lr: 0}\n", 3, 19, "trainer.optimizer.lr: expected a number > 0, got '0'"},
    {THEAD "  optimizer: {lr: -1e-3}\n", 3, 19, "expected a number > 0"},
    {THEAD "  optimizer: {lr: nan}\n", 3, 19, "expected a number, got 'nan'"},
    {THEAD "  optimizer: {lr: .inf}\n", 3, 19, "expected a number"},
    {THEAD "  optimizer: {lr: 0x10}\n", 3, 19, "expected a number"},
    {THEAD "  optimizer: {betas: [0.9, 1.0]}\n", 3, 28, "betas: expected a number in [0, 1), got '1.0'"},
    {THEAD "  optimizer: {betas: [-0.1, 0.9]}\n", 3, 23, "in [0, 1)"},
    {THEAD "  optimizer: {betas: [0.9]}\n", 3, 22, "expected exactly 2 numbers, got 1"},
    {THEAD "  optimizer: {eps: -1}\n", 3, 20, "expected a number >= 0"},
    {THEAD "  optimizer: {weight_decay: -0.1}\n", 3, 29, "expected a number >= 0"},
    {THEAD "  optimizer: {grad_clip: -1}\n", 3, 26, "expected a number >= 0"},
    {THEAD "  optimizer: {type: sgd}\n", 3, 21, "one of adamw"},
    {THEAD "  scheduler: {type: onecycle}\n", 3, 14, "type onecycle needs max_lr"},
    {THEAD "  scheduler: {type: linear}\n", 3, 21, "one of constant, onecycle, cosine"},
    {THEAD "  scheduler: {type: cosine, warmup_steps: -1}\n", 3, 43, "warmup_steps: expected"},
    {THEAD "  scheduler: {type: cosine, min_lr: -1e-4}\n", 3, 37, "min_lr: expected a number >= 0"},
    {THEAD "  optimizer: {lr: 1e-3}\n  scheduler: {type: cosine, min_lr: 0.01}\n", 4, 37,
     "trainer.scheduler.min_lr: must be in [0, optimizer.lr] (lr is 0.001), got 0.01"},
    {THEAD "  ddp: {zero: 2}\n", 3, 15, "trainer.ddp.zero: expected"},
    {THEAD "  scheduler: {type: onecycle, max_lr: 0}\n", 3, 39, "max_lr: expected a number > 0"},
    {THEAD "  scheduler: {type: onecycle, max_lr: 1, pct_start: 1.5}\n", 3, 53,
     "pct_start: expected a number in [0, 1]"},
    {THEAD "  scheduler: {type: onecycle, max_lr: 1, pct_start: 0.6, three_phase: true}\n", 3, 53,
     "three_phase needs pct_start <= 0.5"},
    {THEAD "  scheduler: {type: onecycle, max_lr: 1, base_momentum: 0.9, max_momentum: 0.8}\n", 3, 57,
     "must not exceed max_momentum"},
    {THEAD "  scheduler: {anneal: cosine}\n", 3, 23, "one of cos, linear"},
    {THEAD "  scheduler: {div_factor: 0}\n", 3, 27, "expected a number > 0"},
    {THEAD "  ddp: {bucket_cap_mb: 0}\n", 3, 24,
     "trainer.ddp.bucket_cap_mb: expected a size in (0, 4096] MiB, got '0'"},
    {THEAD "  ddp: {bucket_cap_mb: 25 parsecs}\n", 3, 24, "expected a size like 25 (MiB), 25MB or 1GiB"},
    {THEAD "  ddp: {first_bucket_mb: 8GiB}\n", 3, 26, "in (0, 4096]"},
    {THEAD "  ddp: {grad_accum: 0}\n", 3, 21, "from 1 to 65536"},
    {THEAD "  ddp: {overlap: 1}\n", 3, 18, "expected true or false"},
    {THEAD "  ddp: {desync_check_every: -1}\n", 3, 29, "expected an integer from 0"},
    {THEAD "  checkpoint: {keep: 0}\n", 3, 22, "from 1 to 10000"},
    {THEAD "  checkpoint: {every_steps: -5}\n", 3, 29, "from 0 to"},
    {THEAD "  checkpoint: {resume: always}\n", 3, 24, "one of auto, never"},
    {THEAD "  eval: {every_epochs: -1}\n", 3, 24, "trainer.eval.every_epochs"},
    {THEAD "  eval: 1\n", 3, 9, "trainer.eval: expected a mapping"},
    {THEAD "  seed: -1\n", 3, 9, "trainer.seed: expected an integer from 0"},
    {THEAD "  device: tpu\n", 3, 11, "one of cpu, cuda"},
    {THEAD "  init_from: /w/gpt2\n", 3, 14, "trainer.init_from: loads Hugging Face GPT-2 weights, and model.type is mlp"},
    {THEAD "  init_from: \"\"\n", 3, 14, "trainer.init_from: expected a non-empty string"},
    {THEAD "  amp: {dtype: fp8}\n", 3, 16, "one of off, bf16, fp16"},
    {THEAD "  amp: {loss_scale: static}\n", 3, 21, "expected dynamic or a number > 0, got 'static'"},
    {THEAD "  amp: {loss_scale: 0}\n", 3, 21, "expected a number > 0"},
    {THEAD "  amp: {growth_factor: 1}\n", 3, 24, "expected a number > 1"},
    {THEAD "  amp: {backoff_factor: 1}\n", 3, 25, "in (0, 1)"},
    {THEAD "  amp: {growth_interval: 0}\n", 3, 26, "from 1 to"},
    {THEAD "  trace: {steps: 20-10}\n", 3, 18, "step range like \"10-20\""},
    {THEAD "  trace: {steps: ten}\n", 3, 18, "step range like"},
    {THEAD "  trace: {steps: -3}\n", 3, 18, "step range like"},
    {THEAD "  cuda_graph: maybe\n", 3, 15, "expected true or false"},
    {THEAD "  log_every_steps: 0\n", 3, 20, "from 1 to"},
    /* trainer.data tokens (issue 24): the model reads the data set's kind; each data set its own keys */
    {THEAD "  data: {dataset: tokens, train: a.bin, seq_len: 8}\n", 3, 19,
     "trainer.data.dataset: tokens are read by a language model: set model.type: gpt2"},
    {THEAD "  data: {dataset: mnist}\n", 3, 19, "one of fashion-mnist, tokens"},
    {THEAD "  data: {seq_len: 64}\n", 3, 19, "trainer.data.seq_len: is a key of dataset tokens"},
    {THEAD "  data: {val: 'v/*.bin'}\n", 3, 15, "trainer.data.val: is a key of dataset tokens"},
    {THEAD "  data: {dataset: tokens, seq_len: 0}\n", 3, 36, "seq_len: expected an integer from 1"},
    {THEAD "  model: {type: gpt2, block_size: 64}\n  data: {dataset: tokens, train: a.bin, seq_len: 65}\n", 4, 50,
     "trainer.data.seq_len: 65 is longer than the model's block_size 64"},
    {THEAD "  model: {type: gpt2}\n  data: {batch_size: 8}\n", 4, 9,
     "model gpt2 reads token sequences, not the images of fashion-mnist"},
    {THEAD "  model: {type: gpt2}\n  data: {dataset: tokens, seq_len: 8}\n", 4, 9, "dataset tokens needs train"},
    {THEAD "  model: {type: gpt2}\n  data: {dataset: tokens, train: a.bin, seq_len: 8}\n  device: cuda\n"
           "  amp: {dtype: fp16}\n",
     6, 16, "trainer.amp.dtype: fp16 is not offered for gpt2 on device: cuda"},
    {THEAD "  tf32: true\n", 3, 9, "trainer.tf32: is the GPU's fp32-on-tensor-cores mode"},
    {THEAD "  model: {type: gpt2}\n  data: {dataset: tokens, train: a.bin}\n", 4, 9, "dataset tokens needs seq_len"},
    {THEAD "  model: {type: gpt2}\n  data: {dataset: tokens, train: a, seq_len: 8, path: /x}\n", 4, 55,
     "trainer.data.path: is the fashion-mnist directory"},
    {THEAD "  eval: {batches: -1}\n", 3, 19, "trainer.eval.batches: expected an integer from 0"},
    {THEAD "  eval: {every_steps: x}\n", 3, 23, "trainer.eval.every_steps"},
    {THEAD "  sample: {tokens: 20}\n", 3, 11, "trainer.sample: a sample needs a language model on dataset tokens"},
    {THEAD "  sample: {temperature: -1}\n", 3, 25, "trainer.sample.temperature: expected a number >= 0"},
    {"name: t\nnproc_per_node: gpu\ntrainer: {}\n", 2, 17, "the trainer runs on the CPU"},
    {"name: t\nbackend: nccl\ntrainer: {}\n", 2, 10, "nccl runs on GPUs"},
    {"name: t\nbackend: tcp\ntrainer: {device: cuda}\n", 2, 10, "tcp is a CPU backend"},
    /* schedulers */
    {HEAD "slurm: {time: forever}\n", 3, 15, "expected a time limit like"},
    {HEAD "slurm: {time: \"1:99:00\"}\n", 3, 15, "expected a time limit like"},
    {HEAD "slurm: {time: 99999999999999999999999999h}\n", 3, 15, "expected a time limit like"},
    {HEAD "slurm: {time: \"99999999999999-00\"}\n", 3, 15, "expected a time limit like"},
    {HEAD "slurm: {time: 0}\n", 3, 15, "expected a time limit like"},
    {HEAD "slurm: {mem: 99999999999999999999999TiB}\n", 3, 14,
     "slurm.mem: expected a size in [1, 1e+18] bytes"},
    {HEAD "slurm: {gpus_per_node: 65}\n", 3, 24, "from 0 to 64"},
    {HEAD "slurm: {cpus_per_task: 0}\n", 3, 24, "from 1 to 4096"},
    {HEAD "slurm: {mem: lots}\n", 3, 14, "expected a size like 512Mi, 64Gi or 4GB"},
    {HEAD "slurm: {exclusive: 1}\n", 3, 20, "expected true or false"},
    {HEAD "slurm: {extra_sbatch: --x}\n", 3, 23, "each item is one sbatch option"},
    {HEAD "slurm: 3\n", 3, 8, "slurm: expected a mapping"},
    {HEAD "scheduler: kubernetes\n", 3, 12, "kubernetes needs a kubernetes: section"},
    {HEAD "kubernetes: {namespace: x}\n", 3, 13, "missing required key 'image' in kubernetes"},
    {HEAD "kubernetes: {image: x, namespace: Bad_NS}\n", 3, 35,
     "kubernetes.namespace: expected a DNS-1123 label"},
    {HEAD "kubernetes: {image: x, cpu: lots}\n", 3, 29, "expected a CPU amount like 4, 0.5 or \"500m\""},
    {HEAD "kubernetes: {image: x, cpu: 0}\n", 3, 29, "expected a CPU amount"},
    {HEAD "kubernetes: {image: x, image_pull_policy: sometimes}\n", 3, 43,
     "one of IfNotPresent, Always, Never"},
    {HEAD "kubernetes: {image: x, tolerations: [{operator: Exists, value: a}]}\n", 3, 64,
     "operator Exists takes no value"},
    {HEAD "kubernetes: {image: x, tolerations: [{key: a, toleration_seconds: 3}]}\n", 3, 67,
     "only applies with effect: NoExecute"},
    {HEAD "kubernetes: {image: x, tolerations: [{key: a, effect: Never}]}\n", 3, 55, "one of NoSchedule"},
    {HEAD "kubernetes: {image: x, tolerations: {key: a}}\n", 3, 37, "expected a list of mappings"},
    {HEAD "kubernetes:\n  image: x\n  volumes:\n    - {name: data, mount_path: /d}\n", 6, 7,
     "kubernetes.volumes[0]: a volume needs exactly one of"},
    {HEAD "kubernetes:\n  image: x\n  volumes:\n    - {name: data, mount_path: d, pvc: c}\n", 6, 32,
     "kubernetes.volumes[0].mount_path: expected an absolute path"},
    {HEAD "kubernetes:\n  image: x\n  volumes:\n    - {name: Data, mount_path: /d, pvc: c}\n", 6, 14,
     "volumes[0].name: expected a DNS-1123 label"},
    {HEAD "kubernetes: {image: x, volumes: [{mount_path: /d, pvc: c}]}\n", 3, 34,
     "missing required key 'name' in kubernetes.volumes[0]"},
    {HEAD "kubernetes: {image: x, labels: {\"-bad\": v}}\n", 3, 32,
     "kubernetes.labels: '-bad' is not a Kubernetes key ([prefix/]name"},
    {HEAD "kubernetes: {image: x, labels: {app.kubernetes.io/instance: y}}\n", 3, 32,
     "kubernetes.labels: 'app.kubernetes.io/instance': dtrain or the Job controller sets this label itself"},
    {HEAD "kubernetes: {image: x, labels: {batch.kubernetes.io/job-name: y}}\n", 3, 32,
     "sets this label itself"},
    {HEAD "kubernetes: {image: x, labels: {team: \"a b\"}}\n", 3, 32,
     "kubernetes.labels: team: 'a b' is not a label value"},
    {HEAD "kubernetes: {image: x, annotations: {a/b/c: x}}\n", 3, 37,
     "kubernetes.annotations: 'a/b/c' is not a Kubernetes key"},
    {HEAD "kubernetes: {image: x, image_pull_secrets: [Reg_Cred]}\n", 3, 44,
     "kubernetes.image_pull_secrets: 'Reg_Cred' is not a Secret name"},
    {HEAD "kubernetes: {image: x, log_volume: {pvc: a, host_path: /b}}\n", 3, 36,
     "kubernetes.log_volume: needs exactly one of pvc and host_path"},
    {HEAD "kubernetes: {image: x, log_volume: {}}\n", 3, 36, "needs exactly one of pvc and host_path"},
    {HEAD "kubernetes: {image: x, pod_template: [a]}\n", 3, 38,
     "kubernetes.pod_template: expected a mapping, got a list"},
    {HEAD "kubernetes: {image: x, image_pull_secrets: regcred}\n", 3, 44,
     "expected a list of strings like [a, b], got 'regcred'; Secret names, like [regcred]"},
    {HEAD "scheduler: kubernetes\nkubernetes: {image: x}\nrendezvous: {port: 0}\n", 5, 20,
     "cannot work on Kubernetes"},
    {HEAD "mpirun: {hosts: [a], hostfile: h}\n", 3, 32, "set either hosts or hostfile"},
    {HEAD "mpirun: {hosts: []}\n", 3, 17, "at least 1 item"},
    {HEAD "mpirun: {allow_run_as_root: yes}\n", 3, 29, "expected true or false"},
};

/* One cmocka test per case, so a failure names its case and the count is honest. */
static void bad_spec(void **state)
{
    const struct bad_case *c = *state;
    struct dt_job *job = (struct dt_job *)1;
    size_t len = strlen(c->yaml);
    if (strstr(c->needle, "NUL byte"))
        len += 2; /* the case holds a NUL byte inside */
    int rc = dt_job_load_string(c->yaml, len, "t.yaml", &job);
    char want[32];
    snprintf(want, sizeof want, "t.yaml:%d:%d: ", c->line, c->col);
    const char *msg = dt_error_last();
    if (rc != DT_EINVAL || job != NULL || strncmp(msg, want, strlen(want)) != 0 || !strstr(msg, c->needle))
        fail_msg("spec:\n%s\ngot rc %d: %s\nwanted %s...%s", c->yaml, rc, msg, want, c->needle);
}

#define N_CASES (sizeof bad_cases / sizeof bad_cases[0])

int main(void)
{
    static struct CMUnitTest tests[N_CASES];
    static char names[N_CASES][64];
    for (size_t i = 0; i < N_CASES; i++) {
        char first[40];
        snprintf(first, sizeof first, "%.39s", bad_cases[i].needle);
        snprintf(names[i], sizeof names[i], "bad_%03zu %s", i, first);
        tests[i] = (struct CMUnitTest){
            .name = names[i], .test_func = bad_spec, .initial_state = (void *)&bad_cases[i]};
    }
    return _cmocka_run_group_tests("jobspec_errors", tests, N_CASES, NULL, NULL);
}
