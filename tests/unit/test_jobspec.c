/* test_jobspec.c - the job spec parser on good specs: defaults filled in, every top-level,
 * trainer and scheduler key read into its field, --print output loading back equal, files
 * bounded.  Bad specs and their messages are in test_jobspec_errors.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "base/error.h"
#include "spec/jobspec.h"
#include "spec/trainer_spec.h"

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
    assert_true(job->grace_period_s == 30.0); /* torchrun's shutdown timeout */
    assert_true(job->grace_period_s == DT_JOB_GRACE_DEFAULT_S);
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
    struct dt_job *job =
        load_ok("name: fmnist-2\nscheduler: mpirun\nnodes: 3\nnproc_per_node: gpu\n"
                "backend: mpi\ncommand: [python3, train.py, --epochs, 3, 1.50, true]\n"
                "env: {OMP_NUM_THREADS: 1, FLAG: true, RATIO: 0.50, S: 'x y', EMPTY: \"\"}\n"
                "max_restarts: 4\n"
                "grace_period: 2m30s\n"
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
    assert_true(job->grace_period_s == 150.0);
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
    "  ddp: {bucket_cap_mb: 1GiB, first_bucket_mb: 512KiB, overlap: false, grad_accum: 4, "
    "desync_check_every: 0, share_state: false, zero: 1}\n"
    "  checkpoint: {every_steps: 100, dir: ckpt, keep: 7, resume: never}\n"
    "  eval: {every_epochs: 0}\n"
    "  seed: 1234567890123\n"
    "  device: cuda\n"
    "  amp: {dtype: bf16, loss_scale: 1024, init_scale: 256, growth_factor: 4, backoff_factor: 0.25,\n"
    "        growth_interval: 100}\n"
    "  trace: {steps: \"10-20\"}\n"
    "  cuda_graph: false\n"
    "  tf32: true\n"
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
    assert_false(t->ddp.share_state);
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
    assert_true(t->tf32);
    assert_int_equal(t->ddp.zero, 1); /* ZeRO-1 on device: cuda too */
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
    assert_false(t->tf32); /* torch.backends.cuda.matmul.allow_tf32's default */
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
        "  tolerations:\n    - {key: gpu, operator: Equal, value: 'yes', effect: NoExecute, "
        "toleration_seconds: 30}\n"
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
    } forms[] = {{"90", 5400},         {"\"30:15\"", 1815},     {"\"02:00:00\"", 7200},
                 {"\"1-12\"", 129600}, {"\"2-01:30\"", 178200}, {"2h", 7200},
                 {"1h30m", 5400}};
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

/* slurm.mem as sbatch reads --mem (K/M/G/T binary, a bare number MiB, 0 all of the node's memory),
 * typed GPUs, time: 0 and signal_lead. */
static void slurm_sbatch_units(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        unsigned long long bytes;
    } mems[] = {{"64G", 64ULL << 30},   {"64g", 64ULL << 30},    {"4096", 4096ULL << 20},
                {"500M", 500ULL << 20}, {"2T", 2ULL << 40},      {"1500K", 1500ULL << 10},
                {"64Gi", 64ULL << 30},  {"500MB", 500000000ULL}, {"1.5GiB", 3ULL << 29},
                {"100m", 100ULL << 20}};
    for (size_t i = 0; i < sizeof mems / sizeof mems[0]; i++) {
        char yaml[128];
        snprintf(yaml, sizeof yaml, "name: t\ncommand: [a]\nslurm: {mem: %s}\n", mems[i].text);
        struct dt_job *job = load_ok(yaml);
        if (job->slurm->mem_bytes != mems[i].bytes || job->slurm->mem_all)
            fail_msg("mem: %s gave %llu bytes, want %llu", mems[i].text,
                     (unsigned long long)job->slurm->mem_bytes, mems[i].bytes);
        dt_job_free(job);
    }
    struct dt_job *job =
        load_ok("name: t\ncommand: [a]\nslurm: {mem: 0, time: 0, gpus_per_node: \"h100:8\"}\n");
    assert_true(job->slurm->mem_all);
    assert_int_equal(job->slurm->time_s, 0);
    assert_string_equal(job->slurm->gpu_type, "h100");
    assert_int_equal(job->slurm->gpus_per_node, 8);
    assert_true(job->slurm->signal_lead_s == 90); /* sbatch --signal=B:USR1@90 */
    char *printed = print_job(job);
    assert_non_null(strstr(printed, "  gpus_per_node: \"h100:8\"\n"));
    assert_non_null(strstr(printed, "  mem: 0\n"));
    struct dt_job *again = load_ok(printed);
    assert_true(again->slurm->mem_all);
    assert_string_equal(again->slurm->gpu_type, "h100");
    free(printed);
    dt_job_free(again);
    dt_job_free(job);
    job =
        load_ok("name: t\ncommand: [a]\nslurm: {gpus_per_node: a100_80gb:4, signal_lead: 5m, requeue: true,\n"
                "        time: \"00:10:00\"}\n");
    assert_string_equal(job->slurm->gpu_type, "a100_80gb");
    assert_int_equal(job->slurm->gpus_per_node, 4);
    assert_true(job->slurm->signal_lead_s == 300);
    dt_job_free(job);
}

