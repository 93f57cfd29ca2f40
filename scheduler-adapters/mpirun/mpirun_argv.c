/* mpirun_argv.c - the mpirun command line of a job, shared by `dtrain render
 * mpirun` and `dtrain launch`, so what a user reads is what runs.
 *
 *   mpirun -np <agents or ranks> --map-by ppr:<1 or nproc_per_node>:node
 *          [--hostfile F | --host h1,h2] [--allow-run-as-root] [--oversubscribe]
 *          [--mca btl_tcp_if_include IF --mca oob_tcp_if_include IF]
 *          -x NAME ... [extra_args] [/bin/sh -c SETUP dtrain-setup]
 *          <dtrain agent job.yaml | the ranks' program>
 *
 * --map-by ppr:K:node is what makes "one agent per node" (K = 1) or
 * "nproc_per_node ranks per node" true whatever the slot counts say; a
 * --map-by in extra_args replaces it.  --host entries without ":slots" get K
 * slots, because Open MPI gives a --host entry one slot and refuses to map
 * more.  One host playing several nodes (`hosts: [localhost:2]`, a test
 * machine) is mapped by slot instead: ppr:K:node would put K processes on it
 * and refuse the rest; its entry without ":slots" gets nodes x K.
 * --allow-run-as-root is passed only when the spec asks: Open MPI refuses root
 * on purpose, and dtrain should not quietly overrule it.
 *
 * Not for running mpirun (mpirun_submit.c).
 */
#include "scheduler-adapters/mpirun/mpirun_internal.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

