/* host_state.h - the CPU trainer's state on one host: the gradient arenas in
 * shared memory, and one copy of the parameters and AdamW moments for all the
 * host's ranks, with the optimizer step split among them.
 *
 * Data parallelism keeps every rank's parameters and moments identical, so on
 * one host (the shm communicator) they need not be copies: they live in one
 * buffer every rank maps (dt_comm_alloc_common), and each rank sums the
 * clipping norm's blocks and runs AdamW on its slice only (whole norm
 * blocks).  AdamW is elementwise and the norm's partition into blocks is
 * fixed (worker/optim/grad_norm.h), so every bit is what each rank would
 * compute doing all of it; the optimizer's memory traffic and work per rank
 * are 1/p, and the
 * host holds one copy instead of p.  Each rank keeps its own gradient arena,
 * in shared memory, where backward writes; the all-reduce reads the peers'
 * arenas in place and writes the average into one host-wide array (comm.h:
 * rank q writes piece q, nothing is copied back), which the norm and AdamW
 * read.
 *
 * One step, after dt_reducer_finish():
 *   - nobody reads the parameters any more this step: the last bucket's
 *     all-reduce ends only once every rank has written all its gradients,
 *     and backward's last parameter read comes before that;
 *   - each rank sums its slice's norm blocks into the common block sums;
 *     barrier; every rank totals all of them in block order (same bits);
 *   - AdamW on the slice; barrier: the next forward reads finished
 *     parameters, and the next all-reduce writes the averages only once every
 *     rank has read its slice of them.
 * Checkpoints, evaluation and the desync hash read the parameters between a
 * step's last barrier and the next step's all-reduce, which waits for them.
 *
 * Not for other backends (tcp: every rank keeps its own copy and runs the
 * whole step), for ZeRO-1 (worker/zero.h: with ddp.zero 1 the one copy is
 * off, only the gradients are shared) or for the GPU trainer.
 */
#ifndef DT_HOST_STATE_H
#define DT_HOST_STATE_H

#include <stdbool.h>
#include <stddef.h>

#include "comm/comm.h"
#include "worker/optim/adamw.h"
#include "worker/optim/grad_norm.h"
#include "worker/models/model.h"
#include "worker/trace.h"

struct dt_host_state {
    struct dt_comm *comm;
    float *grads;        /* this rank's gradient arena in shared memory, or NULL */
    float *common;       /* parameters | m | v | averaged gradients | norm block sums, one for the host, or NULL */
    float *avg;          /* the averaged gradients, inside common: the all-reduce writes them there */
    double *sums;        /* the norm's block sums, inside common */
    size_t lo, hi;       /* this rank's slice of the parameters (whole norm blocks) */
    struct dt_trace *trace; /* NULL, or where the slices and the waits after them go (compute track) */
};

/* After the model, the optimizer and a resume hold rank 0's values on every
 * rank: moves the gradients to shared memory and, when `one_copy`, the
 * parameters and moments to the host's one copy (rank 0's values).  A
 * communicator without shared memory (or world 1) leaves everything where it
 * is, and hs->common NULL. */
int dt_host_state_init(struct dt_host_state *hs, struct dt_comm *comm, struct dt_model *m, struct dt_adamw *opt,
                       bool one_copy);
/* After the model and the optimizer are gone. */
void dt_host_state_release(struct dt_host_state *hs);

/* The clipping norm's block sums go to the common array (call once, after dt_grad_norm_init). */
void dt_host_state_share_norm(struct dt_host_state *hs, struct dt_grad_norm *gn);

/* norm^2 of the averaged gradients: this rank's blocks, then every rank's. */
int dt_host_state_norm(struct dt_host_state *hs, struct dt_grad_norm *gn, double *norm2);

/* AdamW on this rank's slice of hs->avg (skip: no step, as an AMP step with
 * inf/NaN), then the barrier after which every parameter is updated. */
int dt_host_state_adamw(struct dt_host_state *hs, struct dt_adamw *opt, struct dt_model *m, bool skip, double lr,
                        double beta1, float grad_scale);

#endif
