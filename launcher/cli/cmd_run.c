/* cmd_run.c - `dtrain run [options] PROGRAM ARGS`: a job without a YAML file, torchrun's command line.
 *
 * Every flag of torchrun 2.x is read with torchrun's meaning, in its dash
 * and underscore spellings, and from its PET_* variable where torchrun has
 * one (docs/torchrun.md says what each does here).  The flags become the job
 * spec they stand for (--print-spec shows it), which is then read exactly as
 * `dtrain launch` reads a file (cli_spec.c: --set, ${VAR}, the adapter's
 * check) and run through the same path (cli_launch.c): one node as launch
 * runs it, or this node's part of several as `dtrain agent` runs it, where
 * the rendezvous flags place it (run_rdzv.c).  Only the keys a flag names
 * are written, so everything else keeps the spec's defaults.
 *
 * The program: `-m MODULE` runs `python3 -u -m MODULE`, a PROGRAM ending in
 * .py runs under `python3 -u` (PYTHON_EXEC, as torchrun reads it, or $PYTHON
 * names another interpreter), --run-path runs the script through runpy, and
 * any other PROGRAM runs as it is (torchrun's --no-python, which forces it).
 *
 * Not for options launch also takes (cli_launch.c) or for running ranks (the agent).
 */
#include "launcher/cli/cli.h"
#include "launcher/cli/run_rdzv.h"
#include "spec/jobspec.h"
#include "spec/placement.h"

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "base/yaml_escape.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The options of `dtrain run`: torchrun's, then dtrain's own. */
enum key {
    K_NNODES, K_NPROC, K_RDZV_BACKEND, K_RDZV_ENDPOINT, K_RDZV_ID, K_RDZV_CONF, K_STANDALONE, K_MAX_RESTARTS,
    K_MONITOR_INTERVAL, K_START_METHOD, K_EVENT_LOG_HANDLER, K_ROLE, K_MODULE, K_NO_PYTHON, K_RUN_PATH,
    K_REDIRECTS, K_TEE, K_LINE_PREFIX, K_LOCAL_RANKS_FILTER, K_DUP_STDOUT, K_DUP_STDERR, K_NODE_RANK,
    K_MASTER_ADDR, K_MASTER_PORT, K_LOCAL_ADDR, K_LOGS_SPECS, K_NUMA_BINDING, K_SIGNALS, K_SHUTDOWN_TIMEOUT,
    K_VIRTUAL_LOCAL_RANK, K_PRINT_COMPLETION,
    K_TORCHRUN_END, /* dtrain's own below: no underscore spelling, no PET_ variable */
    K_NAME = K_TORCHRUN_END, K_AUTH, K_BACKEND, K_SCHEDULER, K_TOKEN_FILE, K_PRINT_SPEC, K_RDZV_PORT, K_HELP,
    K_COUNT
};

static const struct {
    const char *name; /* the dash spelling */
    int arg;          /* required_argument or no_argument */
    bool pet;         /* torchrun reads PET_<NAME> (argparse_util.py's env and check_env) */
} flags[K_COUNT] = {
    [K_NNODES] = {"nnodes", 1, 1},
    [K_NPROC] = {"nproc-per-node", 1, 1},
    [K_RDZV_BACKEND] = {"rdzv-backend", 1, 1},
    [K_RDZV_ENDPOINT] = {"rdzv-endpoint", 1, 1},
    [K_RDZV_ID] = {"rdzv-id", 1, 1},
    [K_RDZV_CONF] = {"rdzv-conf", 1, 1},
    [K_STANDALONE] = {"standalone", 0, 1},
    [K_MAX_RESTARTS] = {"max-restarts", 1, 1},
    [K_MONITOR_INTERVAL] = {"monitor-interval", 1, 1},
    [K_START_METHOD] = {"start-method", 1, 1},
    [K_EVENT_LOG_HANDLER] = {"event-log-handler", 1, 1},
    [K_ROLE] = {"role", 1, 1},
    [K_MODULE] = {"module", 0, 1},
    [K_NO_PYTHON] = {"no-python", 0, 1},
    [K_RUN_PATH] = {"run-path", 0, 1},
    [K_REDIRECTS] = {"redirects", 1, 1},
    [K_TEE] = {"tee", 1, 1},
    [K_LINE_PREFIX] = {"log-line-prefix-template", 1, 1},
    [K_LOCAL_RANKS_FILTER] = {"local-ranks-filter", 1, 1},
    [K_DUP_STDOUT] = {"duplicate-stdout-filters", 1, 1},
    [K_DUP_STDERR] = {"duplicate-stderr-filters", 1, 1},
    [K_NODE_RANK] = {"node-rank", 1, 1},
    [K_MASTER_ADDR] = {"master-addr", 1, 1},
    [K_MASTER_PORT] = {"master-port", 1, 1},
    [K_LOCAL_ADDR] = {"local-addr", 1, 1},
    [K_LOGS_SPECS] = {"logs-specs", 1, 0},
    [K_NUMA_BINDING] = {"numa-binding", 1, 0},
    [K_SIGNALS] = {"signals-to-handle", 1, 1},
    [K_SHUTDOWN_TIMEOUT] = {"shutdown-timeout", 1, 1},
    [K_VIRTUAL_LOCAL_RANK] = {"virtual-local-rank", 0, 1},
    [K_PRINT_COMPLETION] = {"print-completion", 1, 0},
    [K_NAME] = {"name", 1, 0},
    [K_AUTH] = {"auth", 1, 0},
    [K_BACKEND] = {"backend", 1, 0},
    [K_SCHEDULER] = {"scheduler", 1, 0},
    [K_TOKEN_FILE] = {"token-file", 1, 0},
    [K_PRINT_SPEC] = {"print-spec", 0, 0},
    [K_RDZV_PORT] = {"rdzv-port", 1, 0}, /* dtrain's older name of --master-port */
    [K_HELP] = {"help", 0, 0},
};

