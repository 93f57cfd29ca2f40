/* test_mpirun.c - the mpirun adapter without running mpirun: the command line
 * (agents and MPI ranks, hosts, slots, root, interfaces, the token kept off
 * it), render, discover from OMPI_* / PMIX_* + SLURM_* environments, the rank
 * environment of an MPI rank, and the reading of mpirun's output.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "spec/jobspec.h"
#include "scheduler-adapters/adapter.h"
#include "scheduler-adapters/mpirun/mpirun.h"
#include "spec/placement.h"

static struct dt_job *load(const char *yaml)
{
    struct dt_job *job = NULL;
    if (dt_job_load_string(yaml, strlen(yaml), "job.yaml", &job) != 0)
        fail_msg("spec did not load: %s", dt_error_last());
    return job;
}

/* The argv joined with single spaces. */
static char *joined(const struct dt_job *job, int nproc, const char *const *names, bool tag)
{
    struct dt_mpirun_call call = {.dtrain = "/opt/dtrain", .job_path = "job.yaml", .export_names = names,
                                  .tag_output = tag};
    struct dt_mpirun_line l;
    struct dt_placement pl;
    assert_int_equal(dt_placement_resolve(job, DT_PLACE_SPEC, &pl), 0);
    assert_int_equal(pl.nproc, nproc);
    assert_int_equal(dt_mpirun_build(job, &pl, &call, &l), 0);
    static char buf[4096];
    buf[0] = 0;
    for (int i = 0; l.argv[i]; i++)
        strcat(strcat(buf, i ? " " : ""), l.argv[i]);
    dt_mpirun_line_free(&l);
    return buf;
}

static void agents_line(void **s)
{
    (void)s;
    struct dt_job *job = load("name: j\nscheduler: mpirun\nnodes: 2\nnproc_per_node: 4\ncommand: [true]\n"
                              "mpirun: {hosts: [n1, n2], interfaces: [eth0, ib0]}\n");
    const char *names[] = {"DTRAIN_JOB_TOKEN", "DTRAIN_COORD_PORT", NULL};
    assert_string_equal(joined(job, 4, names, false),
                        "mpirun -np 2 --map-by ppr:1:node --host n1,n2 --mca btl_tcp_if_include eth0,ib0 "
                        "--mca oob_tcp_if_include eth0,ib0 -x DTRAIN_JOB_TOKEN -x DTRAIN_COORD_PORT "
                        "/opt/dtrain agent job.yaml");
    dt_job_free(job);
}

static void mpi_ranks_line(void **s)
{
    (void)s;
    struct dt_job *job = load("name: j\nscheduler: mpirun\nnodes: 2\nnproc_per_node: 4\nbackend: mpi\n"
                              "command: [./a.out, -v]\n"
                              "mpirun: {program: /opt/ompi/bin/mpirun, hosts: [n1, 'n2:8'], allow_run_as_root: "
                              "true, oversubscribe: true, extra_args: [--mca, btl, '^openib']}\n");
    assert_true(dt_mpirun_ranks_are_mpi(job));
    const char *none[] = {NULL};
    /* Slots: n1 gets the 4 ranks it must hold, n2 keeps the 8 the user wrote. */
    assert_string_equal(joined(job, 4, none, true),
                        "/opt/ompi/bin/mpirun -np 8 --map-by ppr:4:node --host n1:4,n2:8 --allow-run-as-root "
                        "--oversubscribe --tag-output --mca btl ^openib ./a.out -v");
    dt_job_free(job);
}

static void trainer_and_user_mapping(void **s)
{
    (void)s;
    struct dt_job *job = load("name: j\nscheduler: mpirun\nnproc_per_node: 2\nbackend: mpi\n"
                              "trainer: {model: {hidden: [8]}, steps: 1}\n"
                              "mpirun: {hostfile: /etc/hosts.mpi, extra_args: [--map-by, slot]}\n");
    const char *none[] = {NULL};
    assert_string_equal(joined(job, 2, none, false),
                        "mpirun -np 2 --hostfile /etc/hosts.mpi --map-by slot /opt/dtrain worker job.yaml");
    dt_job_free(job);
}

