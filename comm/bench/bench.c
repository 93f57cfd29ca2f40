/* bench.c - the self-test harness behind `dtrain bench`: bootstrap from the
 * job's environment, the size sweep, timing, validation, and output in
 * nccl-tests' all_reduce_perf format (its src/common.cu):
 *
 *   time  = wall clock of `iters` back-to-back collectives / iters, averaged
 *           over ranks (after `warmup` untimed ones and a barrier);
 *   algbw = size / time (GB = 1e9 B);  busbw = algbw * factor(world), with
 *           factor 2(n-1)/n for allreduce, (n-1)/n for allgather and
 *           reduce_scatter, 1 for broadcast;
 *   #wrong = elements differing bitwise from the exact result, summed over
 *           ranks, from `check` untimed runs with fresh data after timing.
 * "Avg bus bandwidth" is the mean busbw over every row and placement.
 *
 * Not for the collectives' specifics (bench_<collective>.c).
 */
#include "comm/bench/bench.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/env.h"
#include "base/error.h"
#include "comm/reduce.h"
#include "comm/store.h"
#include "comm/comm_backend.h"
#ifdef DT_HAVE_CUDA
#include "comm/nccl/nccl_comm.h"

/* nccl: the collectives run on device twins of the host buffers that fill
 * and check use (copies are outside the timed loop). */
static struct dt_nccl_mirror mirror;
static bool mirrored;
#endif

static int to_device(struct dt_bench_ctx *x)
{
#ifdef DT_HAVE_CUDA
    size_t es = dt_dtype_size(x->dtype);
    if (mirrored)
        return dt_nccl_mirror_in(&mirror, &x->send, &x->recv, x->send_n * es, x->recv_n * es);
#endif
    (void)x;
    return 0;
}

static int to_host(struct dt_bench_ctx *x)
{
#ifdef DT_HAVE_CUDA
    size_t es = dt_dtype_size(x->dtype);
    if (mirrored)
        return dt_nccl_mirror_out(&mirror, &x->send, &x->recv, x->send_n * es, x->recv_n * es);
#endif
    (void)x;
    return 0;
}

double dt_bench_value(int rank, size_t i, int seed)
{
    return (double)((i % 1000003 * 3 + (size_t)rank * 7 + (size_t)seed * 5) % 11) - 5;
}

double dt_bench_reduced(enum dt_dtype t, enum dt_redop op, int world, size_t i, int seed)
{
    double acc = dt_bench_value(0, i, seed);
    for (int q = 1; q < world; q++) {
        double v = dt_bench_value(q, i, seed);
        acc = op == DT_MAX ? (v > acc ? v : acc) : op == DT_MIN ? (v < acc ? v : acc) : acc + v;
    }
    if (op != DT_AVG)
        return acc;
    switch (t) {
    case DT_F64: return acc / world;
    case DT_I32: case DT_I64: return (double)((long long)acc / world);
    default: return (double)((float)acc / (float)world);
    }
}

size_t dt_bench_count_wrong(enum dt_dtype t, const char *buf, size_t n, size_t first,
                            double (*expect)(const struct dt_bench_ctx *x, size_t i, int seed),
                            const struct dt_bench_ctx *x, int seed)
{
    size_t es = dt_dtype_size(t), wrong = 0;
    char want[8];
    for (size_t i = 0; i < n; i++) {
        dt_dtype_put(t, want, 0, expect(x, first + i, seed));
        wrong += memcmp(want, buf + i * es, es) != 0;
    }
    return wrong;
}

int dt_bench_parse_size(const char *s, size_t *out)
{
    char *end;
    double v = strtod(s, &end);
    size_t mult = 1;
    switch (*end) {
    case 'G': case 'g': mult = 1ull << 30; end++; break;
    case 'M': case 'm': mult = 1ull << 20; end++; break;
    case 'K': case 'k': mult = 1ull << 10; end++; break;
    default: break;
    }
    if (end == s || *end || v < 0)
        return dt_error_set(DT_EINVAL, "'%s' is not a size (examples: 8, 64K, 32M, 1G)", s);
    *out = (size_t)(v * (double)mult);
    return 0;
}

static const struct dt_bench_coll *find_coll(const char *name)
{
    const struct dt_bench_coll *all[] = {&dt_bench_allreduce, &dt_bench_allgather, &dt_bench_reduce_scatter,
                                         &dt_bench_broadcast};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        if (!strcmp(all[i]->name, name))
            return all[i];
    return NULL;
}

