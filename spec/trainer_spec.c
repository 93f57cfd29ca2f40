/* trainer_spec.c - defaults of the trainer section (trainer_spec.h).
 *
 * Kept next to the struct so the parser and the trainer agree on them.
 */
#include "spec/trainer_spec.h"

#include <string.h>

void dt_trainer_spec_defaults(struct dt_trainer_spec *t)
{
    memset(t, 0, sizeof *t);
    strcpy(t->model.type, "mlp");
    t->model.hidden[0] = 1024;
    t->model.hidden[1] = 1024;
    t->model.n_hidden = 2;
    t->model.activation = DT_ACT_RELU;
    t->model.n_layer = 12;
    t->model.n_head = 12;
    t->model.n_embd = 768;
    t->model.vocab_size = 50257;
    t->model.block_size = 1024;

    strcpy(t->data.dataset, "fashion-mnist");
    t->data.path = NULL; /* NULL means /usr/share/datasets/fashion-mnist */
    t->data.batch_size = 64;
    t->data.workers = 2;
    t->data.prefetch = 2;
    t->data.shuffle = true;
    t->data.drop_last = false;

    t->epochs = 1;
    t->steps = 0;

    strcpy(t->optimizer.type, "adamw");
    t->optimizer.lr = 1e-3;
    t->optimizer.beta1 = 0.9;
    t->optimizer.beta2 = 0.999;
    t->optimizer.eps = 1e-8;
    t->optimizer.weight_decay = 0.01;
    t->optimizer.grad_clip = 0.0;

    t->scheduler.type = DT_SCHED_CONSTANT;
    t->scheduler.pct_start = 0.3;
    t->scheduler.anneal = DT_ANNEAL_COS;
    t->scheduler.div_factor = 25.0;
    t->scheduler.final_div_factor = 1e4;
    t->scheduler.three_phase = false;
    t->scheduler.cycle_momentum = true;
    t->scheduler.base_momentum = 0.85;
    t->scheduler.max_momentum = 0.95;
    t->scheduler.warmup_steps = 0;
    t->scheduler.min_lr = 0.0;

    t->ddp.bucket_cap_mb = 25.0;
    t->ddp.first_bucket_mb = 1.0;
    t->ddp.overlap = true;
    t->ddp.grad_accum = 1;
    t->ddp.desync_check_every = 100;
    t->ddp.share_state = true;
    t->ddp.zero = 0;

    t->checkpoint.every_steps = 500;
    t->checkpoint.dir = NULL; /* NULL means "checkpoints" inside the run directory */
    t->checkpoint.keep = 3;
    t->checkpoint.resume = DT_RESUME_AUTO;

    t->eval_every_epochs = 1;
    t->eval_batches = 20;     /* llm.c's val_max_steps */
    t->eval_every_steps = 0;
    t->seed = 0;
    t->device = DT_DEVICE_CPU;

    t->amp.dtype = DT_AMP_OFF;
    t->amp.dynamic = true;
    t->amp.loss_scale = 0.0;
    t->amp.init_scale = 65536.0;
    t->amp.growth_factor = 2.0;
    t->amp.backoff_factor = 0.5;
    t->amp.growth_interval = 2000;

    t->trace.first_step = 0;
    t->trace.last_step = -1;
    t->cuda_graph = true;
    t->tf32 = false;
    t->log_every_steps = 10;
    t->sample.tokens = 0;
    t->sample.prompt = NULL; /* NULL means "\n" */
    t->sample.temperature = 1.0;
    t->sample.top_k = 0;
}
