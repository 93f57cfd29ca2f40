/* cmd_bench.c - `dtrain bench allreduce|allgather|reduce_scatter|broadcast`:
 * the communicator self-test, with nccl-tests' flags and output.
 *
 * Only parses the command line; the harness is comm/bench/bench.c.  Run it as the
 * command of a `dtrain launch` job (every rank runs it; rank 0 prints), or
 * alone for one rank.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/bench/bench.h"
#include "base/error.h"
#include "launcher/cli/cli.h"
#include "scheduler-adapters/mpirun/mpirun.h"

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: dtrain bench <allreduce|allgather|reduce_scatter|broadcast> [flags]\n\n"
            "Measures a collective on the ranks of a `dtrain launch` job (each rank runs the same\n"
            "command; rank 0 prints) and checks every result bit for bit.  Output, flags and bus\n"
            "bandwidth factors are those of NVIDIA's nccl-tests (all_reduce_perf, ...).\n\n"
            "  -b, --minbytes SIZE     smallest size (K/M/G suffixes, 1024-based; default 32M)\n"
            "  -e, --maxbytes SIZE     largest size (default 32M)\n"
            "  -f, --stepfactor F      multiply the size by F between rows\n"
            "  -i, --stepbytes SIZE    or add SIZE between rows (default 1M)\n"
            "  -n, --iters N           timed iterations per row (default 20)\n"
            "  -w, --warmup_iters N    untimed iterations before timing (default 1)\n"
            "  -c, --check N           validation runs per row after timing, 0 = off (default 1)\n"
            "  -d, --datatype T        float double half bfloat16 int32 int64 or all (default float)\n"
            "  -o, --op OP             sum avg max min or all (default sum)\n"
            "  -r, --root R            root of broadcast (default 0)\n"
            "      --backend B         tcp, shm, nccl, mpi or auto (default auto: shm on one host; mpi for\n"
            "                          ranks of a backend: mpi job).  nccl: one GPU per rank (LOCAL_RANK),\n"
            "                          device buffers, busbw as nccl-tests computes it\n"
            "      --min-bw GB/s       fail (exit 1) if the average bus bandwidth is below this\n"
            "      --timeout SECONDS   deadline of bootstrap and of each collective (default 60)\n"
            "      --bind              pin each rank to one core (LOCAL_RANK-th allowed CPU) as mpirun does:\n"
            "                          only with at most 2 ranks per host and a CPU for each\n\n"
            "Example: run it as the command of a job, here 4 ranks on this machine (bench.yaml):\n"
            "  name: bench\n"
            "  nproc_per_node: 4\n"
            "  command: [dtrain, bench, allreduce, -b, \"8\", -e, 64M, -f, \"2\"]\n"
            "then: dtrain launch --ranks 0 bench.yaml\n\n"
            "Exit status: 0 if every value was right (and --min-bw met), 1 otherwise.\n");
}

static int parse_enum(const char *cmd, const char *what, const char *v, const char *(*name)(int), int n, int *out)
{
    if (!strcmp(v, "all")) {
        *out = -1;
        return 0;
    }
    for (int i = 0; i < n; i++)
        if (!strcmp(v, name(i))) {
            *out = i;
            return 0;
        }
    return dt_cli_usage_error(cmd, "unknown %s '%s'", what, v);
}

static const char *dtype_name(int i) { return dt_dtype_name((enum dt_dtype)i); }
static const char *redop_name(int i) { return dt_redop_name((enum dt_redop)i); }

static int parse_num(const char *v, double lo, double *out)
{
    char *end;
    *out = strtod(v, &end);
    return *end || end == v || *out < lo ? -1 : 0;
}

static int parse(int argc, char **argv, struct dt_bench_args *a)
{
    static const struct option longs[] = {
        {"minbytes", 1, 0, 'b'}, {"maxbytes", 1, 0, 'e'}, {"stepfactor", 1, 0, 'f'}, {"stepbytes", 1, 0, 'i'},
        {"iters", 1, 0, 'n'},    {"warmup_iters", 1, 0, 'w'}, {"check", 1, 0, 'c'}, {"datatype", 1, 0, 'd'},
        {"op", 1, 0, 'o'},       {"root", 1, 0, 'r'},      {"backend", 1, 0, 'B'},   {"min-bw", 1, 0, 'M'},
        {"timeout", 1, 0, 'T'},  {"bind", 0, 0, 'P'},    {0, 0, 0, 0}};
    static const struct option *const tables[] = {longs, NULL};
    struct dt_cli_opts s;
    dt_cli_opts_init(&s, "bench", "b:e:f:i:n:w:c:d:o:r:", false, tables);
    const char *v;
    double d;
    for (int ch; (ch = dt_cli_opts_next(&s, argc - 1, argv + 1, &v)) != -1;) { /* after the collective */
        switch (ch) {
        case DT_CLI_OPT_ERROR: return DT_EXIT_REFUSED;
        case DT_CLI_OPT_OPERAND: return dt_cli_usage_error("bench", "unexpected argument '%s'", v);
        case 'b': case 'e': case 'i':
            if (dt_bench_parse_size(v, ch == 'b' ? &a->min_bytes : ch == 'e' ? &a->max_bytes : &a->step_bytes))
                return dt_cli_usage_error("bench", "%s", dt_error_last());
            if (ch == 'i')
                a->step_factor = 0;
            break;
        case 'f': if (parse_num(v, 1, &a->step_factor)) return dt_cli_usage_error("bench", "-f wants a factor > 1"); break;
        case 'n': if (parse_num(v, 1, &d)) return dt_cli_usage_error("bench", "-n wants a count >= 1"); a->iters = (int)d; break;
        case 'w': if (parse_num(v, 0, &d)) return dt_cli_usage_error("bench", "-w wants a count >= 0"); a->warmup = (int)d; break;
        case 'c': if (parse_num(v, 0, &d)) return dt_cli_usage_error("bench", "-c wants a count >= 0"); a->check = (int)d; break;
        case 'r': if (parse_num(v, 0, &d)) return dt_cli_usage_error("bench", "-r wants a rank"); a->root = (int)d; break;
        case 'M': if (parse_num(v, 0, &a->min_bw)) return dt_cli_usage_error("bench", "--min-bw wants GB/s"); break;
        case 'T': if (parse_num(v, 0.001, &a->timeout_s)) return dt_cli_usage_error("bench", "--timeout wants seconds"); break;
        case 'B': a->backend = v; break;
        case 'P': a->bind = true; break;
        case 'd': if (parse_enum("bench", "datatype", v, dtype_name, DT_DTYPE_COUNT, &a->dtype)) return 2; break;
        case 'o': if (parse_enum("bench", "op", v, redop_name, DT_REDOP_COUNT, &a->op)) return 2; break;
        default: return dt_cli_usage_error("bench", "unknown option");
        }
    }
    if (a->min_bytes > a->max_bytes)
        return dt_cli_usage_error("bench", "-b %zu is larger than -e %zu", a->min_bytes, a->max_bytes);
    return 0;
}