/* --bind: the local_rank-th CPU this process may run on, as `mpirun` binds
 * ranks to cores by default.  Unbound ranks that wake each other tend to be
 * pulled onto one core by the scheduler, which turns sub-microsecond shared
 * memory hand-offs into context switches.  Like mpirun (Open MPI 4: bind to
 * core for np <= 2, to the socket above, nothing when oversubscribed), it
 * pins only when there are at most two local ranks and a CPU for each:
 * pinned in pairs on a 2-core VM, a 4-rank shm allreduce of 8 B measured
 * ~1 ms instead of ~10 us unpinned. */
static int bind_to_core(int local_rank, int local_world)
{
    cpu_set_t allowed, one;
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0)
        return dt_error_set_errno(DT_EIO, errno, "bench: --bind: sched_getaffinity");
    int n = CPU_COUNT(&allowed), want = local_rank % (n > 0 ? n : 1);
    if (local_world > 2 || local_world > n)
        return 0;
    for (int cpu = 0, k = 0; cpu < CPU_SETSIZE; cpu++) {
        if (!CPU_ISSET(cpu, &allowed) || k++ != want)
            continue;
        CPU_ZERO(&one);
        CPU_SET(cpu, &one);
        if (sched_setaffinity(0, sizeof one, &one) != 0)
            return dt_error_set_errno(DT_EIO, errno, "bench: --bind: cannot pin to CPU %d", cpu);
        return 0;
    }
    return 0;
}

/* One communicator for the whole sweep, bootstrapped like any worker. */
static int bootstrap(const struct dt_bench_args *a, struct dt_store **st, struct dt_comm **c, int *local_rank)
{
    /* torchrun's variables, checked: a malformed RANK is an error, not rank 0 */
    struct dt_comm_options o = {.backend = a->backend, .timeout_s = a->timeout_s, .cuda_device = -1};
    const int most = 1 << 20;
    int rc = dt_env_int("RANK", 0, 0, most, &o.rank);
    if (rc == 0)
        rc = dt_env_int("WORLD_SIZE", 1, 1, most, &o.world);
    if (rc == 0)
        rc = dt_env_int("LOCAL_RANK", 0, 0, most, &o.local_rank);
    if (rc == 0)
        rc = dt_env_int("LOCAL_WORLD_SIZE", o.world, 1, most, &o.local_world);
    if (rc < 0)
        return dt_error_prefix("reading this rank's place");
    *local_rank = o.local_rank;
    if (a->bind && (rc = bind_to_core(o.local_rank, o.local_world)) < 0)
        return rc;
    char prefix[64];
    snprintf(prefix, sizeof prefix, "bench/%s/", a->coll);
    o.key_prefix = prefix;
    if (o.world > 1) {
        int rc = dt_store_connect_env(a->timeout_s, st);
        if (rc < 0)
            return dt_error_prefix("bench: rank %d of %d", o.rank, o.world);
        o.store = *st;
    }
    return dt_comm_init(&o, c);
}

/* nccl-tests' getFloatStr: the most digits that fit the column. */
static void fmt_num(double v, int width, char *out, size_t n)
{
    for (int prec = 2; prec >= 0; prec--) {
        snprintf(out, n, "%*.*f", width, prec, v);
        if ((int)strlen(out) <= width)
            return;
    }
    snprintf(out, n, "%*.1e", width, v);
    if ((int)strlen(out) > width)
        snprintf(out, n, "%*.0e", width, v);
}

struct rec { int64_t pid, local_rank; char host[48], dev[64]; };

