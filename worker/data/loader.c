/* loader.c - loader threads and the bounded ring of batches (see loader.h).
 *
 * Batch b lives in slot b % nslots; a worker may fill it once batch b - nslots
 * has been given back, so memory is fixed and order is kept without a
 * reordering buffer.  Not for data set formats (idx.h) or order (sampler.h).
 */
#include "worker/data/loader.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/error.h"
#include "base/clock.h"

#define FMNIST_MEAN 0.2860f
#define FMNIST_STD 0.3530f

struct slot {
    struct dt_batch b;
    int64_t ready;      /* batch number held, -1 when none */
};

struct dt_loader {
    const struct dt_dataset *d;
    struct dt_loader_options o;
    struct dt_sampler sampler;
    int64_t *indices;       /* this rank's order for the epoch */
    int64_t batches;        /* per epoch */
    float lut[256];         /* pixel -> normalised value */
    struct slot *slots;
    int nslots;
    pthread_t *threads;
    int nthreads;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int64_t next_fill, next_take, released;
    int filling;            /* workers inside a fill */
    bool stop;
    double wait_s;
};

/* ToTensor then Normalize: (p / 255 - mean) / std, in float as torchvision computes it. */
static void make_lut(float *lut)
{
    for (int p = 0; p < 256; p++)
        lut[p] = ((float)p / 255.0f - FMNIST_MEAN) / FMNIST_STD;
}

static void gather(const struct dt_dataset *d, const float *lut, const int64_t *idx, int n, float *x, int32_t *y)
{
    const size_t px = (size_t)d->rows * (size_t)d->cols;
    for (int i = 0; i < n; i++) {
        const uint8_t *img = d->images + (size_t)idx[i] * px;
        float *xi = x + (size_t)i * px;
        for (size_t j = 0; j < px; j++)
            xi[j] = lut[img[j]];
        y[i] = d->labels[idx[i]];
    }
}

static int batch_rows(const struct dt_loader *l, int64_t b)
{
    int64_t left = l->sampler.num_samples - b * l->o.batch_size;
    return left < l->o.batch_size ? (int)left : l->o.batch_size;
}

static void fill(struct dt_loader *l, int64_t b)
{
    struct slot *s = &l->slots[b % l->nslots];
    s->b.n = batch_rows(l, b);
    s->b.index = b;
    gather(l->d, l->lut, l->indices + b * l->o.batch_size, s->b.n, s->b.x, s->b.y);
}

