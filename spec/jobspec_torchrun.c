/* jobspec_torchrun.c - the keys that torchrun's launch flags stand for and the rest of the spec lacks.
 *
 *   role               --role: ROLE_NAME of every rank
 *   console.redirects  -r/--redirects: streams that go to the log files only
 *   console.tee        -t/--tee: streams that go to the console and the log files
 *   console.line_prefix --log-line-prefix-template
 *   signals_to_handle  --signals-to-handle: the signals the agent passes on
 *
 * `dtrain run` writes them from its flags, a job file may say them too; the
 * agent reads them from the loaded job (jobspec.h).  A stream setting is
 * torchrun's Std: 0 none, 1 stdout, 2 stderr, 3 both, for every local rank
 * or as "LOCAL_RANK:N" pairs ("0:3,1:2"); dt_job_std_of reads it for one rank.
 *
 * Not for what the agent does with them (launcher/agent/).
 */
#include "spec/jobspec.h"
#include "spec/jobspec_keys.h"
#include "spec/jobspec_yaml.h"

#include "base/error.h"

#include <ctype.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

/* --- streams: torchrun's Std ----------------------------------------------- */

int dt_job_std_of(const char *std, int local_rank)
{
    if (!std || !*std)
        return 0;
    if (!strchr(std, ':'))
        return std[0] - '0';
    for (const char *p = std; *p;) {
        char *end;
        long r = strtol(p, &end, 10);
        int v = end[1] - '0';
        if (r == local_rank)
            return v;
        p = end + 2;
        p += *p == ',';
    }
    return 0;
}

/* "0".."3", or "R:N" pairs: torchrun's _VALUE_REGEX and _MAPPING_REGEX (a
 * local rank of several digits allowed), each local rank once. */
static bool std_ok(const char *s)
{
    if (s[0] >= '0' && s[0] <= '3' && !s[1])
        return true;
    for (const char *p = s;;) {
        if (!isdigit((unsigned char)*p))
            return false;
        char *end;
        long r = strtol(p, &end, 10);
        if (end - p > 4 || end[0] != ':' || end[1] < '0' || end[1] > '3' || (end[2] && end[2] != ','))
            return false;
        for (const char *q = s; q < p;) { /* listed before? */
            char *qe;
            if (strtol(q, &qe, 10) == r)
                return false;
            q = qe + 2 + (qe[2] == ',');
        }
        if (!end[2])
            return true;
        p = end + 3;
    }
}

static int set_std(struct dt_spec_ctx *ctx, const struct dt_spec_key *k, const struct dt_ynode *v, void *obj)
{
    char **field = (char **)((char *)obj + k->off), q[96];
    if (v->kind != DT_Y_SCALAR || dt_ynode_is_null(v) || !std_ok(v->text))
        return dt_spec_fail(ctx, v, k->name,
                            "expected 0 (none), 1 (stdout), 2 (stderr), 3 (both), or LOCAL_RANK:N pairs like "
                            "\"0:3,1:2\", got %s",
                            dt_spec_got(v, q, sizeof q));
    char *copy = strdup(v->text);
    if (!copy)
        return dt_error_set(DT_ENOMEM, "out of memory reading the job spec");
    free(*field);
    *field = copy;
    return 0;
}

static void release_redirects(void *obj)
{
    struct dt_console_spec *c = obj;
    free(c->redirects);
    c->redirects = NULL;
}

static void release_tee(void *obj)
{
    struct dt_console_spec *c = obj;
    free(c->tee);
    c->tee = NULL;
}

static int print_std(const char *s, char *buf, size_t size)
{
    snprintf(buf, size, strchr(s ? s : "", ':') ? "\"%s\"" : "%s", s ? s : "0");
    return 1;
}

static int print_redirects(const void *obj, char *buf, size_t size)
{
    return print_std(((const struct dt_console_spec *)obj)->redirects, buf, size);
}

static int print_tee(const void *obj, char *buf, size_t size)
{
    return print_std(((const struct dt_console_spec *)obj)->tee, buf, size);
}

#define STD_SCHEMA                                                                                           \
    "{\"anyOf\": [{\"type\": \"integer\", \"minimum\": 0, \"maximum\": 3}, {\"type\": \"string\", "           \
    "\"pattern\": \"^([0-3]|[0-9]{1,4}:[0-3](,[0-9]{1,4}:[0-3])*)$\"}]}"