struct run_opts {
    const char *v[K_COUNT]; /* each option's value ("1" for a flag that is on), NULL: not given */
    char **program;         /* the rest of argv: PROGRAM (or MODULE, or the script) and its arguments */
    int n_program;
    int nproc;              /* --nproc-per-node resolved (DT_NPROC_GPU for gpu), 0: not given */
    struct dt_cli__rdzv rdzv;
    struct dt_cli_node node;
    char ranks[4096];       /* --local-ranks-filter as the global ranks it shows */
    struct dt_cli_spec spec;
    struct dt_cli_launch run;
    const char *origin[64]; /* the option each line of the spec came from (dt_cli_spec.line_origin) */
};

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: dtrain run [options] [-m] PROGRAM [ARGS...]\n\n"
            "Runs PROGRAM on every rank without a job file, with torchrun's command line: every\n"
            "torchrun flag in its dash or underscore spelling, or its PET_* variable (docs/torchrun.md).\n"
            "The options stand for keys of a job spec (--print-spec shows it), which is then run\n"
            "exactly as `dtrain launch` runs a file.  A PROGRAM ending in .py runs under `python3 -u`\n"
            "(PYTHON_EXEC or $PYTHON names another); any other runs as it is.  Options end at PROGRAM.\n\n"
            "  dtrain run --nproc-per-node 4 train.py --lr 3e-4\n"
            "  dtrain run --standalone -n cpu -m pkg.train\n"
            "  dtrain run --nnodes 2 --node-rank 0 --master-addr node0 --master-port 29500 train.py\n"
            "  dtrain run --nnodes 1:4 --rdzv-backend c10d --rdzv-endpoint node0:29400 --rdzv-id job7 train.py\n\n"
            "torchrun's options (each sets the key in brackets):\n"
            "  -n, --nproc-per-node N|auto|cpu|gpu   ranks per node [nproc_per_node]\n"
            "  --nnodes N|MIN:MAX      nodes; several: this node's part, placed by the flags below [nodes]\n"
            "  --node-rank K           static rendezvous: this node (default 0)\n"
            "  --master-addr H, --master-port P   static: node 0's address (127.0.0.1:29500) [rendezvous.port]\n"
            "  --rdzv-backend static|c10d   c10d: the endpoint's host hosts the coordinator, nodes come as\n"
            "                          they come (default: static, or c10d for --nnodes MIN:MAX)\n"
            "  --rdzv-endpoint H[:P]   the coordinator's address (c10d port default 29400)\n"
            "  --rdzv-id ID            the run id every node shares [TORCHELASTIC_RUN_ID]\n"
            "  --rdzv-conf K=V,...     join_timeout [rendezvous.timeout], last_call_timeout, is_host\n"
            "  --standalone            one node, a free port (what dtrain does without rendezvous flags)\n"
            "  --max-restarts K        restarts of the whole group after a failure [max_restarts]\n"
            "  --shutdown-timeout S    SIGTERM to SIGKILL when ranks are stopped [grace_period]\n"
            "  -m, --module            PROGRAM is a module: `python3 -u -m MODULE ARGS` [command]\n"
            "  --no-python             run PROGRAM as it is, even a .py file\n"
            "  --run-path              run the script through runpy.run_path in `python3 -u`\n"
            "  --log-dir DIR           where run directories go (also --log_dir)\n"
            "  --local-ranks-filter L  show only these local ranks' output (as --ranks)\n"
            "  -r, --redirects N, -t, --tee N, --log-line-prefix-template T   [console.*]\n"
            "  --role NAME [role], --signals-to-handle LIST [signals_to_handle]\n"
            "  --virtual-local-rank    LOCAL_RANK=0 and one GPU per rank [virtual_local_rank]\n"
            "  --print-completion SHELL   print a bash, zsh or tcsh completion script and exit\n"
            "  --monitor-interval, --start-method, --event-log-handler, --local-addr,\n"
            "  --numa-binding, --duplicate-stdout-filters, --duplicate-stderr-filters,\n"
            "  --logs-specs default: accepted\n"
            "                          with one warning, no effect here (docs/torchrun.md)\n\n"
            "dtrain's options:\n"
            "  --auth none|token       token (the default) also runs PyTorch scripts: their store\n"
            "                          is their node's endpoint, open to the job's processes only;\n"
            "                          none lets anyone who reaches the port in [rendezvous.auth]\n"
            "  --token-file FILE       the job token every node shares (several nodes, auth: token);\n"
            "                          else DTRAIN_JOB_TOKEN(_FILE), else ~/.config/dtrain/job-token\n"
            "                          (which nodes all on this machine make if it is missing)\n"
            "  --backend NAME          auto, tcp, shm, nccl or mpi [backend]\n"
            "  --scheduler NAME        local (default), slurm, kubernetes or mpirun [scheduler]\n"
            "  --name NAME             the job's name (default: from PROGRAM) [name]\n"
            "  --set KEY.PATH=VALUE    any other key, as `dtrain launch --set` (repeatable)\n"
            "  --print-spec            print the job spec these options make and exit\n");
    dt_cli_launch_usage(out);
    fprintf(out, "  -h, --help              show this help\n\n"
                 "torchrun's underscore spellings work too:");
    int col = 41;
    for (int k = 0; k < K_TORCHRUN_END; k++) {
        if (!strchr(flags[k].name, '-'))
            continue;
        char name[48];
        int n = snprintf(name, sizeof name, " --%s,", flags[k].name);
        for (char *p = name + 3; *p; p++)
            *p = *p == '-' ? '_' : *p;
        if (col + n > 100) {
            fputs("\n ", out);
            col = 1;
        }
        fputs(name, out);
        col += n;
    }
    fprintf(out, " --log_dir.\nThe PET_<FLAG> variables torchrun reads stand for a flag not given "
                 "(PET_NPROC_PER_NODE=4).\n\n"
                 "The exit status is launch's (docs/cli.md, Exit statuses).\n");
}

