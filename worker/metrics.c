/* metrics.c - metrics.jsonl rows and trainer_summary.json (see metrics.h).
 *
 * Numbers are printed with %.9g (enough to read a float back exactly); a
 * non-finite value becomes null so every line stays valid JSON.
 */
#include "worker/metrics.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "base/fs.h"

static const char *num(char *buf, size_t len, double v)
{
    if (!isfinite(v))
        return "null";
    snprintf(buf, len, "%.9g", v);
    return buf;
}

int dt_metrics_open(struct dt_metrics *m, const char *run_dir)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/metrics.jsonl", run_dir);
    /* Appended to, not replaced (a resumed run continues it), so not through
     * dt_fs_write_atomic; the name is predictable, so a symlink there is refused
     * rather than followed (ELOOP). */
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY, 0666);
    if (fd < 0)
        return dt_error_set_errno(DT_EIO, errno, "cannot open %s%s", path,
                                  errno == ELOOP ? " (a symbolic link, which is not followed)" : "");
    if (!(m->f = fdopen(fd, "a"))) {
        close(fd);
        return dt_error_set_errno(DT_ENOMEM, errno, "cannot buffer %s", path);
    }
    snprintf(m->path, sizeof m->path, "%s", path);
    return 0;
}

void dt_metrics_close(struct dt_metrics *m)
{
    if (m->f)
        fclose(m->f);
    m->f = NULL;
}

const char *const dt_metrics_split_names[DT_METRICS_SPLIT] = {"data_s", "forward_s", "backward_s",
                                                               "comm_wait_s", "optimizer_s"};

/* A row is flushed as it is written; a write error (a full disk, a file-size
 * limit) fails the run, naming the file and the reason, rather than leaving
 * metrics.jsonl silently cut short. */
static int flushed(struct dt_metrics *m)
{
    if (fflush(m->f) == 0 && !ferror(m->f))
        return 0;
    int e = errno;
    clearerr(m->f);
    return dt_error_set_errno(DT_EIO, e, "writing %s failed", m->path);
}

int dt_metrics_step(struct dt_metrics *m, int64_t step, double epoch, double loss, double lr, double beta1,
                    double grad_norm, double samples_per_s, double time_s)
{
    if (!m->f)
        return 0;
    char a[6][32];
    fprintf(m->f,
            "{\"step\": %lld, \"epoch\": %.6g, \"loss\": %s, \"lr\": %s, \"beta1\": %s, \"grad_norm\": %s, "
            "\"samples_per_s\": %s, \"time_s\": %.3f, \"total_steps\": %lld",
            (long long)step, epoch, num(a[0], 32, loss), num(a[1], 32, lr), num(a[2], 32, beta1),
            num(a[3], 32, grad_norm), num(a[4], 32, samples_per_s), time_s, (long long)m->total_steps);
    if (m->seq_len > 0)
        fprintf(m->f, ", \"tokens_per_s\": %s", num(a[5], 32, samples_per_s * m->seq_len));
    for (int i = 0; i < DT_METRICS_SPLIT; i++)
        fprintf(m->f, ", \"%s\": %s", dt_metrics_split_names[i], num(a[5], 32, m->split[i]));
    if (m->amp)
        fprintf(m->f, ", \"loss_scale\": %s, \"skipped_steps\": %lld", num(a[5], 32, m->loss_scale),
                (long long)m->skipped_steps);
    if (m->seq_len > 0 && isfinite(m->mfu))
        fprintf(m->f, ", \"mfu\": %s", num(a[5], 32, m->mfu));
    static const char *const gpu_keys[DT_METRICS_GPU_VALUES] = {"gpu_util_pct", "gpu_mem_mib", "gpu_alloc_mib"};
    for (int k = 0; k < DT_METRICS_GPU_VALUES && m->gpu_ranks > 0; k++) {
        fprintf(m->f, ", \"%s\": [", gpu_keys[k]);
        for (int r = 0; r < m->gpu_ranks; r++)
            fprintf(m->f, "%s%s", r ? ", " : "", num(a[5], 32, m->gpu[DT_METRICS_GPU_VALUES * r + k]));
        fputc(']', m->f);
    }
    fputs("}\n", m->f);
    return flushed(m);
}

void dt_metrics_set_gpu(struct dt_metrics *m, const double *v, int ranks)
{
    m->gpu_ranks = ranks < DT_METRICS_GPU_RANKS ? ranks : DT_METRICS_GPU_RANKS;
    memcpy(m->gpu, v, DT_METRICS_GPU_VALUES * (size_t)m->gpu_ranks * sizeof *v);
}

int dt_metrics_eval(struct dt_metrics *m, int64_t step, double epoch, double test_loss, double test_accuracy)
{
    if (!m->f)
        return 0;
    char a[2][32];
    const char *set = m->seq_len > 0 ? "val" : "test";
    fprintf(m->f, "{\"step\": %lld, \"epoch\": %.6g, \"%s_loss\": %s, \"%s_accuracy\": %s}\n", (long long)step,
            epoch, set, num(a[0], 32, test_loss), set, num(a[1], 32, test_accuracy));
    return flushed(m);
}

static int write_summary(void *ctx, FILE *f)
{
    const struct dt_metrics_summary *s = ctx;
    char a[8][32];
    fprintf(f,
            "{\n  \"final_loss\": %s,\n  \"test_loss\": %s,\n  \"test_accuracy\": %s,\n  \"steps\": %lld,\n"
            "  \"total_steps\": %lld,\n  \"epochs\": %.6g,\n  \"samples_per_s\": %s,\n  \"train_seconds\": %s,\n"
            "  \"data_wait_seconds\": %s,\n  \"comm_wait_seconds\": %s,\n  \"world_size\": %d,\n"
            "  \"batch_size_per_rank\": %d,\n  \"resumed_from_step\": %lld,\n  \"allreduce_alone_seconds\": %s",
            num(a[0], 32, s->final_loss), num(a[1], 32, s->seq_len > 0 ? NAN : s->test_loss),
            num(a[2], 32, s->seq_len > 0 ? NAN : s->test_accuracy),
            (long long)s->steps, (long long)s->total_steps, s->epochs, num(a[3], 32, s->samples_per_s),
            num(a[4], 32, s->train_s), num(a[5], 32, s->data_wait_s), num(a[6], 32, s->comm_wait_s), s->world,
            s->batch_size, (long long)s->resumed_from, num(a[7], 32, s->allreduce_s));
    if (s->seq_len > 0)
        fprintf(f, ",\n  \"val_loss\": %s,\n  \"val_accuracy\": %s,\n  \"tokens_per_s\": %s",
                num(a[0], 32, s->test_loss), num(a[1], 32, s->test_accuracy),
                num(a[2], 32, s->samples_per_s * s->seq_len));
    if (s->work_s && s->n_work > 0) {
        fputs(",\n  \"rank_work_seconds\": [", f);
        for (int r = 0; r < s->n_work; r++)
            fprintf(f, "%s%s", r ? ", " : "", num(a[0], 32, s->work_s[r]));
        fputc(']', f);
    }
    fputs("\n}\n", f);
    return 0;
}

int dt_metrics_write_summary(const char *run_dir, const struct dt_metrics_summary *s)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/trainer_summary.json", run_dir);
    return dt_fs_write_atomic(path, false, write_summary, (void *)s);
}