/* One machine playing both nodes: every agent placed on it by slot, no --map-by from the user. */
static void one_host_maps_by_slot(void **s)
{
    (void)s;
    const char *names[] = {NULL};
    struct dt_job *job = load("name: j\nscheduler: mpirun\nnodes: 2\nnproc_per_node: 2\ncommand: [true]\n"
                              "mpirun: {hosts: ['localhost:2']}\n");
    assert_string_equal(joined(job, 2, names, false),
                        "mpirun -np 2 --map-by slot --host localhost:2 /opt/dtrain agent job.yaml");
    dt_job_free(job);
    job = load("name: j\nscheduler: mpirun\nnodes: 3\nnproc_per_node: 2\ncommand: [true]\n"
               "mpirun: {hosts: [localhost]}\n");
    assert_string_equal(joined(job, 2, names, false),
                        "mpirun -np 3 --map-by slot --host localhost:3 /opt/dtrain agent job.yaml");
    dt_job_free(job);
}

static void render_keeps_token_off_the_line(void **s)
{
    (void)s;
    struct dt_job *job = load("name: j\nscheduler: mpirun\nnodes: 2\ncommand: [true]\n"
                              "mpirun: {hosts: [n1, n2]}\nrendezvous: {port: 29400}\n");
    const struct dt_adapter *a = dt_adapter_by_name("mpirun");
    assert_non_null(a);
    assert_ptr_equal(a, dt_adapter_for(DT_SCHED_MPIRUN));
    setenv("DTRAIN_JOB_TOKEN", "feedface00feedface00", 1);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_int_equal(a->render(job, "job.yaml", f), 0);
    fclose(f);
    unsetenv("DTRAIN_JOB_TOKEN");
    assert_null(strstr(text, "feedface"));
    assert_non_null(strstr(text, "-x DTRAIN_JOB_TOKEN"));
    assert_non_null(strstr(text, "DTRAIN_COORD_HOST=n1"));
    assert_non_null(strstr(text, "DTRAIN_COORD_PORT=29400"));
    assert_non_null(strstr(text, "\nmpirun -np 2 --map-by ppr:1:node --host n1,n2 "));
    assert_null(strstr(text, "allow-run-as-root"));
    free(text);
    dt_job_free(job);
}

static void render_mpi_ranks(void **s)
{
    (void)s;
    struct dt_job *job = load("name: j\nscheduler: mpirun\nnodes: 2\nnproc_per_node: 4\nbackend: mpi\n"
                              "trainer: {model: {hidden: [8]}, steps: 1}\nmpirun: {hosts: [n1, n2], "
                              "interfaces: [eth0]}\n");
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_int_equal(dt_adapter_mpirun.render(job, "job.yaml", f), 0);
    fclose(f);
    /* The line docs/mpirun.md shows. */
    assert_non_null(strstr(text, "\nmpirun -np 8 --map-by ppr:4:node --host n1:4,n2:4 --mca btl_tcp_if_include eth0 "
                                 "--mca oob_tcp_if_include eth0 dtrain mpirank -- dtrain worker job.yaml\n"));
    assert_non_null(strstr(text, "dtrain launch job.yaml"));
    free(text);
    dt_job_free(job);
}

static void first_host_of_hostfile(void **s)
{
    (void)s;
    char path[] = "/tmp/dtrain-hostfile-XXXXXX", host[64];
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *text = "# the cluster\n\n   node7 slots=8\nnode8 slots=8\n";
    assert_int_equal(write(fd, text, strlen(text)), (int)strlen(text));
    close(fd);
    struct dt_mpirun_spec m = {.hostfile = path};
    assert_int_equal(dt_mpirun_first_host(&m, host, sizeof host), 0);
    assert_string_equal(host, "node7");
    unlink(path);
    assert_int_equal(dt_mpirun_first_host(&m, host, sizeof host), DT_ENOTFOUND);
    assert_non_null(strstr(dt_error_last(), path));
}

