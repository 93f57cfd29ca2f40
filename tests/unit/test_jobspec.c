/* test_jobspec.c - the job spec parser: a wide table of bad specs, each with the exact
 * file:line:column and a distinctive part of its message; defaults filled in; every
 * trainer and scheduler key read into its field; --print output loading back equal. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/error.h"
#include "launcher/jobspec.h"
#include "worker/trainer_spec.h"

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
    {"a: [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]\n", 1, 35, "nesting deeper"},
    /* unknown keys and suggestions */
    {"name: t\nnproc_pernode: 4\ncommand: [a]\n", 2, 1, "unknown key 'nproc_pernode' in the top level; did you mean 'nproc_per_node'?"},
    {HEAD "Nodes: 2\n", 3, 1, "did you mean 'nodes'?"},
    {HEAD "nproc-per-node: 2\n", 3, 1, "did you mean 'nproc_per_node'?"},
    {HEAD "max_restart: 2\n", 3, 1, "did you mean 'max_restarts'?"},
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
    /* required, exclusive */
    {"command: [a]\n", 1, 1, "missing required key 'name' in the top level"},
    {"name: t\n", 1, 1, "neither command nor trainer"},
    {"name: t\ncommand: [a]\ntrainer: {}\n", 3, 10, "both command and trainer"},
    {"name: t\ntrainer: {}\ncommand: [a]\n", 3, 10, "both command and trainer"},
    /* types and ranges at the top */
    {"name: Upper\ncommand: [a]\n", 1, 7, "DNS-1123 label"},
    {"name: -x\ncommand: [a]\n", 1, 7, "DNS-1123 label"},
    {"name: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\ncommand: [a]\n", 1, 7, "(too long)"},
    {"name: [x]\ncommand: [a]\n", 1, 7, "name: expected a non-empty string, got a list"},
    {"name: \"\"\ncommand: [a]\n", 1, 7, "expected a non-empty string"},
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
    {HEAD "max_restarts: -1\n", 3, 15, "max_restarts: expected an integer from 0 to 10000"},
    {HEAD "log_dir: 3\nrendezvous: 1\n", 4, 13, "rendezvous: expected a mapping of keys"},
    {HEAD "rendezvous: {port: 65536}\n", 3, 20, "rendezvous.port: expected an integer from 0 to 65535, got '65536'"},
    {HEAD "rendezvous: {port: -1}\n", 3, 20, "from 0 to 65535"},
    {HEAD "rendezvous:\n  timeout: abc\n", 4, 12, "rendezvous.timeout: expected a duration like 30s, 10m or 500ms, got 'abc'"},
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
    {THEAD "  epochs: 2\n  steps: 10\n", 4, 10, "set either epochs or steps, not both"},
    {THEAD "  steps: 0\n", 3, 10, "trainer.steps: expected an integer from 1"},
    {THEAD "  model: {type: gpt}\n", 3, 17, "one of mlp, got 'gpt'"},
    {THEAD "  model: {hidden: []}\n", 3, 19, "from 1 to 16 items, got 0"},
    {THEAD "  model: {hidden: [10, 0]}\n", 3, 24, "trainer.model.hidden: expected an integer from 1 to 65536, got '0'"},
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
    {THEAD "  scheduler: {type: cosine}\n", 3, 21, "one of constant, onecycle"},
    {THEAD "  scheduler: {type: onecycle, max_lr: 0}\n", 3, 39, "max_lr: expected a number > 0"},
    {THEAD "  scheduler: {type: onecycle, max_lr: 1, pct_start: 1.5}\n", 3, 53, "pct_start: expected a number in [0, 1]"},
    {THEAD "  scheduler: {type: onecycle, max_lr: 1, pct_start: 0.6, three_phase: true}\n", 3, 53, "three_phase needs pct_start <= 0.5"},
    {THEAD "  scheduler: {type: onecycle, max_lr: 1, base_momentum: 0.9, max_momentum: 0.8}\n", 3, 57, "must not exceed max_momentum"},
    {THEAD "  scheduler: {anneal: cosine}\n", 3, 23, "one of cos, linear"},
    {THEAD "  scheduler: {div_factor: 0}\n", 3, 27, "expected a number > 0"},
    {THEAD "  ddp: {bucket_cap_mb: 0}\n", 3, 24, "trainer.ddp.bucket_cap_mb: expected a number in (0, 4096]"},
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
    {"name: t\nnproc_per_node: gpu\ntrainer: {}\n", 2, 17, "the trainer runs on the CPU"},
    {"name: t\nbackend: nccl\ntrainer: {}\n", 2, 10, "nccl runs on GPUs"},
    {"name: t\nbackend: tcp\ntrainer: {device: cuda}\n", 2, 10, "tcp is a CPU backend"},
    /* schedulers */
    {HEAD "slurm: {time: forever}\n", 3, 15, "expected a time limit like"},
    {HEAD "slurm: {time: \"1:99:00\"}\n", 3, 15, "expected a time limit like"},
    {HEAD "slurm: {gpus_per_node: 65}\n", 3, 24, "from 0 to 64"},
    {HEAD "slurm: {cpus_per_task: 0}\n", 3, 24, "from 1 to 4096"},
    {HEAD "slurm: {mem: lots}\n", 3, 14, "expected a size like 512Mi, 64Gi or 4GB"},
    {HEAD "slurm: {exclusive: 1}\n", 3, 20, "expected true or false"},
    {HEAD "slurm: {extra_sbatch: --x}\n", 3, 23, "each item is one sbatch option"},
    {HEAD "slurm: 3\n", 3, 8, "slurm: expected a mapping"},
    {HEAD "scheduler: kubernetes\n", 3, 12, "kubernetes needs a kubernetes: section"},
    {HEAD "kubernetes: {namespace: x}\n", 3, 13, "missing required key 'image' in kubernetes"},
    {HEAD "kubernetes: {image: x, namespace: Bad_NS}\n", 3, 35, "kubernetes.namespace: expected a DNS-1123 label"},
    {HEAD "kubernetes: {image: x, cpu: lots}\n", 3, 29, "expected a CPU amount like 4, 0.5 or \"500m\""},
    {HEAD "kubernetes: {image: x, cpu: 0}\n", 3, 29, "expected a CPU amount"},
    {HEAD "kubernetes: {image: x, image_pull_policy: sometimes}\n", 3, 43, "one of IfNotPresent, Always, Never"},
    {HEAD "kubernetes: {image: x, tolerations: [{operator: Exists, value: a}]}\n", 3, 64, "operator Exists takes no value"},
    {HEAD "kubernetes: {image: x, tolerations: [{key: a, toleration_seconds: 3}]}\n", 3, 67, "only applies with effect: NoExecute"},
    {HEAD "kubernetes: {image: x, tolerations: [{key: a, effect: Never}]}\n", 3, 55, "one of NoSchedule"},
    {HEAD "kubernetes: {image: x, tolerations: {key: a}}\n", 3, 37, "expected a list of mappings"},
    {HEAD "kubernetes:\n  image: x\n  volumes:\n    - {name: data, mount_path: /d}\n", 6, 7, "kubernetes.volumes[0]: a volume needs exactly one of"},
    {HEAD "kubernetes:\n  image: x\n  volumes:\n    - {name: data, mount_path: d, pvc: c}\n", 6, 32, "kubernetes.volumes[0].mount_path: expected an absolute path"},
    {HEAD "kubernetes:\n  image: x\n  volumes:\n    - {name: Data, mount_path: /d, pvc: c}\n", 6, 14, "volumes[0].name: expected a DNS-1123 label"},
    {HEAD "kubernetes: {image: x, volumes: [{mount_path: /d, pvc: c}]}\n", 3, 34, "missing required key 'name' in kubernetes.volumes[0]"},
    {HEAD "scheduler: kubernetes\nkubernetes: {image: x}\nrendezvous: {port: 0}\n", 5, 20, "cannot work on Kubernetes"},
    {HEAD "mpirun: {hosts: [a], hostfile: h}\n", 3, 32, "set either hosts or hostfile"},
    {HEAD "mpirun: {hosts: []}\n", 3, 17, "at least 1 item"},
    {HEAD "mpirun: {allow_run_as_root: yes}\n", 3, 29, "expected true or false"},
};