static void print_round_trips(void **state)
{
    (void)state;
    const char *specs[] = {full_trainer,
                           "name: t\ncommand: [a, 'b \"q\" \\\\', \"\\t\"]\nenv: {A: 'x: y'}\n"
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
        assert_non_null(strstr(first, "\ngrace_period: 30s\n")); /* the default is printed */
        free(first);
        free(second);
        dt_job_free(a);
        dt_job_free(b);
    }
}

/* A YAML-valued key (kubernetes.pod_template) is kept as one line of flow
 * YAML: typed plain scalars stay plain, every other scalar is quoted (a
 * plain "a,b" or "12:30" would not survive flow context), and it prints and
 * loads back unchanged. */
static void yaml_key_kept_as_flow(void **state)
{
    (void)state;
    struct dt_job *a = load_ok("name: t\ncommand: [a]\nkubernetes:\n  image: i\n  pod_template:\n"
                               "    spec:\n      x: [0x1F, 0o17, 0x, .5, -3, +2.5e-3, \"7\", 12:30, ~, true, yes]\n"
                               "      v: a,b [c]\n      y: {}\n      z: []\n      w:\n");
    assert_string_equal(a->kubernetes->pod_template,
                        "{\"spec\": {\"x\": [0x1F, 0o17, \"0x\", .5, -3, +2.5e-3, \"7\", \"12:30\", ~, true, "
                        "\"yes\"], \"v\": \"a,b [c]\", \"y\": {}, \"z\": [], \"w\": null}}");
    char *first = print_job(a);
    struct dt_job *b = load_ok(first);
    assert_string_equal(a->kubernetes->pod_template, b->kubernetes->pod_template);
    free(first);
    dt_job_free(a);
    dt_job_free(b);
}

/* YAML 1.2 section 5.1 allows no C1 control (U+0080-U+009F) unescaped in a document, and
 * libyaml refuses them; it reads NEL, LS and PS as line breaks and folds the spaces around
 * them; U+FFFE is no character.  A spec may still hold each of them through an escape, so
 * --print must escape them again for its output to load back to the same strings. */
static void print_escapes_what_yaml_cannot_hold_raw(void **state)
{
    (void)state;
    struct dt_job *a =
        load_ok("name: t\ncommand: [a, \"x\\x80y\", \"1 \\x85 2\", \"\\u009f\", \" \\u2028 \", "
                "\" \\u2029 \", \"\\uFFFE\", \"\\uFEFF\"]\nenv: {K: \"v\\x9b\"}\n");
    char *first = print_job(a);
    assert_non_null(strstr(first, "\"x\\u0080y\""));
    assert_non_null(strstr(first, "\"1 \\u0085 2\""));
    assert_non_null(strstr(first, "\"v\\u009b\""));
    struct dt_job *b = load_ok(first);
    assert_int_equal(b->command_argc, a->command_argc);
    for (int i = 0; i < a->command_argc; i++)
        assert_string_equal(b->command[i], a->command[i]);
    assert_string_equal(b->env[0].value, "v\xc2\x9b");
    free(first);
    dt_job_free(a);
    dt_job_free(b);
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
    assert_non_null(strstr(dt_error_last(), "not a regular file (a directory)"));
    assert_int_equal(dt_job_load("/dev/zero", &job), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "/dev/zero: not a regular file (a character device)"));
    snprintf(path, sizeof path, "%s/ok.yaml", dir);
    f = fopen(path, "w");
    fputs("name: t\ncommand: [a]\n", f);
    fclose(f);
    assert_int_equal(dt_job_load(path, &job), 0);
    assert_string_equal(job->path, path);
    dt_job_free(job);
    /* A FIFO named as the spec (a run's job.yaml that `launch --resume`
     * reads) waited for a writer forever; now it is refused unopened. */
    char fifo[80], link[80];
    snprintf(fifo, sizeof fifo, "%s/fifo.yaml", dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    alarm(10);
    assert_int_equal(dt_job_load(fifo, &job), DT_EINVAL);
    alarm(0);
    assert_non_null(strstr(dt_error_last(), "fifo.yaml: not a regular file (a FIFO)"));
    /* A link: followed for a spec the user names, refused for a run's own. */
    snprintf(link, sizeof link, "%s/link.yaml", dir);
    assert_int_equal(symlink(path, link), 0);
    assert_int_equal(dt_job_load(link, &job), 0);
    dt_job_free(job);
    struct dt_job_load_opts run = {.run_file = true};
    assert_int_equal(dt_job_load_with(link, &run, &job), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "link.yaml: a symbolic link, which is not followed"));
    assert_int_equal(dt_job_load_with(path, &run, &job), 0);
    dt_job_free(job);
    remove(link);
    remove(fifo);
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

