/* fs.c - directories, PATH lookup, this executable, whole-file replacement (fs.h). */
#include "base/fs.h"

#include "base/error.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int dt_fs_mkdir_p(const char *path, mode_t mode, const char *what)
{
    char buf[PATH_MAX];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return dt_error_set(DT_EINVAL, "the %s path is too long: %s", what, path);
    /* Each prefix ending at a '/', then the whole path; EEXIST is success
     * (another rank or a previous run made it). */
    for (char *p = buf + 1;; p++) {
        if (*p && *p != '/')
            continue;
        char c = *p;
        *p = 0;
        if (mkdir(buf, mode) != 0 && errno != EEXIST)
            return dt_error_set_errno(DT_EIO, errno, "cannot create the %s %s", what, buf);
        if (!(*p = c))
            return 0;
    }
}

bool dt_fs_on_path(const char *prog)
{
    if (strchr(prog, '/'))
        return access(prog, X_OK) == 0;
    const char *path = getenv("PATH");
    if (!path)
        path = "/usr/local/bin:/usr/bin:/bin";
    char buf[PATH_MAX];
    for (const char *p = path; *p;) {
        const char *colon = strchr(p, ':');
        size_t n = colon ? (size_t)(colon - p) : strlen(p);
        /* An empty entry is the current directory, as the shell reads it. */
        snprintf(buf, sizeof buf, "%.*s/%s", (int)n, n ? p : ".", prog);
        if (access(buf, X_OK) == 0)
            return true;
        p += n + (colon ? 1 : 0);
    }
    return false;
}

void dt_fs_self_path(char *out, size_t size)
{
    snprintf(out, size, "dtrain");
    ssize_t n = readlink("/proc/self/exe", out, size - 1);
    if (n > 0)
        out[n] = 0;
}

int dt_fs_sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return dt_error_set_errno(DT_EIO, errno, "cannot open directory %s", dir);
    int rc = fsync(fd) ? dt_error_set_errno(DT_EIO, errno, "fsync %s", dir) : 0;
    close(fd);
    return rc;
}

/* The directory part of path ("." for a bare name) and the rest. */
static const char *split_path(const char *path, char *dir, size_t size)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, size, ".");
    else if (slash == path)
        snprintf(dir, size, "/");
    else
        snprintf(dir, size, "%.*s", (int)(slash - path), path);
    return slash ? slash + 1 : path;
}

int dt_fs_write_atomic(const char *path, bool durable, dt_fs_write_fn write, void *ctx)
{
    char dir[PATH_MAX], tmp[2 * PATH_MAX + 8];
    const char *base = split_path(path, dir, sizeof dir);
    if (snprintf(tmp, sizeof tmp, "%s/.%s.tmp", dir, base) >= PATH_MAX)
        return dt_error_set(DT_EINVAL, "path is too long: %s", path);
    FILE *f = fopen(tmp, "we");
    if (!f)
        return dt_error_set_errno(DT_EIO, errno, "cannot create %s", tmp);
    int rc = write(ctx, f);
    if (rc == 0 && (fflush(f) != 0 || ferror(f)))
        rc = dt_error_set_errno(DT_EIO, errno, "writing %s failed (disk full?)", tmp);
    if (rc == 0 && durable && fsync(fileno(f)) != 0)
        rc = dt_error_set_errno(DT_EIO, errno, "fsync %s", tmp);
    if (fclose(f) != 0 && rc == 0)
        rc = dt_error_set_errno(DT_EIO, errno, "writing %s failed (disk full?)", tmp);
    if (rc == 0 && rename(tmp, path) != 0)
        rc = dt_error_set_errno(DT_EIO, errno, "cannot rename %s to %s", tmp, path);
    if (rc != 0) {
        unlink(tmp);
        return rc;
    }
    return durable ? dt_fs_sync_dir(dir) : 0;
}
