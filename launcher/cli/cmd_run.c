/* cmd_run.c - `dtrain run [options] -- PROGRAM ARGS`: a job without a YAML file, torchrun's way.
 *
 * The flags become the job spec they stand for (--print-spec shows it), which
 * is then read exactly as `dtrain launch` reads a file (cli_spec.c: --set,
 * ${VAR}, the adapter's check) and run through the same path (cli_launch.c).
 * Only the keys a flag names are written, so everything else keeps the
 * spec's defaults.  Like torchrun, `-m MODULE` runs `python3 -m MODULE` and a
 * PROGRAM ending in .py runs under python3 ($PYTHON overrides it); any other
 * PROGRAM runs as it is (torchrun's --no-python).
 *
 * Not for options launch also takes (cli_launch.c) or for running ranks (the agent).
 */
#include "launcher/cli/cli.h"
#include "spec/jobspec.h"

#include "base/clock.h"
#include "base/yaml_escape.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct run_opts {
    const char *name, *nproc, *nnodes, *max_restarts, *auth, *backend, *scheduler, *port, *module;
    bool print_spec;
    char **program; /* the rest of argv */
    int n_program;
    struct dt_cli_spec spec;
    struct dt_cli_launch run;
};

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: dtrain run [options] [-m MODULE | PROGRAM] [--] [ARGS...]\n\n"
            "Runs PROGRAM (or `python3 -m MODULE`) on every rank without a job file, as torchrun does:\n"
            "the options stand for keys of a job spec (--print-spec shows it), which is then run\n"
            "exactly as `dtrain launch` runs a file.  A PROGRAM ending in .py runs under python3\n"
            "($PYTHON overrides it); any other runs as it is.  Options end at PROGRAM or --.\n\n"
            "  dtrain run -n 4 -- python3 train.py --lr 3e-4\n"
            "  dtrain run --nproc-per-node 2 train.py\n"
            "  dtrain run -n 2 -- sh -c 'echo $RANK of $WORLD_SIZE'\n\n"
            "Options (each sets the key in brackets):\n"
            "  -n, --nproc-per-node N  ranks per node, a number or gpu [nproc_per_node]\n"
            "                          (also --nproc_per_node, as torchrun spells it)\n"
            "  --nnodes N              nodes [nodes]; more than 1 needs a scheduler that places them\n"
            "  --max-restarts K        restarts of the whole group after a failure [max_restarts]\n"
            "  --auth none|token       token (the default) also runs PyTorch scripts: their store\n"
            "                          is their node's endpoint, open to the job's processes only;\n"
            "                          none lets anyone who reaches the port in [rendezvous.auth]\n"
            "  --backend NAME          auto, tcp, shm, nccl or mpi [backend]\n"
            "  --scheduler NAME        local (default), slurm, kubernetes or mpirun [scheduler]\n"
            "  --master-port PORT      the ranks' MASTER_PORT, 0 for a free one [rendezvous.port]\n"
            "                          (also --rdzv-port)\n"
            "  --name NAME             the job's name (default: from PROGRAM) [name]\n"
            "  -m MODULE               run `python3 -m MODULE ARGS` [command]\n"
            "  --set KEY.PATH=VALUE    any other key, as `dtrain launch --set` (repeatable)\n"
            "  --print-spec            print the job spec these options make and exit\n");
    dt_cli_launch_usage(out);
    fprintf(out, "  -h, --help              show this help\n\n"
                 "The exit status is launch's (docs/cli.md, Exit statuses).\n");
}

