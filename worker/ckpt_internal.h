/* ckpt_internal.h - what ckpt.c and ckpt_model.c share (not a public
 * interface: worker/ckpt.h is).
 *
 * Not for callers of checkpoints.
 */
#ifndef DT_CKPT_INTERNAL_H
#define DT_CKPT_INTERNAL_H

#include <stddef.h>

#include "worker/ckpt.h"

#define DT_CKPT__MODEL_JSON_MAX 512 /* the model entry: 16 hidden widths of 5 digits fit many times over */

/* {"type": ..., then the type's fields}: what `dtrain export hf` and
 * `dtrain sample` rebuild the model from, and what a resume must match. */
int dt_ckpt__model_json(const struct dt_model_spec *m, char *buf, size_t size);
/* 0 when the file's model entry is m's (or it has none); else DT_EINVAL
 * naming both. */
int dt_ckpt__same_model(const struct dt_ckpt_file *c, const struct dt_model *m);

#endif