static int preamble(struct dt_bench_ctx *x, const struct dt_bench_coll *k, const struct dt_bench_args *a,
                    FILE *out)
{
    struct rec me = {.pid = getpid(), .local_rank = x->local_rank}, *all;
    gethostname(me.host, sizeof me.host - 1);
    snprintf(me.dev, sizeof me.dev, "[0000:00:00] CPU (%s)", dt_comm_backend_name(x->comm));
#ifdef DT_HAVE_CUDA
    if (mirrored)
        dt_nccl_device_name(dt_nccl_device(x->comm), me.dev, sizeof me.dev);
#endif
    all = calloc((size_t)x->world, sizeof *all);
    if (!all)
        return dt_error_set(DT_ENOMEM, "bench: out of memory");
    int rc = dt_comm_allgather(x->comm, &me, all, sizeof me / 8, DT_I64);
    if (rc == 0 && x->rank == 0) {
        fprintf(out, "# dtrain bench %s (nccl-tests %s format), backend %s, %d rank(s)\n", k->name, k->program,
                dt_comm_backend_name(x->comm), x->world);
        fprintf(out, "# Collective test starting: %s\n", k->program);
        fprintf(out, "# nThread 1 nGpus 1 minBytes %zu maxBytes %zu step: ", a->min_bytes, a->max_bytes);
        if (a->step_factor > 0)
            fprintf(out, "%g(factor)", a->step_factor);
        else
            fprintf(out, "%zu(bytes)", a->step_bytes);
        fprintf(out, " warmup iters: %d iters: %d agg iters: 1 validation: %d graph: 0 unalign: 0\n#\n",
                a->warmup, a->iters, a->check);
        fprintf(out, "# Using devices\n");
        for (int q = 0; q < x->world; q++)
            fprintf(out, "#  Rank %2d Group %2d Pid %6d on %10s device %2d %s\n", q, 0, (int)all[q].pid,
                    all[q].host, (int)all[q].local_rank, all[q].dev);
        fprintf(out, "#\n# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n",
                "", "", "", "", "");
        fprintf(out, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s \n", "size", "count",
                "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
        fprintf(out, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s \n", "(B)",
                "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
        fflush(out);
    }
    free(all);
    return rc;
}

/* Average seconds per collective over ranks. */
static int time_placement(struct dt_bench_ctx *x, const struct dt_bench_coll *k, const struct dt_bench_args *a,
                          bool in_place, double *sec)
{
    k->fill(x, 0);
    int rc = to_device(x);
    for (int i = 0; i < a->warmup && rc == 0; i++)
        rc = k->run(x, in_place);
    if (rc == 0)
        rc = dt_comm_barrier(x->comm);
    double t0 = dt_clock_s();
    for (int i = 0; i < a->iters && rc == 0; i++)
        rc = k->run(x, in_place);
    double dt = (dt_clock_s() - t0) / a->iters;
    int back = to_host(x);
    if (rc == 0)
        rc = back;
    if (rc == 0)
        rc = dt_comm_allreduce(x->comm, &dt, sec, 1, DT_F64, DT_AVG);
    return rc;
}

static int check_placement(struct dt_bench_ctx *x, const struct dt_bench_coll *k, const struct dt_bench_args *a,
                           bool in_place, int64_t *wrong)
{
    int64_t mine = 0;
    int rc = 0;
    for (int rep = 0; rep < a->check && rc == 0; rep++) {
        k->fill(x, rep + 1);
        if ((rc = to_device(x)) == 0)
            rc = k->run(x, in_place);
        int back = to_host(x);
        if (rc == 0 && (rc = back) == 0)
            mine += (int64_t)k->check(x, rep + 1, in_place);
    }
    if (rc == 0)
        rc = dt_comm_allreduce(x->comm, &mine, wrong, 1, DT_I64, DT_SUM);
    return rc;
}

struct totals { double bw_sum; int bw_rows; int errors; };

static int row(struct dt_bench_ctx *x, const struct dt_bench_coll *k, const struct dt_bench_args *a, size_t bytes,
               struct totals *tot, FILE *out)
{
    size_t es = dt_dtype_size(x->dtype);
    size_t size, count;
    k->counts(bytes, es, x->world, &x->send_n, &x->recv_n, &size);
    count = size / es;
    if (x->rank == 0)
        fprintf(out, "%12zu  %12zu  %8s  %6s  %6i", size, count, dt_dtype_name(x->dtype),
                k->has_op ? dt_redop_name(x->op) : "none", k->rooted ? x->root : -1);
    for (int ip = 0; ip < 2; ip++) {
        double sec = 0;
        int64_t wrong = 0;
        int rc = time_placement(x, k, a, ip, &sec);
        if (rc == 0 && a->check)
            rc = check_placement(x, k, a, ip, &wrong);
        if (rc < 0)
            return rc;
        double algbw = sec > 0 ? (double)size / sec / 1e9 : 0, busbw = algbw * k->bus_factor(x->world);
        tot->bw_sum += busbw;
        tot->bw_rows++;
        tot->errors += wrong > 0;
        char ts[32], ab[32], bb[32];
        fmt_num(sec * 1e6, 7, ts, sizeof ts);
        fmt_num(algbw, 6, ab, sizeof ab);
        fmt_num(busbw, 6, bb, sizeof bb);
        if (x->rank == 0 && a->check)
            fprintf(out, "  %7s  %6s  %6s  %6g", ts, ab, bb, (double)wrong);
        else if (x->rank == 0)
            fprintf(out, "  %7s  %6s  %6s  %6s", ts, ab, bb, "N/A");
    }
    if (x->rank == 0) {
        fprintf(out, "\n");
        fflush(out);
    }
    return 0;
}

static int sweep(struct dt_bench_ctx *x, const struct dt_bench_coll *k, const struct dt_bench_args *a,
                 struct totals *tot, FILE *out)
{
    int t0 = a->dtype < 0 ? 0 : a->dtype, t1 = a->dtype < 0 ? DT_DTYPE_COUNT - 1 : a->dtype;
    int o0 = a->op < 0 ? 0 : a->op, o1 = !k->has_op ? o0 : a->op < 0 ? DT_REDOP_COUNT - 1 : a->op;
    for (int t = t0; t <= t1; t++)
        for (int op = o0; op <= o1; op++) {
            x->dtype = t;
            x->op = op;
            for (size_t b = a->min_bytes; b <= a->max_bytes;) {
                int rc = row(x, k, a, b, tot, out);
                if (rc < 0)
                    return rc;
                size_t next = a->step_factor > 1 ? (size_t)((double)b * a->step_factor) : b + a->step_bytes;
                if (next <= b)
                    break;
                b = next;
            }
        }
    return 0;
}

/* Buffers for the largest row, allocated and touched once before timing. */
static int alloc_buffers(struct dt_bench_ctx *x, size_t max_bytes)
{
    size_t bytes = max_bytes + 64 * (size_t)x->world;
    x->send = malloc(bytes);
    x->recv = malloc(bytes);
    if (!x->send || !x->recv)
        return dt_error_set(DT_ENOMEM, "bench: cannot allocate 2 x %zu bytes", bytes);
    memset(x->send, 0, bytes);
    memset(x->recv, 0, bytes);
#ifdef DT_HAVE_CUDA
    if (!strcmp(dt_comm_backend_name(x->comm), "nccl")) {
        int rc = dt_nccl_mirror_init(&mirror, x->send, x->recv, bytes);
        if (rc < 0)
            return rc;
        mirrored = true;
    }
#endif
    return 0;
}

int dt_bench_run(const struct dt_bench_args *a, FILE *out)
{
    const struct dt_bench_coll *k = find_coll(a->coll);
    if (!k)
        return dt_error_set(DT_EINVAL, "bench: unknown collective '%s'", a->coll);
    struct dt_store *st = NULL;
    struct dt_bench_ctx x = {.root = a->root};
    struct totals tot = {0};
    int rc = bootstrap(a, &st, &x.comm, &x.local_rank);
    if (rc == 0) {
        x.rank = dt_comm_rank(x.comm);
        x.world = dt_comm_world(x.comm);
        if (x.root < 0 || x.root >= x.world)
            rc = dt_error_set(DT_EINVAL, "bench: root %d is not a rank of world size %d", x.root, x.world);
    }
    if (rc == 0)
        rc = alloc_buffers(&x, a->max_bytes);
    if (rc == 0)
        rc = preamble(&x, k, a, out);
    if (rc == 0)
        rc = sweep(&x, k, a, &tot, out);
    double avg = tot.bw_rows ? tot.bw_sum / tot.bw_rows : 0;
    bool bw_fail = a->min_bw > 0 && avg < a->min_bw;
    if (rc == 0 && x.rank == 0) {
        fprintf(out, "# %-20s : %d %s\n", "Out of bounds values", tot.errors, tot.errors ? "FAILED" : "OK");
        fprintf(out, "# %-20s : %g %s\n", "Avg bus bandwidth", avg,
                a->min_bw > 0 ? (bw_fail ? "FAILED" : "OK") : "");
        fprintf(out, "#\n# Collective test concluded: %s\n", k->program);
        if (bw_fail)
            fprintf(out, "# average bus bandwidth %g GB/s is below --min-bw %g GB/s\n", avg, a->min_bw);
        fflush(out);
        if (bw_fail)
            fprintf(stderr, "dtrain bench: %s on %d rank(s) (%s): average bus bandwidth %g GB/s is below --min-bw %g GB/s\n",
                    k->name, x.world, dt_comm_backend_name(x.comm), avg, a->min_bw);
    }
    /* A failing exit of another rank may make the launcher stop the job:
     * let rank 0 finish printing first. */
    if (rc == 0)
        rc = dt_comm_barrier(x.comm);
    dt_comm_destroy(x.comm);
    dt_store_close(st);
#ifdef DT_HAVE_CUDA
    if (mirrored)
        dt_nccl_mirror_release(&mirror);
    mirrored = false;
#endif
    free(x.send);
    free(x.recv);
    if (rc < 0)
        return rc;
    return tot.errors || bw_fail ? 1 : 0;
}
