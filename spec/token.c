/* token.c - making, checking and reading the job token (token.h).
 *
 * Not for passing it on (the agent puts it in the ranks' environment, the
 * adapters in a Secret or sbatch's environment).
 */
#include "spec/token.h"

#include "base/error.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

int dt_token_make(char out[DT_TOKEN_LEN + 1])
{
    uint8_t raw[DT_TOKEN_LEN / 2];
    size_t got = 0;
    while (got < sizeof raw) {
        ssize_t n = getrandom(raw + got, sizeof raw - got, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return dt_error_set_errno(DT_EIO, errno, "making the job token: getrandom");
        }
        got += (size_t)n;
    }
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < sizeof raw; i++) {
        out[2 * i] = hex[raw[i] >> 4];
        out[2 * i + 1] = hex[raw[i] & 15];
    }
    out[DT_TOKEN_LEN] = 0;
    return 0;
}

int dt_token_check(const char *t, const char *where)
{
    size_t n = strlen(t);
    for (size_t i = 0; i < n; i++)
        if (!isxdigit((unsigned char)t[i]))
            n = 0;
    if (n != DT_TOKEN_LEN)
        return dt_error_set(DT_EINVAL, "the job token from %s must be %d hexadecimal characters (as `dtrain "
                                       "launch` or `openssl rand -hex 32` makes it)",
                            where, DT_TOKEN_LEN);
    return 0;
}

/* True when this process is a member of group g (its own or a supplementary one). */
static bool in_group(gid_t g)
{
    if (getegid() == g)
        return true;
    gid_t groups[256];
    int n = getgroups(256, groups);
    for (int i = 0; i < n; i++)
        if (groups[i] == g)
            return true;
    return false;
}

/* A Kubernetes Secret mounted for a pod with securityContext.fsGroup: the
 * kubelet writes the file as root, gives it the pod's fsGroup and makes it
 * group-readable (0440), and the container, running as a user of that
 * group, reads it through the group.  The group is the pod's own there (no
 * other user's process is in the pod), so that file is as private as a
 * 0400 one: accepted when its owner is root or this user, only the group
 * may read it besides (nobody may write it), the group is one of this
 * process's, and this is a pod (KUBERNETES_SERVICE_HOST, which Kubernetes
 * sets in every container).  Anywhere else a group-readable token is
 * refused: a user's group on a shared machine is not theirs alone. */
static bool pod_group_file(const struct stat *st)
{
    const char *pod = getenv("KUBERNETES_SERVICE_HOST");
    return pod && *pod && (st->st_uid == 0 || st->st_uid == geteuid()) &&
           !(st->st_mode & (S_IROTH | S_IWOTH | S_IXOTH | S_IWGRP)) && in_group(st->st_gid);
}

/* The file's first line into line; the checks of dt_token_from_file first.
 * O_NONBLOCK: a FIFO under that name must not block the open. */
static int read_first_line(const char *path, char *line, size_t size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return dt_error_set_errno(DT_EIO, errno, "cannot read the job token file %s", path);
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        rc = dt_error_set(DT_EINVAL, "the job token file %s is not a regular file", path);
    else if ((st.st_mode & S_IROTH) || ((st.st_mode & S_IRGRP) && !pod_group_file(&st)))
        rc = dt_error_set(DT_EINVAL,
                          "the job token file %s can be read by %s (mode %04o): anyone who reads it can "
                          "use the job's coordinator; run `chmod 600 %s` (or 400)",
                          path, st.st_mode & S_IROTH ? "every user" : "its group",
                          (unsigned)(st.st_mode & 07777), path);
    ssize_t n = 0;
    if (rc == 0) {
        do
            n = read(fd, line, size - 1);
        while (n < 0 && errno == EINTR);
        if (n < 0)
            rc = dt_error_set_errno(DT_EIO, errno, "cannot read the job token file %s", path);
    }
    close(fd);
    line[n > 0 ? n : 0] = 0;
    line[strcspn(line, "\r\n")] = 0;
    return rc;
}

int dt_token_from_file(const char *path, char out[DT_TOKEN_LEN + 1])
{
    char line[256];
    out[0] = 0;
    int rc = read_first_line(path, line, sizeof line);
    if (rc == 0)
        rc = dt_token_check(line, path);
    if (rc == 0)
        memcpy(out, line, DT_TOKEN_LEN + 1);
    memset(line, 0, sizeof line);
    return rc;
}

int dt_token_from_env(char out[DT_TOKEN_LEN + 1], bool *found)
{
    out[0] = 0;
    *found = false;
    const char *env = getenv("DTRAIN_JOB_TOKEN"), *file = getenv("DTRAIN_JOB_TOKEN_FILE");
    if (env && *env) {
        *found = true;
        int rc = dt_token_check(env, "DTRAIN_JOB_TOKEN");
        if (rc == 0)
            snprintf(out, DT_TOKEN_LEN + 1, "%s", env);
        return rc;
    }
    if (!file || !*file)
        return 0;
    *found = true;
    int rc = dt_token_from_file(file, out);
    return rc < 0 ? dt_error_prefix("DTRAIN_JOB_TOKEN_FILE") : 0;
}