/* nodes: N or MIN:MAX (docs/elastic.md), and dt_job_parse_nodes's refusals. */
static void nodes_range(void **state)
{
    (void)state;
    struct dt_job *job = load_ok("name: j\nnodes: 2:3\ncommand: [true]\nrendezvous: {last_call_timeout: 2s}\n");
    assert_int_equal(job->nodes_min, 2);
    assert_int_equal(job->nodes, 3);
    assert_true(dt_job_elastic(job));
    assert_true(job->rendezvous.last_call_timeout_s == 2.0);
    dt_job_free(job);
    job = load_ok("name: j\nnodes: 4\ncommand: [true]\n");
    assert_int_equal(job->nodes_min, 4);
    assert_int_equal(job->nodes, 4);
    assert_false(dt_job_elastic(job));
    assert_true(job->rendezvous.last_call_timeout_s == 30); /* torchrun's */
    dt_job_free(job);
    int lo = 0, hi = 0;
    assert_int_equal(dt_job_parse_nodes("1:1", &lo, &hi), 0);
    assert_int_equal(lo * 10 + hi, 11);
    assert_int_equal(dt_job_parse_nodes("3:2", &lo, &hi), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "MIN 3 above MAX 2"));
    assert_int_equal(dt_job_parse_nodes("0:2", &lo, &hi), DT_EINVAL);
    assert_int_equal(dt_job_parse_nodes("1:70000", &lo, &hi), DT_EINVAL);
    assert_int_equal(dt_job_parse_nodes("1:", &lo, &hi), DT_EINVAL);
    assert_int_equal(dt_job_parse_nodes("x", &lo, &hi), DT_EINVAL);
    assert_int_equal(dt_job_parse_nodes("1:2:3", &lo, &hi), DT_EINVAL);
    assert_int_equal(dt_job_parse_nodes("", &lo, &hi), DT_EINVAL);
    struct dt_job *bad = NULL;
    const char *quoted = "name: j\nnodes: '2:3'\ncommand: [true]\n";
    assert_int_equal(dt_job_load_string(quoted, strlen(quoted), "q.yaml", &bad), DT_EINVAL);
    /* Slurm (--nodes=MIN-MAX) and Kubernetes start an elastic job's agents; mpirun a fixed number */
    const char *slurm = "name: j\nscheduler: slurm\nnodes: 1:2\ncommand: [true]\n";
    assert_int_equal(dt_job_load_string(slurm, strlen(slurm), "s.yaml", &bad), 0);
    assert_int_equal(bad->nodes_min * 10 + bad->nodes, 12);
    dt_job_free(bad);
    bad = NULL;
    const char *mpi = "name: j\nscheduler: mpirun\nnodes: 1:2\ncommand: [true]\n";
    assert_int_equal(dt_job_load_string(mpi, strlen(mpi), "m.yaml", &bad), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "m.yaml:3:8"));
    assert_non_null(strstr(dt_error_last(), "dtrain agent --nnodes 1:2"));
    const char *down = "name: j\nnodes: 5:1\ncommand: [true]\n";
    assert_int_equal(dt_job_load_string(down, strlen(down), "d.yaml", &bad), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "d.yaml:2:8: nodes: the node range '5:1' has MIN 5 above MAX 1"));
}

/* The keys torchrun's flags stand for (jobspec_torchrun.c): torchrun's Std
 * forms for console.redirects and tee, signal names as a list or torchrun's
 * one string, the role; each read back as printed. */