static void place_from_ompi_and_pmix(void **s)
{
    (void)s;
    struct dt_mpirun_place p;
    char *ompi[] = {"OMPI_COMM_WORLD_RANK=5", "OMPI_COMM_WORLD_SIZE=8", "OMPI_COMM_WORLD_LOCAL_RANK=1",
                    "OMPI_COMM_WORLD_LOCAL_SIZE=4", NULL};
    assert_int_equal(dt_mpirun_read_place(ompi, &p), 0);
    assert_int_equal(p.rank, 5);
    assert_int_equal(p.size, 8);
    assert_int_equal(p.local_rank, 1);
    assert_int_equal(p.local_size, 4);
    char *pmix[] = {"PMIX_RANK=3", "SLURM_NTASKS=6", "SLURM_LOCALID=1", "SLURM_TASKS_PER_NODE=2(x3)", NULL};
    assert_int_equal(dt_mpirun_read_place(pmix, &p), 0);
    assert_int_equal(p.rank, 3);
    assert_int_equal(p.size, 6);
    assert_int_equal(p.local_size, 2);
    char *nosize[] = {"PMIX_RANK=0", NULL};
    assert_int_equal(dt_mpirun_read_place(nosize, &p), DT_ENOTFOUND);
    assert_non_null(strstr(dt_error_last(), "SLURM_NTASKS"));
    char *bad[] = {"OMPI_COMM_WORLD_RANK=x", "OMPI_COMM_WORLD_SIZE=2", NULL};
    assert_int_equal(dt_mpirun_read_place(bad, &p), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "OMPI_COMM_WORLD_RANK=x"));
    char *none[] = {"PATH=/bin", NULL};
    assert_int_equal(dt_mpirun_read_place(none, &p), DT_ENOTFOUND);
    assert_non_null(strstr(dt_error_last(), "not started by an MPI launcher"));
    /* A task of an srun step without MPI (slurm.tasks: per_rank): Slurm's own variables. */
    char *task[] = {"SLURM_STEP_ID=0",      "SLURM_PROCID=5",           "SLURM_STEP_NUM_TASKS=8",
                    "SLURM_NTASKS=99",      "SLURM_LOCALID=1",          "SLURM_TASKS_PER_NODE=4(x2)",
                    "SLURM_NODEID=1",       NULL};
    assert_int_equal(dt_mpirun_read_place(task, &p), 0);
    assert_int_equal(p.rank, 5);
    assert_int_equal(p.size, 8); /* the step's tasks, not the job's */
    assert_int_equal(p.local_rank, 1);
    assert_int_equal(p.local_size, 4);
    assert_int_equal(p.node, 1);
    /* The batch shell has SLURM_PROCID=0 too, but no step: it is no rank. */
    char *batch[] = {"SLURM_PROCID=0", "SLURM_NTASKS=4", "SLURM_LOCALID=0", NULL};
    assert_int_equal(dt_mpirun_read_place(batch, &p), DT_ENOTFOUND);
    char *badtask[] = {"SLURM_STEP_ID=0", "SLURM_PROCID=9", "SLURM_STEP_NUM_TASKS=8", NULL};
    assert_int_equal(dt_mpirun_read_place(badtask, &p), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "rank 9 of 8"));
}

