/* test_placement.c - a job's placement (spec/placement.h): a count is the
 * spec's everywhere; "gpu" is the scheduler section's GPUs per node before
 * the job starts, the machine's own GPUs on a node, and unknown (each node
 * counts its own) elsewhere; a node without GPUs is refused naming the spec;
 * the world size and the one rank formula; torchrun's -n words (auto, cpu,
 * gpu, a count) on this machine. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <glob.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "spec/jobspec.h"
#include "spec/placement.h"

static struct dt_job *load(const char *yaml)
{
    struct dt_job *job = NULL;
    if (dt_job_load_string(yaml, strlen(yaml), "job.yaml", &job) != 0)
        fail_msg("spec did not load: %s", dt_error_last());
    return job;
}

static void a_count_is_the_spec_everywhere(void **state)
{
    (void)state;
    struct dt_job *job = load("name: j\nnodes: 3\nnproc_per_node: 4\ncommand: [true]\n");
    static const enum dt_placement_scope scopes[] = {DT_PLACE_SPEC, DT_PLACE_SCHEDULER, DT_PLACE_HOST};
    for (int i = 0; i < 3; i++) {
        struct dt_placement pl;
        assert_int_equal(dt_placement_resolve(job, scopes[i], &pl), 0);
        assert_int_equal(pl.nnodes, 3);
        assert_int_equal(pl.nnodes_min, 3);
        assert_int_equal(pl.nproc, 4);
        assert_int_equal(pl.world, 12);
        assert_int_equal(pl.source, DT_NPROC_FROM_SPEC);
    }
    dt_job_free(job);
}

static void gpu_before_the_job_starts(void **state)
{
    (void)state;
    struct dt_job *job = load("name: j\nscheduler: slurm\nnodes: 2\nnproc_per_node: gpu\ncommand: [true]\n"
                              "slurm: {gpus_per_node: \"h100:8\"}\n");
    struct dt_placement pl;
    assert_int_equal(dt_placement_resolve(job, DT_PLACE_SCHEDULER, &pl), 0);
    assert_int_equal(pl.nproc, 8);
    assert_int_equal(pl.world, 16);
    assert_int_equal(pl.source, DT_NPROC_FROM_SCHEDULER);
    assert_int_equal(dt_placement_resolve(job, DT_PLACE_SPEC, &pl), 0);
    assert_int_equal(pl.nproc, 0);
    assert_int_equal(pl.world, 0);
    assert_int_equal(pl.source, DT_NPROC_PER_NODE);
    dt_job_free(job);
    /* A Kubernetes pod's GPUs count; a Slurm section of a Kubernetes job does not. */
    job = load("name: j\nscheduler: kubernetes\nnproc_per_node: gpu\ncommand: [true]\n"
               "kubernetes: {image: busybox, gpus_per_node: 2}\nslurm: {gpus_per_node: 8}\n");
    assert_int_equal(dt_placement_resolve(job, DT_PLACE_SCHEDULER, &pl), 0);
    assert_int_equal(pl.nproc, 2);
    dt_job_free(job);
    job = load("name: j\nnproc_per_node: gpu\ncommand: [true]\nslurm: {gpus_per_node: 8}\n");
    assert_int_equal(dt_placement_resolve(job, DT_PLACE_SCHEDULER, &pl), 0);
    assert_int_equal(pl.source, DT_NPROC_PER_NODE);
    dt_job_free(job);
}

static void gpu_on_a_node_counts_its_own(void **state)
{
    (void)state;
    struct dt_job *job = load("name: j\nscheduler: slurm\nnodes: 2\nnproc_per_node: gpu\ncommand: [true]\n"
                              "slurm: {gpus_per_node: 8}\n");
    char *old = getenv("CUDA_VISIBLE_DEVICES") ? strdup(getenv("CUDA_VISIBLE_DEVICES")) : NULL;
    setenv("CUDA_VISIBLE_DEVICES", "0,2,5", 1);
    struct dt_placement pl;
    assert_int_equal(dt_placement_resolve(job, DT_PLACE_HOST, &pl), 0);
    assert_int_equal(pl.nproc, 3); /* what this node shows, not what the spec expects */
    assert_int_equal(pl.world, 6);
    assert_int_equal(pl.source, DT_NPROC_FROM_HOST);
    setenv("CUDA_VISIBLE_DEVICES", "", 1);
    assert_int_equal(dt_placement_resolve(job, DT_PLACE_HOST, &pl), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "job.yaml: nproc_per_node: gpu, but this machine shows no GPU"));
    if (old)
        setenv("CUDA_VISIBLE_DEVICES", old, 1);
    else
        unsetenv("CUDA_VISIBLE_DEVICES");
    free(old);
    dt_job_free(job);
}