static void bad_specs_name_position_and_cause(void **state)
{
    (void)state;
    size_t n = sizeof bad_cases / sizeof bad_cases[0];
    int failures = 0;
    for (size_t i = 0; i < n; i++) {
        const struct bad_case *c = &bad_cases[i];
        struct dt_job *job = (struct dt_job *)1;
        size_t len = strlen(c->yaml);
        if (strstr(c->needle, "NUL byte"))
            len += 2; /* the case holds a NUL byte inside */
        int rc = dt_job_load_string(c->yaml, len, "t.yaml", &job);
        char want[32];
        snprintf(want, sizeof want, "t.yaml:%d:%d: ", c->line, c->col);
        const char *msg = dt_error_last();
        if (rc != DT_EINVAL || job != NULL || strncmp(msg, want, strlen(want)) != 0 || !strstr(msg, c->needle)) {
            print_message("case %zu: %s\n  got rc %d: %s\n  wanted %s...%s\n", i, c->yaml, rc, msg, want, c->needle);
            failures++;
        }
    }
    assert_int_equal(failures, 0);
}

static struct dt_job *load_ok(const char *yaml)
{
    struct dt_job *job = NULL;
    int rc = dt_job_load_string(yaml, strlen(yaml), "ok.yaml", &job);
    if (rc)
        print_message("unexpected error: %s\n", dt_error_last());
    assert_int_equal(rc, 0);
    assert_non_null(job);
    return job;
}

