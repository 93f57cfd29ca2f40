/* test_agent_records.c - the agents' records in the coordinator's store
 * (launcher/agent/agent_records.c): every key, every record's round trip
 * through its encoder and decoder, and the decoders' refusal of what no
 * agent writes (the values come from the network: any client with the token
 * can write any key). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "base/error.h"
#include "launcher/agent/agent_records.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A copy of v without its NUL in memory of exactly its length, so a decoder
 * that reads past the value's end is caught (by ASan in `make asan`). */
static char *exact(const char *v, size_t len)
{
    char *p = malloc(len ? len : 1);
    assert_non_null(p);
    memcpy(p, v, len);
    return p;
}

static void keys(void **state)
{
    (void)state;
    char k[DT_AGENT__KEY_MAX];
    assert_string_equal(dt_agent__key(k, DT_AGENT__K_FAIL, 3, 9), "dtrain/fail/3");
    assert_string_equal(dt_agent__key(k, DT_AGENT__K_FAILINFO, 3, 2), "dtrain/failinfo/3/2");
    assert_string_equal(dt_agent__key(k, DT_AGENT__K_RANKS, 9, 2), "dtrain/ranks/2");
    assert_string_equal(dt_agent__key(k, DT_AGENT__K_END, 4, 9), "dtrain/end/4");
    assert_string_equal(dt_agent__key(k, DT_AGENT__K_HB, 9, 5), "dtrain/hb/5");
    assert_string_equal(dt_agent__key(k, DT_AGENT__K_ROUND, 7, 9), "dtrain/round/7");
    assert_string_equal(dt_agent__key(k, DT_AGENT__K_CHANGE, 7, 9), "dtrain/change/7");
    assert_string_equal(dt_agent__key(k, DT_AGENT__K_SLOT_END, 7, 1), "dtrain/end/7/1");
    assert_string_equal(dt_agent__key(k, DT_AGENT__K_VERDICT, 7, 9), "dtrain/verdict/7");
    assert_string_equal(dt_agent__key(k, DT_AGENT__K_INCARNATION, 7, 9), "dtrain/incarnation/9");
    assert_string_equal(DT_AGENT__KEY_ABORT, "dtrain/abort");
}

/* --- round trips --------------------------------------------------------- */

static void abort_and_fail_round_trip(void **state)
{
    (void)state;
    struct dt_agent__text t = {0};
    struct dt_agent__rec_abort a = {.status = 143}, a2;
    snprintf(a.why, sizeof a.why, "node 1: its agent was interrupted\nby SIGTERM");
    assert_int_equal(dt_agent__rec_abort_encode(&a, &t), 0);
    assert_string_equal(t.p, "143 node 1: its agent was interrupted by SIGTERM");
    assert_int_equal(dt_agent__rec_abort_decode(t.p, t.len, &a2), 0);
    assert_int_equal(a2.status, 143);
    assert_string_equal(a2.why, "node 1: its agent was interrupted by SIGTERM");
    dt_agent__text_free(&t);

    struct dt_agent__rec_fail f = {.rank = 12, .wstatus = SIGKILL, .node = 3, .hung = true}, f2;
    assert_int_equal(dt_agent__rec_fail_encode(&f, &t), 0);
    assert_string_equal(t.p, "12 9 3 1"); /* the layout other agents of this version read */
    char *v = exact(t.p, t.len);
    assert_int_equal(dt_agent__rec_fail_decode(v, t.len, &f2), 0);
    assert_int_equal(f2.rank, 12);
    assert_int_equal(f2.wstatus, SIGKILL);
    assert_int_equal(f2.node, 3);
    assert_true(f2.hung);
    free(v);
    dt_agent__text_free(&t);
}