/* --- reading the options ---------------------------------------------------- */

/* The long options: each flag in its dash and (torchrun's) underscore spelling. */
static void long_options(struct option *out, char names[][40])
{
    size_t n = 0;
    for (int k = 0; k < K_COUNT; k++) {
        out[n++] = (struct option){flags[k].name, flags[k].arg, NULL, DT_CLI_OPT_OWN + k};
        if (k < K_TORCHRUN_END && strchr(flags[k].name, '-')) {
            snprintf(names[k], 40, "%s", flags[k].name);
            for (char *p = names[k]; *p; p++)
                *p = *p == '-' ? '_' : *p;
            out[n++] = (struct option){names[k], flags[k].arg, NULL, DT_CLI_OPT_OWN + k};
        }
    }
    out[n++] = (struct option){"master_port", 1, NULL, DT_CLI_OPT_OWN + K_MASTER_PORT};
    out[n] = (struct option){0};
}

/* torchrun's defaults from the environment: PET_<FLAG> (argparse_util.py). */
static void from_env(struct run_opts *o)
{
    for (int k = 0; k < K_TORCHRUN_END; k++) {
        if (!flags[k].pet)
            continue;
        char var[48] = "PET_";
        for (size_t i = 0; flags[k].name[i] && i + 5 < sizeof var; i++)
            var[4 + i] = flags[k].name[i] == '-' ? '_' : (char)toupper((unsigned char)flags[k].name[i]);
        const char *v = getenv(var);
        if (!v || !*v)
            continue;
        if (flags[k].arg)
            o->v[k] = v;
        else if (atoi(v) != 0) /* check_env: bool(int(value)) */
            o->v[k] = "1";
    }
    if (getenv("PET_LOG_DIR") && *getenv("PET_LOG_DIR"))
        o->run.log_dir = getenv("PET_LOG_DIR");
    if (!o->v[K_LINE_PREFIX] && getenv("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"))
        o->v[K_LINE_PREFIX] = getenv("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE");
}

static int option(struct run_opts *o, int ch, const char *v)
{
    static const int shorts[][2] = {{'n', K_NPROC}, {'m', K_MODULE}, {'r', K_REDIRECTS},
                                    {'t', K_TEE},   {'h', K_HELP}};
    for (size_t i = 0; i < sizeof shorts / sizeof shorts[0]; i++)
        ch = ch == shorts[i][0] ? DT_CLI_OPT_OWN + shorts[i][1] : ch;
    int taken = dt_cli_spec_opt(&o->spec, ch, v);
    if (!taken)
        taken = dt_cli_launch_opt(&o->run, "run", ch, v);
    if (taken)
        return taken == 1 ? 0 : taken;
    int k = ch - DT_CLI_OPT_OWN;
    if (k == K_RDZV_PORT)
        k = K_MASTER_PORT;
    if (k < 0 || k >= K_COUNT)
        return dt_cli_usage_error("run", "unknown option");
    o->v[k] = flags[k].arg ? v : "1";
    return 0;
}

