/* model_amp.h - the MLP's autocast forward and backward; internal to the model
 * (model.c dispatches here when m->prec is not F32).  Not a public header. */
#ifndef DT_MODEL_AMP_H
#define DT_MODEL_AMP_H

#include "worker/model.h"

const float *dt_model_amp_forward(struct dt_model *m, const float *x, int B);

/* Backward from m->dlogits (fp32, as the fp32 loss leaves it) for the batch
 * of the last dt_model_amp_forward. */
void dt_model_amp_backward(struct dt_model *m, int B, int accumulate, dt_model_ready_fn ready, void *ctx);

#endif
