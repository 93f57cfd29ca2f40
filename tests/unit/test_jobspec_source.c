/* test_jobspec_source.c - what the key tables read, made from the file: ${VAR} interpolation
 * (values only, not command/setup, $$, defaults, unset variables at their line:column), --set
 * overrides (typed as YAML, sections made, maps of names, unknown paths named, values checked as
 * the file's), every problem reported in file order, and --print loading back to the same job. */
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
#include "spec/trainer_spec.h"

static char *const env[] = {"HOME=/home/u", "EMPTY=", "N=3", "DOLLAR=a$b", NULL};

static struct dt_job *load(const char *yaml, char *const *set, int n_set, char **problems)
{
    struct dt_job *job = NULL;
    struct dt_job_load_opts o = {.set = set, .n_set = n_set, .env = env, .problems = problems};
    int rc = dt_job_load_string_with(yaml, strlen(yaml), "j.yaml", &o, &job);
    assert_true(rc == 0 ? job != NULL : job == NULL);
    return job;
}

static void interpolates_values(void **state)
{
    (void)state;
    struct dt_job *job = load("name: t\nlog_dir: ${HOME}/runs\nmax_restarts: ${N}\n"
                              "env: {A: '${EMPTY:-dflt}', B: '$${HOME}', C: '${UNSET_X:-}', D: '${DOLLAR}', E: $X}\n"
                              "command: [sh, -c, 'echo ${RANK} $$']\nrendezvous: {timeout: '${T:-5s}'}\n",
                              NULL, 0, NULL);
    assert_non_null(job);
    assert_string_equal(job->log_dir, "/home/u/runs");
    assert_int_equal(job->max_restarts, 3); /* a plain ${N} stays a number */
    assert_string_equal(job->env[0].value, "dflt");
    assert_string_equal(job->env[1].value, "${HOME}");
    assert_string_equal(job->env[2].value, "");
    assert_string_equal(job->env[3].value, "a$b");
    assert_string_equal(job->env[4].value, "$X");
    assert_string_equal(job->command[2], "echo ${RANK} $$"); /* command is the node shell's */
    assert_true(job->rendezvous.timeout_s == 5.0);
    assert_true(job->derived);
    /* --print doubles each $, so it loads back to the same values */
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    dt_job_print(job, m);
    fclose(m);
    struct dt_job *again = load(text, NULL, 0, NULL);
    assert_non_null(again);
    assert_string_equal(again->env[1].value, "${HOME}");
    assert_string_equal(again->env[3].value, "a$b");
    assert_string_equal(again->command[2], "echo ${RANK} $$");
    free(text);
    dt_job_free(again);
    dt_job_free(job);
    job = load("name: t\ncommand: [a]\n", NULL, 0, NULL);
    assert_false(job->derived);
    dt_job_free(job);
}

static void unset_variables_at_their_place(void **state)
{
    (void)state;
    char *problems = NULL;
    assert_null(load("name: t\ncommand: [a]\nlog_dir: ${NOPE_1}/x\nenv: {A: '${BAD-x}'}\n", NULL, 0, &problems));
    assert_non_null(problems);
    assert_non_null(strstr(problems, "j.yaml:3:10: ${NOPE_1}: the environment variable NOPE_1 is not set"));
    assert_non_null(strstr(problems, "j.yaml:4:10: '${BAD-x}': expected ${NAME} or ${NAME:-default}"));
    assert_true(strstr(problems, "j.yaml:3:10") < strstr(problems, "j.yaml:4:10"));
    assert_non_null(strstr(dt_error_last(), "j.yaml:3:10"));
    free(problems);
}

