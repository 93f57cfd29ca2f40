/* test_ckpt_model.c - the checkpoint's "model" entry (issue 24): a save
 * records trainer.model as JSON and dt_ckpt_model_spec reads it back (an MLP,
 * and a gpt2 spec, whose fields are written only for that type); a resume
 * into another model of the same tensor shapes is refused naming both; a
 * file without the entry (from before it) still resumes, and says it has no
 * model when asked; the weights alone load into a fresh model; a run
 * directory resolves to its newest checkpoint.  Issue 45: a gpt2 entry is
 * read back only when the file's tensors are the model it declares. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/log.h"
#include "worker/ckpt.h"
#include "worker/hf_weights.h"
#include "worker/optim/adamw.h"
#include "worker/safetensors.h"
#include "mlp_fixture.h"

struct fx {
    char dir[64];
    struct dt_model *m;
    struct dt_adamw a;
};

static const int hidden[2] = {32, 16};

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof *f);
    strcpy(f->dir, "/tmp/dtrain-ckpt-model.XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    if (mlp_fixture(20, hidden, 2, 5, DT_ACT_RELU, 4, 1, &f->m) ||
        dt_adamw_init(&f->a, &dt_kernels_cpu, f->m->n_params, 0.999, 1e-8, 0.01))
        return -1;
    dt_log_set_level(DT_LOG_ERROR);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", f->dir);
    int rc = system(cmd);
    dt_model_destroy(f->m);
    dt_adamw_release(&f->a);
    free(f);
    return rc == 0 ? 0 : -1;
}

static struct dt_ckpt_state state_at(int64_t step)
{
    return (struct dt_ckpt_state){.step = step, .seed = 5, .world = 1, .batch_size = 8};
}

static void save(struct fx *f, const char *dir, int64_t step)
{
    struct dt_ckpt_state s = state_at(step);
    for (size_t i = 0; i < f->m->n_params; i++)
        f->m->params[i] = (float)step + (float)i * 1e-3f;
    if (dt_ckpt_save(dir, f->m, &f->a, &s, 0))
        fail_msg("%s", dt_error_last());
}

static void read_file(struct fx *f, int64_t step, struct dt_ckpt_file *c)
{
    char p[256];
    snprintf(p, sizeof p, "%s/step_%08lld.safetensors", f->dir, (long long)step);
    if (dt_ckpt_read(p, c))
        fail_msg("%s", dt_error_last());
}

static void mlp_entry_round_trips(void **state)
{
    struct fx *f = *state;
    f->m->spec.activation = DT_ACT_GELU;
    save(f, f->dir, 1);
    struct dt_ckpt_file c;
    read_file(f, 1, &c);
    assert_string_equal(c.model, "{\"type\":\"mlp\",\"hidden\":[32,16],\"activation\":\"gelu\"}");
    struct dt_model_spec s;
    assert_int_equal(dt_ckpt_model_spec(&c, &s), 0);
    assert_string_equal(s.type, "mlp");
    assert_int_equal(s.n_hidden, 2);
    assert_int_equal(s.hidden[0], 32);
    assert_int_equal(s.hidden[1], 16);
    assert_int_equal(s.activation, DT_ACT_GELU);
    dt_ckpt_release(&c);
}

/* A gpt2 of the spec g, one sequence of block_size tokens, the CPU kernels. */
static struct dt_model *gpt2_model(const struct dt_model_spec *g)
{
    struct dt_model_config mc = {
        .spec = g,
        .k = &dt_kernels_cpu,
        .max_batch = 1,
        .data = {.kind = DT_BATCH_TOKENS, .seq_len = g->block_size, .vocab = g->vocab_size}};
    struct dt_model *m = NULL;
    if (dt_model_create(&mc, &m))
        fail_msg("%s", dt_error_last());
    return m;
}

static const struct dt_model_spec small_gpt2 = {
    .type = "gpt2", .n_layer = 2, .n_head = 4, .n_embd = 64, .vocab_size = 256, .block_size = 128};

/* The gpt2 fields, written for a gpt2 and read back; the file's tensors
 * are the ones the entry declares (dt_ckpt_model_spec checks them). */
