/* cli_opts.c - the one way every `dtrain` command reads its options: getopt_long.
 *
 * A command names its short letters and its long options (its own table and
 * the shared ones of cli_spec.c and cli_launch.c); dt_cli_opts_next hands
 * back one option at a time with its value, or an operand.  The usage errors
 * are written here, once, in the words every command uses: "unknown option
 * '--x'", "'--x' needs a value".
 *
 * Two orders.  Most commands take options anywhere (`dtrain launch job.yaml
 * --dry-run`): operands come back in place, in the order given, whatever
 * POSIXLY_CORRECT says (getopt's "-" mode, not its permutation).  `dtrain
 * run` stops at its PROGRAM, as torchrun stops at its script: what follows
 * is the program's, --help included.  "--" ends the options either way.
 *
 * GNU getopt_long takes an unambiguous prefix of a long option (--dry for
 * --dry-run), as Python's argparse does for torchrun.
 *
 * Not for what an option means (each command's own switch).
 */
#include "launcher/cli/cli.h"

#include <stdio.h>
#include <string.h>

void dt_cli_opts_init(struct dt_cli_opts *s, const char *cmd, const char *shorts, bool in_order,
                      const struct option *const *tables)
{
    memset(s, 0, sizeof *s);
    s->cmd = cmd;
    s->in_order = in_order;
    snprintf(s->shorts, sizeof s->shorts, "%s:%s", in_order ? "+" : "-", shorts ? shorts : "");
    size_t n = 0;
    for (size_t t = 0; tables && tables[t]; t++)
        for (const struct option *o = tables[t]; o->name && n < DT_CLI_MAX_OPTS; o++)
            s->longs[n++] = *o;
    optind = 0; /* glibc: start afresh at argv[1] */
    opterr = 0; /* the errors are ours (below) */
}

/* The options `name` (len bytes, without "--") is a prefix of, when they
 * are several different ones ("--no-python, --node-rank"); NULL otherwise. */
static const char *ambiguous(const struct dt_cli_opts *s, const char *name, int len)
{
    static char list[512];
    int vals[DT_CLI_MAX_OPTS], n = 0;
    size_t used = 0;
    list[0] = 0;
    for (const struct option *o = s->longs; o->name && len > 0; o++) {
        bool seen = false;
        for (int i = 0; i < n; i++)
            seen |= vals[i] == o->val;
        if (seen || strncmp(o->name, name, (size_t)len) != 0)
            continue; /* one spelling of each option */
        vals[n++] = o->val;
        if (used < sizeof list)
            used += (size_t)snprintf(list + used, sizeof list - used, "%s--%s", used ? ", " : "", o->name);
    }
    return n > 1 ? list : NULL;
}

/* The usage error for getopt_long's '?' (unknown, or a value given to an
 * option that takes none) and ':' (a value missing at the end of argv). */
static void say_error(const struct dt_cli_opts *s, int ch, char **argv)
{
    const char *a = optind > 0 ? argv[optind - 1] : "";
    bool is_long = strncmp(a, "--", 2) == 0;
    const char *eq = strchr(a, '=');
    int name_len = eq ? (int)(eq - a) : (int)strlen(a);
    if (ch == ':' && is_long)
        dt_cli_usage_error(s->cmd, "'%.*s' needs a value", name_len, a);
    else if (ch == ':')
        dt_cli_usage_error(s->cmd, "'-%c' needs a value", optopt);
    else if (!optopt && ambiguous(s, a + 2, name_len - 2))
        dt_cli_usage_error(s->cmd, "'%.*s' is short for several options: %s", name_len, a, ambiguous(s, a + 2, name_len - 2));
    else if (!optopt)
        dt_cli_usage_error(s->cmd, "unknown option '%s'", a);
    else if (is_long && eq) /* glibc: optopt is the option's id */
        dt_cli_usage_error(s->cmd, "'%.*s' takes no value", name_len, a);
    else
        dt_cli_usage_error(s->cmd, "unknown option '-%c'", optopt);
}

int dt_cli_opts_next(struct dt_cli_opts *s, int argc, char **argv, const char **arg)
{
    if (s->ended) { /* after "--": the rest are operands, whatever they look like */
        *arg = optind < argc ? argv[optind] : NULL;
        return optind < argc ? (optind++, DT_CLI_OPT_OPERAND) : -1;
    }
    int ch = getopt_long(argc, argv, s->shorts, s->longs, NULL);
    *arg = optarg;
    if (ch == -1 && !s->in_order) {
        s->ended = true;
        return dt_cli_opts_next(s, argc, argv, arg);
    }
    if (ch == 1) /* an operand, in place */
        return DT_CLI_OPT_OPERAND;
    if (ch == '?' || ch == ':') {
        say_error(s, ch, argv);
        return DT_CLI_OPT_ERROR;
    }
    /* "-n=4": argparse (torchrun) reads it as -n 4; getopt would hand on "=4". */
    if (ch > 0 && ch < 128 && optarg && optarg[0] == '=' && optind > 0 && argv[optind - 1] == optarg - 2 &&
        argv[optind - 1][0] == '-' && argv[optind - 1][1] == ch)
        *arg = optarg + 1;
    return ch;
}
