/* test_agent.c - the agent's pure parts: the "[rank N]" prefix, the stderr
 * tail, the rank environment, the summary JSON with the trainer's figures, the
 * OOM counter and error reports.  Nothing here forks (test_agent_run.c does);
 * line splitting, --ranks lists, exit words and run directories are base/'s
 * (test_lines.c, test_args.c, test_proc.c, test_run_dir.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/json.h"
#include "launcher/agent/agent.h"
#include "spec/jobspec.h"

static void prefix_is_rank_and_newline(void **state)
{
    (void)state;
    char out[64];
    size_t n = dt_agent_format_line(out, 12, "hello", 5);
    assert_int_equal(n, strlen("[rank 12] hello\n"));
    assert_memory_equal(out, "[rank 12] hello\n", n);
    n = dt_agent_format_line(out, 0, "", 0);
    assert_memory_equal(out, "[rank 0] \n", n);
}

/* console.line_prefix, as torchrun's --log-line-prefix-template renders it
 * (string.Template.safe_substitute): known names replaced, braced or not;
 * $$ a dollar; unknown names, a bare $ and an unclosed brace kept. */
static void line_prefix_template(void **state)
{
    (void)state;
    char out[DT_AGENT_PREFIX_MAX];
    static const struct {
        const char *tmpl, *want;
    } cases[] = {
        {NULL, "[rank 12] "},
        {"[${role_name}${local_rank}]:", "[trainer4]:"},
        {"${hostname}:${rank}: ", "node7:12: "},
        {"$rank|$local_rank|$role_name ", "12|4|trainer "},
        {"$$rank ${unknown} $nope ${rank", "$rank ${unknown} $nope ${rank"},
        {"cost: 5$", "cost: 5$"},
        {"${rank}x$rankx", "12x$rankx"}, /* "$rankx" names rankx, which it does not know */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = dt_agent_line_prefix(out, cases[i].tmpl, "trainer", 12, 4, "node7");
        assert_int_equal(n, strlen(cases[i].want));
        assert_string_equal(out, cases[i].want);
    }
    char big[600];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    assert_int_equal(dt_agent_line_prefix(out, big, "r", 0, 0, "h"), DT_AGENT_PREFIX_MAX - 1); /* cut */
}

