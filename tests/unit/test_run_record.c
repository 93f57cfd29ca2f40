/* test_run_record.c - what a launch leaves in its run directory and what reads it back:
 * launch.json and job.yaml written and read (scheduler-adapters/run_record.h), the
 * launcher's liveness by pid and start time, the spec comparison --resume makes
 * (launcher/cli/launch_resume.h), and how run_info names a run's state from its files.
 * Then records as someone else may have planted them in a shared log directory:
 * a pid that is not the run's launcher is never signalled, scheduler handles
 * that are options or no ids are refused, FIFOs are not waited on, a lookup by
 * name prefers the caller's own record, huge shapes do not overflow, control
 * characters are not printed.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
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
    pid_t gone = fork();
    if (gone == 0)
        _exit(0);
    waitpid(gone, NULL, 0);
    snprintf(cmd, sizeof cmd, "sed -i 's/\"pid\": [0-9]*/\"pid\": %d/' %s/launch.json", (int)gone, run_dir);
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

/* --- planted records ------------------------------------------------------ */

static char tmp_root[64];

static void write_file(const char *dir, const char *name, const char *text)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* <tmp_root>/<entry>/ (0700) holding launch.json with these members. */
static void plant(char *dir, size_t size, const char *entry, const char *members)
{
    snprintf(dir, size, "%s/%s", tmp_root, entry);
    assert_int_equal(mkdir(dir, 0700), 0);
    char text[4096], host[256] = "";
    gethostname(host, sizeof host - 1);
    snprintf(text, sizeof text,
             "{\"scheduler\": \"local\", \"name\": \"train\", \"run_id\": \"%s\", "
             "\"run_dir\": \"%s\", \"host\": \"%s\", %s}\n",
             entry, dir, host, members);
    write_file(dir, "launch.json", text);
}

static int setup_root(void **s)
{
    (void)s;
    snprintf(tmp_root, sizeof tmp_root, "/tmp/dtrain-planted-XXXXXX");
    return mkdtemp(tmp_root) ? 0 : -1;
}

static int teardown_root(void **s)
{
    (void)s;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp_root);
    return system(cmd) == 0 ? 0 : -1;
}

/* A record naming a process of ours that is not the run's launcher (a
 * sleep, with its real start time copied in): it is not taken for running,
 * and cancel refuses it without a signal. */
static void planted_pid_is_never_signalled(void **s)
{
    (void)s;
    pid_t victim = fork();
    if (victim == 0) {
        execlp("sleep", "sleep", "30", (char *)NULL);
        _exit(127);
    }
    long long start = -1;
    for (int i = 0; i < 100 && start < 0; i++, usleep(10000))
        start = dt_run_record_pid_start(victim);
    assert_true(start > 0);
    char dir[PATH_MAX], members[128];
    snprintf(members, sizeof members, "\"pid\": %d, \"pid_start\": %lld", (int)victim, start);
    plant(dir, sizeof dir, "planted", members);
    struct dt_run_record r;
    assert_int_equal(dt_run_record_read(dir, &r), 0);
    assert_true(r.trusted); /* ours, 0700: only the process check stands in the way */
    assert_false(dt_run_record_launcher_alive(&r));
    assert_int_equal(dt_run_record_stop_launcher(&r, 0.2), DT_EAUTH);
    print_message("refused: %s\n", dt_error_last());
    /* pid 1 and a record without a start time are not even looked at. */
    r.pid = 1;
    assert_int_equal(dt_run_record_stop_launcher(&r, 0.2), DT_EAUTH);
    r.pid = victim;
    r.pid_start = -1;
    assert_int_equal(dt_run_record_stop_launcher(&r, 0.2), DT_EAUTH);
    assert_int_equal(waitpid(victim, NULL, WNOHANG), 0); /* the sleep lives */
    kill(victim, SIGKILL);
    waitpid(victim, NULL, 0);
}