static void failinfo_round_trip(void **state)
{
    (void)state;
    struct dt_agent__rec_failinfo *in = calloc(1, sizeof *in), *out = calloc(1, sizeof *out);
    assert_non_null(in);
    assert_non_null(out);
    struct dt_agent_failure *f = &in->f;
    *f = (struct dt_agent_failure){.rank = 5, .wstatus = 42 << 8, .node = 2, .n_tail = 3, .hung = true,
                                   .hung_step = 1234567890123LL, .oom_killer = -1, .final = true};
    snprintf(f->host, sizeof f->host, "gpu-node-7");
    snprintf(f->error_file, sizeof f->error_file, "/runs/job/attempt_2/rank_5.error.json");
    snprintf(f->error_message, sizeof f->error_message, "RuntimeError: CUDA error\nout of memory");
    snprintf(f->hang_reason, sizeof f->hang_reason, "silent for 3.2 s");
    f->hang_report[0] = 0; /* an empty line is a field too */
    snprintf(f->tail[0], DT_AGENT_TAIL_WIDTH, "Traceback (most recent call last):");
    snprintf(f->tail[1], DT_AGENT_TAIL_WIDTH, "  with a trailing carriage return\r");
    snprintf(f->tail[2], DT_AGENT_TAIL_WIDTH, "%s", "");
    snprintf(f->error_traceback, sizeof f->error_traceback,
             "  File \"train.py\", line 3, in <module>\n    main()\nRuntimeError: CUDA error\r\n");
    f->traceback_left_out = 17;
    snprintf(f->hang_traceback, sizeof f->hang_traceback, "Thread 0x7f (most recent call first):\n"
                                                           "  File \"train.py\", line 9 in step");
    in->time_unix = 1765000000.123456;
    in->detected_unix = 1765000001.5;
    struct dt_agent__text t = {0};
    assert_int_equal(dt_agent__rec_failinfo_encode(in, &t), 0);
    char *v = exact(t.p, t.len);
    assert_int_equal(dt_agent__rec_failinfo_decode(v, t.len, out), 0);
    assert_int_equal(out->f.rank, 5);
    assert_int_equal(out->f.wstatus, 42 << 8);
    assert_int_equal(out->f.node, 2);
    assert_true(out->f.hung);
    assert_true(out->f.final);
    assert_int_equal(out->f.hung_step, 1234567890123LL);
    assert_int_equal(out->f.oom_killer, -1);
    assert_true(fabs(out->time_unix - in->time_unix) < 1e-6);
    assert_true(fabs(out->detected_unix - in->detected_unix) < 1e-6);
    assert_string_equal(out->f.host, "gpu-node-7");
    assert_string_equal(out->f.error_file, f->error_file);
    assert_string_equal(out->f.error_message, "RuntimeError: CUDA error out of memory");
    assert_string_equal(out->f.hang_reason, "silent for 3.2 s");
    assert_string_equal(out->f.hang_report, "");
    assert_int_equal(out->f.n_tail, 3);
    assert_string_equal(out->f.tail[0], f->tail[0]);
    assert_string_equal(out->f.tail[1], "  with a trailing carriage return ");
    assert_string_equal(out->f.tail[2], "");
    /* the tracebacks line for line (a last line without its newline gets one) */
    assert_string_equal(out->f.error_traceback, f->error_traceback);
    assert_int_equal(out->f.traceback_left_out, 17);
    assert_string_equal(out->f.hang_traceback,
                        "Thread 0x7f (most recent call first):\n  File \"train.py\", line 9 in step\n");
    free(v);
    dt_agent__text_free(&t);
    free(in);
    free(out);
}

