/* fs.c - directories, PATH lookup, this executable, reading regular files
 * only, whole-file replacement (fs.h). */
#include "base/fs.h"

#include "base/error.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
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

const char *dt_fs_kind(mode_t mode)
{
    return S_ISREG(mode)    ? "a regular file"
           : S_ISDIR(mode)  ? "a directory"
           : S_ISLNK(mode)  ? "a symbolic link"
           : S_ISFIFO(mode) ? "a FIFO"
           : S_ISSOCK(mode) ? "a socket"
           : S_ISCHR(mode)  ? "a character device"
           : S_ISBLK(mode)  ? "a block device"
                            : "not a file";
}

static int not_regular(const char *path, mode_t mode)
{
    if (S_ISLNK(mode))
        return dt_error_set(
            DT_EINVAL, "%s: a symbolic link, which is not followed here; only a regular file is read", path);
    return dt_error_set(DT_EINVAL, "%s: not a regular file (%s); only a regular file is read", path,
                        dt_fs_kind(mode));
}

static int cannot_open(const char *path, int err)
{
    return dt_error_set_errno(err == ENOENT || err == ENOTDIR ? DT_ENOTFOUND : DT_EIO, err, "%s: cannot open",
                              path);
}

int dt_fs_open_read(int dfd, const char *path, enum dt_fs_links links, struct stat *st)
{
    struct stat named, opened;
    if (fstatat(dfd, path, &named, links == DT_FS_FOLLOW ? 0 : AT_SYMLINK_NOFOLLOW) != 0)
        return cannot_open(path, errno);
    if (!S_ISREG(named.st_mode))
        return not_regular(path, named.st_mode);
    int flags = O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | (links == DT_FS_NOFOLLOW ? O_NOFOLLOW : 0);
    int fd = openat(dfd, path, flags), rc = 0;
    if (fd < 0)
        return errno == ELOOP && links == DT_FS_NOFOLLOW ? not_regular(path, S_IFLNK)
                                                         : cannot_open(path, errno);
    if (fstat(fd, &opened) != 0)
        rc = dt_error_set_errno(DT_EIO, errno, "%s: cannot stat", path);
    else if (!S_ISREG(opened.st_mode))
        rc = not_regular(path, opened.st_mode);
    else if (opened.st_dev != named.st_dev || opened.st_ino != named.st_ino)
        rc =
            dt_error_set(DT_EINVAL, "%s: replaced by another file while it was being opened; not read", path);
    else if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0)
        rc = dt_error_set_errno(DT_EIO, errno, "%s: cannot read", path);
    if (rc) {
        close(fd);
        return rc;
    }
    if (st)
        *st = opened;
    return fd;
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

/* The temporary file, new, in the directory dfd: O_EXCL never opens an
 * existing name and fails on a symlink there, dangling or not, so nothing
 * planted at the predictable name is followed or truncated.  A name already
 * there is a crashed writer's leftover (or a planted link): it is unlinked,
 * which removes a link itself and never its target, and the create is tried
 * once more.  Where the leftover cannot be removed (a sticky directory,
 * someone else's file) the write fails, naming it. */
static int create_tmp(int dfd, const char *dir, const char *tmp)
{
    const int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY;
    int fd = openat(dfd, tmp, flags, 0666);
    if (fd < 0 && errno == EEXIST) {
        if (unlinkat(dfd, tmp, 0) != 0 && errno != ENOENT)
            return dt_error_set_errno(DT_EIO, errno, "cannot remove the leftover temporary file %s/%s", dir,
                                      tmp);
        fd = openat(dfd, tmp, flags, 0666);
    }
    if (fd < 0)
        return dt_error_set_errno(DT_EIO, errno, "cannot create %s/%s", dir, tmp);
    return fd;
}

/* write() into the open temporary file, flushed, fsync'd when durable, closed. */
static int fill_tmp(int fd, const char *shown, bool durable, dt_fs_write_fn write, void *ctx)
{
    FILE *f = fdopen(fd, "w");
    if (!f) {
        int e = errno;
        close(fd);
        return dt_error_set_errno(DT_ENOMEM, e, "cannot buffer %s", shown);
    }
    int rc = write(ctx, f);
    if (rc == 0 && (fflush(f) != 0 || ferror(f)))
        rc = dt_error_set_errno(DT_EIO, errno, "writing %s failed", shown);
    if (rc == 0 && durable && fsync(fileno(f)) != 0)
        rc = dt_error_set_errno(DT_EIO, errno, "fsync %s", shown);
    if (fclose(f) != 0 && rc == 0)
        rc = dt_error_set_errno(DT_EIO, errno, "writing %s failed", shown);
    return rc;
}

int dt_fs_write_atomic(const char *path, bool durable, dt_fs_write_fn write, void *ctx)
{
    char dir[PATH_MAX], tmp[NAME_MAX + 8], shown[PATH_MAX + NAME_MAX + 8];
    const char *base = split_path(path, dir, sizeof dir);
    if (strlen(path) >= PATH_MAX || !*base || strlen(base) > NAME_MAX - 5)
        return dt_error_set(DT_EINVAL, "cannot write %s: the path is too long or names no file", path);
    snprintf(tmp, sizeof tmp, ".%s.tmp", base);
    snprintf(shown, sizeof shown, "%s/%s", dir, tmp);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return dt_error_set_errno(DT_EIO, errno, "cannot write %s: cannot open its directory", path);
    int fd = create_tmp(dfd, dir, tmp);
    int rc = fd < 0 ? fd : fill_tmp(fd, shown, durable, write, ctx);
    /* rename(2) replaces the name `path`, never what a symlink there points to. */
    if (rc == 0 && renameat(dfd, tmp, dfd, base) != 0)
        rc = dt_error_set_errno(DT_EIO, errno, "cannot rename %s to %s", shown, path);
    if (rc != 0 && fd >= 0)
        unlinkat(dfd, tmp, 0);
    if (rc == 0 && durable && fsync(dfd) != 0)
        rc = dt_error_set_errno(DT_EIO, errno, "fsync %s", dir);
    close(dfd);
    return rc;
}

int dt_fs_read_whole(int dfd, const char *dir_shown, const char *path, enum dt_fs_links links, size_t max_bytes,
                     char **text, size_t *len)
{
    bool in_dir = dfd != AT_FDCWD && dir_shown;
    struct stat st;
    int fd = dt_fs_open_read(dfd, path, links, &st);
    if (fd < 0)
        return in_dir ? dt_error_prefix("%s", dir_shown) : fd;
    char shown[PATH_MAX + 256];
    snprintf(shown, sizeof shown, "%s%s%s", in_dir ? dir_shown : "", in_dir ? "/" : "", path);
    char *buf = NULL;
    size_t n = 0;
    int rc = 0;
    if ((size_t)st.st_size > max_bytes)
        rc = dt_error_set(DT_EINVAL, "%s is %lld bytes, more than the %zu this reads", shown,
                          (long long)st.st_size, max_bytes);
    else if (!(buf = malloc((size_t)st.st_size + 1)))
        rc = dt_error_set(DT_ENOMEM, "no memory to read %s", shown);
    while (!rc && n < (size_t)st.st_size) {
        ssize_t got = read(fd, buf + n, (size_t)st.st_size - n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            rc = dt_error_set_errno(DT_EIO, errno, "reading %s failed", shown);
        if (got <= 0)
            break;
        n += (size_t)got;
    }
    close(fd);
    if (rc) {
        free(buf);
        return rc;
    }
    buf[n] = 0;
    *text = buf;
    *len = n;
    return 0;
}
