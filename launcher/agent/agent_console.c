/* agent_console.c - the ranks' output on the console: which streams show,
 * the "[rank N]" prefix, and lines that are not finished yet.
 *
 * Which streams show is torchrun's rule (DefaultLogsSpecs.reify in
 * torch/distributed/elastic/multiprocessing/api.py): a stream that
 * console.redirects names goes to the log file only, unless console.tee
 * names it too; a rank the filter (--ranks, --local-ranks-filter) leaves out
 * shows neither stream.  The log files get every byte whatever is shown.
 *
 * A line reaches the console as it is written, not only at its newline: a
 * piece that ends in \r (tqdm redrawing its bar) is shown with its \r, and
 * what has come of a line that then stalls is shown after
 * DT_AGENT__PARTIAL_S (agent_procs.c hands it over).  Such a line is "open"
 * on its console: its rank's next piece continues it, while any other line
 * for that console first ends it with a newline, so lines of different
 * ranks still never share a line.  Everything for one console line goes out
 * in one write(2).  stdout and stderr that are the same file (a terminal)
 * share one open line, and the agent's own messages (dt_log, on stderr) end
 * the open line of their console first.
 *
 * Not for log files or the pipes (agent_procs.c).
 */
#include "launcher/agent/agent_internal.h"
#include "base/log.h"
#include "spec/jobspec.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { CON_CLEAN, CON_OPEN, CON_CR };

static bool same_file(int fd1, int fd2)
{
    struct stat s1, s2;
    return fstat(fd1, &s1) == 0 && fstat(fd2, &s2) == 0 && s1.st_dev == s2.st_dev && s1.st_ino == s2.st_ino;
}

static void end_open(struct dt_agent *a, struct dt_agent__con *c, bool is_err);

/* dt_log's hook: the agent's own line on stderr ends a rank's open line there first. */
static void before_log(void *ctx)
{
    struct dt_agent *a = ctx;
    if (a->con.log_con >= 0)
        end_open(a, &a->con.line[a->con.log_con], a->con.log_con == 1);
}

void dt_agent__console_init(struct dt_agent *a)
{
    a->con.shared = same_file(a->con.out_fd, a->con.err_fd);
    a->con.log_con = same_file(STDERR_FILENO, a->con.err_fd) ? (a->con.shared ? 0 : 1)
                 : same_file(STDERR_FILENO, a->con.out_fd) ? 0
                                                        : -1;
    dt_log_set_before(before_log, a);
    if (gethostname(a->con.host, sizeof a->con.host) != 0)
        snprintf(a->con.host, sizeof a->con.host, "localhost");
    a->con.host[sizeof a->con.host - 1] = 0;
}

/* Appends src (n bytes) to out at *o, cut at the prefix's bound. */
static void put_text(char *out, size_t *o, const char *src, size_t n)
{
    size_t room = DT_AGENT_PREFIX_MAX - 1 - *o;
    n = n < room ? n : room;
    memcpy(out + *o, src, n);
    *o += n;
}

/* The value of a template's identifier, into num; NULL for one it does not know. */
static const char *macro(const char *name, size_t n, const char *role, int rank, int local_rank,
                         const char *host, char num[16])
{
    if (n == 9 && !memcmp(name, "role_name", 9))
        return role;
    if (n == 8 && !memcmp(name, "hostname", 8))
        return host;
    if ((n == 4 && !memcmp(name, "rank", 4)) || (n == 10 && !memcmp(name, "local_rank", 10))) {
        snprintf(num, 16, "%d", n == 4 ? rank : local_rank);
        return num;
    }
    return NULL;
}

static bool ident_char(char c, bool first)
{
    return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (!first && c >= '0' && c <= '9');
}

size_t dt_agent_line_prefix(char *out, const char *tmpl, const char *role, int rank, int local_rank,
                            const char *host)
{
    if (!tmpl) {
        size_t n = dt_agent_format_line(out, rank, "", 0) - 1; /* without its newline */
        out[n] = 0;
        return n;
    }
    size_t o = 0;
    char num[16];
    for (const char *p = tmpl; *p;) {
        if (p[0] != '$' || p[1] == '$') { /* text, or "$$": one dollar */
            put_text(out, &o, p, 1);
            p += p[0] == '$' ? 2 : 1;
            continue;
        }
        bool braced = p[1] == '{';
        const char *name = p + 1 + braced, *end = name;
        while (ident_char(*end, end == name))
            end++;
        const char *v = end > name && (!braced || *end == '}')
                            ? macro(name, (size_t)(end - name), role, rank, local_rank, host, num)
                            : NULL;
        if (!v) { /* kept as written, as safe_substitute does */
            put_text(out, &o, p, 1);
            p++;
            continue;
        }
        put_text(out, &o, v, strlen(v));
        p = end + braced;
    }
    out[o] = 0;
    return o;
}