static void ranks_round_trip(void **state)
{
    (void)state;
    struct dt_agent__rec_rank in[3] = {
        {.round = 0, .rank = 4, .pid = 1001, .exited = true, .stopped = false, .wstatus = 256,
         .spawn_unix = 1765000000.25, .exit_unix = 1765000009.5},
        {.round = 1, .rank = 4, .pid = 1002, .exited = false, .stopped = true, .wstatus = 0,
         .spawn_unix = 1765000010.0, .exit_unix = 0},
        {.round = 1, .rank = 5, .pid = 1003, .exited = true, .stopped = true, .wstatus = SIGTERM,
         .spawn_unix = 1765000010.0, .exit_unix = 1765000011.0},
    };
    struct dt_agent__text t = {0};
    assert_int_equal(dt_agent__rec_ranks_encode(in, 3, &t), 0);
    struct dt_agent__rec_rank *out = NULL;
    int n = -1;
    char *v = exact(t.p, t.len);
    assert_int_equal(dt_agent__rec_ranks_decode(v, t.len, &out, &n), 0);
    assert_int_equal(n, 3);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(out[i].round, in[i].round);
        assert_int_equal(out[i].rank, in[i].rank);
        assert_int_equal(out[i].pid, in[i].pid);
        assert_int_equal(out[i].exited, in[i].exited);
        assert_int_equal(out[i].stopped, in[i].stopped);
        assert_int_equal(out[i].wstatus, in[i].wstatus);
        assert_true(fabs(out[i].spawn_unix - in[i].spawn_unix) < 1e-6);
        assert_true(fabs(out[i].exit_unix - in[i].exit_unix) < 1e-6);
    }
    free(out);
    free(v);
    dt_agent__text_free(&t);
    /* A node with no ranks in any round writes an empty record. */
    assert_int_equal(dt_agent__rec_ranks_encode(in, 0, &t), 0);
    assert_int_equal(t.len, 0);
    assert_int_equal(dt_agent__rec_ranks_decode(t.p, t.len, &out, &n), 0);
    assert_int_equal(n, 0);
    assert_null(out);
    dt_agent__text_free(&t);
}

static void hb_round_trip(void **state)
{
    (void)state;
    struct dt_agent__rec_hb_entry e[2] = {{.rank = 8, .step = 0, .age_s = 0.25},
                                          {.rank = 9, .step = INT64_MAX, .age_s = 12.5}},
                                  got[2];
    struct dt_agent__rec_hb in = {.seq = 18446744073709551615ULL, .n = 2, .e = e}, out = {.e = got};
    struct dt_agent__text t = {0};
    assert_int_equal(dt_agent__rec_hb_encode(&in, &t), 0);
    char *v = exact(t.p, t.len);
    assert_int_equal(dt_agent__rec_hb_decode(v, t.len, 2, &out), 0);
    assert_true(out.seq == in.seq);
    assert_int_equal(out.n, 2);
    assert_int_equal(got[1].rank, 9);
    assert_true(got[1].step == INT64_MAX);
    assert_true(fabs(got[0].age_s - 0.25) < 1e-3);
    free(v);
    dt_agent__text_free(&t);
    in.n = 0; /* no rank has sent one yet */
    assert_int_equal(dt_agent__rec_hb_encode(&in, &t), 0);
    assert_int_equal(dt_agent__rec_hb_decode(t.p, t.len, 2, &out), 0);
    assert_int_equal(out.n, 0);
    dt_agent__text_free(&t);
}

static void rounds_round_trip(void **state)
{
    (void)state;
    int slots[3] = {0, 4, 2}, incarns[3] = {1, 1, 3}, got[3], got_inc[3];
    struct dt_agent__rec_round in = {.restarts = 2, .n = 3, .slots = slots, .incarns = incarns},
                               out = {.slots = got, .incarns = got_inc};
    struct dt_agent__text t = {0};
    assert_int_equal(dt_agent__rec_round_encode(&in, &t), 0);
    assert_string_equal(t.p, "2 3 0:1 4:1 2:3");
    assert_int_equal(dt_agent__rec_round_decode(t.p, t.len, 3, &out), 0);
    assert_int_equal(out.restarts, 2);
    assert_int_equal(out.n, 3);
    assert_memory_equal(got, slots, sizeof slots);
    /* the incarnation fences an earlier agent of node 2 out of this round */
    assert_memory_equal(got_inc, incarns, sizeof incarns);
    dt_agent__text_free(&t);

    for (int finished = 0; finished < 2; finished++) {
        struct dt_agent__rec_slot_end e = {.finished = finished}, e2 = {.finished = !finished};
        assert_int_equal(dt_agent__rec_slot_end_encode(&e, &t), 0);
        assert_string_equal(t.p, finished ? "0" : "1");
        assert_int_equal(dt_agent__rec_slot_end_decode(t.p, t.len, &e2), 0);
        assert_int_equal(e2.finished, finished);
        dt_agent__text_free(&t);
    }
    struct dt_agent__rec_verdict next = {.next = true}, done = {.status = 137}, got_v;
    assert_int_equal(dt_agent__rec_verdict_encode(&next, &t), 0);
    assert_string_equal(t.p, "next");
    assert_int_equal(dt_agent__rec_verdict_decode(t.p, t.len, &got_v), 0);
    assert_true(got_v.next);
    dt_agent__text_free(&t);
    assert_int_equal(dt_agent__rec_verdict_encode(&done, &t), 0);
    assert_string_equal(t.p, "done 137");
    assert_int_equal(dt_agent__rec_verdict_decode(t.p, t.len, &got_v), 0);
    assert_false(got_v.next);
    assert_int_equal(got_v.status, 137);
    dt_agent__text_free(&t);
    int k = -1;
    assert_int_equal(dt_agent__rec_round_number_encode(41, &t), 0);
    assert_int_equal(dt_agent__rec_round_number_decode(t.p, t.len, 1023, &k), 0);
    assert_int_equal(k, 41);
    dt_agent__text_free(&t);
    /* Only the value's length counts, not what follows it in memory. */
    assert_int_equal(dt_agent__rec_round_number_decode("123", 2, 1023, &k), 0);
    assert_int_equal(k, 12);
}