static int parse_args(int argc, char **argv, struct run_opts *o)
{
    static struct option own[2 * K_COUNT + 2];
    static char underscore[K_COUNT][40];
    long_options(own, underscore);
    const struct option *const tables[] = {own, dt_cli_spec_options, dt_cli_launch_options, NULL};
    struct dt_cli_opts s;
    dt_cli_opts_init(&s, "run", "n:mr:t:h" DT_CLI_LAUNCH_SHORTS, true, tables);
    from_env(o);
    const char *v;
    for (int ch; (ch = dt_cli_opts_next(&s, argc, argv, &v)) != -1;) {
        int rc = ch == DT_CLI_OPT_ERROR ? DT_EXIT_REFUSED : option(o, ch, v);
        if (rc)
            return rc;
    }
    o->program = argv + optind;
    o->n_program = argc - optind;
    if (o->v[K_HELP] || o->v[K_PRINT_COMPLETION])
        return 0;
    if (o->n_program == 0)
        return dt_cli_usage_error("run", "which program? e.g. `dtrain run -n 2 train.py` or `dtrain run -n 2 -- "
                                         "python3 train.py`");
    return 0;
}

/* --- --print-completion ---------------------------------------------------------- */

/* Generated from the launcher/cmd_*.c files (see the Makefile), NULL-terminated. */
extern const struct dt_cli_command *const dt_cli_commands[];

/* The words to complete: every command, and `dtrain run`'s long options. */
static void completion_words(FILE *out, bool commands, const char *dashes)
{
    for (size_t i = 0; commands && dt_cli_commands[i]; i++)
        fprintf(out, "%s%s", i ? " " : "", dt_cli_commands[i]->name);
    for (int k = 0; !commands && k < K_COUNT; k++)
        fprintf(out, "%s%s%s", k ? " " : "", dashes, flags[k].name);
    for (const struct option *l = dt_cli_launch_options; !commands && l->name; l++)
        fprintf(out, " %s%s", dashes, l->name);
    if (!commands)
        fprintf(out, " %sset", dashes);
}

/* torchrun's --print-completion SHELL: a script that completes dtrain's
 * commands and `dtrain run`'s options (zsh through its bash emulation). */
static int print_completion(const char *shell)
{
    if (!strcmp(shell, "tcsh")) {
        fputs("# dtrain's tcsh completion (dtrain run --print-completion tcsh): source it from ~/.tcshrc\n"
              "complete dtrain 'p/1/(", stdout);
        completion_words(stdout, true, "");
        fputs(")/' 'c/--/(", stdout);
        completion_words(stdout, false, "");
        fputs(")/'\n", stdout);
        return 0;
    }
    if (strcmp(shell, "bash") && strcmp(shell, "zsh"))
        return dt_cli_usage_error("run", "--print-completion '%s': expected bash, zsh or tcsh", shell);
    printf("# dtrain's %s completion (dtrain run --print-completion %s): source it from ~/.%src\n%s"
           "_dtrain() {\n"
           "    local cur=${COMP_WORDS[COMP_CWORD]}\n"
           "    if [ \"$COMP_CWORD\" -eq 1 ]; then\n"
           "        COMPREPLY=($(compgen -W \"",
           shell, shell, shell, strcmp(shell, "zsh") ? "" : "autoload -U +X bashcompinit && bashcompinit\n");
    completion_words(stdout, true, "");
    fputs("\" -- \"$cur\"))\n"
          "    elif [ \"${COMP_WORDS[1]}\" = run ] && [ \"${cur#-}\" != \"$cur\" ]; then\n"
          "        COMPREPLY=($(compgen -W \"",
          stdout);
    completion_words(stdout, false, "--");
    fputs("\" -- \"$cur\"))\n"
          "    else\n"
          "        COMPREPLY=($(compgen -f -- \"$cur\"))\n"
          "    fi\n"
          "}\n"
          "complete -o default -F _dtrain dtrain\n",
          stdout);
    return 0;
}

/* --- what each torchrun flag means here -------------------------------------- */

