/* test_jobspec_defaults.c - each key's default is said once, in its key table, and a loaded spec gets it.
 *
 * The tables (spec/jobspec.c, jobspec_trainer.c, jobspec_sched.c) hold every
 * default as text (`def`) that dt_spec_init reads through the key itself; the
 * schema, reference.yaml and the man page are generated from the same text.
 * Here: every section of the tree initialises (each default is accepted by
 * its own key, in range); writing any key with its default (`--set key=def`)
 * loads to the same job as leaving it out, so no rule after the table moves a
 * default; dt_trainer_spec_defaults is byte for byte the trainer a spec with
 * `trainer: {}` gets; and the documentation fields are filled in where the
 * generator needs them.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "spec/jobspec.h"
#include "spec/jobspec_keys.h"
#include "spec/trainer_spec.h"

/* Specs every key can be written in: the scheduler sections present, and a
 * trainer on images or on tokens (data.format belongs to the second). */
static const char *const bases[] = {
    "name: t\ntrainer: {}\nslurm: {}\nkubernetes: {image: x}\nmpirun: {}\n",
    "name: t\ntrainer: {model: {type: gpt2, vocab_size: 256, block_size: 64},\n"
    "  data: {dataset: tokens, train: 'x_*.bin', seq_len: 64}}\n",
};

typedef void (*visit_fn)(const char *path, const struct dt_spec_key *k, void *arg);

/* Calls `visit` for every key under `sec`, depth first, with its dotted path. */
static void walk(const struct dt_spec_section *sec, const char *prefix, visit_fn visit, void *arg)
{
    for (size_t i = 0; i < sec->n_keys; i++) {
        const struct dt_spec_key *k = &sec->keys[i];
        char path[256];
        snprintf(path, sizeof path, "%s%s%s%s", prefix, *prefix ? "." : "", k->name,
                 k->type == DT_KT_SECLIST ? "[]" : "");
        visit(path, k, arg);
        if (k->sub)
            walk(k->sub, path, visit, arg);
    }
}

static char *print_job(const struct dt_job *job)
{
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    assert_non_null(m);
    dt_job_print(job, m);
    fclose(m);
    return text;
}

/* The --print of `base` with the given overrides, or NULL when it does not load. */
static char *printed(const char *base, char *const *set, int n_set)
{
    struct dt_job_load_opts o = {.set = set, .n_set = n_set};
    struct dt_job *job = NULL;
    if (dt_job_load_string_with(base, strlen(base), "base.yaml", &o, &job))
        return NULL;
    char *text = print_job(job);
    dt_job_free(job);
    return text;
}

static void every_section_initialises(const char *path, const struct dt_spec_key *k, void *arg)
{
    (void)arg;
    if (k->type != DT_KT_SECTION_PTR && k->type != DT_KT_SECLIST)
        return;
    void *obj = calloc(1, k->sub->size);
    assert_non_null(obj);
    if (dt_spec_init(k->sub, obj))
        fail_msg("%s: %s", path, dt_error_last());
    dt_spec_release(k->sub, obj);
    free(obj);
}

static void sections_initialise_from_their_tables(void **state)
{
    (void)state;
    struct dt_job job;
    memset(&job, 0, sizeof job);
    assert_int_equal(dt_spec_init(&dt_jobspec_root, &job), 0);
    dt_spec_release(&dt_jobspec_root, &job);
    walk(&dt_jobspec_root, "", every_section_initialises, NULL);
}

struct written {
    int checked;
};

/* Writing the key with its default gives the job leaving it out gives. */
static void default_written_changes_nothing(const char *path, const struct dt_spec_key *k, void *arg)
{
    struct written *w = arg;
    if (!k->def || strstr(path, "[]"))
        return;
    char set[512];
    snprintf(set, sizeof set, "%s=%s", path, k->def);
    char *const sets[] = {set};
    for (size_t b = 0; b < sizeof bases / sizeof *bases; b++) {
        char *with = printed(bases[b], sets, 1);
        if (!with)
            continue;
        char *without = printed(bases[b], NULL, 0);
        assert_non_null(without);
        if (strcmp(with, without))
            fail_msg("%s: a spec that writes its default differs from one that leaves it out:\n%s\n---\n%s",
                     path, with, without);
        free(with);
        free(without);
        w->checked++;
        return;
    }
    fail_msg("%s=%s loads in none of the base specs: %s", path, k->def, dt_error_last());
}

static void loaded_defaults_are_the_tables(void **state)
{
    (void)state;
    struct written w = {0};
    walk(&dt_jobspec_root, "", default_written_changes_nothing, &w);
    print_message("%d defaults written explicitly load as left out\n", w.checked);
    assert_true(w.checked > 80);
}

static void trainer_defaults_are_a_loaded_trainers(void **state)
{
    (void)state;
    struct dt_job *job = NULL;
    const char *spec = "name: t\ntrainer: {}\n";
    assert_int_equal(dt_job_load_string(spec, strlen(spec), "t.yaml", &job), 0);
    struct dt_trainer_spec want;
    dt_trainer_spec_defaults(&want);
    assert_memory_equal(job->trainer, &want, sizeof want);
    dt_job_free(job);
}

/* What the generator needs of each key: words to say, and a value for reference.yaml. */
static void documented(const char *path, const struct dt_spec_key *k, void *arg)
{
    (void)arg;
    if (!k->help || !*k->help)
        fail_msg("%s has no help text", path);
    if (k->type == DT_KT_CUSTOM && !k->form)
        fail_msg("%s: a custom key says its form in words (form)", path);
    if (k->def && k->unset)
        fail_msg("%s has both a default and an unset text", path);
    int needs_value = !(k->type == DT_KT_SECTION || k->type == DT_KT_SECTION_PTR || k->type == DT_KT_SECLIST);
    if (needs_value && !k->def && !k->example)
        fail_msg("%s has neither a default nor an example for configs/reference.yaml", path);
    if (k->help[strlen(k->help) - 1] != '.')
        fail_msg("%s: help is sentences, ending with '.'", path);
}

static void every_key_is_documented(void **state)
{
    (void)state;
    walk(&dt_jobspec_root, "", documented, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sections_initialise_from_their_tables),
        cmocka_unit_test(loaded_defaults_are_the_tables),
        cmocka_unit_test(trainer_defaults_are_a_loaded_trainers),
        cmocka_unit_test(every_key_is_documented),
    };
    return cmocka_run_group_tests_name("jobspec_defaults", tests, NULL, NULL);
}