/* --- refusals ------------------------------------------------------------ */

enum which { ABORT, FAIL, FAILINFO, RANKS, HB, ROUND, SLOT_END, VERDICT, NUMBER };

static int decode(enum which w, const char *v, size_t len)
{
    static struct dt_agent__rec_failinfo fi;
    struct dt_agent__rec_abort a;
    struct dt_agent__rec_fail f;
    struct dt_agent__rec_rank *r = NULL;
    struct dt_agent__rec_hb_entry e[2];
    struct dt_agent__rec_hb hb = {.e = e};
    int slots[2], incarns[2];
    struct dt_agent__rec_round round = {.slots = slots, .incarns = incarns};
    struct dt_agent__rec_slot_end end;
    struct dt_agent__rec_verdict verdict;
    int n, rc = 0;
    switch (w) {
    case ABORT: return dt_agent__rec_abort_decode(v, len, &a);
    case FAIL: return dt_agent__rec_fail_decode(v, len, &f);
    case FAILINFO: return dt_agent__rec_failinfo_decode(v, len, &fi);
    case RANKS:
        rc = dt_agent__rec_ranks_decode(v, len, &r, &n);
        assert_true(rc == 0 || (r == NULL && n == 0)); /* nothing half-read is handed back */
        free(r);
        return rc;
    case HB: return dt_agent__rec_hb_decode(v, len, 2, &hb);
    case ROUND: return dt_agent__rec_round_decode(v, len, 2, &round);
    case SLOT_END: return dt_agent__rec_slot_end_decode(v, len, &end);
    case VERDICT: return dt_agent__rec_verdict_decode(v, len, &verdict);
    case NUMBER: return dt_agent__rec_round_number_decode(v, len, 1023, &n);
    }
    return 0;
}

struct refusal {
    enum which w;
    const char *v;
    const char *why; /* in the error's sentence */
};

#define FI_HEAD "1 256 1 0 1765000000.5 0 -1 1765000000.5 -1 0 0\n"
#define FI_LINES "host\nfile\nmessage\nreason\nreport\n"
#define FI_TB "0\n0\n" /* no tracebacks */