static void handles_are_ids_not_options(void **s)
{
    (void)s;
    assert_true(dt_run_record_slurm_id_ok("4242"));
    assert_true(dt_run_record_slurm_id_ok("4242_7"));
    const char *bad_slurm[] = {
        "--me", "-u", "", "12 13", "12,13", "1_", "_1", "1_2_3", "123456789012345678901", NULL};
    for (int i = 0; bad_slurm[i]; i++)
        assert_false(dt_run_record_slurm_id_ok(bad_slurm[i]));
    assert_true(dt_run_record_k8s_name_ok("train-1a2b"));
    const char *bad_k8s[] = {"--all", "-n", "", "Train", "a_b", "a.b", "a-", "x y", NULL};
    for (int i = 0; bad_k8s[i]; i++)
        assert_false(dt_run_record_k8s_name_ok(bad_k8s[i]));
    char dir[PATH_MAX];
    plant(dir, sizeof dir, "slurm-me", "\"pid\": 7");
    write_file(dir, "launch.json",
               "{\"scheduler\": \"slurm\", \"name\": \"t\", \"run_dir\": \"/x\", \"job_id\": \"--me\"}");
    struct dt_run_record r;
    assert_int_equal(dt_run_record_read(dir, &r), DT_EPROTO);
    assert_non_null(strstr(dt_error_last(), "'--me' is not a Slurm job id"));
    write_file(dir, "launch.json",
               "{\"scheduler\": \"kubernetes\", \"name\": \"t\", \"run_dir\": \"/x\", \"job_id\": \"t\", "
               "\"namespace\": \"--all-namespaces\"}");
    assert_int_equal(dt_run_record_read(dir, &r), DT_EPROTO);
    /* Numbers out of range refuse the record (nothing casts 1e300 to an int). */
    write_file(dir, "launch.json", "{\"scheduler\": \"local\", \"run_dir\": \"/x\", \"pid\": 1e300}");
    assert_int_equal(dt_run_record_read(dir, &r), DT_EPROTO);
    /* Outside what a launch writes: pid 0, nodes beyond the spec's 65536,
     * nproc_per_node 0 or beyond 1024; "gpu" (-1) is a shape a launch writes. */
    const char *bad_numbers[] = {"\"pid\": 0", "\"pid\": 2147483648", "\"nodes\": 0", "\"nodes\": 65537",
                                 "\"nproc_per_node\": 0", "\"nproc_per_node\": -2",
                                 "\"nproc_per_node\": 1025", "\"pid_start\": -2", NULL};
    char text[256];
    for (int i = 0; bad_numbers[i]; i++) {
        snprintf(text, sizeof text, "{\"scheduler\": \"local\", \"run_dir\": \"/x\", %s}", bad_numbers[i]);
        write_file(dir, "launch.json", text);
        assert_int_equal(dt_run_record_read(dir, &r), DT_EPROTO);
    }
    write_file(dir, "launch.json",
               "{\"scheduler\": \"local\", \"run_dir\": \"/x\", \"pid\": 2147483647, \"nodes\": 65536, "
               "\"nproc_per_node\": -1, \"pid_start\": -1}");
    assert_int_equal(dt_run_record_read(dir, &r), 0);
    assert_int_equal(r.nodes, 65536);
    assert_int_equal(r.nproc_per_node, -1);
}

/* launch.json, summary.json and job.yaml as FIFOs: refused at once (a reader
 * blocked in open would hang status, list and --resume for ever). */
static void fifos_are_refused_not_waited_on(void **s)
{
    (void)s;
    char dir[PATH_MAX], path[PATH_MAX + 32];
    snprintf(dir, sizeof dir, "%s/fifos", tmp_root);
    assert_int_equal(mkdir(dir, 0700), 0);
    const char *names[] = {"launch.json", "summary.json", "job.yaml", "metrics.jsonl"};
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        assert_int_equal(mkfifo(path, 0600), 0);
    }
    alarm(10); /* a hang fails the test instead of the suite's timeout */
    struct dt_run_record r;
    assert_int_equal(dt_run_record_read(dir, &r), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "a FIFO"));
    struct dt_run_info in;
    assert_int_equal(dt_run_info_load(dir, true, &in), DT_EINVAL); /* said, not waited on */
    snprintf(path, sizeof path, "%s/launch.json", dir);
    unlink(path);
    assert_int_equal(dt_run_info_load(dir, true, &in), 0); /* summary.json and metrics.jsonl skipped */
    assert_false(in.have_summary);
    assert_int_equal(in.step, -1);
    struct dt_job *job = NULL;
    assert_int_equal(dt_run_record_load_spec(dir, &job), DT_EINVAL);
    /* A link is not followed either. */
    snprintf(path, sizeof path, "%s/link", tmp_root);
    assert_int_equal(mkdir(path, 0700), 0);
    snprintf(path, sizeof path, "%s/link/launch.json", tmp_root);
    assert_int_equal(symlink("/dev/zero", path), 0);
    snprintf(path, sizeof path, "%s/link", tmp_root);
    assert_int_equal(dt_run_record_read(path, &r), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "symbolic link"));
    alarm(0);
}