/* Flags dtrain takes and cannot honour, or honours in its own way: said once. */
static void say_no_effect(const struct run_opts *o)
{
    static const struct {
        int k;
        const char *why;
    } notes[] = {
        {K_MONITOR_INTERVAL, "the agent learns of a rank's exit at once (SIGCHLD); it does not poll"},
        {K_START_METHOD, "it is how torchrun starts a Python function; dtrain runs a program, always by "
                         "fork and exec"},
        {K_LOCAL_ADDR, "ranks reach the coordinator at --master-addr or the --rdzv-endpoint host, and other "
                       "nodes need no address of this one"},
        {K_NUMA_BINDING, "dtrain binds no rank to CPUs; use numactl or taskset in the command, or Slurm's "
                         "slurm.cpu_bind"},
        {K_DUP_STDOUT, "every rank's stdout is in its log file, attempt_<k>/rank_<n>.out; grep it there"},
        {K_DUP_STDERR, "every rank's stderr is in its log file, attempt_<k>/rank_<n>.err; grep it there"},
        {K_LOGS_SPECS, "torchrun's own log layout; dtrain writes each rank's output to <log dir>/<name>-<run "
                       "id>/attempt_<k>/rank_<n>.{out,err}"},
    };
    for (size_t i = 0; i < sizeof notes / sizeof notes[0]; i++)
        if (o->v[notes[i].k])
            dt_log_warn("--%s %s: no effect in dtrain: %s", flags[notes[i].k].name, o->v[notes[i].k], notes[i].why);
    if (o->v[K_EVENT_LOG_HANDLER] && strcmp(o->v[K_EVENT_LOG_HANDLER], "null") != 0)
        dt_log_warn("--event-log-handler %s: no effect in dtrain, which has no event handlers; summary.json "
                    "in the run directory records how the run went",
                    o->v[K_EVENT_LOG_HANDLER]);
}

/* Flags whose meaning dtrain cannot give: refused with the reason. */
static int refuse_unsupported(const struct run_opts *o)
{
    /* "default" is the one entry point PyTorch registers (torchrun.logs_specs:
     * DefaultLogsSpecs), the layout torchrun uses without the flag. */
    if (o->v[K_LOGS_SPECS] && strcmp(o->v[K_LOGS_SPECS], "default") != 0)
        return dt_cli_usage_error("run", "--logs-specs %s names a Python LogsSpecs plugin of torchrun, which dtrain "
                                         "cannot load (it takes 'default'); its logs are <log dir>/<name>-<run id>/"
                                         "attempt_<k>/rank_<n>.{out,err}",
                                  o->v[K_LOGS_SPECS]);
    if (o->v[K_MODULE] && o->v[K_NO_PYTHON])
        return dt_cli_usage_error("run", "--no-python and --module (-m) together: a module runs under Python");
    static const char *const methods[] = {"spawn", "fork", "forkserver", NULL};
    static const char *const numa[] = {"node", "socket", "exclusive", "core-complex", NULL};
    const struct {
        int k;
        const char *const *words;
    } choices[] = {{K_START_METHOD, methods}, {K_NUMA_BINDING, numa}};
    for (size_t i = 0; i < 2; i++) {
        const char *v = o->v[choices[i].k];
        bool ok = !v;
        for (int w = 0; v && choices[i].words[w]; w++)
            ok |= !strcmp(v, choices[i].words[w]);
        if (!ok)
            return dt_cli_usage_error("run", "--%s '%s': expected %s", flags[choices[i].k].name, v,
                                      choices[i].k == K_START_METHOD ? "spawn, fork or forkserver"
                                                                     : "node, socket, exclusive or core-complex");
    }
    char *end;
    if (o->v[K_MONITOR_INTERVAL] && (strtod(o->v[K_MONITOR_INTERVAL], &end) < 0 || *end || end == o->v[K_MONITOR_INTERVAL]))
        return dt_cli_usage_error("run", "--monitor-interval '%s': expected seconds", o->v[K_MONITOR_INTERVAL]);
    return 0;
}

/* -n auto and -n cpu count this machine (placement.h); a number and gpu go to
 * the spec as written, which checks them. */
static int resolve_nproc(struct run_opts *o)
{
    const char *w = o->v[K_NPROC];
    if (!w || (strcmp(w, "auto") && strcmp(w, "cpu") && strcmp(w, "xpu")))
        return 0;
    if (dt_placement_nproc_word(w, &o->nproc) < 0)
        return dt_cli_usage_error("run", "--nproc-per-node: %s", dt_error_last());
    if (o->nproc > 0)
        dt_log_info("--nproc-per-node %s: %d rank%s, one per CPU of this machine", w, o->nproc,
                    o->nproc == 1 ? "" : "s");
    return 0;
}

/* --local-ranks-filter 0,2: the global ranks with those local ranks on any
 * node, as --ranks takes them (every node has nproc_per_node ranks). */
static int local_ranks(struct run_opts *o)
{
    const char *f = o->v[K_LOCAL_RANKS_FILTER];
    if (!f)
        return 0;
    if (o->run.ranks)
        return dt_cli_usage_error("run", "--ranks and --local-ranks-filter together: give one");
    int nproc = o->nproc ? o->nproc : o->v[K_NPROC] ? atoi(o->v[K_NPROC]) : 1;
    if (nproc == DT_NPROC_GPU || (o->v[K_NPROC] && !strcmp(o->v[K_NPROC], "gpu")))
        nproc = dt_placement_count_gpus();
    size_t used = 0;
    for (const char *p = f; *p;) {
        char *end;
        long l = strtol(p, &end, 10);
        if (end == p || l < 0 || (*end && *end != ','))
            return dt_cli_usage_error("run", "--local-ranks-filter '%s': expected local ranks like 0,1,2", f);
        for (int node = 0; l < nproc && node < o->rdzv.nmax && used < sizeof o->ranks; node++)
            used += (size_t)snprintf(o->ranks + used, sizeof o->ranks - used, "%s%ld", used ? "," : "",
                                     node * nproc + l);
        p = *end ? end + 1 : end;
    }
    if (!used)
        return dt_cli_usage_error("run", "--local-ranks-filter '%s': no such local rank (%d per node)", f, nproc);
    o->run.ranks = o->ranks;
    return 0;
}