static void elastic_nodes_and_the_rank_formula(void **state)
{
    (void)state;
    struct dt_job *job = load("name: j\nnodes: 2:5\nnproc_per_node: 3\ncommand: [true]\n");
    struct dt_placement pl;
    assert_int_equal(dt_placement_resolve(job, DT_PLACE_SPEC, &pl), 0);
    assert_int_equal(pl.nnodes_min, 2);
    assert_int_equal(pl.nnodes, 5);
    assert_int_equal(pl.world, 15);
    assert_int_equal(dt_placement_rank(&pl, 0, 0), 0);
    assert_int_equal(dt_placement_rank(&pl, 0, 2), 2);
    assert_int_equal(dt_placement_rank(&pl, 1, 0), 3);
    assert_int_equal(dt_placement_rank(&pl, 4, 2), 14);
    /* the count-only form (the agent's) is the same formula, and the local
     * rank its inverse for every rank of the job */
    for (int node = 0; node < pl.nnodes; node++)
        for (int local = 0; local < pl.nproc; local++) {
            int rank = dt_placement_rank(&pl, node, local);
            assert_int_equal(dt_placement_rank_of(pl.nproc, node, local), rank);
            assert_int_equal(dt_placement_local_rank_of(pl.nproc, rank), local);
        }
    assert_int_equal(dt_placement_local_rank_of(0, 7), 0); /* nproc not known here */
    dt_job_free(job);
}

static void torchrun_words(void **state)
{
    (void)state;
    char *old = getenv("CUDA_VISIBLE_DEVICES") ? strdup(getenv("CUDA_VISIBLE_DEVICES")) : NULL;
    int n = 0, cpus = dt_placement_count_cpus();
    assert_true(cpus >= 1);
    assert_int_equal(dt_placement_nproc_word("3", &n), 0);
    assert_int_equal(n, 3);
    assert_int_equal(dt_placement_nproc_word("cpu", &n), 0);
    assert_int_equal(n, cpus);
    assert_int_equal(dt_placement_nproc_word("gpu", &n), 0);
    assert_int_equal(n, DT_NPROC_GPU); /* the agent counts them on its node */
    setenv("CUDA_VISIBLE_DEVICES", "", 1); /* no GPU: auto is one rank per CPU */
    assert_int_equal(dt_placement_nproc_word("auto", &n), 0);
    assert_int_equal(n, cpus);
    /* GPUs listed: auto is gpu where the kernel shows a device, as torch.cuda.is_available()
     * needs; a list on a machine without one is one rank per CPU. */
    glob_t g;
    bool devices = glob("/dev/nvidia[0-9]*", 0, NULL, &g) == 0;
    if (devices)
        globfree(&g);
    setenv("CUDA_VISIBLE_DEVICES", "0,1", 1);
    assert_int_equal(dt_placement_nproc_word("auto", &n), 0);
    assert_int_equal(n, devices ? DT_NPROC_GPU : cpus);
    assert_int_equal(dt_placement_nproc_word("xpu", &n), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "not Intel's XPUs"));
    assert_int_equal(dt_placement_nproc_word("0", &n), DT_EINVAL);
    assert_int_equal(dt_placement_nproc_word("4x", &n), DT_EINVAL);
    if (old)
        setenv("CUDA_VISIBLE_DEVICES", old, 1);
    else
        unsetenv("CUDA_VISIBLE_DEVICES");
    free(old);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_count_is_the_spec_everywhere),
        cmocka_unit_test(gpu_before_the_job_starts),
        cmocka_unit_test(gpu_on_a_node_counts_its_own),
        cmocka_unit_test(elastic_nodes_and_the_rank_formula),
        cmocka_unit_test(torchrun_words),
    };
    return cmocka_run_group_tests_name("placement", tests, NULL, NULL);
}