/* The flags that take a value, with the field it goes to. */
static const char **value_of(struct run_opts *o, const char *a)
{
    static const struct {
        const char *flag;
        size_t off;
    } flags[] = {
        {"-n", offsetof(struct run_opts, nproc)},
        {"--nproc-per-node", offsetof(struct run_opts, nproc)},
        {"--nproc_per_node", offsetof(struct run_opts, nproc)},
        {"--nnodes", offsetof(struct run_opts, nnodes)},
        {"--max-restarts", offsetof(struct run_opts, max_restarts)},
        {"--max_restarts", offsetof(struct run_opts, max_restarts)},
        {"--auth", offsetof(struct run_opts, auth)},
        {"--backend", offsetof(struct run_opts, backend)},
        {"--scheduler", offsetof(struct run_opts, scheduler)},
        {"--master-port", offsetof(struct run_opts, port)},
        {"--master_port", offsetof(struct run_opts, port)},
        {"--rdzv-port", offsetof(struct run_opts, port)},
        {"--name", offsetof(struct run_opts, name)},
        {"-m", offsetof(struct run_opts, module)},
    };
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        if (strcmp(a, flags[i].flag) == 0)
            return (const char **)((char *)o + flags[i].off);
    return NULL;
}

static int parse_args(int argc, char **argv, struct run_opts *o)
{
    int i = 1;
    for (; i < argc; i++) {
        char *a = argv[i], *eq = strchr(a, '=');
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        if (strcmp(a, "--print-spec") == 0) {
            o->print_spec = true;
            continue;
        }
        int taken = dt_cli_spec_arg(&o->spec, argc, argv, &i);
        if (!taken)
            taken = dt_cli_launch_arg(&o->run, "run", argc, argv, &i);
        if (taken == DT_EXIT_REFUSED)
            return taken;
        if (taken)
            continue;
        char flag[64];
        snprintf(flag, sizeof flag, "%.*s", eq && a[0] == '-' ? (int)(eq - a) : 63, a);
        const char **field = a[0] == '-' ? value_of(o, flag) : NULL;
        if (field && eq) {
            *field = eq + 1; /* --nproc-per-node=4 */
        } else if (field && i + 1 < argc) {
            *field = argv[++i];
        } else if (a[0] == '-' && a[1]) {
            return dt_cli_usage_error("run", "unknown option '%s'%s", a, field ? " (it needs a value)" : "");
        } else {
            break; /* PROGRAM: torchrun's options end at the script too */
        }
        if (field == &o->module) {
            i++;
            break;
        }
    }
    o->program = argv + i;
    o->n_program = argc - i;
    if (!o->module && o->n_program == 0)
        return dt_cli_usage_error("run", "which program? e.g. `dtrain run -n 2 -- python3 train.py`");
    return 0;
}

/* Whether PROGRAM is an interpreter, whose script (the next argument) names the job better. */
static bool interpreter(const char *prog)
{
    const char *slash = strrchr(prog, '/');
    prog = slash ? slash + 1 : prog;
    return !strncmp(prog, "python", 6) || !strcmp(prog, "sh") || !strcmp(prog, "bash");
}

/* A DNS-1123 label from PROGRAM's (or MODULE's, or an interpreter's script's)
 * name: "train_gpt.py" -> "train-gpt", "python3 -m pkg.train" -> "pkg". */
static void default_name(const struct run_opts *o, char *buf, size_t size)
{
    const char *p = o->module ? o->module : o->program[0];
    if (!o->module && o->n_program > 2 && interpreter(p) && !strcmp(o->program[1], "-m"))
        p = o->program[2];
    else if (!o->module && o->n_program > 1 && interpreter(p) && o->program[1][0] != '-')
        p = o->program[1];
    const char *slash = strrchr(p, '/');
    p = slash ? slash + 1 : p;
    size_t n = 0;
    for (; *p && *p != '.' && n + 1 < size && n < 40; p++) {
        char c = (char)tolower((unsigned char)*p);
        if (isalnum((unsigned char)c))
            buf[n++] = c;
        else if (n && buf[n - 1] != '-')
            buf[n++] = '-';
    }
    while (n && buf[n - 1] == '-')
        n--;
    buf[n] = '\0';
    if (!n || !isalpha((unsigned char)buf[0]))
        snprintf(buf, size, "run");
}