static void discover_agents(void **s)
{
    (void)s;
    struct dt_job *job = load("name: j\nscheduler: mpirun\nnodes: 2\ncommand: [true]\n"
                              "mpirun: {hosts: [n1, n2]}\n");
    const struct dt_adapter *a = &dt_adapter_mpirun;
    struct dt_adapter_node n;
    char *env[] = {"OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=2", "DTRAIN_COORD_PORT=29411",
                   "DTRAIN_RUN_ID=20261202-1-abc", "OMPI_MCA_ess_base_jobid=4242", NULL};
    assert_int_equal(a->discover(job, env, &n), 0);
    assert_int_equal(n.node_rank, 1);
    assert_int_equal(n.nnodes, 2);
    assert_string_equal(n.coord_host, "n1"); /* the first host of the job */
    assert_int_equal(n.coord_port, 29411);
    assert_string_equal(n.run_id, "20261202-1-abc");
    assert_string_equal(n.job_id, "4242");
    /* Without a port from the launcher or the spec the agents cannot agree. */
    char *noport[] = {"OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=2", NULL};
    assert_int_equal(a->discover(job, noport, &n), DT_ENOTFOUND);
    assert_non_null(strstr(dt_error_last(), "rendezvous.port"));
    /* Three agents for a two-node job. */
    char *three[] = {"OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=3", "DTRAIN_COORD_PORT=1", NULL};
    assert_int_equal(a->discover(job, three, &n), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "started 3 agents but the spec says nodes: 2"));
    dt_job_free(job);
}

static void discover_under_srun_pmix(void **s)
{
    (void)s;
    struct dt_job *job = load("name: j\nscheduler: mpirun\nnodes: 3\ncommand: [true]\nrendezvous: {port: 29500}\n");
    struct dt_adapter_node n;
    char *env[] = {"PMIX_RANK=2", "SLURM_NTASKS=3", "SLURM_JOB_NODELIST=gpu[07-09,12],cpu1", "SLURM_JOB_ID=77",
                   NULL};
    assert_int_equal(dt_adapter_mpirun.discover(job, env, &n), 0);
    assert_int_equal(n.node_rank, 2);
    assert_string_equal(n.coord_host, "gpu07");
    assert_int_equal(n.coord_port, 29500);
    assert_string_equal(n.run_id, "mpi-77");
    dt_job_free(job);
}

static void rank_env_from_mpirun(void **s)
{
    (void)s;
    setenv("RANK", "0", 1); /* mpirun's own environment leaks to local ranks: MPI's rank must win */
    setenv("DTRAIN_MPI_RANKS", "1", 1);
    setenv("OMPI_COMM_WORLD_RANK", "3", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);
    setenv("DTRAIN_RUN_DIR", "/runs/x", 1);
    setenv("DTRAIN_RESTART_COUNT", "2", 1);
    assert_int_equal(dt_mpirun_rank_env(), 1);
    assert_string_equal(getenv("RANK"), "3");
    assert_string_equal(getenv("LOCAL_RANK"), "1");
    assert_string_equal(getenv("WORLD_SIZE"), "4");
    assert_string_equal(getenv("LOCAL_WORLD_SIZE"), "2");
    assert_string_equal(getenv("GROUP_RANK"), "1");
    assert_string_equal(getenv("TORCHELASTIC_ERROR_FILE"), "/runs/x/attempt_2/rank_3.error.json");
    /* Without DTRAIN_MPI_RANKS a RANK set by an agent stays. */
    unsetenv("DTRAIN_MPI_RANKS");
    setenv("RANK", "7", 1);
    assert_int_equal(dt_mpirun_rank_env(), 0);
    assert_string_equal(getenv("RANK"), "7");
    /* Asked for, but no MPI launcher: an error naming the variables. */
    setenv("DTRAIN_MPI_RANKS", "1", 1);
    unsetenv("OMPI_COMM_WORLD_RANK");
    assert_true(dt_mpirun_rank_env() < 0);
    assert_non_null(strstr(dt_error_last(), "OMPI_COMM_WORLD_RANK"));
    unsetenv("DTRAIN_MPI_RANKS");
}