static int push(struct dt_mpirun_line *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int push(struct dt_mpirun_line *l, const char *fmt, ...)
{
    if (l->argc + 2 > l->cap) {
        int cap = l->cap ? l->cap * 2 : 32;
        char **v = realloc(l->argv, (size_t)cap * sizeof *v);
        if (!v)
            return dt_error_set(DT_ENOMEM, "out of memory building the mpirun command line");
        l->argv = v;
        l->cap = cap;
    }
    va_list ap;
    va_start(ap, fmt);
    int rc = vasprintf(&l->argv[l->argc], fmt, ap);
    va_end(ap);
    if (rc < 0)
        return dt_error_set(DT_ENOMEM, "out of memory building the mpirun command line");
    l->argv[++l->argc] = NULL;
    return 0;
}

void dt_mpirun_line_free(struct dt_mpirun_line *l)
{
    for (int i = 0; i < l->argc; i++)
        free(l->argv[i]);
    free(l->argv);
    memset(l, 0, sizeof *l);
}

bool dt_mpirun_ranks_are_mpi(const struct dt_job *job) { return job->backend == DT_BACKEND_MPI; }

static bool user_maps(const struct dt_mpirun_spec *m)
{
    for (int i = 0; m && i < m->n_extra_args; i++)
        if (!strcmp(m->extra_args[i], "--map-by") || !strcmp(m->extra_args[i], "-map-by") ||
            !strncmp(m->extra_args[i], "--map-by=", 9))
            return true;
    return false;
}

/* One --host entry for a job of several nodes: they all run there. */
static bool one_host(const struct dt_job *job)
{
    const struct dt_mpirun_spec *m = job->mpirun;
    return m && !m->hostfile && m->n_hosts == 1 && job->nodes > 1;
}

/* "a,b" for --host, each entry with :K slots unless it names its own. */
static int push_hosts(struct dt_mpirun_line *l, const struct dt_mpirun_spec *m, int per_node)
{
    size_t len = 1;
    for (int i = 0; i < m->n_hosts; i++)
        len += strlen(m->hosts[i]) + 16;
    char *s = malloc(len), *p = s;
    if (!s)
        return dt_error_set(DT_ENOMEM, "out of memory building the mpirun command line");
    for (int i = 0; i < m->n_hosts; i++) {
        p += sprintf(p, "%s%s", i ? "," : "", m->hosts[i]);
        if (per_node > 1 && !strchr(m->hosts[i], ':'))
            p += sprintf(p, ":%d", per_node);
    }
    int rc = push(l, "--host");
    if (rc == 0)
        rc = push(l, "%s", s);
    free(s);
    return rc;
}

static int push_options(struct dt_mpirun_line *l, const struct dt_job *job, int per_node, bool tag)
{
    const struct dt_mpirun_spec *m = job->mpirun;
    int rc = 0;
    if (!user_maps(m) && (rc = push(l, "--map-by")) == 0)
        rc = one_host(job) ? push(l, "slot") : push(l, "ppr:%d:node", per_node);
    if (rc == 0 && m && m->hostfile && (rc = push(l, "--hostfile")) == 0)
        rc = push(l, "%s", m->hostfile);
    if (rc == 0 && m && m->n_hosts)
        rc = push_hosts(l, m, one_host(job) ? job->nodes * per_node : per_node);
    if (rc == 0 && m && m->allow_run_as_root)
        rc = push(l, "--allow-run-as-root");
    if (rc == 0 && m && m->oversubscribe)
        rc = push(l, "--oversubscribe");
    if (rc == 0 && m && m->n_interfaces) {
        /* Both the data path (btl) and the runtime's own wire-up (oob). */
        size_t len = 1;
        for (int i = 0; i < m->n_interfaces; i++)
            len += strlen(m->interfaces[i]) + 1;
        char *ifs = calloc(1, len);
        for (int i = 0; ifs && i < m->n_interfaces; i++)
            strcat(strcat(ifs, i ? "," : ""), m->interfaces[i]);
        if (!ifs)
            return dt_error_set(DT_ENOMEM, "out of memory building the mpirun command line");
        const char *keys[] = {"btl_tcp_if_include", "oob_tcp_if_include"};
        for (int k = 0; k < 2 && rc == 0; k++)
            if ((rc = push(l, "--mca")) == 0 && (rc = push(l, "%s", keys[k])) == 0)
                rc = push(l, "%s", ifs);
        free(ifs);
    }
    if (rc == 0 && tag)
        rc = push(l, "--tag-output");
    return rc;
}

int dt_mpirun_build(const struct dt_job *job, const struct dt_placement *pl,
                    const struct dt_mpirun_call *call, struct dt_mpirun_line *out)
{
    memset(out, 0, sizeof *out);
    const struct dt_mpirun_spec *m = job->mpirun;
    bool mpi = dt_mpirun_ranks_are_mpi(job);
    int per_node = mpi ? pl->nproc : 1;
    int rc = push(out, "%s", m && m->program ? m->program : "mpirun");
    if (rc == 0 && (rc = push(out, "-np")) == 0)
        rc = push(out, "%d", mpi ? pl->world : pl->nnodes);
    if (rc == 0)
        rc = push_options(out, job, per_node, call->tag_output);
    for (int i = 0; rc == 0 && call->export_names && call->export_names[i]; i++)
        if ((rc = push(out, "-x")) == 0)
            rc = push(out, "%s", call->export_names[i]);
    for (int i = 0; rc == 0 && m && i < m->n_extra_args; i++)
        rc = push(out, "%s", m->extra_args[i]);
    /* setup: on each host, before its agent (or MPI rank), in a shell that then execs it */
    char *setup = dt_adapter_setup_script(job);
    if (rc == 0 && job->setup && !setup)
        rc = dt_error_set(DT_ENOMEM, "out of memory building the mpirun command line");
    if (rc == 0 && setup && (rc = push(out, "/bin/sh")) == 0 && (rc = push(out, "-c")) == 0 &&
        (rc = push(out, "%s", setup)) == 0)
        rc = push(out, DT_ADAPTER_SETUP_ARG0);
    free(setup);
    /* MPI ranks run under `dtrain mpirank --` (mpirun_rank.c) when the call
     * asks: RANK and friends for any program, and exit records. */
    if (rc == 0 && mpi && call->rank_wrapper && (rc = push(out, "%s", call->dtrain)) == 0 &&
        (rc = push(out, "mpirank")) == 0)
        rc = push(out, "--");
    if (rc == 0 && mpi && job->command) {
        for (int i = 0; rc == 0 && job->command[i]; i++)
            rc = push(out, "%s", job->command[i]);
    } else if (rc == 0) {
        if ((rc = push(out, "%s", call->dtrain)) == 0 && (rc = push(out, "%s", mpi ? "worker" : "agent")) == 0)
            rc = push(out, "%s", call->job_path);
        for (int i = 0; rc == 0 && !mpi && call->agent_args && call->agent_args[i]; i++)
            rc = push(out, "%s", call->agent_args[i]);
    }
    if (rc)
        dt_mpirun_line_free(out);
    return rc;
}

void dt_mpirun__print_line(FILE *out, char *const *argv)
{
    for (int i = 0; argv[i]; i++) {
        fputs(i ? " " : "", out);
        dt_adapter_put_word(out, argv[i]); /* one line, whatever the words hold */
    }
    fputc('\n', out);
}

static void copy_host(const char *s, size_t n, char *out, size_t size)
{
    size_t k = 0;
    while (k < n && s[k] && s[k] != ':' && !isspace((unsigned char)s[k]))
        k++;
    snprintf(out, size, "%.*s", (int)k, s);
}

int dt_mpirun_first_host(const struct dt_mpirun_spec *m, char *out, size_t size)
{
    out[0] = 0;
    if (m && m->n_hosts) {
        copy_host(m->hosts[0], strlen(m->hosts[0]), out, size);
        return 0;
    }
    if (!m || !m->hostfile)
        return 0;
    FILE *f = fopen(m->hostfile, "r");
    if (!f)
        return dt_error_set_errno(DT_ENOTFOUND, errno, "mpirun.hostfile %s: cannot open it", m->hostfile);
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        const char *p = line;
        while (isspace((unsigned char)*p))
            p++;
        if (*p && *p != '#') {
            copy_host(p, strlen(p), out, size);
            break;
        }
    }
    fclose(f);
    if (!out[0])
        return dt_error_set(DT_EINVAL, "mpirun.hostfile %s: names no host", m->hostfile);
    return 0;
}