/* --- the job spec the options stand for ---------------------------------------- */

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
    const char *p = o->program[0];
    if (!o->v[K_MODULE] && o->n_program > 2 && interpreter(p) && !strcmp(o->program[1], "-m"))
        p = o->program[2];
    else if (!o->v[K_MODULE] && o->n_program > 1 && interpreter(p) && o->program[1][0] != '-')
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

/* runpy.run_path as torchrun's --run-path runs it, in a fresh interpreter. */
#define RUN_PATH_CODE "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"

/* The argv every rank runs: torchrun's cmd and cmd_args (run.py's config_from_args). */
static void put_command(const struct run_opts *o, FILE *f)
{
    const char *py = getenv("PYTHON_EXEC") && *getenv("PYTHON_EXEC") ? getenv("PYTHON_EXEC")
                     : getenv("PYTHON") && *getenv("PYTHON")         ? getenv("PYTHON")
                                                                     : "python3";
    size_t len = strlen(o->program[0]);
    bool script = len > 3 && strcmp(o->program[0] + len - 3, ".py") == 0;
    bool python = o->v[K_RUN_PATH] || o->v[K_MODULE] || (script && !o->v[K_NO_PYTHON]);
    fputs("command: [", f);
    if (python) {
        put_str(f, py);
        fputs(", \"-u\", ", f);
        if (o->v[K_RUN_PATH]) {
            fputs("\"-c\", ", f);
            put_str(f, RUN_PATH_CODE);
            fputs(", ", f);
        } else if (o->v[K_MODULE]) {
            fputs("\"-m\", ", f);
        }
    }
    for (int i = 0; i < o->n_program; i++) {
        fputs(i ? ", " : "", f);
        put_str(f, o->program[i]);
    }
    fputs("]\n", f);
}

/* The rendezvous keys: --master-port (one node), --rdzv-conf's timeouts, --auth. */
static void put_rendezvous(const struct run_opts *o, FILE *f)
{
    const struct dt_cli__rdzv_conf *c = &o->rdzv.conf;
    const char *join = c->join_timeout ? c->join_timeout : c->timeout;
    bool port = !o->rdzv.several && o->rdzv.port_given;
    if (!o->v[K_AUTH] && !port && !join && !c->last_call_timeout)
        return;
    fputs("rendezvous:\n", f);
    if (o->v[K_AUTH])
        fprintf(f, "  auth: %s\n", o->v[K_AUTH]);
    if (port)
        fprintf(f, "  port: %d\n", o->rdzv.port);
    if (join) /* torchrun's seconds, as a duration the spec checks */
        fprintf(f, "  timeout: %ss\n", join);
    if (c->last_call_timeout)
        fprintf(f, "  last_call_timeout: %ss\n", c->last_call_timeout);
}

/* The keys torchrun's output and signal flags stand for (jobspec_torchrun.c). */
static void put_torchrun_keys(const struct run_opts *o, FILE *f)
{
    if (o->v[K_ROLE]) {
        fputs("role: ", f);
        put_str(f, o->v[K_ROLE]);
        fputc('\n', f);
    }
    if (o->v[K_VIRTUAL_LOCAL_RANK])
        fputs("virtual_local_rank: true\n", f);
    if (o->v[K_SIGNALS]) {
        fputs("signals_to_handle: ", f);
        put_str(f, o->v[K_SIGNALS]);
        fputc('\n', f);
    }
    if (!o->v[K_REDIRECTS] && !o->v[K_TEE] && !o->v[K_LINE_PREFIX])
        return;
    fputs("console:\n", f);
    const struct {
        const char *key;
        int k;
    } c[] = {{"redirects", K_REDIRECTS}, {"tee", K_TEE}, {"line_prefix", K_LINE_PREFIX}};
    for (size_t i = 0; i < 3; i++)
        if (o->v[c[i].k]) {
            fprintf(f, "  %s: ", c[i].key);
            put_str(f, o->v[c[i].k]);
            fputc('\n', f);
        }
}

