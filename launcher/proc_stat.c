/* proc_stat.c - /proc/<pid>/stat for the agent's sweep and watchdog (proc_stat.h). */
#include "launcher/proc_stat.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int dt_proc_stat_parse(const char *line, struct dt_proc_stat *out)
{
    const char *rp = strrchr(line, ')');
    int ppid, pgrp;
    unsigned long long ut, st;
    /* after "pid (comm)": state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt utime stime */
    if (!rp || sscanf(rp + 1, " %c %d %d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &out->state, &ppid, &pgrp, &ut,
                      &st) != 5)
        return -1;
    out->ppid = ppid;
    out->pgrp = pgrp;
    out->cpu_ticks = (long long)(ut + st);
    return 0;
}

int dt_proc_stat_read(const char *pid, struct dt_proc_stat *out)
{
    char path[300], buf[1024];
    snprintf(path, sizeof path, "/proc/%s/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = 0;
    return dt_proc_stat_parse(buf, out);
}