/* PyTorch's own prefix for this rank is dropped from the console, one space with it. */
static void torch_prefix_found(void **state)
{
    (void)state;
    struct {
        int rank;
        const char *line;
        size_t drop;
    } cases[] = {
        {1, "[rank1]: Traceback (most recent call last):", 9},
        {0, "[rank0]:[W1204 15:58:18.127000 23899 ProcessGroupNCCL.cpp:1496] Warning: x", 8},
        {12, "[rank12]:W1204 12:00:00 torch/_dynamo/x.py:1] y", 9},
        {3, "[rank3]:", 8},
        {3, "[rank3]: ", 9},
        {3, "[rank4]: another rank's prefix stays", 0},
        {3, "[rank 3] dtrain's form is not PyTorch's", 0},
        {3, "[rank3] no colon", 0},
        {3, "[rank3", 0},
        {3, "x [rank3]: not at the start", 0},
        {30, "[rank3]: a shorter number", 0},
        {3, "[rank30]: a longer number", 0},
        {-1, "[rank1]: a group's own line", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        assert_int_equal(dt_agent_torch_prefix(cases[i].rank, cases[i].line, strlen(cases[i].line)),
                         cases[i].drop);
    /* the length given is what counts, not a terminating NUL */
    assert_int_equal(dt_agent_torch_prefix(1, "[rank1]: x", 7), 0);
}

static void tail_keeps_last_lines_in_order(void **state)
{
    (void)state;
    struct dt_agent_tail t;
    memset(&t, 0, sizeof t);
    char line[32];
    for (int i = 0; i < DT_AGENT_TAIL_LINES + 5; i++) {
        int n = snprintf(line, sizeof line, "line %d", i);
        dt_agent_tail_push(&t, line, (size_t)n, true);
    }
    char out[DT_AGENT_TAIL_LINES][DT_AGENT_TAIL_WIDTH];
    assert_int_equal(dt_agent_tail_copy(&t, out), DT_AGENT_TAIL_LINES);
    assert_string_equal(out[0], "line 5");
    assert_string_equal(out[DT_AGENT_TAIL_LINES - 1], "line 14");
    /* A line in pieces counts once, and a very long one is cut with "...". */
    memset(&t, 0, sizeof t);
    char big[DT_AGENT_TAIL_WIDTH * 2];
    memset(big, 'x', sizeof big);
    dt_agent_tail_push(&t, big, sizeof big, false);
    dt_agent_tail_push(&t, "rest", 4, true);
    dt_agent_tail_push(&t, "last", 4, true);
    assert_int_equal(dt_agent_tail_copy(&t, out), 2);
    assert_int_equal(strlen(out[0]), DT_AGENT_TAIL_WIDTH - 1);
    assert_string_equal(out[0] + DT_AGENT_TAIL_WIDTH - 4, "...");
    assert_string_equal(out[1], "last");
}

static struct dt_env_entry spec_env[] = {
    {(char *)"FROM_SPEC", (char *)"yes"}, {(char *)"RANK", (char *)"99"}, {(char *)"KEEP", (char *)"spec"}};
static char *cmd_argv[] = {(char *)"printenv", NULL};
static struct dt_job job = {
    .name = (char *)"unit",
    .nodes = 2,
    .nproc_per_node = 4,
    .command = cmd_argv,
    .command_argc = 1,
    .env = spec_env,
    .n_env = 3,
    .max_restarts = 2,
    .signals_to_handle = 1ull << SIGHUP | 1ull << SIGINT | 1ull << SIGQUIT | 1ull << SIGTERM, /* the spec's default */
};

static struct dt_agent_config make_cfg(void)
{
    return (struct dt_agent_config){
        .job = &job,
        .argv = (const char *const *)cmd_argv,
        .node_rank = 1,
        .nnodes = 2,
        .nproc = 4,
        .run_id = "RID",
        .run_dir = "/tmp/run \"x\"",
        .master_addr = "127.0.0.1",
        .master_port = 4242,
        .token = "ab12",
    };
}

static const char *get(char **env, const char *name)
{
    const char *found = NULL;
    size_t n = strlen(name);
    for (char **e = env; *e; e++) {
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=') {
            assert_null(found); /* never twice */
            found = *e + n + 1;
        }
    }
    return found;
}

static void environment_for_a_rank(void **state)
{
    (void)state;
    struct dt_agent_config cfg = make_cfg();
    char *base[] = {(char *)"PATH=/bin",          (char *)"RANK=7",
                    (char *)"KEEP=base",          (char *)"DTRAIN_JOB_TOKEN=old",
                    (char *)"PYTHONUNBUFFERED=0", NULL};
    char **env;
    assert_int_equal(dt_agent_env_build(&cfg, 2, 1, base, &env), 0);
    assert_string_equal(get(env, "PATH"), "/bin");
    assert_string_equal(get(env, "RANK"), "6");
    assert_string_equal(get(env, "LOCAL_RANK"), "2");
    assert_string_equal(get(env, "WORLD_SIZE"), "8");
    assert_string_equal(get(env, "LOCAL_WORLD_SIZE"), "4");
    assert_string_equal(get(env, "GROUP_RANK"), "1");
    assert_string_equal(get(env, "GROUP_WORLD_SIZE"), "2");
    assert_string_equal(get(env, "ROLE_RANK"), "6");
    assert_string_equal(get(env, "ROLE_NAME"), "default");
    assert_string_equal(get(env, "ROLE_WORLD_SIZE"), "8");
    assert_string_equal(get(env, "MASTER_ADDR"), "127.0.0.1");
    assert_string_equal(get(env, "MASTER_PORT"), "4242");
    assert_string_equal(get(env, "TORCHELASTIC_RESTART_COUNT"), "1");
    assert_string_equal(get(env, "TORCHELASTIC_MAX_RESTARTS"), "2");
    assert_string_equal(get(env, "TORCHELASTIC_RUN_ID"), "RID");
    assert_string_equal(get(env, "TORCHELASTIC_USE_AGENT_STORE"), "True");
    assert_string_equal(get(env, "DTRAIN_COORD_ADDR"), "127.0.0.1:4242");
    assert_string_equal(get(env, "DTRAIN_JOB_TOKEN"), "ab12");
    assert_string_equal(get(env, "DTRAIN_NODE_RANK"), "1");
    assert_string_equal(get(env, "DTRAIN_NNODES"), "2");
    assert_string_equal(get(env, "DTRAIN_RESTART_COUNT"), "1");
    assert_string_equal(get(env, "DTRAIN_ERROR_FILE"), "/tmp/run \"x\"/attempt_1/rank_6.error.json");
    assert_string_equal(get(env, "TORCHELASTIC_ERROR_FILE"), get(env, "DTRAIN_ERROR_FILE"));
    assert_string_equal(get(env, "OMP_NUM_THREADS"), "1");
    assert_string_equal(get(env, "PYTHONUNBUFFERED"), "1");
    assert_string_equal(get(env, "FROM_SPEC"), "yes");
    assert_string_equal(get(env, "KEEP"), "spec");
    /* torchrun's: NCCL's async error handling on unless set, its default signal list */
    assert_string_equal(get(env, "TORCH_NCCL_ASYNC_ERROR_HANDLING"), "1");
    assert_string_equal(get(env, "TORCHELASTIC_SIGNALS_TO_HANDLE"), "SIGTERM,SIGINT,SIGHUP,SIGQUIT");
    dt_agent_env_free(env);
}

/* torchrun's --virtual-local-rank and --role: LOCAL_RANK 0, the rank's own
 * entry of the node's GPU list (the spec's env: over the launcher's, HIP's
 * where set), each variable once; a rank beyond the list is refused. */
static void virtual_local_rank_and_role(void **state)
{
    (void)state;
    struct dt_agent_config cfg = make_cfg();
    struct dt_job v = *cfg.job;
    v.virtual_local_rank = true;
    v.role = (char *)"trainer";
    v.env = NULL;
    v.n_env = 0;
    cfg.job = &v;
    char *base[] = {(char *)"CUDA_VISIBLE_DEVICES=2, 7,9", NULL};
    char **env;
    assert_int_equal(dt_agent_env_build(&cfg, 1, 0, base, &env), 0);
    assert_string_equal(get(env, "LOCAL_RANK"), "0");
    assert_string_equal(get(env, "CUDA_VISIBLE_DEVICES"), "7");
    assert_string_equal(get(env, "RANK"), "5");
    assert_string_equal(get(env, "ROLE_NAME"), "trainer");
    assert_null(get(env, "HIP_VISIBLE_DEVICES"));
    dt_agent_env_free(env);
    assert_int_equal(dt_agent_env_build(&cfg, 3, 0, base, &env), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "virtual_local_rank: local rank 3 has no GPU in CUDA_VISIBLE_DEVICES=2, 7,9"));
    char *none[] = {NULL}, *hip[] = {(char *)"CUDA_VISIBLE_DEVICES=0,1", (char *)"HIP_VISIBLE_DEVICES=4,5", NULL};
    assert_int_equal(dt_agent_env_build(&cfg, 3, 0, none, &env), 0);
    assert_string_equal(get(env, "CUDA_VISIBLE_DEVICES"), "3");
    dt_agent_env_free(env);
    assert_int_equal(dt_agent_env_build(&cfg, 1, 0, hip, &env), 0);
    assert_string_equal(get(env, "CUDA_VISIBLE_DEVICES"), "5");
    assert_string_equal(get(env, "HIP_VISIBLE_DEVICES"), "5");
    dt_agent_env_free(env);
    struct dt_env_entry spec_env[] = {{(char *)"CUDA_VISIBLE_DEVICES", (char *)"6,8"}};
    v.env = spec_env;
    v.n_env = 1;
    assert_int_equal(dt_agent_env_build(&cfg, 0, 0, base, &env), 0);
    assert_string_equal(get(env, "CUDA_VISIBLE_DEVICES"), "6");
    dt_agent_env_free(env);
}