static char *make_spec(const struct run_opts *o)
{
    char *text = NULL, name[48], nproc[16] = "", nodes[32] = "", grace[40] = "";
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return NULL;
    default_name(o, name, sizeof name);
    fputs("# the job `dtrain run` made from its options\nname: ", f);
    put_str(f, o->v[K_NAME] ? o->v[K_NAME] : name);
    fputc('\n', f);
    if (o->nproc)
        snprintf(nproc, sizeof nproc, o->nproc == DT_NPROC_GPU ? "gpu" : "%d", o->nproc);
    if (o->v[K_NNODES])
        snprintf(nodes, sizeof nodes, o->rdzv.nmin < o->rdzv.nmax ? "%d:%d" : "%d", o->rdzv.nmin, o->rdzv.nmax);
    if (o->v[K_SHUTDOWN_TIMEOUT])
        snprintf(grace, sizeof grace, "%.30ss", o->v[K_SHUTDOWN_TIMEOUT]);
    const struct {
        const char *key, *value;
    } keys[] = {{"scheduler", o->v[K_SCHEDULER]},
                {"nodes", nodes[0] ? nodes : NULL},
                {"nproc_per_node", nproc[0] ? nproc : o->v[K_NPROC]},
                {"backend", o->v[K_BACKEND]},
                {"max_restarts", o->v[K_MAX_RESTARTS]},
                {"grace_period", grace[0] ? grace : NULL}};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (keys[i].value)
            fprintf(f, "%s: %s\n", keys[i].key, keys[i].value); /* plain: 4 is a number, as typed */
    put_rendezvous(o, f);
    put_torchrun_keys(o, f);
    put_command(o, f);
    return fclose(f) == 0 ? text : (free(text), NULL);
}

/* Which option each line of the spec came from, so that a value the spec
 * refuses is reported under the option the user typed, not "<options>:3:17". */
static void note_origins(struct run_opts *o, const char *text)
{
    static const struct {
        const char *key, *opt;
    } from[] = {{"name:", "--name"},
                {"scheduler:", "--scheduler"},
                {"nodes:", "--nnodes"},
                {"nproc_per_node:", "--nproc-per-node"},
                {"backend:", "--backend"},
                {"max_restarts:", "--max-restarts"},
                {"grace_period:", "--shutdown-timeout"},
                {"  auth:", "--auth"},
                {"  port:", "--master-port"},
                {"  timeout:", "--rdzv-conf join_timeout"},
                {"  last_call_timeout:", "--rdzv-conf last_call_timeout"},
                {"role:", "--role"},
                {"virtual_local_rank:", "--virtual-local-rank"},
                {"signals_to_handle:", "--signals-to-handle"},
                {"  redirects:", "-r/--redirects"},
                {"  tee:", "-t/--tee"},
                {"  line_prefix:", "--log-line-prefix-template"}};
    int line = 1;
    for (const char *p = text; *p && line < (int)(sizeof o->origin / sizeof o->origin[0]); line++) {
        for (size_t i = 0; i < sizeof from / sizeof from[0]; i++)
            if (!strncmp(p, from[i].key, strlen(from[i].key)))
                o->origin[line] = from[i].opt;
        const char *nl = strchr(p, '\n');
        p = nl ? nl + 1 : p + strlen(p);
    }
    o->spec.line_origin = o->origin;
    o->spec.n_line_origin = line;
}

/* A flag's value that goes into the spec unquoted is one plain YAML word: a
 * line break or flow character would write other keys than the flag names. */
static int check_plain(const struct run_opts *o)
{
    const int plain[] = {K_NPROC, K_MAX_RESTARTS, K_AUTH, K_BACKEND, K_SCHEDULER, K_SHUTDOWN_TIMEOUT};
    const struct dt_cli__rdzv_conf *c = &o->rdzv.conf;
    const char *vals[8] = {c->join_timeout ? c->join_timeout : c->timeout, c->last_call_timeout};
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++)
        vals[2 + i] = o->v[plain[i]];
    for (size_t i = 0; i < 8; i++)
        if (vals[i] && (!*vals[i] || strpbrk(vals[i], "\n\r:#{}[],&*!|>'\"%@` \t")))
            return dt_cli_usage_error("run", "'%s' is not a value for that option", vals[i]);
    /* torchrun's seconds, which the spec gets with an "s" appended */
    const char *secs[][2] = {{"--shutdown-timeout", o->v[K_SHUTDOWN_TIMEOUT]},
                             {"--rdzv-conf join_timeout", c->join_timeout},
                             {"--rdzv-conf timeout", c->timeout},
                             {"--rdzv-conf last_call_timeout", c->last_call_timeout}};
    for (size_t i = 0; i < sizeof secs / sizeof secs[0]; i++) {
        char *end;
        if (secs[i][1] && (strtod(secs[i][1], &end) < 0 || end == secs[i][1] || *end))
            return dt_cli_usage_error("run", "%s '%s': expected seconds, like 30", secs[i][0], secs[i][1]);
    }
    return 0;
}

/* --- where this node stands ------------------------------------------------- */

