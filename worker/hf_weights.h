/* hf_weights.h - Hugging Face GPT-2 files: the weights a run starts from
 * (trainer.init_from) and the directory `dtrain export hf` writes.
 *
 * Hugging Face's GPT2LMHeadModel and dtrain's gpt2 (worker/models/model.h)
 * name and lay out their tensors alike: transformer.wte.weight [V, C], each
 * block's attn.c_attn.weight [C, 3C] in Conv1D's [in, out] layout, ..., so
 * weights pass either way as they are, with no transpose.  What
 * differs is only around them: HF's files carry no lm_head.weight (tied to
 * wte), old ones carry attn.bias / attn.masked_bias buffers, the hub's own
 * gpt2 file names its tensors without the "transformer." prefix (it was
 * saved from GPT2Model), and many files are fp16 or bf16.
 *
 * Not for dtrain's own checkpoints (ckpt.h), which hold the optimizer and
 * the run's position as well.
 */
#ifndef DT_HF_WEIGHTS_H
#define DT_HF_WEIGHTS_H

#include <stdbool.h>
#include <stdint.h>

#include "worker/ckpt.h"
#include "worker/models/model.h"

/* One tensor of GPT2LMHeadModel: its name and shape ([d0] or [d0, d1]). */
struct dt_hf_tensor {
    char name[64];
    int ndim;
    int64_t shape[2];
};

/* GPT2LMHeadModel's state_dict for a gpt2 spec s, less lm_head and the
 * buffers: 4 + 12 * n_layer tensors, malloc'd, in state_dict order.  They
 * are dtrain's gpt2's named tensors too (worker/models/gpt2.c), so a
 * checkpoint's model entry says which tensors the file must hold
 * (dt_ckpt_model_spec).  NULL with the error set when out of memory. */
struct dt_hf_tensor *dt_hf_gpt2_tensors(const struct dt_model_spec *s, int *n);

/* Copies the weights at `path` into m, a gpt2 model: a Hugging Face
 * directory (its model.safetensors; its config.json, when there, must agree
 * with m's spec) or a .safetensors file.  Every tensor of m must be in the
 * file with m's shape, in F32, F16, BF16 or F64 (converted to fp32) and
 * finite; lm_head.weight may be there if it equals wte (tied), attn.bias and
 * attn.masked_bias buffers are ignored, any other tensor is an error.  A
 * refusal is one sentence naming the file and the tensor, its shape in the
 * file and in the model, and the trainer.model key to change, and leaves m
 * as it was.  pytorch_model.bin and sharded files are refused with how to
 * convert them. */
int dt_hf_load(const char *path, struct dt_model *m);

/* Writes dir/model.safetensors (the model's tensors in fp32 under HF's
 * names, no optimizer state, no lm_head) and dir/config.json (a GPT2Config
 * that transformers.GPT2LMHeadModel.from_pretrained(dir) loads) from a
 * verified gpt2 checkpoint; each file replaced whole (dt_fs_write_atomic).
 * dir is created if missing; one that holds any file is refused unless
 * `force`, which replaces those two files and leaves the others. */
int dt_hf_export(const struct dt_ckpt_file *c, const char *dir, bool force);

#endif