static void gpt2_entry_round_trips(void **state)
{
    struct fx *f = *state;
    dt_model_destroy(f->m);
    dt_adamw_release(&f->a);
    f->m = gpt2_model(&small_gpt2);
    assert_int_equal(dt_adamw_init(&f->a, &dt_kernels_cpu, f->m->n_params, 0.999, 1e-8, 0.01), 0);
    save(f, f->dir, 2);
    struct dt_ckpt_file c;
    read_file(f, 2, &c);
    assert_string_equal(c.model,
                        "{\"type\":\"gpt2\",\"n_layer\":2,\"n_head\":4,\"n_embd\":64,\"vocab_size\":256,"
                        "\"block_size\":128}");
    struct dt_model_spec s;
    assert_int_equal(dt_ckpt_model_spec(&c, &s), 0);
    assert_string_equal(s.type, "gpt2");
    assert_int_equal(s.n_layer, 2);
    assert_int_equal(s.n_head, 4);
    assert_int_equal(s.n_embd, 64);
    assert_int_equal(s.vocab_size, 256);
    assert_int_equal(s.block_size, 128);
    /* another n_head: the same shapes, another function; refused on resume */
    f->m->spec.n_head = 8;
    struct dt_ckpt_state st = state_at(0);
    assert_int_equal(dt_ckpt_apply(&c, f->m, &f->a, &st), DT_EINVAL);
    assert_non_null(
        strstr(dt_error_last(), "saved from the model {\"type\":\"gpt2\",\"n_layer\":2,\"n_head\":4"));
    assert_non_null(
        strstr(dt_error_last(), "this run's trainer.model is {\"type\":\"gpt2\",\"n_layer\":2,\"n_head\":8"));
    assert_int_equal(st.step, 0);
    assert_int_equal(dt_ckpt_apply_weights(&c, f->m), DT_EINVAL);
    dt_ckpt_release(&c);
}

/* What the entry declares is what a gpt2 of that spec has: the list the
 * check holds files to (Hugging Face's names) is the model's own, name for
 * name and shape for shape, in its order. */
static void gpt2_declared_tensors_are_the_models(void **state)
{
    (void)state;
    struct dt_model *m = gpt2_model(&small_gpt2);
    int n;
    struct dt_hf_tensor *want = dt_hf_gpt2_tensors(&small_gpt2, &n);
    assert_non_null(want);
    assert_int_equal(n, m->n_tensors);
    for (int i = 0; i < n; i++) {
        assert_string_equal(want[i].name, m->tensors[i].name);
        assert_int_equal(want[i].ndim, m->tensors[i].ndim);
        for (int d = 0; d < want[i].ndim; d++)
            assert_int_equal(want[i].shape[d], m->tensors[i].shape[d]);
    }
    free(want);
    dt_model_destroy(m);
}

/* A file whose entry declares a model its tensors are not (here an MLP's
 * tensors under a gpt2 entry; then a gpt2 of a wider embedding) is refused
 * by dt_ckpt_model_spec, before anything builds the declared model: `dtrain
 * sample` of a 33 KB file declaring GPT-2 124M used 2.4 GB. */
static void declared_model_must_be_the_files(void **state)
{
    struct fx *f = *state;
    f->m->spec = small_gpt2; /* the entry says gpt2; the tensors stay the MLP's */
    save(f, f->dir, 2);
    struct dt_ckpt_file c;
    read_file(f, 2, &c);
    struct dt_model_spec s;
    assert_int_equal(dt_ckpt_model_spec(&c, &s), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(),
                           "/step_00000002.safetensors: its model entry declares gpt2 n_layer 2, "
                           "n_head 4, n_embd 64, vocab_size 256, block_size 128, whose tensor "
                           "transformer.wte.weight is F32 [256, 64]; the file has no such tensor"));
    dt_ckpt_release(&c);
    struct dt_model_spec wide = small_gpt2;
    wide.n_embd = 128;
    dt_model_destroy(f->m);
    dt_adamw_release(&f->a);
    f->m = gpt2_model(&small_gpt2);
    assert_int_equal(dt_adamw_init(&f->a, &dt_kernels_cpu, f->m->n_params, 0.999, 1e-8, 0.01), 0);
    f->m->spec = wide;
    save(f, f->dir, 3);
    read_file(f, 3, &c);
    assert_int_equal(dt_ckpt_model_spec(&c, &s), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "is F32 [256, 128]; the file has it as F32 [256, 64]"));
    dt_ckpt_release(&c);
}