/* TORCH_NCCL_ASYNC_ERROR_HANDLING is the user's when the launcher's
 * environment or env: sets it (torchrun keeps its own environment's);
 * TORCHELASTIC_SIGNALS_TO_HANDLE says what dtrain does, whatever is set. */
static void torchrun_defaults_yield_to_the_user(void **state)
{
    (void)state;
    struct dt_agent_config cfg = make_cfg();
    char *base[] = {(char *)"TORCH_NCCL_ASYNC_ERROR_HANDLING=0",
                    (char *)"TORCHELASTIC_SIGNALS_TO_HANDLE=SIGUSR2", NULL};
    char **env;
    assert_int_equal(dt_agent_env_build(&cfg, 0, 0, base, &env), 0);
    assert_string_equal(get(env, "TORCH_NCCL_ASYNC_ERROR_HANDLING"), "0");
    assert_string_equal(get(env, "TORCHELASTIC_SIGNALS_TO_HANDLE"), "SIGTERM,SIGINT,SIGHUP,SIGQUIT");
    dt_agent_env_free(env);
    /* signals_to_handle (--signals-to-handle) as torchrun exports it */
    uint64_t was = job.signals_to_handle;
    job.signals_to_handle = 1ull << SIGUSR1 | 1ull << SIGTERM;
    assert_int_equal(dt_agent_env_build(&cfg, 0, 0, base, &env), 0);
    job.signals_to_handle = was;
    assert_string_equal(get(env, "TORCHELASTIC_SIGNALS_TO_HANDLE"), "SIGTERM,SIGUSR1");
    dt_agent_env_free(env);
    struct dt_env_entry nccl_env[] = {{(char *)"TORCH_NCCL_ASYNC_ERROR_HANDLING", (char *)"3"}};
    struct dt_job with_env = *cfg.job;
    with_env.env = nccl_env;
    with_env.n_env = 1;
    cfg.job = &with_env;
    assert_int_equal(dt_agent_env_build(&cfg, 0, 0, base, &env), 0);
    assert_string_equal(get(env, "TORCH_NCCL_ASYNC_ERROR_HANDLING"), "3");
    dt_agent_env_free(env);
    assert_false(dt_job_env_is_reserved("TORCH_NCCL_ASYNC_ERROR_HANDLING"));
    assert_true(dt_job_env_is_reserved("TORCHELASTIC_SIGNALS_TO_HANDLE"));
}

