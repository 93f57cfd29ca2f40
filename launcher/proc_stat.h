/* proc_stat.h - one reader of /proc/<pid>/stat for the agent: the process
 * sweep (agent_spawn.c: who is a child of ours) and the watchdog
 * (agent_watchdog.c: stopped, in D, burning CPU or not).
 *
 * Not for anything beyond the few fields below (proc(5) lists the rest).
 */
#ifndef DT_PROC_STAT_H
#define DT_PROC_STAT_H

#include <sys/types.h>

struct dt_proc_stat {
    char state;            /* R S D Z T t X ... */
    pid_t ppid, pgrp;
    long long cpu_ticks;   /* utime + stime, in clock ticks */
};

/* Reads /proc/<pid>/stat (pid as its directory name); -1 when the process
 * is gone or the line does not parse. */
int dt_proc_stat_read(const char *pid, struct dt_proc_stat *out);

/* Parses the text of one stat line; exposed for tests.  The command name in
 * parentheses may hold spaces and ')' itself, so the fields are read after
 * the last ')'. */
int dt_proc_stat_parse(const char *line, struct dt_proc_stat *out);

#endif
