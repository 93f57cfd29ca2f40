/* test_token.c - the job token (spec/token.c): made fresh, checked, and read
 * from the environment or a file that must be private to its user. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "spec/token.h"

static const char good[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/* A scratch file holding text with this mode; its path into path. */
static void token_file(char *path, size_t size, const char *text, mode_t mode)
{
    snprintf(path, size, "/tmp/dtrain-token-test.XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    assert_int_equal(fchmod(fd, mode), 0);
    close(fd);
}

static void made_fresh_and_checked(void **state)
{
    (void)state;
    char a[DT_TOKEN_LEN + 1], b[DT_TOKEN_LEN + 1];
    assert_int_equal(dt_token_make(a), 0);
    assert_int_equal(dt_token_make(b), 0);
    assert_int_equal(strlen(a), DT_TOKEN_LEN);
    assert_string_not_equal(a, b);
    assert_int_equal(dt_token_check(a, "test"), 0);
    assert_int_equal(dt_token_check("abc", "X"), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "from X must be 64 hexadecimal characters"));
}

static void file_private_to_its_user(void **state)
{
    (void)state;
    char path[64], out[DT_TOKEN_LEN + 1];
    char text[DT_TOKEN_LEN + 2];
    snprintf(text, sizeof text, "%s\n", good);
    const mode_t ok_modes[] = {0600, 0400, 0700, 0620, 0602};
    for (size_t i = 0; i < sizeof ok_modes / sizeof ok_modes[0]; i++) {
        token_file(path, sizeof path, text, ok_modes[i]);
        assert_int_equal(dt_token_from_file(path, out), 0);
        assert_string_equal(out, good);
        unlink(path);
    }
    struct {
        mode_t mode;
        const char *who;
    } refused[] = {{0644, "every user (mode 0644)"}, {0640, "its group (mode 0640)"}, {0604, "every user"}};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        token_file(path, sizeof path, text, refused[i].mode);
        assert_int_equal(dt_token_from_file(path, out), DT_EINVAL);
        assert_string_equal(out, "");
        assert_non_null(strstr(dt_error_last(), refused[i].who));
        char fix[128];
        snprintf(fix, sizeof fix, "run `chmod 600 %s`", path);
        assert_non_null(strstr(dt_error_last(), fix));
        unlink(path);
    }
    token_file(path, sizeof path, "not a token\n", 0600);
    assert_int_equal(dt_token_from_file(path, out), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), path));
    unlink(path);
    assert_int_equal(dt_token_from_file("/nonexistent/token", out), DT_EIO);
    assert_int_equal(dt_token_from_file("/tmp", out), DT_EINVAL); /* a directory */
    assert_non_null(strstr(dt_error_last(), "not a regular file"));
}

/* A Kubernetes Secret under the pod's fsGroup: root's file, 0440, the group
 * the container's user is in.  Accepted in a pod only, and only that shape. */
static void pod_group_readable(void **state)
{
    (void)state;
    char path[64], out[DT_TOKEN_LEN + 1];
    token_file(path, sizeof path, good, 0440);
    assert_int_equal(chown(path, geteuid(), getegid()), 0);
    unsetenv("KUBERNETES_SERVICE_HOST");
    assert_int_equal(dt_token_from_file(path, out), DT_EINVAL); /* not a pod: a group is not the user's alone */
    assert_non_null(strstr(dt_error_last(), "its group (mode 0440)"));
    setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
    assert_int_equal(dt_token_from_file(path, out), 0);
    assert_string_equal(out, good);
    const mode_t refused[] = {0460, 0444, 0442, 0441}; /* the group may write, others may read, write, run */
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        chmod(path, refused[i]);
        if (dt_token_from_file(path, out) != DT_EINVAL)
            fail_msg("mode %04o accepted in a pod", (unsigned)refused[i]);
    }
    chmod(path, 0440);
    if (geteuid() == 0 && chown(path, 0, 54321) == 0) { /* a group this process is not in */
        assert_int_equal(dt_token_from_file(path, out), DT_EINVAL);
        assert_non_null(strstr(dt_error_last(), "its group"));
    }
    unsetenv("KUBERNETES_SERVICE_HOST");
    unlink(path);
}

static void from_the_environment(void **state)
{
    (void)state;
    char path[64], out[DT_TOKEN_LEN + 1];
    bool found = true;
    unsetenv("DTRAIN_JOB_TOKEN");
    unsetenv("DTRAIN_JOB_TOKEN_FILE");
    assert_int_equal(dt_token_from_env(out, &found), 0);
    assert_false(found);
    token_file(path, sizeof path, good, 0644);
    setenv("DTRAIN_JOB_TOKEN_FILE", path, 1);
    assert_int_equal(dt_token_from_env(out, &found), DT_EINVAL);
    assert_true(found);
    assert_non_null(strstr(dt_error_last(), "DTRAIN_JOB_TOKEN_FILE: the job token file"));
    chmod(path, 0600);
    assert_int_equal(dt_token_from_env(out, &found), 0);
    assert_string_equal(out, good);
    setenv("DTRAIN_JOB_TOKEN", "short", 1); /* the variable comes first */
    assert_int_equal(dt_token_from_env(out, &found), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "DTRAIN_JOB_TOKEN must be"));
    unsetenv("DTRAIN_JOB_TOKEN");
    unsetenv("DTRAIN_JOB_TOKEN_FILE");
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(made_fresh_and_checked),
        cmocka_unit_test(pod_group_readable),
        cmocka_unit_test(file_private_to_its_user),
        cmocka_unit_test(from_the_environment),
    };
    return cmocka_run_group_tests_name("token", tests, NULL, NULL);
}