static void no_token_no_variable(void **state)
{
    (void)state;
    struct dt_agent_config cfg = make_cfg();
    cfg.token = NULL;
    char *base[] = {(char *)"DTRAIN_JOB_TOKEN=inherited", (char *)"OMP_NUM_THREADS=8", NULL};
    char **env;
    assert_int_equal(dt_agent_env_build(&cfg, 0, 0, base, &env), 0);
    assert_null(get(env, "DTRAIN_JOB_TOKEN"));
    assert_string_equal(get(env, "OMP_NUM_THREADS"), "8");
    assert_true(dt_job_env_is_reserved("MASTER_PORT"));
    assert_false(dt_job_env_is_reserved("OMP_NUM_THREADS"));
    dt_agent_env_free(env);
}

static void summary_json(void **state)
{
    (void)state;
    struct dt_agent_config cfg = make_cfg();
    cfg.nnodes = 1;
    cfg.node_rank = 0;
    cfg.nproc = 2;
    struct dt_agent_rank_result r0[2] = {{0, 100, true, 1 << 8, false, 0.1, 0.2},
                                         {1, 101, true, SIGTERM, true, 0.1, 0.3}};
    struct dt_agent_rank_result r1[2] = {{0, 200, true, 0, false, 0.5, 0.6},
                                         {1, 201, true, 0, false, 0.5, 0.7}};
    struct dt_agent_attempt at[2] = {
        {.start_s = 0.0, .end_s = 0.4, .first_failed = 0, .leftovers = 1, .ranks = r0, .hung = -1},
        {.start_s = 0.5, .end_s = 0.8, .first_failed = -1, .leftovers = 0, .ranks = r1, .hung = -1}};
    struct dt_agent_result res = {.status = DT_AGENT_SUCCEEDED,
                                  .n_attempts = 2,
                                  .nproc = 2,
                                  .attempts = at,
                                  .have_failure = true,
                                  .wall_s = 0.9,
                                  .started_unix = 0};
    res.first_failure.attempt = 0;
    res.first_failure.rank = 0;
    res.first_failure.wstatus = 1 << 8;
    res.first_failure.n_tail = 1;
    strcpy(res.first_failure.tail[0], "boom \"quoted\"\tend");
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_int_equal(dt_agent_write_summary_to(f, &cfg, &res), 0);
    fclose(f);
    assert_non_null(strstr(text, "\"status\": \"succeeded\""));
    assert_non_null(strstr(text, "\"run_dir\": \"/tmp/run \\\"x\\\"\""));
    assert_non_null(strstr(text, "\"n_attempts\": 2"));
    assert_non_null(strstr(text, "\"world_size\": 2"));
    assert_non_null(strstr(text, "\"stderr_tail\": [\"boom \\\"quoted\\\"\\tend\"]"));
    assert_non_null(strstr(text, "\"exit_code\": null, \"signal\": \"SIGTERM\""));
    assert_non_null(strstr(text, "\"stopped_by_dtrain\": true"));
    assert_non_null(strstr(text, "\"started_at\": \"1970-01-01T00:00:00Z\""));
    assert_non_null(strstr(text, "\"command\": [\"printenv\"]"));
    assert_non_null(strstr(text, "\"coordinator_port\": 4242"));
    assert_non_null(strstr(text, "\"auth\": \"token\""));
    free(text);
}