static void torchrun_keys(void **state)
{
    (void)state;
    struct dt_job *job = load_ok("name: j\ncommand: [true]\n");
    assert_string_equal(job->role, "default");
    assert_string_equal(job->console.redirects, "0");
    assert_null(job->console.line_prefix);
    assert_true(job->signals_to_handle == (1ull << SIGHUP | 1ull << SIGINT | 1ull << SIGQUIT | 1ull << SIGTERM));
    dt_job_free(job);
    job = load_ok("name: j\ncommand: [true]\nrole: trainer\nsignals_to_handle: SIGTERM,SIGUSR1\n"
                  "console: {redirects: 3, tee: \"0:1,12:2\", line_prefix: \"${rank}: \"}\n");
    assert_string_equal(job->role, "trainer");
    assert_true(job->signals_to_handle == (1ull << SIGTERM | 1ull << SIGUSR1));
    assert_string_equal(job->console.line_prefix, "${rank}: "); /* verbatim: no ${VAR} here */
    assert_int_equal(dt_job_std_of(job->console.redirects, 5), DT_STD_OUT | DT_STD_ERR);
    assert_int_equal(dt_job_std_of(job->console.tee, 0), DT_STD_OUT);
    assert_int_equal(dt_job_std_of(job->console.tee, 12), DT_STD_ERR);
    assert_int_equal(dt_job_std_of(job->console.tee, 1), 0);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    dt_job_print(job, f);
    fclose(f);
    assert_non_null(strstr(text, "signals_to_handle: [SIGTERM, SIGUSR1]\n"));
    assert_non_null(strstr(text, "  tee: \"0:1,12:2\"\n"));
    dt_job_free(job);
    job = load_ok(text);
    assert_true(job->signals_to_handle == (1ull << SIGTERM | 1ull << SIGUSR1));
    dt_job_free(job);
    free(text);
    const char *bad[] = {"console: {redirects: 4}", "console: {tee: \"0:1,0:2\"}", "console: {tee: \"0:\"}",
                         "console: {redirects: \"a:1\"}", "signals_to_handle: [SIGKILL]", "signals_to_handle: {}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char yaml[256];
        snprintf(yaml, sizeof yaml, "name: j\ncommand: [true]\n%s\n", bad[i]);
        struct dt_job *b = NULL;
        assert_int_equal(dt_job_load_string(yaml, strlen(yaml), "t.yaml", &b), DT_EINVAL);
        assert_non_null(strstr(dt_error_last(), "t.yaml:3:"));
    }
}

/* An elastic trainer spec works at every node count of its range or is
 * refused with the count: keep_global needs MAX x grad_accum / n whole. */
