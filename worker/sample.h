/* sample.h - text from a language model: autoregressive generation, as
 * nanoGPT's GPT.generate does it.
 *
 * Each new token is drawn from the logits of the last position after a
 * forward of the context window (the last min(block_size, the model's
 * seq_len) tokens; there is no key-value cache, so a step costs a whole
 * forward).  The logits are divided by the temperature, all but the top_k
 * largest dropped (ties with the k-th kept, as torch.topk's threshold keeps
 * them), and a token drawn from their softmax (in double).  Temperature 0
 * (or top_k 1) takes the argmax instead, the first on a tie like
 * torch.argmax, and draws nothing.
 *
 * The random numbers are SplitMix64 (Steele, Lea and Flood 2014) from the
 * state `seed`: the j-th draw is u_j = (x_j >> 11) * 2^-53 in [0, 1), x_j
 * the generator's j-th output, one draw per sampled token; the token is the
 * first whose cumulative probability exceeds u_j.  So a seed names one
 * sample, the same on any machine with the same logits.
 *
 * Used by `dtrain sample` and by the trainer's samples at evaluation time.
 * Not for tokenising: tokens in, tokens out (byte-level ones printable as
 * text).
 */
#ifndef DT_SAMPLE_H
#define DT_SAMPLE_H

#include <stdint.h>
#include <stdio.h>

#include "worker/models/model.h"

/* Generates n_new tokens after prompt[0, n_prompt) into out[0, n_new) (the
 * new tokens only), with m, a model of token sequences (gpt2), in forward
 * only (its parameters and gradients are not touched; its activations and
 * logits are).  n_prompt >= 1, every prompt token in [0, vocab), temperature
 * finite and >= 0, top_k >= 0 (0: the whole vocabulary).  DT_EINVAL with a
 * sentence for a bad argument, DT_ENOMEM. */
int dt_sample_generate(struct dt_model *m, const int32_t *prompt, int n_prompt, int n_new, double temperature,
                       int top_k, uint64_t seed, int32_t *out);

/* Byte-level tokens (a vocabulary of 256) as text on f: printable ASCII, a
 * newline and a tab as they are, a backslash as two, any other byte as
 * \xNN, so a terminal never receives control bytes and the text can be
 * read back exactly. */
void dt_sample_print_bytes(FILE *f, const int32_t *tokens, int n);

#endif
