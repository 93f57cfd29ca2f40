/* heartbeat_fault.c - DTRAIN_FAULT (see heartbeat_fault.h). */
#include "worker/heartbeat_fault.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"
#include "base/clock.h"

int dt_heartbeat_fault_parse(const char *text, struct dt_heartbeat_fault *f)
{
    memset(f, 0, sizeof *f);
    char action[16];
    int rank, n = 0, delay = 0;
    long long step;
    int got = sscanf(text, "%15[a-z]:%d:%lld%n", action, &rank, &step, &n);
    if (got == 3 && text[n] == ':') {
        int m = 0;
        if (sscanf(text + n + 1, "%d%n", &delay, &m) != 1 || text[n + 1 + m] || delay < 0)
            got = 0;
        n = (int)strlen(text);
    }
    if (got != 3 || text[n] || rank < 0 || step < 1)
        return dt_error_set(
            DT_EINVAL,
            "DTRAIN_FAULT='%s': expected ACTION:RANK:STEP[:MS] with ACTION kill, stop or hang, "
            "RANK >= 0, STEP >= 1 (e.g. kill:2:17:5)",
            text);
    if (strcmp(action, "kill") == 0)
        f->action = DT_FAULT_KILL;
    else if (strcmp(action, "stop") == 0)
        f->action = DT_FAULT_STOP;
    else if (strcmp(action, "hang") == 0)
        f->action = DT_FAULT_HANG;
    else
        return dt_error_set(DT_EINVAL, "DTRAIN_FAULT='%s': unknown action '%s' (kill, stop or hang)", text,
                            action);
    if (delay && f->action != DT_FAULT_KILL)
        return dt_error_set(DT_EINVAL, "DTRAIN_FAULT='%s': only kill takes a delay", text);
    f->rank = rank;
    f->step = step;
    f->delay_ms = delay;
    return 0;
}

int dt_heartbeat_fault_from_env(int rank, int restart, struct dt_heartbeat_fault *f)
{
    memset(f, 0, sizeof *f);
    const char *v = getenv("DTRAIN_FAULT");
    if (!v || !*v)
        return 0;
    int rc = dt_heartbeat_fault_parse(v, f);
    if (rc == 0 && (f->rank != rank || restart != 0))
        f->action = DT_FAULT_NONE;
    return rc;
}

static void *kill_later(void *arg)
{
    int ms = (int)(intptr_t)arg;
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
    kill(getpid(), SIGKILL);
    return NULL;
}

void dt_heartbeat_fault_after_step(const struct dt_heartbeat_fault *f, int64_t step)
{
    if (f->action == DT_FAULT_NONE || step != f->step)
        return;
    const char *what = f->action == DT_FAULT_KILL   ? "SIGKILL"
                       : f->action == DT_FAULT_STOP ? "SIGSTOP"
                                                    : "hang";
    fprintf(stderr, "DTRAIN_FAULT: rank %d %s after step %lld (+%d ms) at unix time %.3f\n", f->rank, what,
            (long long)step, f->delay_ms, dt_clock_wall_s());
    fflush(stderr);
    pthread_t t;
    switch (f->action) {
    case DT_FAULT_KILL:
        if (f->delay_ms == 0 || pthread_create(&t, NULL, kill_later, (void *)(intptr_t)f->delay_ms) != 0)
            kill(getpid(), SIGKILL);
        else
            pthread_detach(t);
        break;
    case DT_FAULT_STOP:
        kill(getpid(), SIGSTOP);
        break;
    case DT_FAULT_HANG:
        for (;;)
            pause();
    case DT_FAULT_NONE:
        break;
    }
}