static const struct refusal refusals[] = {
    {ABORT, "", "a number is missing"},
    {ABORT, "143", "a space expected"},
    {ABORT, "256 too big", "out of range"},
    {ABORT, "-1 negative", "out of range"},
    {ABORT, "x node 1: y", "a number is missing"},
    {FAIL, "", "a number is missing"},
    {FAIL, "1 2 3", "a space expected"},
    {FAIL, "1 2 3 1 5", "more than the record"},
    {FAIL, "1 2 3 2", "out of range"},
    {FAIL, "1  2 3 1", "a number is missing"},
    {FAIL, "-1 2 3 1", "out of range"},
    {FAIL, "1 2 3 1\n", "more than the record"},
    {FAIL, "99999999999 2 3 1", "out of range"},
    {FAIL, "999999999999999999999999 2 3 1", "not a whole number"},
    {FAIL, "1-2 2 3 1", "not a whole number"},
    {FAIL, "1 2 3 +1", "a number is missing"},
    {FAILINFO, "", "a number is missing"},
    {FAILINFO, FI_HEAD, "a line without its end"},
    {FAILINFO, FI_HEAD FI_LINES FI_TB "extra\n", "more than the record"},
    {FAILINFO, FI_HEAD FI_LINES, "a number is missing"},
    {FAILINFO, FI_HEAD FI_LINES "513\n0\n", "out of range"},
    {FAILINFO, FI_HEAD FI_LINES "2\none line\n", "a traceback line without its end"},
    {FAILINFO, FI_HEAD FI_LINES "1 \nline\n0\n", "a line break expected"},
    {FAILINFO, "1 256 1 2 1765000000.5 0 -1 1765000000.5 -1 0 0\n" FI_LINES "one tail line\n",
     "a line without its end"},
    {FAILINFO, "1 256 1 11 1765000000.5 0 -1 1765000000.5 -1 0 0\n" FI_LINES, "out of range"},
    {FAILINFO, "1 256 1 0 1e999 0 -1 1765000000.5 -1 0 0\n" FI_LINES, "not a finite number"},
    {FAILINFO, "1 256 1 0 nan 0 -1 1765000000.5 -1 0 0\n" FI_LINES, "a number is missing"},
    {FAILINFO, "1 256 1 0 -5 0 -1 1765000000.5 -1 0 0\n" FI_LINES, "not a finite number in range"},
    {FAILINFO, "1 256 1 0 1.5.5 0 -1 1765000000.5 -1 0 0\n" FI_LINES, "not a finite number"},
    {FAILINFO, "1 256 1 0 1765000000.5 0 -2 1765000000.5 -1 0 0\n" FI_LINES, "out of range"},
    {FAILINFO, "1 256 1 0 1765000000.5 0 -1 1765000000.5 2 0 0\n" FI_LINES, "out of range"},
    {FAILINFO, "1 256 1 0 1765000000.5 0 -1 1765000000.5 -1 0 -3\n" FI_LINES, "out of range"},
    {FAILINFO, "1 256 1 0 1765000000.5 0 -1 1765000000.5 -1 0 0 7\n" FI_LINES, "a line break expected"},
    {RANKS, "0 1 2 1 0 0 1.5 2.5", "a line break expected"},
    {RANKS, "0 1 2 1 0 0 1.5\n", "a space expected"},
    {RANKS, "0 1 2 1 0 0 1.5 2.5\n0 1 2", "a space expected"},
    {RANKS, "0 1 2 3 0 0 1.5 2.5\n", "out of range"},
    {RANKS, "\n", "a number is missing"},
    {HB, "", "a number is missing"},
    {HB, "7", "a line break expected"},
    {HB, "-7\n", "a number is missing"},
    {HB, "7\n1 2 0.5", "a line break expected"},
    {HB, "7\n1 2 -0.5\n", "not a finite number in range"},
    {HB, "7\n1 2 0.5\n2 3 0.5\n3 4 0.5\n", "more ranks than a node runs"},
    {HB, "99999999999999999999999\n", "out of range"},
    {ROUND, "", "a number is missing"},
    {ROUND, "0 0", "out of range"},
    {ROUND, "0 3 1:1 2:1 3:1", "out of range"},
    {ROUND, "0 2 1:1", "a space expected"},
    {ROUND, "0 2 1:1 1:2", "a slot named twice"},
    {ROUND, "0 2 1:1 2:1 3:1", "more than the record"},
    {ROUND, "0 1 -4:1", "out of range"},
    {ROUND, "0 2 0 1", "a mark expected"},
    {ROUND, "0 1 0:", "a number is missing"},
    {ROUND, "0 1 0:0", "out of range"},
    {ROUND, "0 1 0:1:1", "more than the record"},
    {SLOT_END, "", "a number is missing"},
    {SLOT_END, "2", "out of range"},
    {SLOT_END, "0 ", "more than the record"},
    {VERDICT, "", "neither"},
    {VERDICT, "nextt", "neither"},
    {VERDICT, "Next", "neither"},
    {VERDICT, "done", "neither"},
    {VERDICT, "done ", "a number is missing"},
    {VERDICT, "done 256", "out of range"},
    {VERDICT, "done 1 2", "more than the record"},
    {NUMBER, "", "a number is missing"},
    {NUMBER, "1024", "out of range"},
    {NUMBER, "-1", "out of range"},
    {NUMBER, "3 ", "more than the record"},
};