/* lost_node: null without a lost node (a zeroed result too), else the node,
 * its host, when and the coordinator's sentence, escaped. */
static void summary_names_a_lost_node(void **state)
{
    (void)state;
    struct dt_agent_config cfg = make_cfg();
    struct dt_agent_result res = {.status = DT_AGENT_FAILED, .exit_status = 1};
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_int_equal(dt_agent_write_summary_to(f, &cfg, &res), 0);
    fclose(f);
    assert_non_null(strstr(text, "\"lost_node\": null,"));
    free(text);
    res.lost_node.node = 1;
    strcpy(res.lost_node.host, "gpu7");
    res.lost_node.detected_s = 14.5;
    strcpy(res.lost_node.reason, "node 1 (host gpu7, address 10.0.0.2:4242) stopped \"acknowledging\"");
    f = open_memstream(&text, &len);
    assert_int_equal(dt_agent_write_summary_to(f, &cfg, &res), 0);
    fclose(f);
    assert_non_null(strstr(text,
                           "\"lost_node\": {\"node\": 1, \"host\": \"gpu7\", \"detected_s\": 14.5, "
                           "\"reason\": \"node 1 (host gpu7, address 10.0.0.2:4242) stopped "
                           "\\\"acknowledging\\\"\"},"));
    free(text);
}

/* summary.json's text: the layout tests and scripts grep (one member a line,
 * an attempt's head and each rank one line), times to the microsecond (the
 * start's Unix time too, which the trace merge aligns to), null for a time
 * that is no number, and the same value read back. */