static void *worker_main(void *arg)
{
    struct dt_loader *l = arg;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        while (!l->stop && !(l->next_fill < l->batches && l->next_fill < l->released + l->nslots))
            pthread_cond_wait(&l->cv, &l->mu);
        if (l->stop)
            break;
        int64_t b = l->next_fill++;
        l->filling++;
        pthread_mutex_unlock(&l->mu);
        fill(l, b);
        pthread_mutex_lock(&l->mu);
        l->slots[b % l->nslots].ready = b;
        l->filling--;
        pthread_cond_broadcast(&l->cv);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

static int alloc_slots(struct dt_loader *l)
{
    const size_t px = (size_t)l->d->rows * (size_t)l->d->cols, B = (size_t)l->o.batch_size;
    l->slots = calloc((size_t)l->nslots, sizeof *l->slots);
    if (!l->slots)
        return DT_ENOMEM;
    for (int i = 0; i < l->nslots; i++) {
        l->slots[i].b.kind = DT_BATCH_IMAGES;
        l->slots[i].b.x = malloc(B * px * sizeof(float));
        l->slots[i].b.y = malloc(B * sizeof(int32_t));
        l->slots[i].ready = -1;
        if (!l->slots[i].b.x || !l->slots[i].b.y)
            return DT_ENOMEM;
        memset(l->slots[i].b.x, 0, B * px * sizeof(float)); /* first touch now, not in the step loop */
    }
    return 0;
}

int dt_loader_create(const struct dt_dataset *d, const struct dt_loader_options *o, struct dt_loader **out)
{
    *out = NULL;
    if (o->batch_size < 1 || o->workers < 0 || o->prefetch < 1)
        return dt_error_set(DT_EINVAL, "loader: batch_size %d, workers %d, prefetch %d: need >= 1, >= 0, >= 1",
                            o->batch_size, o->workers, o->prefetch);
    struct dt_loader *l = calloc(1, sizeof *l);
    if (!l)
        return dt_error_set(DT_ENOMEM, "loader: no memory");
    l->d = d;
    l->o = *o;
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    make_lut(l->lut);
    int rc = dt_sampler_init(&l->sampler, d->n, o->rank, o->world, o->shuffle, o->drop_last, o->seed);
    if (rc) {
        dt_loader_destroy(l);
        return rc;
    }
    int64_t ns = l->sampler.num_samples;
    l->batches = o->drop_last ? ns / o->batch_size : (ns + o->batch_size - 1) / o->batch_size;
    l->nslots = o->workers > 0 ? o->workers * o->prefetch : 1;
    l->indices = malloc((size_t)(ns > 0 ? ns : 1) * sizeof *l->indices);
    if (!l->indices || alloc_slots(l)) {
        dt_loader_destroy(l);
        return dt_error_set(DT_ENOMEM, "loader: no memory for %d batches of %d", l->nslots, o->batch_size);
    }
    l->next_fill = l->batches; /* idle until an epoch starts */
    l->threads = calloc((size_t)(o->workers > 0 ? o->workers : 1), sizeof *l->threads);
    for (int i = 0; l->threads && i < o->workers; i++) {
        if (pthread_create(&l->threads[i], NULL, worker_main, l) != 0) {
            dt_loader_destroy(l);
            return dt_error_set(DT_EIO, "loader: cannot start worker thread %d", i);
        }
        l->nthreads++;
    }
    *out = l;
    return 0;
}

void dt_loader_destroy(struct dt_loader *l)
{
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    l->stop = true;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    for (int i = 0; i < l->nthreads; i++)
        pthread_join(l->threads[i], NULL);
    for (int i = 0; l->slots && i < l->nslots; i++) {
        free(l->slots[i].b.x);
        free(l->slots[i].b.y);
    }
    free(l->slots);
    free(l->threads);
    free(l->indices);
    dt_sampler_release(&l->sampler);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
    free(l);
}

int64_t dt_loader_batches_per_epoch(const struct dt_loader *l)
{
    return l->batches;
}

void dt_loader_start_epoch(struct dt_loader *l, int64_t epoch, int64_t first)
{
    pthread_mutex_lock(&l->mu);
    /* Stop handing out fills of the old epoch and let the running ones end. */
    l->next_fill = l->batches;
    while (l->filling > 0)
        pthread_cond_wait(&l->cv, &l->mu);
    dt_sampler_epoch(&l->sampler, epoch, l->indices);
    for (int i = 0; i < l->nslots; i++)
        l->slots[i].ready = -1;
    l->next_fill = l->next_take = l->released = first;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

const struct dt_batch *dt_loader_next(struct dt_loader *l)
{
    pthread_mutex_lock(&l->mu);
    l->released = l->next_take; /* the previous batch is given back */
    pthread_cond_broadcast(&l->cv);
    int64_t b = l->next_take;
    if (b >= l->batches) {
        pthread_mutex_unlock(&l->mu);
        return NULL;
    }
    struct slot *s = &l->slots[b % l->nslots];
    if (l->nthreads == 0) {
        pthread_mutex_unlock(&l->mu);
        fill(l, b);
        s->ready = b;
        pthread_mutex_lock(&l->mu);
    } else if (s->ready != b) {
        double t0 = dt_clock_s();
        while (s->ready != b)
            pthread_cond_wait(&l->cv, &l->mu);
        l->wait_s += dt_clock_s() - t0;
    }
    l->next_take = b + 1;
    pthread_mutex_unlock(&l->mu);
    return &s->b;
}

const int64_t *dt_loader_indices(const struct dt_loader *l)
{
    return l->indices;
}

double dt_loader_wait_s(const struct dt_loader *l)
{
    return l->wait_s;
}

void dt_loader_fill_range(const struct dt_dataset *d, int64_t first, int n, struct dt_batch *b)
{
    float lut[256];
    make_lut(lut);
    int64_t idx[256];
    b->kind = DT_BATCH_IMAGES;
    b->n = n;
    b->index = 0;
    for (int done = 0; done < n;) {
        int k = n - done < 256 ? n - done : 256;
        for (int i = 0; i < k; i++)
            idx[i] = first + done + i;
        gather(d, lut, idx, k, b->x + (size_t)done * d->rows * d->cols, b->y + done);
        done += k;
    }
}