static void defaults_filled(void **state)
{
    (void)state;
    struct dt_job *job = load_ok("name: hello\ncommand: [sh, -c, 'echo $RANK']\n");
    assert_string_equal(job->path, "ok.yaml");
    assert_string_equal(job->name, "hello");
    assert_int_equal(job->scheduler, DT_SCHED_LOCAL);
    assert_int_equal(job->nodes, 1);
    assert_int_equal(job->nproc_per_node, 1);
    assert_int_equal(job->backend, DT_BACKEND_AUTO);
    assert_int_equal(job->command_argc, 3);
    assert_string_equal(job->command[2], "echo $RANK");
    assert_null(job->command[3]);
    assert_null(job->trainer);
    assert_int_equal(job->n_env, 0);
    assert_int_equal(job->max_restarts, 0);
    assert_int_equal(job->rendezvous.port, 0);
    assert_true(job->rendezvous.timeout_s == 60.0);
    assert_true(job->rendezvous.heartbeat_timeout_s == 30.0);
    assert_int_equal(job->rendezvous.auth, DT_AUTH_TOKEN);
    assert_string_equal(job->log_dir, "runs");
    assert_int_equal(job->restart_policy.n_on_exit, 0);
    assert_int_equal(dt_job_exit_action(job, 1), DT_EXIT_RETRY);
    assert_null(job->slurm);
    assert_null(job->kubernetes);
    assert_null(job->mpirun);
    dt_job_free(job);
}