static void summary_layout_and_times(void **state)
{
    (void)state;
    struct dt_agent_config cfg = make_cfg();
    cfg.nnodes = 1;
    cfg.node_rank = 0;
    cfg.nproc = 2;
    struct dt_agent_rank_result r[2] = {{0, 100, true, 0, false, 0.25, 1.000001},
                                        {1, 0, false, 0, false, 0.5, 0}};
    struct dt_agent_attempt at = {.end_s = 2, .first_failed = -1, .hung = -1, .ranks = r};
    struct dt_agent_result res = {
        .n_attempts = 1, .nproc = 2, .attempts = &at, .started_unix = 1796683159.599631, .wall_s = NAN};
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_int_equal(dt_agent_write_summary_to(f, &cfg, &res), 0);
    fclose(f);
    assert_non_null(strstr(text, "{\n  \"name\": \"unit\",\n  \"run_id\": \"RID\",\n"));
    assert_non_null(strstr(text, "\n  \"started_unix\": 1796683159.599631,\n  \"wall_seconds\": null,\n"));
    assert_non_null(strstr(text, "\n  \"attempts\": [\n    {\"attempt\": 0, \"start_s\": 0.0, "
                                 "\"end_s\": 2.0, \"leftover_processes\": 0, \"first_failed_rank\": null, "
                                 "\"hung_rank\": null, \"ranks\": [\n"));
    assert_non_null(strstr(text, "\n      {\"rank\": 0, \"local_rank\": 0, \"pid\": 100, "
                                 "\"exit_code\": 0, \"signal\": null, \"stopped_by_dtrain\": false, "
                                 "\"spawn_s\": 0.25, \"exit_s\": 1.000001},\n"));
    assert_non_null(strstr(text, "\n      {\"rank\": 1, \"local_rank\": 1, \"pid\": null, "
                                 "\"exit_code\": null, \"signal\": null, \"stopped_by_dtrain\": false, "
                                 "\"spawn_s\": 0.5, \"exit_s\": null}\n    ]}\n  ],\n  \"version\": 1\n}\n"));
    json_t *doc;
    if (dt_json_parse(text, len, "summary.json", 1, &doc))
        fail_msg("%s\n%s", dt_error_last(), text);
    assert_true(json_real_value(json_object_get(doc, "started_unix")) == res.started_unix);
    assert_true(json_is_integer(json_object_get(doc, "world_size")));
    json_decref(doc);
    free(text);
}

/* A summary that cannot be written says so in a sentence, with the reason. */
static void summary_write_failure_is_reported(void **state)
{
    (void)state;
    struct dt_agent_config cfg = make_cfg();
    struct dt_agent_result res = {.status = DT_AGENT_FAILED, .exit_status = 1};
    FILE *f = fopen("/dev/full", "w"); /* every write: ENOSPC */
    assert_non_null(f);
    setvbuf(f, NULL, _IONBF, 0);
    assert_int_equal(dt_agent_write_summary_to(f, &cfg, &res), DT_EIO);
    assert_non_null(strstr(dt_error_last(), "writing the run summary failed: No space left on device"));
    fclose(f);
}

static void oom_counter_parsed(void **state)
{
    (void)state;
    long long n = -1;
    assert_int_equal(dt_agent_oom_parse("low 0\nhigh 0\nmax 3\noom 2\noom_kill 7\n", &n), 0);
    assert_int_equal(n, 7);
    assert_int_equal(dt_agent_oom_parse("oom_kill_disable 0\nunder_oom 0\noom_kill 12", &n), 0);
    assert_int_equal(n, 12);
    assert_int_equal(dt_agent_oom_parse("oom_kill_disable 0\nunder_oom 0\n", &n), DT_ENOTFOUND);
    assert_int_equal(dt_agent_oom_parse("oom_kill x\n", &n), DT_ENOTFOUND);
}

