/* test_run_record.c - what a launch leaves in its run directory and what reads it back:
 * launch.json and job.yaml written and read (scheduler-adapters/run_record.h), the
 * launcher's liveness by pid and start time, the spec comparison --resume makes
 * (launcher/cli/launch_resume.h), and how run_info names a run's state from its files.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "launcher/cli/launch_resume.h"
#include "launcher/cli/run_info.h"
#include "scheduler-adapters/run_record.h"
#include "spec/jobspec.h"

static struct dt_job *load(const char *yaml)
{
    struct dt_job *job = NULL;
    if (dt_job_load_string(yaml, strlen(yaml), "job.yaml", &job) != 0)
        fail_msg("spec did not load: %s", dt_error_last());
    return job;
}

static const char *trainer_yaml = "name: t\nnproc_per_node: 2\ntrainer:\n  model: {hidden: [32]}\n"
                                  "  data: {batch_size: 32}\n  steps: 20\n";

static void record_round_trip(void **s)
{
    (void)s;
    char dir[] = "/tmp/dtrain-record-XXXXXX";
    assert_non_null(mkdtemp(dir));
    struct dt_job *job = load(trainer_yaml);
    struct dt_run_record r, back;
    assert_int_equal(dt_run_record_begin(job, dir, "20260101-000000-abcdef", "4242", &r), 0);
    char run_dir[PATH_MAX];
    snprintf(run_dir, sizeof run_dir, "%s/t-20260101-000000-abcdef", dir);
    assert_string_equal(r.run_dir, run_dir);
    assert_int_equal(dt_run_record_read(run_dir, &back), 0);
    assert_string_equal(back.scheduler, "local");
    assert_string_equal(back.name, "t");
    assert_string_equal(back.run_id, "20260101-000000-abcdef");
    assert_string_equal(back.job_id, "4242");
    assert_int_equal(back.pid, (int)getpid());
    assert_true(back.pid_start > 0);
    assert_int_equal(back.nodes, 1);
    assert_int_equal(back.nproc_per_node, 2);
    /* The snapshot loads back to the same model and data. */
    char spec[PATH_MAX + 16];
    snprintf(spec, sizeof spec, "%s/job.yaml", run_dir);
    struct dt_job *snap = NULL;
    assert_int_equal(dt_job_load(spec, &snap), 0);
    const char *kept[] = {"trainer.model", "trainer.data", NULL};
    FILE *devnull = fopen("/dev/null", "w");
    assert_int_equal(dt_launch_spec_diff(snap, job, kept, devnull), 0);
    fclose(devnull);
    /* This process is alive; the same pid with another start time is not (a reused pid). */
    assert_true(dt_run_record_launcher_alive(&back));
    back.pid_start += 1;
    assert_false(dt_run_record_launcher_alive(&back));
    /* Without summary.json, a live launcher is a running run; a gone one, lost. */
    struct dt_run_info in;
    assert_int_equal(dt_run_info_load(run_dir, true, &in), 0);
    assert_string_equal(in.state, "running");
    assert_int_equal(in.world_size, 2);
    char cmd[PATH_MAX + 64];
    snprintf(cmd, sizeof cmd, "sed -i 's/\"pid\": [0-9]*/\"pid\": 999999999/' %s/launch.json", run_dir);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(dt_run_info_load(run_dir, true, &in), 0);
    assert_string_equal(in.state, "lost");
    /* Found by its run id, its job id and its name in the log directory. */
    char found[PATH_MAX];
    assert_int_equal(dt_run_info_find("4242", dir, found, sizeof found), 0);
    assert_string_equal(found, run_dir);
    assert_int_equal(dt_run_info_find("t", dir, found, sizeof found), 0);
    assert_int_equal(dt_run_info_find("nope", dir, found, sizeof found), DT_ENOTFOUND);
    dt_job_free(snap);
    dt_job_free(job);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

static void spec_diff_names_keys(void **s)
{
    (void)s;
    struct dt_job *a = load(trainer_yaml);
    /* Written defaults are no difference; steps is outside model and data. */
    struct dt_job *same = load("name: t\nnproc_per_node: 2\ntrainer:\n  model: {type: mlp, hidden: [32]}\n"
                               "  data: {batch_size: 32, shuffle: true}\n  steps: 99\n");
    struct dt_job *b = load("name: t\nnproc_per_node: 2\ntrainer:\n  model: {hidden: [64, 64]}\n"
                            "  data: {batch_size: 16}\n  steps: 20\n");
    struct dt_job *cmd = load("name: t\ncommand: [true]\n");
    const char *kept[] = {"trainer.model", "trainer.data", NULL};
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    assert_int_equal(dt_launch_spec_diff(a, same, kept, m), 0);
    assert_int_equal(dt_launch_spec_diff(a, b, kept, m), 2);
    fflush(m);
    assert_non_null(strstr(text, "trainer.model.hidden: [32] in the run, [64, 64] now\n"));
    assert_non_null(strstr(text, "trainer.data.batch_size: 32 in the run, 16 now\n"));
    /* A trainer run resumed by a command job: the whole sections are gone. */
    assert_int_equal(dt_launch_spec_diff(a, cmd, kept, m), 2);
    fclose(m);
    assert_non_null(strstr(text, "trainer.model: "));
    assert_non_null(strstr(text, "(absent) now"));
    free(text);
    dt_job_free(a);
    dt_job_free(same);
    dt_job_free(b);
    dt_job_free(cmd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(record_round_trip),
        cmocka_unit_test(spec_diff_names_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