static void top_level_keys_read(void **state)
{
    (void)state;
    struct dt_job *job = load_ok("name: fmnist-2\nscheduler: mpirun\nnodes: 3\nnproc_per_node: gpu\n"
                                 "backend: mpi\ncommand: [python3, train.py, --epochs, 3, 1.50, true]\n"
                                 "env: {OMP_NUM_THREADS: 1, FLAG: true, RATIO: 0.50, S: 'x y', EMPTY: \"\"}\n"
                                 "max_restarts: 4\n"
                                 "rendezvous: {port: 29400, timeout: 1m30s, heartbeat_timeout: 500ms, auth: none}\n"
                                 "log_dir: /tmp/runs\n"
                                 "restart_policy: {on_exit: {42: fail, SIGKILL: retry, 3: retry}, default: fail}\n");
    assert_string_equal(job->name, "fmnist-2");
    assert_int_equal(job->scheduler, DT_SCHED_MPIRUN);
    assert_int_equal(job->nodes, 3);
    assert_int_equal(job->nproc_per_node, DT_NPROC_GPU);
    assert_int_equal(job->backend, DT_BACKEND_MPI);
    assert_int_equal(job->command_argc, 6);
    assert_string_equal(job->command[3], "3");
    assert_string_equal(job->command[4], "1.50");
    assert_string_equal(job->command[5], "true");
    assert_int_equal(job->n_env, 5);
    assert_string_equal(job->env[0].name, "OMP_NUM_THREADS");
    assert_string_equal(job->env[0].value, "1");
    assert_string_equal(job->env[1].value, "true");
    assert_string_equal(job->env[2].value, "0.50");
    assert_string_equal(job->env[3].value, "x y");
    assert_string_equal(job->env[4].value, "");
    assert_int_equal(job->max_restarts, 4);
    assert_int_equal(job->rendezvous.port, 29400);
    assert_true(job->rendezvous.timeout_s == 90.0);
    assert_true(job->rendezvous.heartbeat_timeout_s == 0.5);
    assert_int_equal(job->rendezvous.auth, DT_AUTH_NONE);
    assert_string_equal(job->log_dir, "/tmp/runs");
    assert_int_equal(job->restart_policy.n_on_exit, 3);
    assert_int_equal(job->restart_policy.on_exit[1].code, 137);
    assert_int_equal(dt_job_exit_action(job, 42), DT_EXIT_FAIL);
    assert_int_equal(dt_job_exit_action(job, 137), DT_EXIT_RETRY);
    assert_int_equal(dt_job_exit_action(job, 3), DT_EXIT_RETRY);
    assert_int_equal(dt_job_exit_action(job, 1), DT_EXIT_FAIL);
    assert_string_equal(job->mpirun ? "x" : "none", "none");
    dt_job_free(job);
}

static const char full_trainer[] =
    "name: fmnist\nnproc_per_node: 4\nbackend: nccl\n"
    "trainer:\n"
    "  model: {type: mlp, hidden: [512, 256, 128], activation: gelu}\n"
    "  data: {dataset: fashion-mnist, path: /data/fm, batch_size: 128, workers: 3, prefetch: 5,\n"
    "         shuffle: false, drop_last: true}\n"
    "  steps: 1000\n"
    "  optimizer: {type: adamw, lr: 3e-4, betas: [0.8, 0.95], eps: 1e-6, weight_decay: 0, grad_clip: 1.0}\n"
    "  scheduler: {type: onecycle, max_lr: 3e-3, pct_start: 0.25, anneal: linear, div_factor: 10,\n"
    "              final_div_factor: 1e3, three_phase: true, cycle_momentum: false,\n"
    "              base_momentum: 0.8, max_momentum: 0.9}\n"
    "  ddp: {bucket_cap_mb: 1GiB, first_bucket_mb: 512KiB, overlap: false, grad_accum: 4, desync_check_every: 0}\n"
    "  checkpoint: {every_steps: 100, dir: ckpt, keep: 7, resume: never}\n"
    "  eval: {every_epochs: 0}\n"
    "  seed: 1234567890123\n"
    "  device: cuda\n"
    "  amp: {dtype: bf16, loss_scale: 1024, init_scale: 256, growth_factor: 4, backoff_factor: 0.25,\n"
    "        growth_interval: 100}\n"
    "  trace: {steps: \"10-20\"}\n"
    "  cuda_graph: false\n"
    "  log_every_steps: 5\n";