static void error_report_message(void **state)
{
    (void)state;
    char out[64];
    const char *torch = "{\"message\": {\"message\": \"ValueError: bad \\\"batch\\\"\\nline 2\", "
                        "\"extraInfo\": {\"timestamp\": \"1\"}}}";
    assert_int_equal(dt_agent_error_message(torch, strlen(torch), out, sizeof out), 0);
    assert_string_equal(out, "ValueError: bad \"batch\"\nline 2");
    const char *plain = "{\"message\":\"oops\"}";
    assert_int_equal(dt_agent_error_message(plain, strlen(plain), out, sizeof out), 0);
    assert_string_equal(out, "oops");
    const char *none = "{\"error\": 1, \"message\": 5}";
    assert_int_equal(dt_agent_error_message(none, strlen(none), out, sizeof out), -1);
    assert_string_equal(out, "");
    char small[8];
    assert_int_equal(dt_agent_error_message(plain, strlen(plain), small, sizeof small), 0);
    assert_string_equal(small, "oops");
    const char *cut = "{\"message\": \"a very long message that does not fit\"}";
    assert_int_equal(dt_agent_error_message(cut, strlen(cut), small, sizeof small), 0);
    assert_int_equal(strlen(small), sizeof small - 1);
    /* A raw NUL, alone or escaped, makes the file no JSON: no message, so
     * none ends at it without a word (the report then names the file). */
    const char nul[] = "{\"message\": \"bad\0byte and \\\0 too\"}";
    assert_int_equal(dt_agent_error_message(nul, sizeof nul - 1, out, sizeof out), -1);
    assert_string_equal(out, "");
    /* A message cut to fit is cut between characters: summary.json stays UTF-8. */
    const char *wide = "{\"message\": \"ab\u00e9\u00e9\"}"; /* a, b, then two 2-byte characters */
    assert_int_equal(dt_agent_error_message(wide, strlen(wide), small, 6), 0);
    assert_string_equal(small, "ab\xc3\xa9");
    const char *torch_cut = "{\"message\": {\"message\": \"Runtime";
    assert_int_equal(dt_agent_error_message(torch_cut, strlen(torch_cut), out, sizeof out), -1);
    assert_string_equal(out, "");
}

/* @record's traceback: its end, whole lines, with the count of those left out. */
static void error_report_traceback(void **state)
{
    (void)state;
    char out[4096];
    const char *torch = "{\"message\": {\"message\": \"ValueError: bad\", \"extraInfo\": {\"py_callstack\": "
                        "\"Traceback (most recent call last):\\n  File \\\"t.py\\\", line 3, in <module>\\n"
                        "ValueError: bad\\n\", \"timestamp\": \"1\"}}}";
    assert_int_equal(dt_agent_error_traceback(torch, strlen(torch), out, sizeof out), 0);
    assert_string_equal(out, "Traceback (most recent call last):\n  File \"t.py\", line 3, in <module>\nValueError: bad");
    /* 50 frames: the last DT_AGENT_TRACEBACK_LINES lines are kept, the rest counted */
    char big[8192] = "{\"message\": {\"message\": \"E\", \"extraInfo\": {\"py_callstack\": \"";
    for (int i = 0; i < 50; i++)
        snprintf(big + strlen(big), sizeof big - strlen(big), "line %d\\n", i);
    strcat(big, "\"}}}");
    assert_int_equal(dt_agent_error_traceback(big, strlen(big), out, sizeof out), 50 - DT_AGENT_TRACEBACK_LINES);
    assert_true(strncmp(out, "line 30\n", 8) == 0);
    assert_non_null(strstr(out, "\nline 49"));
    assert_int_equal(out[strlen(out) - 1], '9');
    /* too small for all twenty: as many whole lines as fit */
    char small[20];
    assert_int_equal(dt_agent_error_traceback(big, strlen(big), small, sizeof small), 48);
    assert_string_equal(small, "line 48\nline 49");
    const char *plain = "{\"message\": \"oops\"}", *empty = "{\"message\": {\"message\": \"x\", "
                                                                "\"extraInfo\": {\"py_callstack\": \"\"}}}";
    assert_int_equal(dt_agent_error_traceback(plain, strlen(plain), out, sizeof out), -1);
    assert_string_equal(out, "");
    assert_int_equal(dt_agent_error_traceback(empty, strlen(empty), out, sizeof out), -1);
}