/* Two runs of job "train": ours, and one whose record others may write,
 * claiming to be newer.  A lookup by name takes ours. */
static void lookup_by_name_prefers_a_trusted_record(void **s)
{
    (void)s;
    char mine[PATH_MAX], theirs[PATH_MAX], found[PATH_MAX];
    plant(mine, sizeof mine, "train-mine", "\"started_unix\": 1000");
    plant(theirs, sizeof theirs, "train-theirs", "\"started_unix\": 99999999999");
    assert_int_equal(chmod(theirs, 0777), 0);
    struct dt_run_record r;
    assert_int_equal(dt_run_record_read(theirs, &r), 0);
    assert_false(r.trusted);
    assert_non_null(strstr(r.distrust, "writable by others"));
    assert_int_equal(dt_run_info_find("train", tmp_root, found, sizeof found), 0);
    assert_string_equal(found, mine);
    /* Even its directory name or run id does not make it preferred. */
    write_file(theirs, "launch.json",
               "{\"scheduler\": \"local\", \"name\": \"x\", \"run_id\": \"train\", \"run_dir\": \"/x\"}");
    assert_int_equal(dt_run_info_find("train", tmp_root, found, sizeof found), 0);
    assert_string_equal(found, mine);
    if (getuid() == 0) { /* another owner: only root can make one here */
        assert_int_equal(chmod(theirs, 0700), 0);
        assert_int_equal(chown(theirs, 65534, 65534), 0);
        assert_int_equal(dt_run_record_read(theirs, &r), 0);
        assert_false(r.trusted);
        assert_non_null(strstr(r.distrust, "belongs to uid 65534"));
    }
}

/* nodes x nproc_per_node of a record fit an int or are not used (UBSan
 * reported the product overflowing). */
static void huge_shape_does_not_overflow(void **s)
{
    (void)s;
    char dir[PATH_MAX];
    plant(dir, sizeof dir, "huge", "\"nodes\": 1048576, \"nproc_per_node\": 1048576");
    struct dt_run_info in;
    assert_int_equal(dt_run_info_load(dir, false, &in), DT_EPROTO); /* beyond any spec: refused */
    plant(dir, sizeof dir, "largest", "\"nodes\": 65536, \"nproc_per_node\": 1024");
    assert_int_equal(dt_run_info_load(dir, false, &in), 0);
    assert_int_equal(in.world_size, 65536 * 1024);
    plant(dir, sizeof dir, "gpus", "\"nodes\": 65536, \"nproc_per_node\": -1");
    assert_int_equal(dt_run_info_load(dir, false, &in), 0);
    assert_int_equal(in.world_size, 0); /* ranks per node known to the nodes alone */
    write_file(dir, "summary.json", "{\"status\": \"failed\", \"exit_status\": 1e300, \"world_size\": -5}");
    assert_int_equal(dt_run_info_load(dir, false, &in), 0);
    assert_int_equal(in.exit_status, -1);
    assert_int_equal(in.world_size, 0);
}

static void control_characters_are_not_printed(void **s)
{
    (void)s;
    char buf[256];
    /* ESC ] 0 ; title BEL, a C1 CSI (U+009B), a lone 0x9b byte, DEL; ü and 雪 stay. */
    const char *in = "a\x1b]0;pwned\x07 b\xc2\x9b"
                     "2J c\x9b d\x7f \xc3\xbc\xe9\x9b\xaa";
    dt_run_info_shown(in, buf, sizeof buf);
    for (const unsigned char *p = (const unsigned char *)buf; *p; p++)
        assert_true(*p >= 0x20 && *p != 0x7f);
    assert_null(strstr(buf, "\xc2\x9b"));
    assert_string_equal(buf, "a\\x1b]0;pwned\\x07 b\\xc2\\x9b2J c\\x9b d\\x7f \xc3\xbc\xe9\x9b\xaa");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(record_round_trip),
        cmocka_unit_test(spec_diff_names_keys),
        cmocka_unit_test_setup_teardown(planted_pid_is_never_signalled, setup_root, teardown_root),
        cmocka_unit_test_setup_teardown(handles_are_ids_not_options, setup_root, teardown_root),
        cmocka_unit_test_setup_teardown(fifos_are_refused_not_waited_on, setup_root, teardown_root),
        cmocka_unit_test_setup_teardown(lookup_by_name_prefers_a_trusted_record, setup_root, teardown_root),
        cmocka_unit_test_setup_teardown(huge_shape_does_not_overflow, setup_root, teardown_root),
        cmocka_unit_test(control_characters_are_not_printed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