static const struct dt_spec_key console_keys[] = {
    DT_KEY("redirects", DT_KT_CUSTOM, struct dt_console_spec, redirects, .set = set_std,
           .release = release_redirects, .print = print_redirects, .def = "0",
           .form = "0–3, or `LOCAL_RANK:N` pairs like `\"0:3,1:2\"`", .schema = STD_SCHEMA,
           .help = "The rank streams that go to the rank's log files only, not to the console (torchrun's "
                   "`-r/--redirects`): 0 none, 1 stdout, 2 stderr, 3 both, for every local rank or per local "
                   "rank. A rank left out by `--ranks` (`--local-ranks-filter`) shows neither stream."),
    DT_KEY("tee", DT_KT_CUSTOM, struct dt_console_spec, tee, .set = set_std, .release = release_tee,
           .print = print_tee, .def = "0", .form = "0–3, or `LOCAL_RANK:N` pairs like `\"0:3,1:2\"`",
           .schema = STD_SCHEMA,
           .help = "The rank streams that go to the console and the log files (torchrun's `-t/--tee`), "
                   "written as `redirects`. dtrain writes every stream to its log file whatever this says."),
    DT_KEY("line_prefix", DT_KT_STR, struct dt_console_spec, line_prefix, .unset = "`[rank N] `",
           .flags = DT_KF_VERBATIM,
           .example = "\"${role_name}${local_rank}: \"",
           .help = "The prefix of each rank's console line (torchrun's `--log-line-prefix-template`, "
                   "`${role_name}`, `${rank}`, `${local_rank}` and `${hostname}` replaced as Python's "
                   "`string.Template.safe_substitute` does, `$$` a dollar, the rest as written)."),
};
const struct dt_spec_section dt_jobspec_console_section = {
    .keys = console_keys, .n_keys = DT_NKEYS(console_keys), .size = sizeof(struct dt_console_spec)};

/* --- signals_to_handle ------------------------------------------------------ */

static const struct {
    const char *name;
    int sig;
} forwardable[] = {{"SIGHUP", SIGHUP},   {"SIGINT", SIGINT},   {"SIGQUIT", SIGQUIT}, {"SIGTERM", SIGTERM},
                   {"SIGUSR1", SIGUSR1}, {"SIGUSR2", SIGUSR2}, {"SIGALRM", SIGALRM}};
#define N_FORWARDABLE (sizeof forwardable / sizeof forwardable[0])

static int signal_number(const char *name, size_t len)
{
    for (size_t i = 0; i < N_FORWARDABLE; i++)
        if (strlen(forwardable[i].name) == len && !strncmp(name, forwardable[i].name, len))
            return forwardable[i].sig;
    return -1;
}

int dt_spec_set_signals(struct dt_spec_ctx *ctx, const struct dt_spec_key *k, const struct dt_ynode *v, void *obj)
{
    uint64_t *mask = (uint64_t *)((char *)obj + k->off), m = 0;
    char q[96];
    bool seq = v->kind == DT_Y_SEQ;
    if (!seq && (v->kind != DT_Y_SCALAR || dt_ynode_is_null(v)))
        return dt_spec_fail(ctx, v, k->name, "expected a list of signal names like [SIGTERM, SIGUSR1], got %s",
                            dt_spec_got(v, q, sizeof q));
    for (size_t i = 0; i < (seq ? v->n : 1); i++) {
        const struct dt_ynode *it = seq ? v->items[i] : v;
        if (it->kind != DT_Y_SCALAR)
            return dt_spec_fail(ctx, it, k->name, "expected a signal name like SIGUSR1, got %s",
                                dt_spec_got(it, q, sizeof q));
        for (const char *p = it->text; *p;) {
            size_t len = strcspn(p, ", ");
            int sig = len ? signal_number(p, len) : 0;
            if (sig < 0)
                return dt_spec_fail(ctx, it, k->name,
                                    "'%.*s' is not a signal dtrain passes on (SIGHUP, SIGINT, SIGQUIT, SIGTERM, "
                                    "SIGUSR1, SIGUSR2, SIGALRM)",
                                    (int)len, p);
            m |= sig > 0 ? 1ull << sig : 0;
            p += len;
            p += strspn(p, ", ");
        }
    }
    *mask = m;
    return 0;
}

int dt_spec_print_signals(const void *obj, char *buf, size_t size)
{
    uint64_t m = ((const struct dt_job *)obj)->signals_to_handle;
    size_t used = (size_t)snprintf(buf, size, "[");
    for (size_t i = 0; i < N_FORWARDABLE && used < size; i++)
        if (m & (1ull << forwardable[i].sig))
            used += (size_t)snprintf(buf + used, size - used, "%s%s", used > 1 ? ", " : "", forwardable[i].name);
    if (used < size)
        snprintf(buf + used, size - used, "]");
    return 1;
}