/* summary.json of a run dir holding trainer_summary.json (text, or none when NULL); parsed. */
static json_t *summary_with_trainer(const char *text, char **out)
{
    char dir[] = "/tmp/dt-summary-XXXXXX", path[64];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/trainer_summary.json", dir);
    FILE *t = fopen(path, "w");
    assert_non_null(t);
    fputs(text, t);
    fclose(t);
    struct dt_agent_config cfg = make_cfg();
    cfg.run_dir = dir;
    struct dt_agent_result res = {.status = DT_AGENT_SUCCEEDED};
    size_t len = 0;
    FILE *f = open_memstream(out, &len);
    assert_int_equal(dt_agent_write_summary_to(f, &cfg, &res), 0);
    fclose(f);
    unlink(path);
    rmdir(dir);
    json_t *doc;
    if (dt_json_parse(*out, len, "summary.json", 1, &doc))
        fail_msg("%s\n%s", dt_error_last(), *out);
    return doc;
}

/* The trainer's figures: four copied to the top as the trainer wrote them,
 * the whole object under "trainer" (the same values); a file that is no JSON
 * object adds neither (the summary stays JSON). */
static void trainer_summary_is_copied_when_it_parses(void **state)
{
    (void)state;
    const char *trainer = "{\n  \"final_loss\": 1.30389352,\n  \"test_accuracy\": null,\n  \"steps\": 500,\n"
                          "  \"samples_per_s\": 12345.5,\n  \"rank_work_seconds\": [0.5, 1e-05]\n}\n";
    char *text;
    json_t *doc = summary_with_trainer(trainer, &text);
    assert_non_null(strstr(text, "\n  \"final_loss\": 1.30389352,\n"));
    assert_non_null(strstr(text, "\n  \"test_accuracy\": null,\n"));
    assert_non_null(strstr(text, "\n  \"steps\": 500,\n"));
    assert_non_null(strstr(text, "\n  \"samples_per_s\": 12345.5,\n"));
    /* the object on one line, its numbers as jansson writes them */
    assert_non_null(strstr(text, "\n  \"trainer\": {\"final_loss\": 1.30389352, \"test_accuracy\": null, "
                                 "\"steps\": 500, \"samples_per_s\": 12345.5, "
                                 "\"rank_work_seconds\": [0.5, 1e-5]},\n"));
    json_t *want = json_loads(trainer, 0, NULL);
    assert_true(json_equal(json_object_get(doc, "trainer"), want));
    json_decref(want);
    json_decref(doc);
    free(text);
    const char *broken[] = {"{\"final_loss\": 1.5, \"steps\": 5", "[1, 2]", "{\"final_loss\": NaN}"};
    for (size_t i = 0; i < sizeof broken / sizeof broken[0]; i++) {
        doc = summary_with_trainer(broken[i], &text);
        assert_null(json_object_get(doc, "trainer"));
        assert_null(json_object_get(doc, "final_loss"));
        json_decref(doc);
        free(text);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(line_prefix_template),
        cmocka_unit_test(prefix_is_rank_and_newline),
        cmocka_unit_test(torch_prefix_found),
        cmocka_unit_test(tail_keeps_last_lines_in_order),
        cmocka_unit_test(environment_for_a_rank),
        cmocka_unit_test(virtual_local_rank_and_role),
        cmocka_unit_test(no_token_no_variable),
        cmocka_unit_test(torchrun_defaults_yield_to_the_user),
        cmocka_unit_test(summary_json),
        cmocka_unit_test(summary_names_a_lost_node),
        cmocka_unit_test(summary_layout_and_times),
        cmocka_unit_test(summary_write_failure_is_reported),
        cmocka_unit_test(oom_counter_parsed),
        cmocka_unit_test(error_report_message),
        cmocka_unit_test(error_report_traceback),
        cmocka_unit_test(trainer_summary_is_copied_when_it_parses),
    };
    return cmocka_run_group_tests_name("agent", tests, NULL, NULL);
}
