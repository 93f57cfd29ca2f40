/* cmd_validate.c - `dtrain validate job.yaml...`: load each spec, say what it describes or where it is wrong.
 *
 * Exit status: 0 when every file is valid, 2 when any is not (or on a usage
 * error), so scripts and CI can gate on it.  A file is read as launch and
 * render read it (cli_spec.c): --set, every problem, the adapter's check.  The hidden --list-keys prints the
 * parser's key paths for the schema test.
 *
 * Not for the rules themselves: they live in the key tables (jobspec*.c).
 */
#include "base/error.h"
#include "launcher/cli/cli.h"
#include "scheduler-adapters/adapter.h"
#include "spec/jobspec.h"
#include "spec/jobspec_yaml.h"
#include "spec/placement.h"
#include "spec/trainer_spec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: dtrain validate [--print] [--set KEY.PATH=VALUE ...] JOB.yaml [JOB.yaml ...]\n\n"
            "Checks job spec files without running anything: YAML syntax, every key\n"
            "against the known ones, types, ranges, and the rules between keys (command\n"
            "or trainer, backend and scheduler, ...), and what `dtrain launch` and `dtrain render`\n"
            "would refuse in it for its scheduler (a local spec of several nodes is checked\n"
            "as `dtrain agent` runs it on each node).  For each valid file prints one line:\n"
            "  job.yaml: ok: fmnist, local, 1 node x 4 ranks, command: python3 train.py\n"
            "For an invalid one prints every problem, in file order: where and what was expected, e.g.\n"
            "  job.yaml:4:3: unknown key 'nproc_pernode' in the top level; did you mean 'nproc_per_node'?\n\n"
            "Options:\n"
            "  --print     after the summary, print the spec with every default filled in\n"
            "              (valid YAML: it loads back to the same job)\n"
            "  --set KEY.PATH=VALUE  override a key as if the file said it (repeatable), e.g.\n"
            "              --set trainer.steps=100 --set env.OMP_NUM_THREADS=4\n"
            "  -h, --help  show this help\n\n"
            "A file name of - reads standard input.  Files over 1 MiB are refused.\n"
            "Exit status: 0 if every file is valid, 2 if any is not or on a usage error.\n"
            "The keys are described in README.md (Job spec reference) and configs/job.schema.json.\n");
}

static void print_program(const struct dt_job *job)
{
    if (!job->command) {
        printf("trainer: %s on %s, %s", job->trainer->model.type,
               job->trainer->device == DT_DEVICE_CUDA ? "cuda" : "cpu", job->trainer->data.dataset);
        return;
    }
    printf("command:");
    size_t shown = 0;
    char q[80];
    for (int i = 0; i < job->command_argc; i++) {
        if (shown > 60) {
            printf(" ...");
            break;
        }
        printf(" %s", dt_yaml_quote(job->command[i], q, sizeof q));
        shown += strlen(q) + 1;
    }
}

static void print_summary(const char *path, const struct dt_job *job, int as_comment)
{
    /* With --print the summary is a YAML comment, so the output stays loadable:
     * one line, whatever the path and the command hold. */
    char q[4200];
    printf("%s%s: ok: %s, %s, ", as_comment ? "# " : "", dt_yaml_quote(path, q, sizeof q), job->name,
           dt_scheduler_name(job->scheduler));
    if (dt_job_elastic(job))
        printf("%d:%d nodes x ", job->nodes_min, job->nodes);
    else
        printf("%d node%s x ", job->nodes, job->nodes == 1 ? "" : "s");
    struct dt_placement pl;
    dt_placement_resolve(job, DT_PLACE_SPEC, &pl);
    if (pl.source == DT_NPROC_PER_NODE)
        printf("one rank per GPU, ");
    else
        printf("%d rank%s, ", pl.nproc, pl.nproc == 1 ? "" : "s");
    print_program(job);
    if (job->scheduler == DT_SCHED_LOCAL && job->nodes > 1)
        printf("; runs as one `dtrain agent` per node (`dtrain launch` runs one machine)");
    printf("\n");
}