void dt_agent__console_streams(struct dt_agent *a, struct dt_agent__sink *k, int local_rank)
{
    const struct dt_console_spec *c = &a->cfg->job->console;
    const char *role = a->cfg->job->role ? a->cfg->job->role : "default";
    k->prefix_len = dt_agent_line_prefix(k->prefix, c->line_prefix, role, k->rank, local_rank, a->con.host);
    int redirected = dt_job_std_of(c->redirects, local_rank), teed = dt_job_std_of(c->tee, local_rank);
    const unsigned char *listed = a->cfg->console_ranks;
    k->shown = listed && !listed[k->rank] ? 0 : (unsigned char)((~redirected | teed) & (DT_STD_OUT | DT_STD_ERR));
}

static struct dt_agent__con *con_of(struct dt_agent *a, bool is_err)
{
    return &a->con.line[is_err && !a->con.shared];
}

/* Writes all of buf unless the console is gone; a full pipe to a slow
 * terminal only slows the agent down, it never drops output. */
static void put(struct dt_agent *a, bool is_err, const char *buf, size_t len)
{
    int fd = is_err ? a->con.err_fd : a->con.out_fd;
    dt_progress_hide(a->progress); /* rank output scrolls above the progress line */
    while (len > 0 && !a->con.broken) {
        ssize_t w = write(fd, buf, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EAGAIN) {
            struct pollfd pfd = {.fd = fd, .events = POLLOUT};
            poll(&pfd, 1, 100);
            continue;
        }
        if (w <= 0) {
            /* EPIPE (SIGPIPE is ignored): `dtrain launch | head` closed early; the logs go on. */
            a->con.broken = true;
            return;
        }
        buf += w;
        len -= (size_t)w;
    }
}

/* Ends the open line of one console, if any. */
static void end_open(struct dt_agent *a, struct dt_agent__con *c, bool is_err)
{
    if (c->state == CON_CLEAN)
        return;
    c->state = CON_CLEAN;
    put(a, is_err, "\n", 1);
}

void dt_agent__console_settle(struct dt_agent *a)
{
    end_open(a, &a->con.line[0], false);
    end_open(a, &a->con.line[1], true);
}

void dt_agent__console_end(struct dt_agent *a, const struct dt_agent__sink *k, bool is_err)
{
    struct dt_agent__con *c = con_of(a, is_err);
    if (c->owner == k && c->is_err == is_err)
        end_open(a, c, is_err);
}

void dt_agent__console_line(struct dt_agent *a, bool is_err, const char *buf, size_t len)
{
    end_open(a, con_of(a, is_err), is_err);
    put(a, is_err, buf, len);
}

/* Into a->scratch: what the console gets for the piece; its length. */
static size_t compose(struct dt_agent *a, struct dt_agent__con *c, const struct dt_agent__sink *k, bool is_err,
                      const char *line, size_t len, char end)
{
    bool mine = c->state != CON_CLEAN && c->owner == k && c->is_err == is_err;
    char *out = a->scratch;
    size_t o = 0;
    if (c->state != CON_CLEAN && !mine)
        out[o++] = '\n'; /* another rank's open line ends before this one starts */
    /* A bar's last \r and then its \n: the bar stays as drawn. */
    bool bare = mine && (c->state == CON_OPEN || (len == 0 && end == '\n'));
    if (!bare) {
        memcpy(out + o, k->prefix, k->prefix_len);
        o += k->prefix_len;
    }
    memcpy(out + o, line, len);
    o += len;
    c->owner = k;
    c->is_err = is_err;
    c->state = end == '\r' ? CON_CR : end == DT_LINES_OPEN ? CON_OPEN : CON_CLEAN;
    if (end != DT_LINES_OPEN)
        out[o++] = end == '\r' ? '\r' : '\n';
    return o;
}

void dt_agent__console_piece(struct dt_agent *a, struct dt_agent__sink *k, bool is_err, const char *line,
                             size_t len, char end)
{
    bool *continuing = &k->continuing[is_err];
    bool was = *continuing;
    if (!was) { /* a line's start: PyTorch's own "[rankN]:" goes, ours replaces it */
        size_t own = dt_agent_torch_prefix(k->rank, line, len);
        line += own;
        len -= own;
    }
    *continuing = end == DT_LINES_CUT || end == DT_LINES_OPEN;
    /* A bar's redraws keep one entry, its first; the line's end closes it. */
    if (is_err && (len > 0 || end != '\r'))
        dt_agent_tail_push(&k->tail, line, len, end == '\n');
    if (!(k->shown & (is_err ? DT_STD_ERR : DT_STD_OUT)))
        return;
    struct dt_agent__con *c = con_of(a, is_err);
    bool mine = c->state != CON_CLEAN && c->owner == k && c->is_err == is_err;
    /* A long line that ended exactly at a piece's end, or a \r with nothing
     * before it on the console: nothing to show. */
    if (len == 0 && ((was && !mine && end == '\n') || (end == '\r' && !(mine && c->state == CON_OPEN))))
        return;
    put(a, is_err, a->scratch, compose(a, c, k, is_err, line, len, end));
}