static void put_str(FILE *f, const char *s)
{
    (void)dt_yaml_put_quoted(f, s, strlen(s), DT_YAML_HEX);
}

static void put_command(const struct run_opts *o, FILE *f)
{
    const char *py = getenv("PYTHON") && *getenv("PYTHON") ? getenv("PYTHON") : "python3";
    size_t len = o->n_program ? strlen(o->program[0]) : 0;
    fputs("command: [", f);
    int first = 1;
    if (o->module || (len > 3 && strcmp(o->program[0] + len - 3, ".py") == 0)) {
        put_str(f, py);
        first = 0;
        if (o->module) {
            fputs(", \"-m\", ", f);
            put_str(f, o->module);
        }
    }
    for (int i = 0; i < o->n_program; i++) {
        fputs(first && i == 0 ? "" : ", ", f);
        put_str(f, o->program[i]);
    }
    fputs("]\n", f);
}

/* The spec the flags stand for: only the keys a flag names, scalars as typed text
 * (the spec's own reading checks them, with "dtrain run" as the file's name). */
static char *make_spec(const struct run_opts *o)
{
    char *text = NULL, name[48];
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return NULL;
    default_name(o, name, sizeof name);
    fputs("# the job `dtrain run` made from its options\nname: ", f);
    put_str(f, o->name ? o->name : name);
    fputc('\n', f);
    const struct {
        const char *key, *value;
    } keys[] = {{"scheduler", o->scheduler}, {"nodes", o->nnodes},           {"nproc_per_node", o->nproc},
                {"backend", o->backend},     {"max_restarts", o->max_restarts}};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (keys[i].value)
            fprintf(f, "%s: %s\n", keys[i].key, keys[i].value); /* plain: 4 is a number, as typed */
    if (o->auth || o->port) {
        fputs("rendezvous:\n", f);
        if (o->auth)
            fprintf(f, "  auth: %s\n", o->auth);
        if (o->port)
            fprintf(f, "  port: %s\n", o->port);
    }
    put_command(o, f);
    return fclose(f) == 0 ? text : (free(text), NULL);
}

static int run(int argc, char **argv)
{
    struct run_opts o = {.spec = {.cmd = "run"}, .run = {.start_mono = dt_clock_s()}};
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc;
    /* A flag's value is one plain YAML word: a line break or flow character would
     * write other keys than the flag names. */
    const char *vals[] = {o.nproc, o.nnodes, o.max_restarts, o.auth, o.backend, o.scheduler, o.port};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++)
        if (vals[i] && (!*vals[i] || strpbrk(vals[i], "\n\r:#{}[],&*!|>'\"%@`") || isspace((unsigned char)*vals[i])))
            return dt_cli_usage_error("run", "'%s' is not a value for that option", vals[i]);
    char *text = make_spec(&o);
    if (!text) {
        fprintf(stderr, "dtrain run: out of memory\n");
        return DT_EXIT_FAILED;
    }
    if (o.print_spec && o.spec.n_set == 0) {
        fputs(text, stdout);
        free(text);
        return DT_EXIT_OK;
    }
    struct dt_job *job = NULL;
    rc = dt_cli_spec_load(&o.spec, "<options>", text, NULL, &job);
    free(text);
    if (rc)
        return rc;
    if (o.print_spec) { /* with --set: the whole job, overrides applied */
        dt_job_print(job, stdout);
        dt_job_free(job);
        return DT_EXIT_OK;
    }
    job->derived = true; /* no file: nodes and ranks read the printed copy */
    int status = dt_cli_launch_job(job, &o.run, "run");
    dt_job_free(job);
    return status;
}

const struct dt_cli_command dt_cli_run = {
    .name = "run",
    .summary = "run a program on N ranks without a job file, torchrun's way (-n 4 -- python3 train.py)",
    .run = run,
    .usage = usage,
};