static int place(struct run_opts *o)
{
    const char *sched = o->v[K_SCHEDULER];
    struct dt_cli__rdzv_flags f = {.nnodes = o->v[K_NNODES],
                                   .backend = o->v[K_RDZV_BACKEND],
                                   .endpoint = o->v[K_RDZV_ENDPOINT],
                                   .id = o->v[K_RDZV_ID],
                                   .conf = o->v[K_RDZV_CONF],
                                   .node_rank = o->v[K_NODE_RANK],
                                   .master_addr = o->v[K_MASTER_ADDR],
                                   .master_port = o->v[K_MASTER_PORT],
                                   .standalone = o->v[K_STANDALONE] != NULL,
                                   .local_scheduler = !sched || !strcmp(sched, "local")};
    int rc = dt_cli__rdzv_resolve(&f, &o->rdzv);
    if (rc)
        return rc;
    const char *id = o->rdzv.run_id;
    for (const char *p = id; p && *p; p++)
        if (!isalnum((unsigned char)*p) && !strchr("._-", *p))
            return dt_cli_usage_error("run", "--rdzv-id '%s': it names the run directory, so letters, digits, "
                                             "'.', '_' and '-' only",
                                      id);
    if (id && (strlen(id) > 48 || id[0] == '.'))
        return dt_cli_usage_error("run", "--rdzv-id '%s': at most 48 characters, not starting with '.'", id);
    return 0;
}

/* The node of a local job (cli.h): one, or this one of several. */
static int node_of(struct run_opts *o, const struct dt_job *job, char token[DT_TOKEN_LEN + 1])
{
    struct dt_cli__rdzv *r = &o->rdzv;
    o->node = (struct dt_cli_node){.who = "dtrain run",
                                   .node_rank = r->node_rank,
                                   .nnodes = r->several ? r->nmax : 1,
                                   .nnodes_min = r->several ? r->nmin : 1,
                                   .bind = r->several ? r->bind : "127.0.0.1",
                                   .host = r->host,
                                   .port = r->several ? r->port : job->rendezvous.port,
                                   .run_id = r->run_id,
                                   .auth_off = "pass --auth none to dtrain run (the spec's rendezvous.auth)",
                                   .own_terminal = true};
    if (r->several && job->rendezvous.auth == DT_AUTH_TOKEN) {
        if (dt_cli__rdzv_token(o->v[K_TOKEN_FILE], r->one_machine, token) < 0) {
            fprintf(stderr, "dtrain run: %s\n", dt_error_last());
            return DT_EXIT_REFUSED;
        }
        o->node.token = token;
    }
    double timeout = job->rendezvous.timeout_s > 0 ? job->rendezvous.timeout_s : 60;
    if (r->take_node_rank && dt_cli__rdzv_take_node_rank(r, o->node.token, timeout) < 0) {
        fprintf(stderr, "dtrain run: %s\n", dt_error_last());
        return DT_EXIT_FAILED;
    }
    o->node.node_rank = r->node_rank;
    o->run.node = &o->node;
    return 0;
}

static int launch(struct run_opts *o, struct dt_job *job)
{
    char token[DT_TOKEN_LEN + 1] = "";
    int status = 0;
    bool local = job->scheduler == DT_SCHED_LOCAL && !o->run.dry_run;
    if (local)
        status = node_of(o, job, token);
    if (status == 0) {
        job->derived = true; /* no file: nodes and ranks read the printed copy */
        status = dt_cli_launch_job(job, &o->run, "run");
    }
    memset(token, 0, sizeof token);
    return status;
}

static int run(int argc, char **argv)
{
    struct run_opts o = {.spec = {.cmd = "run"}, .run = {.start_mono = dt_clock_s()}};
    int rc = parse_args(argc, argv, &o);
    if (rc || o.v[K_HELP]) {
        if (o.v[K_HELP])
            usage(stdout);
        return rc;
    }
    if (o.v[K_PRINT_COMPLETION])
        return print_completion(o.v[K_PRINT_COMPLETION]);
    if ((rc = refuse_unsupported(&o)) || (rc = resolve_nproc(&o)) || (rc = place(&o)) || (rc = local_ranks(&o)) ||
        (rc = check_plain(&o)))
        goto out;
    say_no_effect(&o);
    char *text = make_spec(&o);
    if (!text) {
        fprintf(stderr, "dtrain run: out of memory\n");
        rc = DT_EXIT_FAILED;
        goto out;
    }
    if (o.v[K_PRINT_SPEC] && o.spec.n_set == 0) {
        fputs(text, stdout);
        free(text);
        goto out;
    }
    struct dt_job *job = NULL;
    o.spec.one_node_of_several = o.rdzv.several;
    note_origins(&o, text);
    rc = dt_cli_spec_load(&o.spec, "<options>", text, NULL, &job);
    free(text);
    if (rc)
        goto out;
    if (o.v[K_PRINT_SPEC]) /* with --set: the whole job, overrides applied */
        dt_job_print(job, stdout);
    else
        rc = launch(&o, job);
    dt_job_free(job);
out:
    dt_cli__rdzv_release(&o.rdzv);
    return rc;
}

const struct dt_cli_command dt_cli_run = {
    .name = "run",
    .summary = "run a program on N ranks without a job file, with torchrun's command line",
    .run = run,
    .usage = usage,
    .own_help = true,
};