static void elastic_batch_holds_at_every_count(void **state)
{
    (void)state;
    struct dt_job *bad = NULL;
    char spec[512];
    static const struct {
        const char *nodes, *ddp, *data, *device;
        const char *needle; /* NULL: accepted */
    } cases[] = {
        {"2:3", "{}", "{batch_size: 32}", "cpu", NULL}, /* auto: keep_per_rank */
        {"2:3", "{elastic_batch: keep_per_rank, elastic_lr: linear}", "{batch_size: 32}", "cpu", NULL},
        {"2:3", "{elastic_batch: keep_global}", "{batch_size: 32}", "cpu",
         "keep_global keeps the global batch of 3 nodes x grad_accum 1 (x nproc_per_node x batch_size 32), "
         "which a round of 2 nodes cannot keep: it would need grad_accum 1 x 3 / 2, no whole number; take "
         "trainer.ddp.grad_accum a multiple of 2, or use keep_per_rank"},
        {"2:3", "{elastic_batch: keep_global, grad_accum: 2}", "{batch_size: 8}", "cpu", NULL},
        {"2:4", "{elastic_batch: keep_global, grad_accum: 2}", "{batch_size: 8}", "cpu",
         "a round of 3 nodes cannot keep: it would need grad_accum 2 x 4 / 3, no whole number; take "
         "trainer.ddp.grad_accum a multiple of 3"},
        {"2:4", "{elastic_batch: keep_global, grad_accum: 3}", "{batch_size: 8}", "cpu", NULL},
        {"4", "{elastic_batch: keep_global}", "{batch_size: 8}", "cpu", NULL}, /* fixed nodes: nothing to keep */
        {"2:3", "{elastic_batch: keep_global, grad_accum: 2}", "{batch_size: 8}", "cuda",
         "keep_global on 2 nodes of 2:3 needs grad_accum 2 x 3 / 2, but a GPU trainer cannot change grad_accum"},
        {"1:2", "{grad_accum: 2}", "{dataset: tokens, train: x.bin, seq_len: 8}", "cpu", NULL}, /* auto: global */
        {"2:3", "{}", "{dataset: tokens, train: x.bin, seq_len: 8}", "cpu", "which a round of 2 nodes cannot keep"},
        {"2:3", "{elastic_batch: keep_per_rank}", "{dataset: tokens, train: x.bin, seq_len: 8}", "cpu",
         "keep_per_rank cannot keep a token run's place"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(spec, sizeof spec,
                 "name: j\nnodes: %s\ntrainer:\n  device: %s\n  model: {type: %s}\n  data: %s\n  ddp: %s\n",
                 cases[i].nodes, cases[i].device, strstr(cases[i].data, "tokens") ? "gpt2" : "mlp", cases[i].data,
                 cases[i].ddp);
        int rc = dt_job_load_string(spec, strlen(spec), "e.yaml", &bad);
        if ((rc == 0) != (cases[i].needle == NULL) || (cases[i].needle && !strstr(dt_error_last(), cases[i].needle)))
            print_message("case %zu: rc %d: %s\n", i, rc, rc ? dt_error_last() : "accepted");
        if (cases[i].needle) {
            assert_int_equal(rc, DT_EINVAL);
            assert_non_null(strstr(dt_error_last(), cases[i].needle));
        } else {
            assert_int_equal(rc, 0);
            dt_job_free(bad);
        }
        bad = NULL;
    }
}

/* comm.interfaces as the variables hold it, and which values of them agree. */
static void comm_interfaces_and_their_variables(void **state)
{
    (void)state;
    char buf[64];
    struct dt_job *none = load_ok("name: t\ncommand: [a]\n");
    assert_false(dt_job_ifnames(none, buf, sizeof buf));
    assert_string_equal(buf, "");
    assert_true(dt_job_ifname_agrees(none, "GLOO_SOCKET_IFNAME", "anything"));
    dt_job_free(none);
    struct dt_job *job = load_ok("name: t\ncommand: [a]\ncomm: {interfaces: [eth1, ib0]}\n"
                                 "env: {NCCL_SOCKET_IFNAME: '=eth1,ib0', GLOO_SOCKET_IFNAME: 'eth1,ib0'}\n");
    assert_true(dt_job_ifnames(job, buf, sizeof buf));
    assert_string_equal(buf, "eth1,ib0");
    assert_true(dt_job_ifname_agrees(job, "GLOO_SOCKET_IFNAME", "eth1,ib0"));
    assert_true(dt_job_ifname_agrees(job, "DTRAIN_SOCKET_IFNAME", "eth1,ib0"));
    assert_true(dt_job_ifname_agrees(job, "NCCL_SOCKET_IFNAME", "=eth1,ib0"));
    assert_true(dt_job_ifname_agrees(job, "NCCL_SOCKET_IFNAME", "eth1,ib0"));
    assert_false(dt_job_ifname_agrees(job, "GLOO_SOCKET_IFNAME", "=eth1,ib0")); /* "=" is NCCL's only */
    assert_false(dt_job_ifname_agrees(job, "GLOO_SOCKET_IFNAME", "eth1"));
    assert_false(dt_job_ifname_agrees(job, "NCCL_SOCKET_IFNAME", "ib0,eth1"));
    dt_job_free(job);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(nodes_range),
        cmocka_unit_test(torchrun_keys),
        cmocka_unit_test(elastic_batch_holds_at_every_count),
        cmocka_unit_test(defaults_filled),
        cmocka_unit_test(top_level_keys_read),
        cmocka_unit_test(every_trainer_key_read),
        cmocka_unit_test(trainer_defaults_are_pytorchs),
        cmocka_unit_test(scheduler_sections_read),
        cmocka_unit_test(slurm_time_forms),
        cmocka_unit_test(slurm_sbatch_units),
        cmocka_unit_test(print_round_trips),
        cmocka_unit_test(yaml_key_kept_as_flow),
        cmocka_unit_test(files_bounded_and_named),
        cmocka_unit_test(names_and_key_list),
        cmocka_unit_test(print_escapes_what_yaml_cannot_hold_raw),
        cmocka_unit_test(comm_interfaces_and_their_variables),
    };
    return cmocka_run_group_tests_name("jobspec", tests, NULL, NULL);
}
