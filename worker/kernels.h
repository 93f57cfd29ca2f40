/* kernels.h - the per-device kernel table the model and the optimizer call.
 *
 * One table per device (CPU: kernels_cpu.c over OpenBLAS; CUDA later), so the
 * model, the optimizer and the training loop are written once.  Pointers
 * passed to a table's functions live on that table's device.  Layouts follow
 * PyTorch: activations are row-major [batch, features], a Linear weight is
 * [out, in] and y = x W^T + b.
 *
 * Not for allocation or scheduling: callers own every buffer.
 */
#ifndef DT_KERNELS_H
#define DT_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum dt_kact { DT_KACT_NONE, DT_KACT_RELU, DT_KACT_GELU };
/* The precision a value is rounded to (AMP keeps low-precision values in float arrays). */
enum dt_kprec { DT_KPREC_F32, DT_KPREC_BF16, DT_KPREC_F16 };

/* Scalars of one AdamW step, computed in double by adamw.c as torch does. */
struct dt_adamw_scalars {
    float decay;       /* 1 - lr * weight_decay */
    float w1;          /* 1 - beta1: the lerp weight */
    float beta2, w2;   /* beta2, 1 - beta2 */
    float bc2_sqrt;    /* sqrt(1 - beta2^t) */
    float eps;
    float neg_step;    /* -lr / (1 - beta1^t) */
    float grad_scale;  /* gradient clipping coefficient (1 when not clipping) */
};

struct dt_kernels {
    const char *name;
    /* y[B,out] = x[B,in] W[out,in]^T */
    void (*matmul_forward)(float *y, const float *x, const float *w, int B, int in, int out);
    /* dw[out,in] (+)= dy[B,out]^T x[B,in]  (accumulate: add to dw instead of overwriting) */
    void (*matmul_backward_w)(float *dw, const float *dy, const float *x, int B, int in, int out,
                              bool accumulate);
    /* dx[B,in] = dy[B,out] W[out,in] */
    void (*matmul_backward_x)(float *dx, const float *dy, const float *w, int B, int in, int out);
    /* z = y + b (row broadcast), h = act(z); z may be NULL when act needs only h to go back */
    void (*bias_act_forward)(float *z, float *h, const float *y, const float *b, int B, int n,
                             enum dt_kact act);
    /* dz = dh * act'(z or h), db (+)= sum_rows dz; dz may alias dh */
    void (*act_bias_backward)(float *dz, float *db, const float *dh, const float *z, const float *h, int B,
                              int n, enum dt_kact act, bool accumulate);
    /* Softmax cross-entropy of logits[B,C] against labels y.  Returns the summed
     * loss; counts argmax hits into *correct; when dlogits is not NULL writes
     * (softmax - onehot) * dscale into it. */
    double (*xent)(float *dlogits, const float *logits, const int32_t *y, int B, int C, float dscale,
                   int64_t *correct);
    /* sum of x^2 in double */
    double (*sumsq)(const float *x, size_t n);
    void (*adamw)(float *p, const float *g, float *m, float *v, size_t n, const struct dt_adamw_scalars *s);
    /* 64-bit hash of the bytes of x (desync detection); equal data, equal hash */
    uint64_t (*hash)(const float *x, size_t n);
    /* g *= inv_scale; returns true when an element was inf or NaN before
     * (torch's _amp_foreach_non_finite_check_and_unscale_). */
    bool (*unscale)(float *g, size_t n, float inv_scale);
    /* dst (+)= src rounded to the nearest value of precision p, ties to even
     * (fp16: beyond 65504 rounds to inf, below 2^-14 to multiples of 2^-24;
     * bf16: float's range, 8 bits).  dst may be src when not accumulating. */
    void (*round_lowp)(float *dst, const float *src, size_t n, enum dt_kprec p, bool accumulate);
    /* Sets the threads the kernels may use (BLAS and elementwise). */
    void (*set_threads)(int n);
};

extern const struct dt_kernels dt_kernels_cpu;

#endif
