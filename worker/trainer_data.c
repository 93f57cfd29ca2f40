/* trainer_data.c - the trainer's data sets: which loader feeds the step loop
 * (Fashion-MNIST images through loader.h, or llm.c token shards through
 * tokens.h), evaluation on the token validation set, the token position a
 * checkpoint records and checks on resume, and the sample a language model
 * writes at an evaluation.
 *
 * For tokens an epoch is one pass over every sample of every training shard
 * (tokens.h); `steps` is the usual way to size a run, `epochs` counts such
 * passes.  An elastic run's sample is a step's global batch, so its place
 * survives a round on another world (dt_trainer__tokens_regroup).
 * Micro-batches of one step never cross an epoch's end (the last step of an
 * epoch may have fewer), as for images.
 *
 * Not for the images' set-up (trainer.c) nor for the loop (trainer_loop.c).
 */
#include "worker/trainer_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"
#include "worker/sample.h"

bool dt_trainer__is_tokens(const struct dt_trainer_spec *s)
{
    return strcmp(s->data.dataset, "tokens") == 0;
}

/* ---- set-up ---- */

/* The evaluation's length: eval.batches global batches of val from its
 * start, at most one pass; 0 = one pass. */
static int build_val(struct dt_trainer *t, const struct dt_tokens_options *o)
{
    const struct dt_trainer_spec *s = &t->spec;
    if (!s->data.val)
        return 0;
    if (dt_tokens_open(s->data.val, s->data.format, s->model.vocab_size, "trainer.data.val", &t->val_set))
        return dt_error_prefix("the validation set");
    struct dt_tokens_options vo = *o;
    vo.shuffle = false;
    int rc = dt_tokens_loader_create(&t->val_set, &vo, &t->val_loader);
    if (rc)
        return dt_error_prefix("trainer.data.val");
    int64_t pass = dt_tokens_batches_per_epoch(t->val_loader);
    t->val_batches = s->eval_batches > 0 && s->eval_batches < pass ? s->eval_batches : pass;
    return 0;
}

/* An elastic run reads one step's global batch as one sample of the order
 * (tokens.h: accum), so that a round on another world, whose grad_accum
 * keeps that global batch, reads on from the same token; a fixed-size run
 * keeps llm.c's order of one sample per micro-batch. */
static struct dt_tokens_options train_options(const struct dt_trainer *t)
{
    const struct dt_trainer_spec *s = &t->spec;
    return (struct dt_tokens_options){.batch_size = s->data.batch_size,
                                      .seq_len = s->data.seq_len,
                                      .rank = t->rank,
                                      .world = t->world,
                                      .shuffle = s->data.shuffle,
                                      .seed = s->seed,
                                      .accum = t->o.elastic ? s->ddp.grad_accum : 1};
}

int dt_trainer__tokens_regroup(struct dt_trainer *t)
{
    struct dt_tokens_options o = train_options(t);
    struct dt_tokens_loader *l = NULL;
    if (dt_tokens_loader_create(&t->train_set, &o, &l))
        return dt_error_prefix("trainer.data.train with grad_accum %d", o.accum);
    dt_tokens_loader_destroy(t->tokens);
    t->tokens = l;
    t->batches_per_epoch = dt_tokens_batches_per_epoch(l);
    return 0;
}

