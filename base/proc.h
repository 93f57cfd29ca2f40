/* proc.h - processes: how one ended, what /proc says of one, the job
 * signals caught through a pipe, and running a helper program to its end.
 *
 * The agent (launcher/) forks and supervises ranks; the scheduler adapters
 * run helper programs (sbatch, scontrol, kubectl, mpirun in front of a job's
 * agents).  Both need the same few facts about processes, so they are here,
 * once: the words for an exit ("killed by SIGSEGV (segmentation fault)"), the
 * shell's exit status (the code, or 128 + signal), the fields of
 * /proc/<pid>/stat, and a self-pipe for signals so a poll loop never misses
 * one between a check and a wait.
 *
 * Not for forking ranks: the agent alone does that, with the care a rank
 * needs (a session each, PR_SET_PDEATHSIG, only async-signal-safe calls
 * after fork in a threaded process).
 */
#ifndef DT_PROC_H
#define DT_PROC_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* --- what ps and pgrep -f show -------------------------------------------- */

/* Remembers where this process's command line lives (main's argv, one
 * contiguous area the kernel shows as /proc/self/cmdline), so that a fork
 * that never execs can show its own name instead of its parent's. */
void dt_proc_keep_argv(int argc, char **argv);
/* Names this process `title`: its comm (PR_SET_NAME: ps -e, top) and its
 * command line (the argv area overwritten, the rest zeroed: ps -f, pgrep -f),
 * so `pkill -f "dtrain launch"` aimed at a launcher does not hit its forks.
 * Only async-signal-safe calls: a fork of a threaded process may call it. */
void dt_proc_retitle(const char *title);

/* --- how a process ended ------------------------------------------------- */

/* "SIGSEGV", "SIGKILL", ... or "signal 42" (written into buf). */
const char *dt_proc_signal_name(int sig, char *buf, size_t size);
/* "exited with code 3", "killed by SIGSEGV (segmentation fault), core dumped".
 * sigkill_hint adds the usual cause of a SIGKILL nobody expected (the
 * kernel's out-of-memory killer); leave it out when the cause is known. */
void dt_proc_describe(int wstatus, bool sigkill_hint, char *buf, size_t size);
/* The shell's exit status for a waitpid(2) status: the code, or 128 + signal. */
int dt_proc_exit_status(int wstatus);

/* --- /proc/<pid>/stat ---------------------------------------------------- */

struct dt_proc_stat {
    char state; /* R S D Z T t X ... */
    pid_t ppid, pgrp;
    long long cpu_ticks; /* utime + stime, in clock ticks */
    char comm[64];       /* the command name (a thread's name for a task) */
};

/* Reads /proc/<entry>/stat, entry being a pid ("123") or a thread
 * ("123/task/124"); -1 when it is gone or the line does not parse. */
int dt_proc_stat_read(const char *entry, struct dt_proc_stat *out);
/* Parses one stat line.  The command name in parentheses may hold spaces and
 * ')' itself, so the fields are read after the last ')'. */
int dt_proc_stat_parse(const char *line, struct dt_proc_stat *out);

/* Whether process pid catches sig, as the kernel says (/proc/<pid>/status
 * SigCgt: a hex mask, bit sig-1 set while a handler is installed): 1 or 0,
 * -1 when it is gone.  Ignored or default signals are not caught. */
int dt_proc_catches(pid_t pid, int sig);

/* --- signals through a pipe ---------------------------------------------- */

#define DT_PROC_SIGNALS_MAX 8

/* While caught, each signal of the set writes its number as one byte to a
 * non-blocking pipe whose read end is `fd`, and SIGPIPE is ignored (a closed
 * console must not kill the reader of its children's output).  One set at a
 * time in a process. */
struct dt_proc_signals {
    int fd;
    int w;
    int n;
    int sigs[DT_PROC_SIGNALS_MAX];
    struct sigaction saved[DT_PROC_SIGNALS_MAX], saved_pipe;
};
int dt_proc_signals_catch(const int *sigs, int n, struct dt_proc_signals *s);
/* Puts the dispositions back and closes the pipe. */
void dt_proc_signals_release(struct dt_proc_signals *s);
/* Waits up to timeout_ms on the pipe for a signal other than SIGCHLD, and
 * returns it (0: none came), its byte put back in the pipe for the caller's
 * own handling.  SIGCHLD bytes are dropped: this is for a caller with no
 * child to reap, between a job's attempts, where a late one (the last child's
 * SIGCHLD can land after the pipe was read and the child reaped) must not read
 * as an interruption. */
int dt_proc_signals_wait(int fd, int timeout_ms);

/* --- a helper program, run to its end ------------------------------------ */

/* What becomes of the helper's stdout (io[0]) and stderr (io[1]). */
enum dt_proc_io {
    DT_PROC_INHERIT, /* ours: it writes to our console */
    DT_PROC_CAPTURE, /* into captured[i] */
    DT_PROC_LINES,   /* line by line to on_line */
};

struct dt_proc_run {
    char *const *argv; /* argv[0] is looked up on PATH */
    char *const *envp; /* NULL: this process's environment */
    const char *in;    /* written to its stdin, which is then closed; NULL: /dev/null */
    size_t in_len;
    enum dt_proc_io io[2];
    /* DT_PROC_LINES: stream 0 (stdout) or 1 (stderr); see base/lines.h. */
    void (*on_line)(void *ctx, int stream, const char *line, size_t len, bool complete);
    void *ctx;
    double timeout_s; /* > 0: killed (SIGKILL) after this long, DT_ETIMEDOUT */
    /* > 0: it runs in a session of its own (so a Ctrl-C at the terminal
     * reaches us only) and dies with us (PR_SET_PDEATHSIG); SIGINT, SIGTERM,
     * SIGHUP or SIGQUIT to us becomes SIGTERM to it, SIGKILL to its process
     * group grace_s later or at a second signal. */
    double grace_s;
    /* > 0, set by the caller's on_line (dt_clock_s() seconds): when the clock
     * passes it, SIGTERM to it and SIGKILL to its process group grace_s (at
     * least 1 s) later, as for a signal to us, but `signal` stays 0 (a helper
     * that said it is ending and then does not: mpirun waiting for a host it
     * cannot reach). */
    double stop_at;
    /* out */
    char *captured[2]; /* DT_PROC_CAPTURE: what it wrote, NUL-terminated; free() them */
    int signal;        /* the first signal passed on to it, or 0 */
};

/* Returns its exit status (the code, or 128 + signal), or a negative DT_E*
 * code: DT_ENOTFOUND when argv[0] is not on PATH ("<prog> was not found on
 * PATH"), DT_ETIMEDOUT, DT_EIO when it could not be started. */
int dt_proc_run(struct dt_proc_run *r);

/* Blocks SIGPIPE in the calling thread, for a thread that writes to sockets
 * (a libuv loop): a write to a peer that closed then fails with EPIPE instead
 * of killing the process, whatever the process's SIGPIPE disposition is at
 * that moment (the agent ignores it only while it supervises ranks, and a
 * loop thread can outlive that).  The signal stays pending on the thread and
 * goes with it. */
void dt_proc_thread_block_sigpipe(void);

#endif
