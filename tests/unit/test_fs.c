/* test_fs.c - whole-file replacement (base/fs.c, dt_fs_write_atomic) under
 * the attacks and accidents of issue 26: a symlink planted at the temporary
 * name or at the final name leaves its target untouched, a crashed writer's
 * leftover is replaced, one that cannot be removed fails the write, and a
 * full disk (a small tmpfs) or a file-size limit is an error naming the file
 * and the system's reason, with the old file intact and no leftover. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/error.h"
#include "base/fs.h"

struct fx {
    char dir[64];
    char path[128], tmp[128], target[128];
};

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof *f);
    strcpy(f->dir, "/tmp/dtrain-fs-test.XXXXXX");
    if (!f || !mkdtemp(f->dir))
        return -1;
    snprintf(f->path, sizeof f->path, "%s/out.json", f->dir);
    snprintf(f->tmp, sizeof f->tmp, "%s/.out.json.tmp", f->dir);
    snprintf(f->target, sizeof f->target, "%s/victim", f->dir);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    char cmd[256];
    snprintf(cmd, sizeof cmd, "umount -l %s/small 2>/dev/null; rm -rf %s", f->dir, f->dir);
    int rc = system(cmd);
    free(f);
    return rc == 0 ? 0 : -1;
}

static int put_text(void *ctx, FILE *out)
{
    fputs(ctx, out);
    return 0;
}

struct bulk {
    size_t bytes;
};

static int put_bulk(void *ctx, FILE *out)
{
    const struct bulk *b = ctx;
    static char chunk[65536];
    memset(chunk, 'x', sizeof chunk);
    for (size_t done = 0; done < b->bytes; done += sizeof chunk)
        if (fwrite(chunk, 1, sizeof chunk, out) != sizeof chunk)
            break; /* dt_fs_write_atomic reads the stream's error */
    return 0;
}

static int put_fails(void *ctx, FILE *out)
{
    (void)ctx;
    fputs("half", out);
    return dt_error_set(DT_EINVAL, "the writer gave up");
}

static void file_is(const char *path, const char *want)
{
    char buf[256] = "";
    FILE *in = fopen(path, "r");
    assert_non_null(in);
    size_t n = fread(buf, 1, sizeof buf - 1, in);
    fclose(in);
    buf[n] = 0;
    assert_string_equal(buf, want);
}

static void write_file(const char *path, const char *text)
{
    FILE *out = fopen(path, "w");
    assert_non_null(out);
    fputs(text, out);
    assert_int_equal(fclose(out), 0);
}

static bool exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

static void writes_and_replaces(void **state)
{
    struct fx *f = *state;
    assert_int_equal(dt_fs_write_atomic(f->path, false, put_text, "one\n"), 0);
    file_is(f->path, "one\n");
    assert_int_equal(dt_fs_write_atomic(f->path, true, put_text, "two\n"), 0);
    file_is(f->path, "two\n");
    assert_false(exists(f->tmp));
    /* a bare name is in the current directory */
    char cwd[4096];
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir(f->dir), 0);
    int rc = dt_fs_write_atomic("bare.txt", true, put_text, "three\n");
    assert_int_equal(chdir(cwd), 0);
    assert_int_equal(rc, 0);
    char bare[160];
    snprintf(bare, sizeof bare, "%s/bare.txt", f->dir);
    file_is(bare, "three\n");
}

/* The attack of issue 26: a link at .step_N.safetensors.tmp made the trainer
 * truncate and overwrite whatever it pointed to. */