static void another_activation_is_refused_on_resume(void **state)
{
    struct fx *f = *state;
    save(f, f->dir, 3);
    struct dt_ckpt_file c;
    read_file(f, 3, &c);
    f->m->spec.activation = DT_ACT_GELU;
    memset(f->m->params, 0, f->m->n_params * sizeof(float));
    struct dt_ckpt_state st = state_at(0);
    assert_int_equal(dt_ckpt_apply(&c, f->m, &f->a, &st), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "\"activation\":\"relu\"}, this run's trainer.model is"));
    assert_true(f->m->params[1] == 0.0f); /* left as it was */
    f->m->spec.activation = DT_ACT_RELU;
    assert_int_equal(dt_ckpt_apply(&c, f->m, &f->a, &st), 0);
    assert_true(f->m->params[1] == 3.0f + 1e-3f);
    dt_ckpt_release(&c);
}

/* A file as an older dtrain wrote it: the same pairs less "model", and
 * without the metadata's checksum, which covered the entry (files older
 * still had none, and load on their tensors' checksums). */
static void strip_model_entry(const char *path)
{
    struct dt_safetensors st;
    assert_int_equal(dt_safetensors_read(path, &st), 0);
    struct dt_st_entry *e = calloc((size_t)st.n, sizeof *e);
    for (int i = 0; i < st.n; i++) {
        e[i] = (struct dt_st_entry){
            st.tensors[i].name, st.tensors[i].dtype, st.tensors[i].ndim, {0}, st.tensors[i].data};
        memcpy(e[i].shape, st.tensors[i].shape, sizeof st.tensors[i].shape);
    }
    const char **meta = calloc(2 * (size_t)st.n_meta, sizeof *meta);
    int m = 0;
    for (int i = 0; i < st.n_meta; i++)
        if (strcmp(st.meta[2 * i], "model") && strcmp(st.meta[2 * i], "crc32c.__metadata__")) {
            meta[2 * m] = st.meta[2 * i];
            meta[2 * m + 1] = st.meta[2 * i + 1];
            m++;
        }
    assert_int_equal(m, st.n_meta - 2);
    char tmp[300];
    snprintf(tmp, sizeof tmp, "%s.new", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(dt_safetensors_write_fd(fd, tmp, e, st.n, meta, m), 0);
    close(fd);
    assert_int_equal(rename(tmp, path), 0);
    free(e);
    free(meta);
    dt_safetensors_release(&st);
}

static void file_without_the_entry_still_resumes(void **state)
{
    struct fx *f = *state;
    save(f, f->dir, 4);
    char p[256];
    snprintf(p, sizeof p, "%s/step_%08lld.safetensors", f->dir, 4LL);
    strip_model_entry(p);
    struct dt_ckpt_file c;
    read_file(f, 4, &c);
    assert_null(c.model);
    memset(f->m->params, 0, f->m->n_params * sizeof(float));
    struct dt_ckpt_state st = state_at(0);
    assert_int_equal(dt_ckpt_apply(&c, f->m, &f->a, &st), 0);
    assert_int_equal(st.step, 4);
    assert_true(f->m->params[2] == 4.0f + 2e-3f);
    struct dt_model_spec s;
    assert_int_equal(dt_ckpt_model_spec(&c, &s), DT_ENOTFOUND);
    assert_non_null(strstr(dt_error_last(), "has no model entry in its metadata"));
    dt_ckpt_release(&c);
}

/* Only the model's tensors: no seed, world or batch to match, the
 * optimizer untouched; a model of other shapes is refused naming the tensor. */
static void weights_alone_load_into_a_fresh_model(void **state)
{
    struct fx *f = *state;
    save(f, f->dir, 5);
    struct dt_ckpt_file c;
    read_file(f, 5, &c);
    struct dt_model *fresh;
    assert_int_equal(mlp_fixture(20, hidden, 2, 5, DT_ACT_RELU, 1, 99, &fresh), 0);
    assert_int_equal(dt_ckpt_apply_weights(&c, fresh), 0);
    assert_memory_equal(fresh->params, f->m->params, f->m->n_params * sizeof(float));
    dt_model_destroy(fresh);
    const int other[2] = {32, 8};
    assert_int_equal(mlp_fixture(20, other, 2, 5, DT_ACT_RELU, 1, 99, &fresh), 0);
    assert_int_equal(dt_ckpt_apply_weights(&c, fresh), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "\"hidden\":[32,16]")); /* the entry speaks first */
    fresh->spec.hidden[1] = 16;                                     /* past the entry: the shapes */
    assert_int_equal(dt_ckpt_apply_weights(&c, fresh), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "tensor layers.2.weight dim 0 is 16, this model has 8"));
    dt_model_destroy(fresh);
    dt_ckpt_release(&c);
}

