/* model_internal.h - helpers for the models' own files in worker/models/;
 * not for the trainer, which sees model.h only. */
#ifndef DT_MODEL_INTERNAL_H
#define DT_MODEL_INTERNAL_H

#include "worker/models/model.h"

/* The two arenas of m->n_params zeroed floats each (create calls it once the
 * layout is known); freed by dt_model_destroy. */
int dt_model__alloc_arenas(struct dt_model *m);

/* The first row of the chunk just below row `top` (> 0) of a gradient written
 * in chunks of R rows from the last rows down (dt_model_chunk_rows): chunks
 * start at rows 0, 64, 64 + R, 64 + 2R, ... */
int dt_model__chunk_below(int top, int R);

#endif