static void every_trainer_key_read(void **state)
{
    (void)state;
    struct dt_job *job = load_ok(full_trainer);
    const struct dt_trainer_spec *t = job->trainer;
    assert_non_null(t);
    assert_null(job->command);
    assert_string_equal(t->model.type, "mlp");
    assert_int_equal(t->model.n_hidden, 3);
    assert_int_equal(t->model.hidden[2], 128);
    assert_int_equal(t->model.activation, DT_ACT_GELU);
    assert_string_equal(t->data.path, "/data/fm");
    assert_int_equal(t->data.batch_size, 128);
    assert_int_equal(t->data.workers, 3);
    assert_int_equal(t->data.prefetch, 5);
    assert_false(t->data.shuffle);
    assert_true(t->data.drop_last);
    assert_int_equal(t->epochs, 0); /* steps given: epochs off */
    assert_int_equal(t->steps, 1000);
    assert_true(t->optimizer.lr == 3e-4);
    assert_true(t->optimizer.beta1 == 0.8 && t->optimizer.beta2 == 0.95);
    assert_true(t->optimizer.eps == 1e-6);
    assert_true(t->optimizer.weight_decay == 0.0);
    assert_true(t->optimizer.grad_clip == 1.0);
    assert_int_equal(t->scheduler.type, DT_SCHED_ONECYCLE);
    assert_true(t->scheduler.max_lr == 3e-3);
    assert_true(t->scheduler.pct_start == 0.25);
    assert_int_equal(t->scheduler.anneal, DT_ANNEAL_LINEAR);
    assert_true(t->scheduler.div_factor == 10 && t->scheduler.final_div_factor == 1e3);
    assert_true(t->scheduler.three_phase);
    assert_false(t->scheduler.cycle_momentum);
    assert_true(t->scheduler.base_momentum == 0.8 && t->scheduler.max_momentum == 0.9);
    assert_true(t->ddp.bucket_cap_mb == 1024.0);
    assert_true(t->ddp.first_bucket_mb == 0.5);
    assert_false(t->ddp.overlap);
    assert_int_equal(t->ddp.grad_accum, 4);
    assert_int_equal(t->ddp.desync_check_every, 0);
    assert_int_equal(t->checkpoint.every_steps, 100);
    assert_string_equal(t->checkpoint.dir, "ckpt");
    assert_int_equal(t->checkpoint.keep, 7);
    assert_int_equal(t->checkpoint.resume, DT_RESUME_NEVER);
    assert_int_equal(t->eval_every_epochs, 0);
    assert_true(t->seed == 1234567890123ULL);
    assert_int_equal(t->device, DT_DEVICE_CUDA);
    assert_int_equal(t->amp.dtype, DT_AMP_BF16);
    assert_false(t->amp.dynamic);
    assert_true(t->amp.loss_scale == 1024 && t->amp.init_scale == 256);
    assert_true(t->amp.growth_factor == 4 && t->amp.backoff_factor == 0.25);
    assert_int_equal(t->amp.growth_interval, 100);
    assert_int_equal(t->trace.first_step, 10);
    assert_int_equal(t->trace.last_step, 20);
    assert_false(t->cuda_graph);
    assert_int_equal(t->log_every_steps, 5);
    dt_job_free(job);
}

static void trainer_defaults_are_pytorchs(void **state)
{
    (void)state;
    struct dt_job *job = load_ok("name: t\ntrainer: {}\n");
    struct dt_trainer_spec want;
    dt_trainer_spec_defaults(&want);
    const struct dt_trainer_spec *t = job->trainer;
    assert_int_equal(t->epochs, 1);
    assert_int_equal(t->data.batch_size, want.data.batch_size);
    assert_true(t->optimizer.lr == 1e-3 && t->optimizer.beta2 == 0.999);
    assert_true(t->optimizer.weight_decay == 0.01);
    assert_true(t->ddp.bucket_cap_mb == 25.0);
    assert_true(t->amp.dynamic && t->amp.init_scale == 65536.0);
    assert_int_equal(t->trace.last_step, -1);
    assert_null(t->data.path);
    assert_memory_equal(&t->scheduler, &want.scheduler, sizeof want.scheduler);
    /* One step traced, given as a bare number. */
    dt_job_free(job);
    job = load_ok("name: t\ntrainer: {trace: {steps: 7}, amp: {loss_scale: dynamic}, epochs: 3}\n");
    assert_int_equal(job->trainer->trace.first_step, 7);
    assert_int_equal(job->trainer->trace.last_step, 7);
    assert_int_equal(job->trainer->epochs, 3);
    assert_int_equal(job->trainer->steps, 0);
    dt_job_free(job);
}