static void tagged_lines(void **s)
{
    (void)s;
    int r;
    bool err;
    const char *text;
    const char *l1 = "[1,12]<stderr>:Traceback: x";
    assert_true(dt_mpirun_parse_tag(l1, strlen(l1), &r, &err, &text));
    assert_int_equal(r, 12);
    assert_true(err);
    assert_string_equal(text, "Traceback: x");
    const char *l2 = "[1,0]<stdout>:";
    assert_true(dt_mpirun_parse_tag(l2, strlen(l2), &r, &err, &text));
    assert_false(err);
    assert_string_equal(text, "");
    const char *own[] = {"--------------------", "[vm:14801] Warning: x", "[1,0]<stdin>:x", "[1,]<stdout>:x"};
    for (int i = 0; i < 4; i++)
        assert_false(dt_mpirun_parse_tag(own[i], strlen(own[i]), &r, &err, &text));
}

static void tags_inside_a_line(void **s)
{
    (void)s;
    char text[] = "\r[dtrain] step 10[1,0]<stdout>:\r[rank 0] step 20 <x>";
    size_t n = dt_mpirun_strip_tags(text, strlen(text));
    text[n] = 0;
    assert_string_equal(text, "\r[dtrain] step 10\r[rank 0] step 20 <x>");
}

static struct dt_mpirun_verdict verdict_of(const char *const *lines)
{
    struct dt_mpirun_verdict v = {.rank = -1};
    for (int i = 0; lines[i]; i++)
        dt_mpirun_verdict_feed(&v, lines[i], strlen(lines[i]));
    return v;
}

static void mpirun_verdicts(void **s)
{
    (void)s;
    const char *exit3[] = {"mpirun detected that one or more processes exited with non-zero status, thus causing",
                           "the job to be terminated. The first process to do so was:", "",
                           "  Process name: [[26137,1],2]", "  Exit code:    3", NULL};
    struct dt_mpirun_verdict v = verdict_of(exit3);
    assert_int_equal(v.rank, 2);
    assert_int_equal(v.status, 3);
    assert_false(v.signaled);
    const char *segv[] = {"mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 11 "
                          "(Segmentation fault).",
                          "mpirun has exited due to process rank 0 with PID 0 on", NULL};
    v = verdict_of(segv);
    assert_int_equal(v.rank, 1); /* the first verdict counts */
    assert_int_equal(v.status, 139);
    assert_true(v.signaled);
    const char *nofin[] = {"mpirun has exited due to process rank 4 with PID 0 on", "node vm exiting improperly.",
                           NULL};
    v = verdict_of(nofin);
    assert_int_equal(v.rank, 4);
    assert_int_equal(v.status, 0);
    const char *none[] = {"[vm:1] Warning: something", NULL};
    assert_int_equal(verdict_of(none).rank, -1);
}

static void backend_mpi_needs_mpirun(void **s)
{
    (void)s;
    struct dt_job *job = NULL;
    const char *y = "name: j\nbackend: mpi\ncommand: [true]\n";
    assert_true(dt_job_load_string(y, strlen(y), "job.yaml", &job) < 0);
    assert_non_null(strstr(dt_error_last(), "job.yaml:2:"));
    assert_non_null(strstr(dt_error_last(), "mpi needs scheduler: mpirun"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(agents_line),
        cmocka_unit_test(mpi_ranks_line),
        cmocka_unit_test(trainer_and_user_mapping),
        cmocka_unit_test(one_host_maps_by_slot),
        cmocka_unit_test(render_keeps_token_off_the_line),
        cmocka_unit_test(render_mpi_ranks),
        cmocka_unit_test(first_host_of_hostfile),
        cmocka_unit_test(place_from_ompi_and_pmix),
        cmocka_unit_test(discover_agents),
        cmocka_unit_test(discover_under_srun_pmix),
        cmocka_unit_test(rank_env_from_mpirun),
        cmocka_unit_test(tagged_lines),
        cmocka_unit_test(tags_inside_a_line),
        cmocka_unit_test(mpirun_verdicts),
        cmocka_unit_test(backend_mpi_needs_mpirun),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