static void symlink_at_the_temporary_name_is_not_followed(void **state)
{
    struct fx *f = *state;
    write_file(f->target, "precious\n");
    assert_int_equal(symlink(f->target, f->tmp), 0);
    assert_int_equal(dt_fs_write_atomic(f->path, true, put_text, "new\n"), 0);
    file_is(f->target, "precious\n");
    file_is(f->path, "new\n");
    struct stat st;
    assert_int_equal(lstat(f->path, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    assert_false(exists(f->tmp)); /* the link was removed, not its target */
    assert_true(exists(f->target));
}

/* A dangling link would otherwise create the file it names, anywhere. */
static void dangling_symlink_creates_nothing(void **state)
{
    struct fx *f = *state;
    char elsewhere[160];
    snprintf(elsewhere, sizeof elsewhere, "%s/created-through-a-link", f->dir);
    assert_int_equal(symlink(elsewhere, f->tmp), 0);
    assert_int_equal(dt_fs_write_atomic(f->path, false, put_text, "new\n"), 0);
    assert_false(exists(elsewhere));
    file_is(f->path, "new\n");
}

/* rename(2) replaces the link at the final name; its target keeps its bytes. */
static void symlink_at_the_final_name_is_replaced_not_followed(void **state)
{
    struct fx *f = *state;
    write_file(f->target, "precious\n");
    assert_int_equal(symlink(f->target, f->path), 0);
    assert_int_equal(dt_fs_write_atomic(f->path, true, put_text, "new\n"), 0);
    file_is(f->target, "precious\n");
    struct stat st;
    assert_int_equal(lstat(f->path, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    file_is(f->path, "new\n");
}

static void leftover_is_replaced(void **state)
{
    struct fx *f = *state;
    write_file(f->tmp, "half of a crashed write, longer than the new file");
    assert_int_equal(dt_fs_write_atomic(f->path, true, put_text, "whole\n"), 0);
    file_is(f->path, "whole\n");
    assert_false(exists(f->tmp));
}

/* A leftover that unlink cannot remove (here a directory; in a sticky
 * directory, someone else's file) fails the write with its name. */
static void leftover_that_cannot_be_removed_fails(void **state)
{
    struct fx *f = *state;
    write_file(f->path, "old\n");
    assert_int_equal(mkdir(f->tmp, 0700), 0);
    assert_int_equal(dt_fs_write_atomic(f->path, false, put_text, "new\n"), DT_EIO);
    assert_non_null(strstr(dt_error_last(), "cannot remove the leftover temporary file"));
    assert_non_null(strstr(dt_error_last(), f->tmp));
    file_is(f->path, "old\n");
}

static void failed_writer_leaves_the_old_file(void **state)
{
    struct fx *f = *state;
    write_file(f->path, "old\n");
    assert_int_equal(dt_fs_write_atomic(f->path, true, put_fails, NULL), DT_EINVAL);
    assert_string_equal(dt_error_last(), "the writer gave up");
    file_is(f->path, "old\n");
    assert_false(exists(f->tmp));
    /* a directory that is not there: the sentence names the path */
    assert_int_equal(dt_fs_write_atomic("/nonexistent-dtrain/x.json", false, put_text, "x"), DT_EIO);
    assert_non_null(strstr(dt_error_last(), "/nonexistent-dtrain/x.json"));
    assert_non_null(strstr(dt_error_last(), "No such file or directory"));
}

/* A child so the limit and the ignored SIGXFSZ stay there; without the
 * ignore, the kernel kills the writer instead of failing its write(2). */
static void file_size_limit_is_an_error_naming_the_file(void **state)
{
    struct fx *f = *state;
    write_file(f->path, "old\n");
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit rl = {256 * 1024, 256 * 1024};
        struct bulk b = {1 << 20};
        if (setrlimit(RLIMIT_FSIZE, &rl) || dt_fs_write_atomic(f->path, true, put_bulk, &b) != DT_EIO)
            _exit(1);
        fprintf(stderr, "# %s\n", dt_error_last());
        _exit(strstr(dt_error_last(), f->tmp) && strstr(dt_error_last(), strerror(EFBIG)) ? 0 : 2);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    file_is(f->path, "old\n");
    assert_false(exists(f->tmp));
}

/* ENOSPC from a 64 KiB tmpfs, mounted in a mount namespace of a child: `make
 * test` runs as root (CI too), so a namespace or mount refused fails, never skips. */
static void full_disk_is_an_error_naming_the_file(void **state)
{
    struct fx *f = *state;
    char small[160], path[200], tmp[200];
    snprintf(small, sizeof small, "%s/small", f->dir);
    snprintf(path, sizeof path, "%s/step_00000010.safetensors", small);
    snprintf(tmp, sizeof tmp, "%s/.step_00000010.safetensors.tmp", small);
    assert_int_equal(mkdir(small, 0700), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (unshare(CLONE_NEWNS) || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) ||
            mount("tmpfs", small, "tmpfs", 0, "size=64k"))
            _exit(77);
        FILE *old = fopen(path, "w");
        if (!old || fputs("old\n", old) < 0 || fclose(old))
            _exit(3);
        struct bulk b = {1 << 20};
        if (dt_fs_write_atomic(path, true, put_bulk, &b) != DT_EIO)
            _exit(1);
        fprintf(stderr, "# %s\n", dt_error_last());
        if (!strstr(dt_error_last(), tmp) || !strstr(dt_error_last(), strerror(ENOSPC)))
            _exit(2);
        char buf[16] = "";
        FILE *in = fopen(path, "r");
        size_t n = in ? fread(buf, 1, sizeof buf - 1, in) : 0;
        buf[n] = 0;
        _exit(strcmp(buf, "old\n") == 0 && !exists(tmp) ? 0 : 4);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    if (WEXITSTATUS(st) == 77)
        fail_msg("a mount namespace with a 64 KiB tmpfs could not be made (make test runs as root)");
    assert_int_equal(WEXITSTATUS(st), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(writes_and_replaces, setup, teardown),
        cmocka_unit_test_setup_teardown(symlink_at_the_temporary_name_is_not_followed, setup, teardown),
        cmocka_unit_test_setup_teardown(dangling_symlink_creates_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(symlink_at_the_final_name_is_replaced_not_followed, setup, teardown),
        cmocka_unit_test_setup_teardown(leftover_is_replaced, setup, teardown),
        cmocka_unit_test_setup_teardown(leftover_that_cannot_be_removed_fails, setup, teardown),
        cmocka_unit_test_setup_teardown(failed_writer_leaves_the_old_file, setup, teardown),
        cmocka_unit_test_setup_teardown(file_size_limit_is_an_error_naming_the_file, setup, teardown),
        cmocka_unit_test_setup_teardown(full_disk_is_an_error_naming_the_file, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