static void scheduler_sections_read(void **state)
{
    (void)state;
    struct dt_job *job = load_ok(
        "name: t\ncommand: [a]\nscheduler: kubernetes\n"
        "slurm: {partition: gpu, account: ml, time: \"1-02:03:04\", gpus_per_node: 8, cpus_per_task: 16,\n"
        "        mem: 64Gi, qos: high, constraint: h100, exclusive: true, requeue: true,\n"
        "        extra_sbatch: [--mail-type=END]}\n"
        "kubernetes:\n"
        "  image: ghcr.io/x/dtrain:1\n  image_pull_policy: Always\n  gpus_per_node: 8\n  cpu: 500m\n"
        "  memory: 32G\n  service_account: trainer\n  node_selector: {kubernetes.io/arch: amd64}\n"
        "  tolerations:\n    - {key: gpu, operator: Equal, value: 'yes', effect: NoExecute, toleration_seconds: 30}\n"
        "    - {operator: Exists}\n"
        "  priority_class: high\n  shm_size: 8Gi\n  env: {NCCL_DEBUG: INFO}\n"
        "  volumes:\n    - {name: data, mount_path: /data, pvc: datasets, read_only: true}\n"
        "    - {name: scratch, mount_path: /scratch, host_path: /mnt/s}\n"
        "mpirun: {program: /usr/bin/mpirun, hosts: [a, 'b:4'], interfaces: [lo], allow_run_as_root: true,\n"
        "         oversubscribe: true, extra_args: [--mca, btl, 'self,tcp']}\n");
    const struct dt_slurm_spec *s = job->slurm;
    assert_string_equal(s->partition, "gpu");
    assert_string_equal(s->account, "ml");
    assert_int_equal(s->time_s, 86400 + 2 * 3600 + 3 * 60 + 4);
    assert_int_equal(s->gpus_per_node, 8);
    assert_int_equal(s->cpus_per_task, 16);
    assert_true(s->mem_bytes == 64ULL << 30);
    assert_string_equal(s->qos, "high");
    assert_string_equal(s->constraint, "h100");
    assert_true(s->exclusive && s->requeue);
    assert_int_equal(s->n_extra_sbatch, 1);
    assert_string_equal(s->extra_sbatch[0], "--mail-type=END");
    const struct dt_kubernetes_spec *k = job->kubernetes;
    assert_string_equal(k->image, "ghcr.io/x/dtrain:1");
    assert_string_equal(k->image_pull_policy, "Always");
    assert_string_equal(k->namespace_name, "default");
    assert_int_equal(k->cpu_millis, 500);
    assert_true(k->memory_bytes == 32000000000ULL);
    assert_string_equal(k->node_selector[0].name, "kubernetes.io/arch");
    assert_int_equal(k->n_tolerations, 2);
    assert_int_equal(k->tolerations[0].toleration_seconds, 30);
    assert_string_equal(k->tolerations[0].value, "yes");
    assert_int_equal(k->tolerations[1].toleration_seconds, -1);
    assert_null(k->tolerations[1].key);
    assert_true(k->shm_size_bytes == 8ULL << 30);
    assert_string_equal(k->env[0].value, "INFO");
    assert_int_equal(k->n_volumes, 2);
    assert_string_equal(k->volumes[0].pvc, "datasets");
    assert_true(k->volumes[0].read_only);
    assert_string_equal(k->volumes[1].host_path, "/mnt/s");
    assert_int_equal(job->rendezvous.port, 29500); /* Kubernetes needs a fixed port */
    const struct dt_mpirun_spec *m = job->mpirun;
    assert_string_equal(m->program, "/usr/bin/mpirun");
    assert_int_equal(m->n_hosts, 2);
    assert_string_equal(m->hosts[1], "b:4");
    assert_true(m->allow_run_as_root && m->oversubscribe);
    assert_int_equal(m->n_extra_args, 3);
    dt_job_free(job);
}

