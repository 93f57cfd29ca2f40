/* fuzz_ckpt.c - libFuzzer target for loading a checkpoint into a model.
 *
 * dt_ckpt_load checks a parsed safetensors file against the model (names,
 * dtypes, shapes) and reads the run's state from the metadata, which its own
 * checksum covers in files written since issue 26 ("crc32c.__metadata__")
 * and nothing but range checks covers in older ones.  A 2-3-2 MLP is enough
 * to drive every path, so the model
 * is made once and each input is loaded from a memfd twice, as an fp32 run
 * and as a bf16 one, so that files of either kind get past the amp check.
 * What loads must leave a state the trainer can resume from (no negative
 * step, epoch or batch; no counter of steps past the step; a loss scale the
 * scaler could have reached); what is refused must leave the model and
 * optimizer as they were.
 *
 * The seeds (tests/fuzz/make_seeds.py) are checkpoints of this model with
 * seed 5, 4 ranks and batch 32, of both kinds.  Mutating the header of the
 * older kind keeps their data checksums right, so the fuzzer gets past them
 * into the counter checks; the newer kind's metadata checksum stops most
 * mutations, and the fuzzer learns the checksum check itself from them.  A
 * byte put into or taken
 * out of the header would leave the length in front of it wrong, and the
 * parser would stop there; since this model's data is always 3 x 17 floats,
 * each input is also loaded with that length mended.
 *
 * Not for the safetensors parser itself (fuzz_safetensors.c) nor for picking
 * the newest intact file (tests/unit/test_ckpt.c).
 */
#include "base/error.h"
#include "base/log.h"
#include "worker/optim/adamw.h"
#include "worker/ckpt.h"
#include "tests/unit/mlp_fixture.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static struct dt_model *model;
static struct dt_adamw opt;
static int fd = -1;
static char path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const int hidden[1] = {3};
    if (mlp_fixture(2, hidden, 1, 2, DT_ACT_RELU, 1, 1, &model) ||
        dt_adamw_init(&opt, &dt_kernels_cpu, model->n_params, 0.999, 1e-8, 0.01))
        abort();
    fd = memfd_create("fuzz_ckpt", 0);
    if (fd < 0)
        abort();
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    dt_log_set_level(DT_LOG_ERROR);
    return 0;
}

/* The model's and optimizer's values, to see that a refusal left them. */
static float *snapshot(float *out)
{
    memcpy(out, model->params, model->n_params * sizeof(float));
    memcpy(out + model->n_params, opt.m, opt.n * sizeof(float));
    memcpy(out + model->n_params + opt.n, opt.v, opt.n * sizeof(float));
    return out;
}

static void load(enum dt_amp_dtype amp)
{
    struct dt_ckpt_state s = {.seed = 5, .world = 4, .batch_size = 32, .amp = amp};
    s.scaler.scale = 1;
    float before[64], after[64];
    size_t floats = model->n_params + 2 * opt.n;
    if (floats > 64)
        abort();
    snapshot(before);
    int64_t step = opt.step;
    if (dt_ckpt_load(path, model, &opt, &s)) {
        if (!strstr(dt_error_last(), path))
            abort(); /* every refusal names the file */
        if (memcmp(before, snapshot(after), floats * sizeof(float)) || opt.step != step || s.step != 0)
            abort(); /* and changes nothing (ckpt.h) */
        dt_error_clear();
        return;
    }
    if (s.step < 0 || s.epoch < 0 || s.batch < 0 || opt.step < 0 || s.scaler.growth_tracker < 0)
        abort(); /* the trainer indexes its loader's slots with these */
    if (opt.step > s.step || s.epoch > s.step || s.scaler.skipped > s.step)
        abort(); /* each counts optimizer steps at least; past the step, AdamW's overflowed */
    if (!isfinite(s.scaler.scale) || s.scaler.scale < 0 || s.scaler.skipped < 0)
        abort(); /* no scaler gets there (grad_scaler.c); 0 it can reach, backing off */
}

static void load_both(const uint8_t *data, size_t size)
{
    if (ftruncate(fd, 0) || pwrite(fd, data, size, 0) != (ssize_t)size)
        abort();
    load(DT_AMP_OFF);
    load(DT_AMP_BF16);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    load_both(data, size);
    size_t tail = 3 * model->n_params * sizeof(float); /* parameters and AdamW's two moments */
    if (size < 8 + tail)
        return 0;
    uint8_t *mended = malloc(size);
    if (!mended)
        abort();
    memcpy(mended, data, size);
    uint64_t n = size - 8 - tail;
    for (int i = 0; i < 8; i++)
        mended[i] = (uint8_t)(n >> (8 * i));
    if (memcmp(mended, data, 8))
        load_both(mended, size);
    free(mended);
    return 0;
}