/* A checkpoint file, a checkpoint directory, or a run directory (its
 * checkpoints/): the newest intact file each time. */
static void run_dir_means_its_newest_checkpoint(void **state)
{
    struct fx *f = *state;
    char ck[128];
    snprintf(ck, sizeof ck, "%s/checkpoints", f->dir);
    save(f, ck, 6);
    save(f, ck, 9);
    struct dt_ckpt_file c;
    assert_int_equal(dt_ckpt_read_any(f->dir, &c), 0);
    assert_int_equal(c.step, 9);
    dt_ckpt_release(&c);
    assert_int_equal(dt_ckpt_read_any(ck, &c), 0);
    assert_int_equal(c.step, 9);
    dt_ckpt_release(&c);
    char p[256];
    snprintf(p, sizeof p, "%s/step_%08lld.safetensors", ck, 6LL);
    assert_int_equal(dt_ckpt_read_any(p, &c), 0);
    assert_int_equal(c.step, 6);
    dt_ckpt_release(&c);
    char empty[256];
    snprintf(empty, sizeof empty, "%s/run-elsewhere", f->dir);
    mkdir(empty, 0777);
    assert_int_equal(dt_ckpt_read_any(empty, &c), DT_ENOTFOUND);
    assert_non_null(strstr(dt_error_last(), "and no checkpoints/ in it (a run whose trainer.checkpoint.dir"));
    dt_ckpt_release(&c);
    snprintf(p, sizeof p, "%s/nothing-here", f->dir);
    assert_int_equal(dt_ckpt_read_any(p, &c), DT_ENOTFOUND);
    assert_non_null(strstr(dt_error_last(), "nothing-here"));
    dt_ckpt_release(&c);
}

/* An entry that is not a model: refused with the key at fault. */
static void bad_entries_are_refused(void **state)
{
    (void)state;
    const struct {
        const char *json, *says;
    } bad[] = {
        {"[1]", "no type"},
        {"{\"type\":\"gpt2\",\"n_layer\":2,\"n_head\":3,\"n_embd\":64,\"vocab_size\":256,\"block_size\":8}",
         "n_embd 64 is not a multiple of n_head 3"},
        {"{\"type\":\"gpt2\",\"n_layer\":0,\"n_head\":4,\"n_embd\":64,\"vocab_size\":256,\"block_size\":8}",
         "n_layer is missing or not an integer in 1..1024"},
        {"{\"type\":\"gpt2\",\"n_layer\":2,\"n_head\":4,\"n_embd\":64,\"block_size\":8}",
         "vocab_size is missing"},
        {"{\"type\":\"mlp\",\"hidden\":[],\"activation\":\"relu\"}",
         "hidden is not a list of 1 to 16 widths"},
        {"{\"type\":\"mlp\",\"hidden\":[4],\"activation\":\"tanh\"}", "activation is not relu or gelu"},
        {"{\"type\":", "the model entry:1:"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct dt_ckpt_file c = {.path = "x.safetensors", .model = bad[i].json};
        struct dt_model_spec s;
        assert_int_equal(dt_ckpt_model_spec(&c, &s), DT_EINVAL);
        if (!strstr(dt_error_last(), bad[i].says))
            fail_msg("%s: got '%s', wanted '%s'", bad[i].json, dt_error_last(), bad[i].says);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(mlp_entry_round_trips, setup, teardown),
        cmocka_unit_test_setup_teardown(gpt2_entry_round_trips, setup, teardown),
        cmocka_unit_test(gpt2_declared_tensors_are_the_models),
        cmocka_unit_test_setup_teardown(declared_model_must_be_the_files, setup, teardown),
        cmocka_unit_test_setup_teardown(another_activation_is_refused_on_resume, setup, teardown),
        cmocka_unit_test_setup_teardown(file_without_the_entry_still_resumes, setup, teardown),
        cmocka_unit_test_setup_teardown(weights_alone_load_into_a_fresh_model, setup, teardown),
        cmocka_unit_test_setup_teardown(run_dir_means_its_newest_checkpoint, setup, teardown),
        cmocka_unit_test(bad_entries_are_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
