/* run_dir_fixture.h - a scratch directory for the unit tests of what writes
 * or reads a run directory's files (event files, traces, the report, the
 * live progress line, trace merge): made before each test, emptied and
 * removed after it, with files written into it by name.  Header-only, like
 * fixture.h; not a test itself, and not for directories that hold
 * subdirectories (the teardown removes files only). */
#ifndef DT_TEST_RUN_DIR_FIXTURE_H
#define DT_TEST_RUN_DIR_FIXTURE_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static char run_dir[64], run_path[512];

/* cmocka setup: a fresh /tmp/dt-run-XXXXXX in run_dir. */
static inline int run_dir_setup(void **state)
{
    (void)state;
    snprintf(run_dir, sizeof run_dir, "/tmp/dt-run-XXXXXX");
    return mkdtemp(run_dir) ? 0 : -1;
}

/* cmocka teardown: every file in run_dir, then run_dir. */
static inline int run_dir_teardown(void **state)
{
    (void)state;
    DIR *d = opendir(run_dir);
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.') {
            snprintf(run_path, sizeof run_path, "%s/%s", run_dir, e->d_name);
            unlink(run_path);
        }
    if (d)
        closedir(d);
    return rmdir(run_dir);
}

/* run_dir/name now holds text. */
static inline void run_dir_write(const char *name, const char *text)
{
    snprintf(run_path, sizeof run_path, "%s/%s", run_dir, name);
    FILE *f = fopen(run_path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

#endif