static void slurm_time_forms(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        long long seconds;
    } forms[] = {{"90", 5400}, {"\"30:15\"", 1815}, {"\"02:00:00\"", 7200}, {"\"1-12\"", 129600},
                 {"\"2-01:30\"", 178200}, {"2h", 7200}, {"1h30m", 5400}};
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        char yaml[128];
        snprintf(yaml, sizeof yaml, "name: t\ncommand: [a]\nslurm: {time: %s}\n", forms[i].text);
        struct dt_job *job = load_ok(yaml);
        assert_int_equal(job->slurm->time_s, forms[i].seconds);
        dt_job_free(job);
    }
}

/* --print must write something that loads back to the same job. */
static char *print_job(const struct dt_job *job)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    dt_job_print(job, f);
    fclose(f);
    return text;
}

static void print_round_trips(void **state)
{
    (void)state;
    const char *specs[] = {full_trainer, "name: t\ncommand: [a, 'b \"q\" \\\\', \"\\t\"]\nenv: {A: 'x: y'}\n"
                                         "restart_policy: {on_exit: {SIGSEGV: fail}}\n"
                                         "slurm: {time: 5, mem: 1G}\nkubernetes: {image: i, cpu: 2, tolerations: "
                                         "[{operator: Exists}]}\nmpirun: {}\n"};
    for (size_t i = 0; i < 2; i++) {
        struct dt_job *a = load_ok(specs[i]);
        char *first = print_job(a);
        struct dt_job *b = load_ok(first);
        char *second = print_job(b);
        assert_string_equal(first, second);
        assert_non_null(strstr(first, "name: "));
        free(first);
        free(second);
        dt_job_free(a);
        dt_job_free(b);
    }
}

static void files_bounded_and_named(void **state)
{
    (void)state;
    char dir[] = "/tmp/test_jobspec.XXXXXX", path[64];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/big.yaml", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    for (int i = 0; i < 10 * 1024; i++)
        fprintf(f, "# %1021d\n", i);
    fclose(f);
    struct dt_job *job = (struct dt_job *)1;
    assert_int_equal(dt_job_load(path, &job), DT_EINVAL);
    assert_null(job);
    assert_non_null(strstr(dt_error_last(), "the file is 10485760 bytes; a job spec may be at most 1048576"));
    remove(path);
    assert_int_equal(dt_job_load(path, &job), DT_ENOTFOUND);
    assert_non_null(strstr(dt_error_last(), "big.yaml: cannot open: No such file"));
    assert_int_equal(dt_job_load(dir, &job), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "is a directory"));
    assert_int_equal(dt_job_load("/dev/zero", &job), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "/dev/zero: more than 1048576 bytes"));
    snprintf(path, sizeof path, "%s/ok.yaml", dir);
    f = fopen(path, "w");
    fputs("name: t\ncommand: [a]\n", f);
    fclose(f);
    assert_int_equal(dt_job_load(path, &job), 0);
    assert_string_equal(job->path, path);
    dt_job_free(job);
    remove(path);
    rmdir(dir);
}

static void names_and_key_list(void **state)
{
    (void)state;
    assert_string_equal(dt_scheduler_name(DT_SCHED_KUBERNETES), "kubernetes");
    assert_string_equal(dt_backend_name(DT_BACKEND_SHM), "shm");
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    dt_job_list_keys(f);
    fclose(f);
    assert_non_null(strstr(text, "\nrendezvous.heartbeat_timeout\n"));
    assert_non_null(strstr(text, "\ntrainer.amp.loss_scale\n"));
    assert_non_null(strstr(text, "\nkubernetes.volumes[].mount_path\n"));
    assert_non_null(strstr(text, "\nrestart_policy.on_exit\n"));
    free(text);
    dt_job_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(bad_specs_name_position_and_cause),
        cmocka_unit_test(defaults_filled),
        cmocka_unit_test(top_level_keys_read),
        cmocka_unit_test(every_trainer_key_read),
        cmocka_unit_test(trainer_defaults_are_pytorchs),
        cmocka_unit_test(scheduler_sections_read),
        cmocka_unit_test(slurm_time_forms),
        cmocka_unit_test(print_round_trips),
        cmocka_unit_test(files_bounded_and_named),
        cmocka_unit_test(names_and_key_list),
    };
    return cmocka_run_group_tests_name("jobspec", tests, NULL, NULL);
}
