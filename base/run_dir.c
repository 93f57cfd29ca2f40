/* run_dir.c - run ids and run directories (see run_dir.h).
 *
 * Not for log rotation or clean-up of old runs: dtrain never deletes a run.
 */
#include "base/run_dir.h"

#include "base/error.h"
#include "base/fs.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int dt_run_dir_make_id(char *out, size_t size)
{
    unsigned char rnd[3];
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
        return dt_error_set_errno(DT_EIO, errno, "cannot read random bytes for a run id");
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    char stamp[20];
    strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
    int n = snprintf(out, size, "%s-%02x%02x%02x", stamp, rnd[0], rnd[1], rnd[2]);
    if (n < 0 || (size_t)n >= size)
        return dt_error_set(DT_EINTERNAL, "run id buffer of %zu bytes is too small", size);
    return 0;
}

int dt_run_dir_path(const char *log_dir, const char *name, const char *run_id, char *path, size_t size)
{
    char cwd[PATH_MAX] = "";
    if (log_dir[0] != '/' && !getcwd(cwd, sizeof cwd))
        return dt_error_set_errno(DT_EIO, errno, "cannot read the current directory");
    int n = snprintf(path, size, "%s%s%s/%s-%s", cwd, cwd[0] ? "/" : "", log_dir, name, run_id);
    if (n < 0 || (size_t)n >= size)
        return dt_error_set(DT_EINVAL, "run directory path is too long: %s/%s-%s", log_dir, name, run_id);
    return 0;
}

int dt_run_dir_create(const char *log_dir, const char *name, char *run_id, size_t id_size, char *path,
                      size_t path_size)
{
    int rc = dt_fs_mkdir_p(log_dir, 0755, "log directory");
    for (int tries = 0; rc == 0 && tries < 16; tries++) {
        rc = dt_run_dir_make_id(run_id, id_size);
        if (rc == 0)
            rc = dt_run_dir_path(log_dir, name, run_id, path, path_size);
        if (rc < 0)
            return rc;
        if (mkdir(path, DT_RUN_DIR_MODE) == 0)
            return 0;
        if (errno != EEXIST)
            return dt_error_set_errno(DT_EIO, errno, "cannot create the run directory %s", path);
    }
    return rc < 0 ? rc : dt_error_set(DT_EIO, "cannot find an unused run directory name in %s", log_dir);
}

int dt_run_dir_open(const char *log_dir, const char *name, const char *run_id, char *path, size_t path_size)
{
    int rc = dt_fs_mkdir_p(log_dir, 0755, "log directory");
    if (rc == 0)
        rc = dt_run_dir_path(log_dir, name, run_id, path, path_size);
    if (rc == 0 && mkdir(path, DT_RUN_DIR_MODE) != 0 && errno != EEXIST)
        rc = dt_error_set_errno(DT_EIO, errno, "cannot create the run directory %s", path);
    return rc;
}