static int run(int argc, char **argv)
{
    if (argc < 2)
        return dt_cli_usage_error("bench", "which collective? allreduce, allgather, reduce_scatter or broadcast");
    struct dt_bench_args a = {.coll = argv[1], .min_bytes = 32u << 20, .max_bytes = 32u << 20,
                              .step_bytes = 1u << 20, .iters = 20, .warmup = 1, .check = 1, .dtype = DT_F32,
                              .op = DT_SUM, .backend = "auto", .timeout_s = 60};
    const char *known[] = {"allreduce", "allgather", "reduce_scatter", "broadcast"};
    bool ok = false;
    for (int i = 0; i < 4; i++)
        ok |= !strcmp(a.coll, known[i]);
    if (!ok)
        return dt_cli_usage_error("bench", "unknown collective '%s' (allreduce, allgather, reduce_scatter, broadcast)",
                                  a.coll);
    /* Ranks that mpirun started (backend: mpi jobs) read their rank from it,
     * and measure the MPI backend unless --backend says otherwise. */
    int rc = dt_mpirun_rank_env();
    if (rc < 0)
        return dt_cli_usage_error("bench", "%s", dt_error_last());
    if (getenv("DTRAIN_MPI_RANKS"))
        a.backend = "mpi";
    if ((rc = parse(argc, argv, &a)) != 0)
        return rc;
    rc = dt_bench_run(&a, stdout);
    if (rc < 0) {
        fprintf(stderr, "dtrain bench: %s\n", dt_error_last());
        return 1;
    }
    return rc;
}

const struct dt_cli_command dt_cli_bench = {
    .name = "bench",
    .summary = "measure and check a collective (nccl-tests format)",
    .run = run,
    .usage = usage,
};