static void malformed_records_are_refused(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof refusals / sizeof refusals[0]; i++) {
        const struct refusal *r = &refusals[i];
        char *v = exact(r->v, strlen(r->v));
        int rc = decode(r->w, v, strlen(r->v));
        free(v);
        if (rc != DT_EPROTO || !strstr(dt_error_last(), r->why))
            print_message("record %zu '%s': rc %d, %s\n", i, r->v, rc, dt_error_last());
        assert_int_equal(rc, DT_EPROTO);
        assert_non_null(strstr(dt_error_last(), r->why));
        assert_non_null(strstr(dt_error_last(), "is not one an agent writes"));
    }
}

/* A NUL inside a value ends nothing: it is refused where a field is wanted. */
static void embedded_nul_is_refused(void **state)
{
    (void)state;
    const char v[] = "1 2\0 3 1";
    assert_int_equal(decode(FAIL, v, sizeof v - 1), DT_EPROTO);
    const char w[] = "done 1\0";
    assert_int_equal(decode(VERDICT, w, sizeof w - 1), DT_EPROTO);
    /* The quote in the message shows what a terminal can show. */
    assert_non_null(strstr(dt_error_last(), "'done 1?'"));
}

/* Every byte of valid records changed to each of a few troublesome values,
 * and every prefix: each decoder answers 0 or DT_EPROTO, never more. */
static void mutations_decode_or_are_refused(void **state)
{
    (void)state;
    const struct {
        enum which w;
        const char *v;
    } valid[] = {
        {ABORT, "143 node 1: its agent was interrupted by SIGTERM"},
        {FAIL, "12 9 3 1"},
        {FAILINFO, "1 256 1 2 1765000000.5 1 77 1765000001.25 -1 1 4\n" FI_LINES "tail one\ntail two\n"
                   "2\n  File \"t.py\", line 1\nValueError: x\n1\nThread 0x1:\n"},
        {RANKS, "0 1 2 1 256 0 1765000000.5 1765000002.5\n1 1 3 0 0 1 1765000003.5 0.000000\n"},
        {HB, "7\n1 2 0.5\n2 3 0.250\n"},
        {ROUND, "2 2 0:1 5:3"},
        {SLOT_END, "1"},
        {VERDICT, "done 3"},
        {NUMBER, "17"},
    };
    const char bytes[] = {0, ' ', '\n', '-', '9', 'e', '.', 'x', (char)0xff};
    int refused = 0, decoded = 0;
    for (size_t i = 0; i < sizeof valid / sizeof valid[0]; i++) {
        size_t len = strlen(valid[i].v);
        assert_int_equal(decode(valid[i].w, valid[i].v, len), 0);
        char *v = malloc(len);
        assert_non_null(v);
        for (size_t at = 0; at < len; at++) {
            for (size_t b = 0; b < sizeof bytes; b++) {
                memcpy(v, valid[i].v, len);
                v[at] = bytes[b];
                int rc = decode(valid[i].w, v, len);
                assert_true(rc == 0 || rc == DT_EPROTO);
                rc ? refused++ : decoded++;
            }
            int rc = decode(valid[i].w, valid[i].v, at); /* a record cut short */
            assert_true(rc == 0 || rc == DT_EPROTO);
        }
        free(v);
    }
    assert_true(refused > 0 && decoded > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(keys),
        cmocka_unit_test(abort_and_fail_round_trip),
        cmocka_unit_test(failinfo_round_trip),
        cmocka_unit_test(ranks_round_trip),
        cmocka_unit_test(hb_round_trip),
        cmocka_unit_test(rounds_round_trip),
        cmocka_unit_test(malformed_records_are_refused),
        cmocka_unit_test(embedded_nul_is_refused),
        cmocka_unit_test(mutations_decode_or_are_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
