/* agent_oom.c - was it the kernel's out-of-memory killer?
 *
 * A rank killed by SIGKILL that dtrain did not kill was most often killed by
 * the OOM killer, but a person should not have to guess or read dmesg: the
 * memory cgroup counts OOM kills (cgroup v2 memory.events, v1
 * memory.oom_control, both "oom_kill N").  The agent reads the counter when an
 * attempt starts and again when a rank dies of SIGKILL.
 *
 * Not for limiting memory or moving ranks between cgroups.
 */
#include "launcher/agent.h"

#include "base/error.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int dt_agent_oom_parse(const char *text, long long *count)
{
    const char *p = text;
    while (p && *p) {
        if (strncmp(p, "oom_kill ", 9) == 0) {
            char *end;
            long long v = strtoll(p + 9, &end, 10);
            if (end == p + 9 || v < 0)
                break;
            *count = v;
            return 0;
        }
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    return dt_error_set(DT_ENOTFOUND, "no oom_kill counter in the memory cgroup's events");
}

static int read_counter(const char *path, long long *count)
{
    char buf[1024];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return DT_ENOTFOUND;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return DT_ENOTFOUND;
    buf[n] = 0;
    return dt_agent_oom_parse(buf, count);
}

int dt_agent_oom_count(long long *count)
{
    char line[1024], path[1400];
    FILE *f = fopen("/proc/self/cgroup", "re");
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *c1 = strchr(line, ':');
        char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        *c2 = 0;
        const char *controllers = c1 + 1, *cg = c2 + 1;
        if (strcmp(line, "0") == 0 && !*controllers)
            snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.events", cg);
        else if (strstr(controllers, "memory"))
            snprintf(path, sizeof path, "/sys/fs/cgroup/memory%s/memory.oom_control", cg);
        else
            continue;
        if (read_counter(path, count) == 0) {
            fclose(f);
            return 0;
        }
    }
    if (f)
        fclose(f);
    /* In a container the cgroup paths above are the host's; its own root is mounted instead. */
    if (read_counter("/sys/fs/cgroup/memory.events", count) == 0 ||
        read_counter("/sys/fs/cgroup/memory/memory.oom_control", count) == 0)
        return 0;
    return dt_error_set(DT_ENOTFOUND, "this machine's memory cgroup does not count OOM kills");
}