int dt_trainer__tokens_build(struct dt_trainer *t)
{
    const struct dt_trainer_spec *s = &t->spec;
    if (s->data.seq_len > s->model.block_size)
        return dt_error_set(DT_EINVAL, "trainer.data.seq_len %d is longer than the model's block_size %d",
                            s->data.seq_len, s->model.block_size);
    if (dt_tokens_open(s->data.train, s->data.format, s->model.vocab_size, "trainer.data.train",
                       &t->train_set))
        return dt_error_prefix("the training set");
    struct dt_tokens_options o = train_options(t);
    int rc = dt_tokens_loader_create(&t->train_set, &o, &t->tokens);
    if (rc)
        return dt_error_prefix("trainer.data.train");
    o.accum = 1;
    if ((rc = build_val(t, &o)))
        return rc;
    t->batches_per_epoch = dt_tokens_batches_per_epoch(t->tokens);
    int64_t accum = s->ddp.grad_accum;
    t->steps_per_epoch = (t->batches_per_epoch + accum - 1) / accum;
    t->total_steps = s->steps > 0 ? s->steps : (int64_t)s->epochs * t->steps_per_epoch;
    const char *prompt = s->sample.prompt ? s->sample.prompt : "\n";
    for (size_t i = 0; s->sample.tokens > 0 && s->model.vocab_size <= 256 && prompt[i]; i++)
        if ((unsigned char)prompt[i] >= s->model.vocab_size)
            return dt_error_set(
                DT_EINVAL,
                "trainer.sample.prompt: byte %zu is %u, not below the model's vocab_size %d (a "
                "prompt is bytes: tokens of a vocabulary of 256)",
                i, (unsigned char)prompt[i], s->model.vocab_size);
    if (s->sample.tokens > 0) {
        size_t n = strlen(prompt) + (size_t)s->sample.tokens;
        if (!(t->sample_buf = malloc(n * sizeof *t->sample_buf)))
            return dt_error_set(DT_ENOMEM, "trainer: no memory for a sample of %zu tokens", n);
    }
    return 0;
}

void dt_trainer__data_release(struct dt_trainer *t)
{
    dt_tokens_loader_destroy(t->tokens);
    dt_tokens_loader_destroy(t->val_loader);
    dt_tokens_close(&t->train_set);
    dt_tokens_close(&t->val_set);
    free(t->sample_buf);
}

/* ---- the loop's batches ---- */

void dt_trainer__data_start(struct dt_trainer *t, int64_t epoch, int64_t first)
{
    if (t->tokens)
        dt_tokens_start_epoch(t->tokens, epoch, first);
    else
        dt_loader_start_epoch(t->loader, epoch, first);
}

const struct dt_batch *dt_trainer__data_next(struct dt_trainer *t)
{
    return t->tokens ? dt_tokens_next(t->tokens) : dt_loader_next(t->loader);
}

int dt_trainer__data_none(const struct dt_trainer *t)
{
    if (t->tokens && dt_tokens_failed(t->tokens))
        return dt_error_prefix("trainer.data.train");
    return dt_error_set(DT_EINTERNAL, "loader ran dry at epoch %lld batch %lld", (long long)t->epoch,
                        (long long)t->batch);
}

double dt_trainer__data_wait_s(const struct dt_trainer *t)
{
    return t->tokens ? dt_tokens_wait_s(t->tokens) : dt_loader_wait_s(t->loader);
}

/* ---- checkpoints: the token position ---- */

/* Where the batch after the last step is read.  The loop starts the epoch
 * at (epoch, batch) again before its next batch (a new epoch, or a resume),
 * or is already there, so moving the loader there changes nothing. */
void dt_trainer__data_position(struct dt_trainer *t, struct dt_ckpt_state *st)
{
    if (!t->tokens)
        return;
    int shard;
    int64_t offset;
    dt_tokens_start_epoch(t->tokens, t->epoch, t->batch);
    dt_tokens_where(t->tokens, &shard, &offset);
    st->has_data_pos = true;
    st->data_shard = shard < 0 ? 0 : shard; /* at an epoch's end: the next epoch's first batch */
    st->data_offset = offset;
    if (shard < 0) {
        dt_tokens_start_epoch(t->tokens, t->epoch + 1, 0);
        dt_tokens_where(t->tokens, &shard, &st->data_offset);
        st->data_shard = shard;
        dt_tokens_start_epoch(t->tokens, t->epoch, t->batch);
    }
}

/* A resumed token run starts at the exact token it had reached: the file's
 * (epoch, batch) must land on the shard and offset the file recorded, which
 * fails when the shards changed since (other files, other sizes). */
