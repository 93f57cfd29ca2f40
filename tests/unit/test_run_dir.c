/* test_run_dir.c - run ids and run directories (base/run_dir.c): new ones are
 * fresh, absolute and private (0700), a shared one is opened as it is, the
 * path rule, and a log directory that cannot be made is a sentence. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/run_dir.h"

static mode_t umask_now(void)
{
    mode_t m = umask(0);
    umask(m);
    return m;
}

static void run_dirs_are_new_and_absolute(void **state)
{
    (void)state;
    char base[] = "/tmp/dtrain-rundir.XXXXXX";
    assert_non_null(mkdtemp(base));
    char cwd[4096];
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir(base), 0);
    char id1[DT_RUN_ID_MAX], id2[DT_RUN_ID_MAX], p1[4096], p2[4096];
    assert_int_equal(dt_run_dir_create("logs/deeper", "job", id1, sizeof id1, p1, sizeof p1), 0);
    assert_int_equal(dt_run_dir_create("logs/deeper", "job", id2, sizeof id2, p2, sizeof p2), 0);
    assert_int_equal(chdir(cwd), 0);
    assert_string_not_equal(id1, id2);
    assert_int_equal(strlen(id1), strlen("20261202-122525-274efb"));
    char want[4200];
    snprintf(want, sizeof want, "%s/logs/deeper/job-%s", base, id1);
    assert_string_equal(p1, want); /* relative log_dir made absolute */
    struct stat st;
    assert_int_equal(stat(p1, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    assert_int_equal(st.st_mode & 07777, DT_RUN_DIR_MODE & ~umask_now()); /* private: 0700 */
    assert_int_equal(DT_RUN_DIR_MODE, 0700);
    assert_int_equal(stat(p2, &st), 0);
    /* A log_dir that cannot be made is a sentence, not an errno. */
    assert_int_equal(dt_run_dir_create("/proc/no/such", "job", id1, sizeof id1, p1, sizeof p1), DT_EIO);
    assert_non_null(strstr(dt_error_last(), "cannot create the log directory"));
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", base);
    assert_int_equal(system(cmd), 0);
}

static void shared_run_dir_and_path(void **state)
{
    (void)state;
    char base[] = "/tmp/dtrain-rundir.XXXXXX";
    assert_non_null(mkdtemp(base));
    char p1[4096], p2[4096], want[4200];
    assert_int_equal(dt_run_dir_open(base, "job", "17", p1, sizeof p1), 0);
    assert_int_equal(dt_run_dir_open(base, "job", "17", p2, sizeof p2), 0); /* another node made it first */
    snprintf(want, sizeof want, "%s/job-17", base);
    assert_string_equal(p1, want);
    assert_string_equal(p2, want);
    struct stat st;
    assert_int_equal(stat(p1, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0700);
    assert_int_equal(dt_run_dir_path("/abs/logs", "job", "rid", p1, sizeof p1), 0);
    assert_string_equal(p1, "/abs/logs/job-rid");
    char cwd[4096];
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(dt_run_dir_path("rel", "job", "rid", p1, sizeof p1), 0);
    snprintf(want, sizeof want, "%s/rel/job-rid", cwd);
    assert_string_equal(p1, want);
    char tiny[8];
    assert_int_equal(dt_run_dir_path("/abs/logs", "job", "rid", tiny, sizeof tiny), DT_EINVAL);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", base);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(run_dirs_are_new_and_absolute),
        cmocka_unit_test(shared_run_dir_and_path),
    };
    return cmocka_run_group_tests_name("run_dir", tests, NULL, NULL);
}