static void overrides(void **state)
{
    (void)state;
    char *set[] = {"max_restarts=4", "trainer.steps=7", "env.OMP_NUM_THREADS=2", "rendezvous.auth=none",
                   "command=[sh, -c, 'true']"};
    struct dt_job *job = load("name: t\ncommand: [a]\nmax_restarts: 1\n", set, 1, NULL);
    assert_int_equal(job->max_restarts, 4);
    assert_true(job->derived);
    dt_job_free(job);
    job = load("name: t\ncommand: [a]\n", set + 2, 3, NULL);
    assert_string_equal(job->env[0].name, "OMP_NUM_THREADS");
    assert_string_equal(job->env[0].value, "2");
    assert_int_equal(job->rendezvous.auth, DT_AUTH_NONE);
    assert_int_equal(job->command_argc, 3);
    dt_job_free(job);
    /* sections on the path are made */
    char *steps[] = {"trainer.steps=7"};
    job = load("name: t\ntrainer: {model: {hidden: [4]}}\n", steps, 1, NULL);
    assert_int_equal(job->trainer->steps, 7);
    dt_job_free(job);
}

static void override_errors(void **state)
{
    (void)state;
    char *problems = NULL;
    char *set[] = {"trainer.stepz=5", "max_restarts=abc", "nosuch=1", "name", "max_restarts.x=1"};
    assert_null(load("name: t\ncommand: [a]\nnodes: 0\n", set, 5, &problems));
    const char *want[] = {
        "j.yaml:3:8: nodes: expected an integer",
        "--set trainer.stepz=5: unknown key path: no key 'stepz' in trainer; did you mean 'trainer.steps'?",
        "--set max_restarts=abc: max_restarts: expected an integer, got 'abc'",
        "--set nosuch=1: unknown key path: no key 'nosuch' in the top level",
        "--set name: expected KEY.PATH=VALUE",
        "--set max_restarts.x=1: unknown key path 'max_restarts.x=1': 'max_restarts' holds a value",
    };
    const char *at = problems;
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const char *hit = strstr(problems, want[i]);
        if (!hit)
            fail_msg("missing '%s' in:\n%s", want[i], problems);
        assert_true(hit >= at); /* file order, then the overrides in order */
        at = hit;
    }
    free(problems);
}

static void every_problem_in_file_order(void **state)
{
    (void)state;
    char *problems = NULL;
    assert_null(load("name: t\nnodes: 0\nscheduler: locl\ncommand: [a]\nrendezvous: {timeout: 3}\n"
                     "trainer_x: 1\nmax_restarts: -1\n",
                     NULL, 0, &problems));
    const char *want[] = {"j.yaml:2:8: nodes", "j.yaml:3:12: scheduler", "j.yaml:5:23: rendezvous.timeout",
                          "j.yaml:6:1: unknown key 'trainer_x'", "j.yaml:7:15: max_restarts"};
    const char *at = problems;
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const char *hit = strstr(problems, want[i]);
        if (!hit)
            fail_msg("missing '%s' in:\n%s", want[i], problems);
        assert_true(hit > at || i == 0);
        at = hit;
    }
    assert_non_null(strstr(dt_error_last(), "j.yaml:2:8"));
    free(problems);
    /* the rules between top-level keys: each is said, not only the first */
    assert_null(load("name: T_x\nbackend: mpi\nenv: {RANK: 1}\nsetup: [x]\ncommand: [a]\n", NULL, 0, &problems));
    assert_non_null(strstr(problems, "name: expected a DNS-1123 label"));
    assert_non_null(strstr(problems, "backend: mpi needs scheduler: mpirun"));
    assert_non_null(strstr(problems, "RANK is set by dtrain"));
    assert_non_null(strstr(problems, "setup: runs before the agent starts"));
    free(problems);
}

/* Issue 45: ${U:-${A}} gave the literal "${A}" (the first '}' closed the
 * outer reference); a default is now interpolated when it is used, as a
 * shell does, nested up to 8 deep, and only then (an unset variable in a
 * default that is not used is no error). */