int dt_trainer__data_resume(struct dt_trainer *t, const struct dt_ckpt_state *st, const char *path)
{
    if (!t->tokens)
        return 0;
    if (!st->has_data_pos)
        return dt_error_set(DT_EINVAL,
                            "%s: has no token position (data_shard, data_offset): saved by a run on another "
                            "data set; use another checkpoint dir or resume: never",
                            path);
    struct dt_ckpt_state here = {0};
    int64_t epoch = t->epoch, batch = t->batch;
    t->epoch = st->epoch;
    t->batch = st->batch;
    dt_trainer__data_position(t, &here);
    t->epoch = epoch;
    t->batch = batch;
    if (here.data_shard == st->data_shard && here.data_offset == st->data_offset)
        return 0;
    return dt_error_set(
        DT_EINVAL,
        "%s: saved at token %lld of shard %lld, but epoch %lld batch %lld of trainer.data.train "
        "is token %lld of %s: the shards changed since (restore them, or resume: never)",
        path, (long long)st->data_offset, (long long)st->data_shard, (long long)st->epoch,
        (long long)st->batch, (long long)here.data_offset, t->train_set.shards[here.data_shard].path);
}

/* ---- evaluation and samples ---- */

/* Validation loss: every rank reads its share of the first val_batches
 * global batches of val, from its start (llm.c's val loader, reset each
 * time); the loss is the mean over all their target tokens.  On a device
 * each batch goes to the engine's forward (kernels.h: eval_tokens). */
int dt_trainer__tokens_evaluate(struct dt_trainer *t)
{
    double sums[3] = {0, 0, 0};
    dt_tokens_start_epoch(t->val_loader, 0, 0);
    for (int64_t i = 0; i < t->val_batches; i++) {
        const struct dt_batch *b = dt_tokens_next(t->val_loader);
        int64_t hits = 0;
        if (!b && dt_tokens_failed(t->val_loader))
            return dt_error_prefix("trainer.data.val");
        if (!b)
            return dt_error_set(DT_EINTERNAL, "the validation loader ran dry at batch %lld", (long long)i);
        if (t->dev) {
            double loss = 0;
            int rc = t->devk->eval_tokens(t->dev, b, &loss, &hits);
            if (rc)
                return dt_error_prefix("validation at step %lld", (long long)t->step);
            sums[0] += loss;
        } else {
            sums[0] += dt_model_eval_batch(t->model, b, &hits);
        }
        sums[1] += (double)hits;
        sums[2] += (double)dt_batch_terms(b);
    }
    if (t->comm && t->world > 1 && dt_comm_allreduce(t->comm, sums, sums, 3, DT_F64, DT_SUM))
        return dt_error_prefix("summing the validation loss over ranks");
    t->test_loss = sums[0] / sums[2];
    t->test_acc = sums[1] / sums[2];
    t->evaluated_at = t->step;
    return 0;
}

/* trainer.sample: rank 0 prints what the model writes after the prompt
 * (vocabularies of 256: the prompt's bytes, default a newline; larger ones
 * start from token vocab_size - 1, GPT-2's <|endoftext|>, and print ids).
 * On a device the host model gets the device's parameters first and
 * samples on the CPU (a few hundred one-row forwards). */
int dt_trainer__sample(struct dt_trainer *t)
{
    const struct dt_sample_spec *sp = &t->spec.sample;
    if (sp->tokens <= 0 || t->rank != 0 || t->o.quiet)
        return 0;
    int vocab = t->spec.model.vocab_size, n_prompt = 1;
    const char *prompt = sp->prompt ? sp->prompt : "\n";
    if (vocab <= 256) {
        n_prompt = (int)strlen(prompt);
        for (int i = 0; i < n_prompt; i++)
            t->sample_buf[i] = (unsigned char)prompt[i];
    } else {
        t->sample_buf[0] = vocab - 1;
    }
    int rc = t->dev ? t->devk->get_state(t->dev, t->model->params, NULL, NULL, NULL) : 0;
    if (!rc)
        rc = dt_sample_generate(t->model, t->sample_buf, n_prompt, sp->tokens, sp->temperature, sp->top_k,
                                t->spec.seed + (uint64_t)t->step, t->sample_buf + n_prompt);
    if (rc)
        return dt_error_prefix("sample at step %lld", (long long)t->step);
    printf("sample step %lld:\n", (long long)t->step);
    if (vocab <= 256) {
        dt_sample_print_bytes(stdout, t->sample_buf, n_prompt + sp->tokens);
    } else {
        for (int i = 0; i < n_prompt + sp->tokens; i++)
            printf("%s%d", i ? " " : "", t->sample_buf[i]);
    }
    printf("\n");
    fflush(stdout);
    return 0;
}