/* A local spec of several nodes (a range among them) is what `dtrain agent`
 * runs on each node, though `dtrain launch` runs one machine and refuses it
 * (the local adapter's check): validate reads it as the agents do, with
 * every other rule, and says how it runs. */
static const struct dt_adapter local_agents = {.name = "local", .scheduler = DT_SCHED_LOCAL};

static const struct dt_adapter *agents_spec(const struct dt_cli_spec *s, const char *path, const char *text)
{
    struct dt_job_load_opts o = {.set = s->set, .n_set = s->n_set};
    struct dt_job *job = NULL;
    int rc = text ? dt_job_load_string_with(text, strlen(text), path, &o, &job) : dt_job_load_with(path, &o, &job);
    bool agents = rc == 0 && job->scheduler == DT_SCHED_LOCAL && job->nodes > 1;
    dt_job_free(job);
    return agents ? &local_agents : NULL;
}

static int validate_one(const struct dt_cli_spec *s, const char *path, int print)
{
    struct dt_job *job = NULL;
    int rc;
    if (strcmp(path, "-") == 0) {
        static char buf[1024 * 1024 + 1];
        size_t len = fread(buf, 1, sizeof buf, stdin);
        if (len == sizeof buf || memchr(buf, 0, len)) {
            fprintf(stderr, "<stdin>: %s\n", len == sizeof buf ? "more than 1048576 bytes; a job spec may be at "
                                                                 "most 1048576 bytes (1 MiB)"
                                                               : "a NUL byte: a job spec is a text file");
            return DT_EXIT_REFUSED;
        }
        buf[len] = '\0';
        rc = dt_cli_spec_load(s, "<stdin>", buf, agents_spec(s, "<stdin>", buf), &job);
    } else {
        rc = dt_cli_spec_load(s, path, NULL, agents_spec(s, path, NULL), &job);
    }
    if (rc)
        return rc;
    print_summary(path, job, print);
    if (print)
        dt_job_print(job, stdout);
    dt_job_free(job);
    return 0;
}

static int run(int argc, char **argv)
{
    enum { LIST_KEYS = DT_CLI_OPT_OWN, PRINT };
    static const struct option own[] = {
        {"list-keys", no_argument, NULL, LIST_KEYS}, {"print", no_argument, NULL, PRINT}, {0}};
    static const struct option *const tables[] = {own, dt_cli_spec_options, NULL};
    int print = 0, n_files = 0, status = 0;
    const char **files = calloc((size_t)argc, sizeof *files);
    struct dt_cli_spec s = {.cmd = "validate"};
    struct dt_cli_opts o;
    dt_cli_opts_init(&o, "validate", "", false, tables);
    const char *v;
    /* Every option first, then the files: --set applies to each file wherever it stands. */
    for (int ch; files && (ch = dt_cli_opts_next(&o, argc, argv, &v)) != -1;) {
        int taken = ch == DT_CLI_OPT_ERROR ? DT_EXIT_REFUSED : dt_cli_spec_opt(&s, ch, v);
        if (taken == DT_EXIT_REFUSED) {
            free(files);
            return taken;
        }
        if (ch == LIST_KEYS) {
            dt_job_list_keys(stdout);
            free(files);
            return 0;
        }
        print |= ch == PRINT;
        if (ch == DT_CLI_OPT_OPERAND)
            files[n_files++] = v;
    }
    for (int i = 0; i < n_files; i++)
        if (validate_one(&s, files[i], print))
            status = DT_EXIT_REFUSED;
    free(files);
    if (!n_files)
        return dt_cli_usage_error("validate", "no job spec file given");
    return status;
}

const struct dt_cli_command dt_cli_validate = {
    .name = "validate",
    .summary = "check job spec files and say what each describes",
    .run = run,
    .usage = usage,
};