static void nested_defaults(void **state)
{
    (void)state;
    struct dt_job *job =
        load("name: t\ncommand: [a]\nlog_dir: ${UNSET_U:-${HOME}}/runs\n"
             "env: {A: '${N:-${NOPE}}', B: '${EMPTY:-${UNSET_V:-x$$y}}z', C: '${UNSET_W:-a}b}'}\n",
             NULL, 0, NULL);
    assert_non_null(job);
    assert_string_equal(job->log_dir, "/home/u/runs");
    assert_string_equal(job->env[0].value, "3");    /* N is set: the default, and its ${NOPE}, unused */
    assert_string_equal(job->env[1].value, "x$yz"); /* $$ in a default is a $, as anywhere */
    assert_string_equal(job->env[2].value, "ab}");  /* a } past the reference is text */
    dt_job_free(job);
    char *problems = NULL;
    assert_null(
        load("name: t\ncommand: [a]\nlog_dir: ${UNSET_U:-${NOPE_2}}\nenv: {A: '${UNSET_U:-${HOME}'}\n", NULL,
             0, &problems));
    assert_non_null(strstr(problems, "j.yaml:3:10: ${NOPE_2}: the environment variable NOPE_2 is not set"));
    assert_non_null(
        strstr(problems, "j.yaml:4:10: '${UNSET_U:-${HOME}': expected ${NAME} or ${NAME:-default}"));
    free(problems);
    char deep[512] = "name: t\ncommand: [a]\nlog_dir: ";
    for (int i = 0; i < 9; i++)
        strcat(deep, "${UNSET_D:-");
    strcat(deep, "x}}}}}}}}}\n");
    assert_null(load(deep, NULL, 0, &problems));
    assert_non_null(strstr(problems, "j.yaml:3:10: ${UNSET_D:-...}: defaults nested more than 8 deep"));
    free(problems);
    deep[strlen("name: t\ncommand: [a]\nlog_dir: ")] = 0; /* 8 deep is read */
    for (int i = 0; i < 8; i++)
        strcat(deep, "${UNSET_D:-");
    strcat(deep, "x}}}}}}}}\n");
    job = load(deep, NULL, 0, NULL);
    assert_non_null(job);
    assert_string_equal(job->log_dir, "x");
    dt_job_free(job);
}

/* Issue 45: strtok_r skipped empty names, so '.=1' set nothing and said
 * nothing and 'env..X=1' set env.X; YAML tags are refused as the docs say,
 * !!str included (it had been let through), in the file and in --set. */
static void empty_path_names_and_tags_are_refused(void **state)
{
    (void)state;
    char *problems = NULL;
    char *set[] = {".=1", "env..X=1", "env.X.=1", ".name=u", "env.Y=!!str 3"};
    assert_null(load("name: t\ncommand: [a]\n", set, 5, &problems));
    const char *want[] = {
        "--set .=1: the key path '.' has an empty name at its start",
        "--set env..X=1: the key path 'env..X' has an empty name between two dots",
        "--set env.X.=1: the key path 'env.X.' has an empty name at its end",
        "--set .name=u: the key path '.name' has an empty name at its start",
        "--set env.Y=!!str 3: the value is not YAML: value:1:1: YAML tags (!tag, !!type) are not supported",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!strstr(problems, want[i]))
            fail_msg("missing '%s' in:\n%s", want[i], problems);
    free(problems);
    assert_null(load("name: !!str t\ncommand: [a]\n", NULL, 0, NULL)); /* a YAML error: the first and only */
    assert_non_null(strstr(dt_error_last(),
                           "j.yaml:1:7: YAML tags (!tag, !!type) are not supported in a job spec; quote a "
                           "value to make it a string"));
    struct dt_job *job = load("name: \"t\"\ncommand: [a]\nenv: {X: \"3\"}\n", NULL, 0, NULL);
    assert_non_null(job);
    assert_string_equal(job->env[0].value, "3");
    dt_job_free(job);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(interpolates_values),
        cmocka_unit_test(unset_variables_at_their_place),
        cmocka_unit_test(overrides),
        cmocka_unit_test(override_errors),
        cmocka_unit_test(every_problem_in_file_order),
        cmocka_unit_test(nested_defaults),
        cmocka_unit_test(empty_path_names_and_tags_are_refused),
    };
    return cmocka_run_group_tests_name("jobspec_source", tests, NULL, NULL);
}
