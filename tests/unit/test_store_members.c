/* test_store_members.c - agent membership (JOIN, LEAVE, MEMBERS) and PyTorch's
 * queues (QUEUE_PUSH/POP/LEN) through dtrain's client against an in-process
 * coordinator with a job token, and their bad inputs: a duplicate node rank,
 * a node rank out of range, another node count, a JOIN before the token; an
 * elastic agent's JOIN without a node rank (dt_store_join_any); why
 * a member was lost (dt_coord_member_lost), a member gone silent
 * (member_silence_s) and the liveness settings of a member's connection
 * (dt_store_liveness_fd). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"
#include "comm/store.h"
#include "comm/store_wire.h"
#include "launcher/coordinator/coordinator.h"
#include "spec/token.h"

struct fx {
    struct dt_coord *coord;
    char token[65];
    struct dt_store *s;
};

static struct dt_store *client(struct fx *f)
{
    struct dt_store_options o = {.host = "127.0.0.1", .port = dt_coord_port(f->coord), .token = f->token,
                                 .timeout_s = 5};
    struct dt_store *s = NULL;
    assert_int_equal(dt_store_connect(&o, &s), 0);
    return s;
}

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof *f);
    assert_int_equal(dt_token_make(f->token), 0);
    struct dt_coord_config cfg = {.bind_host = "127.0.0.1", .token = f->token};
    assert_int_equal(dt_coord_start(&cfg, &f->coord), 0);
    f->s = client(f);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    dt_store_close(f->s);
    dt_coord_stop(f->coord);
    free(f);
    return 0;
}

/* The state of node `rank` in the member list, 0 if it is not listed. */
static int state_of(struct dt_store *s, int rank, struct dt_store_member *copy)
{
    struct dt_store_member *m;
    int n;
    assert_int_equal(dt_store_members(s, &m, &n), 0);
    int st = 0;
    for (int i = 0; i < n; i++)
        if (m[i].node_rank == rank) {
            st = (int)m[i].state;
            if (copy)
                *copy = m[i];
        }
    free(m);
    return st;
}

static void join_lists_every_member(void **state)
{
    struct fx *f = *state;
    struct dt_store *b = client(f);
    assert_int_equal(dt_store_join(f->s, 0, 2, 4, "host-a"), 0);
    assert_int_equal(dt_store_join(b, 1, 2, 2, "host-b"), 0);
    struct dt_store_member m;
    assert_int_equal(state_of(f->s, 1, &m), DT_STORE_MEMBER_JOINED);
    assert_string_equal(m.host, "host-b");
    assert_int_equal(m.nproc, 2);
    assert_int_equal(m.pid, (long)getpid());
    assert_int_equal(state_of(b, 0, &m), DT_STORE_MEMBER_JOINED);
    assert_string_equal(m.host, "host-a");
    dt_store_close(b);
}

static void leaving_and_dropping_are_visible(void **state)
{
    struct fx *f = *state;
    struct dt_store *b = client(f), *c = client(f);
    assert_int_equal(dt_store_join(f->s, 0, 3, 1, "a"), 0);
    assert_int_equal(dt_store_join(b, 1, 3, 1, "b"), 0);
    assert_int_equal(dt_store_join(c, 2, 3, 1, "c"), 0);
    assert_int_equal(dt_store_leave(b), 0);
    dt_store_close(c); /* no LEAVE: the connection just goes */
    int st = 0;
    for (int i = 0; i < 100 && st != DT_STORE_MEMBER_LOST; i++) {
        st = state_of(f->s, 2, NULL);
        usleep(10000);
    }
    assert_int_equal(st, DT_STORE_MEMBER_LOST);
    assert_int_equal(state_of(f->s, 1, NULL), DT_STORE_MEMBER_LEFT);
    /* A lost node rank can be joined again (its agent restarted). */
    c = client(f);
    assert_int_equal(dt_store_join(c, 2, 3, 1, "c2"), 0);
    assert_int_equal(state_of(f->s, 2, NULL), DT_STORE_MEMBER_JOINED);
    dt_store_close(c);
    dt_store_close(b);
}

/* A member whose agent closed its connection is lost "closed its connection",
 * named with its host, address and pid; a member that left or never was
 * lost has no reason; joining again clears it. */
static void a_lost_member_says_who_and_how(void **state)
{
    struct fx *f = *state;
    struct dt_store *b = client(f), *c = client(f);
    assert_int_equal(dt_store_join(f->s, 0, 3, 1, "a"), 0);
    assert_int_equal(dt_store_join(b, 1, 3, 1, "hostb"), 0);
    assert_int_equal(dt_store_join(c, 2, 3, 1, "hostc"), 0);
    assert_int_equal(dt_store_leave(b), 0);
    dt_store_close(c);
    char why[512];
    double when = 0;
    int rc = DT_ENOTFOUND;
    for (int i = 0; i < 100 && rc != 0; i++) {
        rc = dt_coord_member_lost(f->coord, 2, why, sizeof why, &when);
        usleep(10000);
    }
    assert_int_equal(rc, 0);
    assert_true(when > 0);
    char pid[64];
    snprintf(pid, sizeof pid, "agent pid %d)", (int)getpid());
    assert_non_null(strstr(why, "node 2 (host hostc, address 127.0.0.1:"));
    assert_non_null(strstr(why, pid));
    assert_non_null(strstr(why, "closed its connection without leaving: its agent exited or was killed"));
    assert_int_equal(dt_coord_member_lost(f->coord, 1, why, sizeof why, NULL), DT_ENOTFOUND);
    assert_int_equal(dt_coord_member_lost(f->coord, 0, why, sizeof why, NULL), DT_ENOTFOUND);
    assert_int_equal(dt_coord_member_lost(f->coord, 7, why, sizeof why, NULL), DT_ENOTFOUND);
    c = client(f);
    assert_int_equal(dt_store_join(c, 2, 3, 1, "hostc"), 0);
    assert_int_equal(dt_coord_member_lost(f->coord, 2, why, sizeof why, NULL), DT_ENOTFOUND);
    dt_store_close(c);
    dt_store_close(b);
}

struct waiter {
    struct dt_store *s;
    int rc;
};

static void *wait_for_go(void *arg)
{
    struct waiter *w = arg;
    const char *key = "go";
    w->rc = dt_store_wait(w->s, &key, 1, 10);
    return NULL;
}

static bool lost_now(struct dt_coord *c, int node, char *why, size_t n)
{
    return dt_coord_member_lost(c, node, why, n, NULL) == 0;
}

/* member_silence_s: a member other than node 0 that sends nothing is lost
 * ("went silent", naming it); one that polls is not, nor one whose WAIT is
 * pending, whose silence starts again when the WAIT is answered. */
static void a_silent_member_is_lost(void **state)
{
    (void)state;
    struct fx f = {0};
    assert_int_equal(dt_token_make(f.token), 0);
    struct dt_coord_config cfg = {
        .bind_host = "127.0.0.1", .token = f.token, .member_liveness_s = 5, .member_silence_s = 1};
    assert_int_equal(dt_coord_start(&cfg, &f.coord), 0);
    struct dt_store *s0 = client(&f), *quiet = client(&f), *busy = client(&f), *waiting = client(&f);
    assert_int_equal(dt_store_join(s0, 0, 4, 1, "h0"), 0);
    assert_int_equal(dt_store_join(quiet, 1, 4, 1, "hquiet"), 0);
    assert_int_equal(dt_store_join(busy, 2, 4, 1, "hbusy"), 0);
    assert_int_equal(dt_store_join(waiting, 3, 4, 1, "hwait"), 0);
    struct waiter w = {.s = waiting, .rc = 1};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, wait_for_go, &w), 0);
    const char *key = "k";
    bool ready;
    for (int i = 0; i < 50; i++) { /* 2.5 s: the busy member polls every 50 ms */
        assert_int_equal(dt_store_check(busy, &key, 1, &ready), 0);
        usleep(50000);
    }
    char why[512];
    assert_true(lost_now(f.coord, 1, why, sizeof why));
    assert_non_null(strstr(why, "node 1 (host hquiet, address 127.0.0.1:"));
    assert_non_null(strstr(why, "went silent: its agent sent nothing for 1 s while its host still acknowledged"));
    assert_false(lost_now(f.coord, 0, why, sizeof why)); /* node 0 hosts the coordinator */
    assert_false(lost_now(f.coord, 2, why, sizeof why));
    assert_false(lost_now(f.coord, 3, why, sizeof why)); /* its WAIT is pending */
    assert_int_equal(dt_store_set(s0, "go", "1", 1), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(w.rc, 0);
    assert_false(lost_now(f.coord, 3, why, sizeof why)); /* answered just now */
    usleep(2500000);
    assert_true(lost_now(f.coord, 3, why, sizeof why));
    assert_true(lost_now(f.coord, 2, why, sizeof why));
    assert_false(lost_now(f.coord, 0, why, sizeof why));
    dt_store_close(quiet);
    dt_store_close(busy);
    dt_store_close(waiting);
    dt_store_close(s0);
    dt_coord_stop(f.coord);
}

/* What makes a connection to a vanished host fail in `seconds`. */
static void liveness_sets_keepalive_and_user_timeout(void **state)
{
    (void)state;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    assert_int_equal(dt_store_liveness_fd(fd, 2.5), 0);
    int v = 0;
    socklen_t len = sizeof v;
    assert_int_equal(getsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &v, &len), 0);
    assert_int_equal(v, 1);
    assert_int_equal(getsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &v, &len), 0);
    assert_int_equal(v, 1);
    assert_int_equal(getsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &v, &len), 0);
    assert_int_equal(v, 1);
    unsigned ms = 0;
    len = sizeof ms;
    assert_int_equal(getsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ms, &len), 0);
    assert_int_equal(ms, 2500);
    close(fd);
}

static void duplicate_node_rank_is_refused_with_who_holds_it(void **state)
{
    struct fx *f = *state;
    struct dt_store *b = client(f);
    assert_int_equal(dt_store_join(f->s, 1, 2, 1, "first"), 0);
    assert_int_equal(dt_store_join(b, 1, 2, 1, "second"), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "node rank 1 is already taken"));
    assert_non_null(strstr(dt_error_last(), "on first"));
    struct dt_store_member m;
    assert_int_equal(state_of(b, 1, &m), DT_STORE_MEMBER_JOINED);
    assert_string_equal(m.host, "first");
    /* The refused client's connection still works. */
    assert_int_equal(dt_store_set(b, "k", "v", 1), 0);
    /* One connection joins once. */
    assert_int_equal(dt_store_join(f->s, 0, 2, 1, "first"), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "already joined as node 1"));
    dt_store_close(b);
}

static void out_of_range_and_other_node_counts_are_refused(void **state)
{
    struct fx *f = *state;
    assert_int_equal(dt_store_join(f->s, 2, 2, 1, "h"), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "node rank 2 is out of range for a job of 2 nodes"));
    assert_int_equal(dt_store_join(f->s, -1, 2, 1, "h"), DT_EINVAL);
    assert_int_equal(dt_store_join(f->s, 0, 0, 1, "h"), DT_EINVAL);
    assert_int_equal(dt_store_join(f->s, 0, 2, 0, "h"), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "ranks"));
    assert_int_equal(dt_store_join(f->s, 0, 2, 1, "h"), 0);
    struct dt_store *b = client(f);
    assert_int_equal(dt_store_join(b, 1, 3, 1, "h"), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "the first agent to join said 2"));
    struct dt_store_member *m;
    int n;
    assert_int_equal(dt_store_members(b, &m, &n), 0);
    assert_int_equal(n, 1);
    free(m);
    dt_store_close(b);
}

static void join_before_the_token_closes_and_is_not_applied(void **state)
{
    struct fx *f = *state;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)dt_coord_port(f->coord))};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    struct timeval tv = {2, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct dt_wire_buf b;
    dt_wire_buf_init(&b);
    dt_wire_put_u8(&b, DT_WIRE_VALIDATE);
    dt_wire_put_u32(&b, DT_WIRE_MAGIC);
    dt_wire_put_u8(&b, DT_WIRE_JOIN);
    for (int i = 0; i < 4; i++)
        dt_wire_put_i64(&b, i == 1 ? 2 : 1);
    dt_wire_put_bytes(&b, "intruder", 8);
    assert_int_equal(send(fd, b.p, b.len, MSG_NOSIGNAL), (ssize_t)b.len);
    dt_wire_buf_free(&b);
    char ch;
    ssize_t n = recv(fd, &ch, 1, 0);
    close(fd);
    assert_true(n <= 0); /* closed, no reply */
    assert_true(dt_coord_refusals(f->coord, NULL, 0) >= 1);
    assert_int_equal(state_of(f->s, 1, NULL), 0);
    assert_int_equal(dt_store_join(f->s, 1, 2, 1, "rightful"), 0);
}

static void queue_is_fifo_and_apart_from_keys(void **state)
{
    struct fx *f = *state;
    assert_int_equal(dt_store_queue_push(f->s, "q", "one", 3), 0);
    assert_int_equal(dt_store_queue_push(f->s, "q", "two", 3), 0);
    int64_t n = -1;
    assert_int_equal(dt_store_queue_len(f->s, "q", &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(dt_store_num_keys(f->s, &n), 0);
    assert_int_equal(n, 0); /* queues are not keys */
    bool ready = false;
    const char *k[] = {"q"};
    assert_int_equal(dt_store_check(f->s, k, 1, &ready), 0);
    assert_true(ready); /* a non-empty queue counts as present */
    void *v;
    size_t len;
    assert_int_equal(dt_store_queue_pop(f->s, "q", false, &v, &len), 0);
    assert_int_equal(len, 3);
    assert_memory_equal(v, "one", 3);
    free(v);
    assert_int_equal(dt_store_queue_pop(f->s, "q", false, &v, &len), 0);
    assert_memory_equal(v, "two", 3);
    free(v);
    assert_int_equal(dt_store_queue_pop(f->s, "q", false, &v, &len), DT_ENOTFOUND);
    assert_non_null(strstr(dt_error_last(), "queue 'q' is empty"));
    assert_int_equal(dt_store_queue_len(f->s, "q", &n), 0);
    assert_int_equal(n, 0);
    assert_int_equal(dt_store_check(f->s, k, 1, &ready), 0);
    assert_false(ready);
}

struct pusher {
    struct fx *f;
    int items;
};

static void *push_later(void *p)
{
    struct pusher *ps = p;
    struct dt_store *s = client(ps->f);
    usleep(150000);
    for (int i = 0; i < ps->items; i++)
        dt_store_queue_push(s, "jobs", "x", 1);
    usleep(100000);
    dt_store_close(s);
    return NULL;
}

static void blocking_pop_waits_and_one_push_wakes_one(void **state)
{
    struct fx *f = *state;
    struct dt_store *b = client(f);
    dt_store_set_timeout(b, 1);
    struct pusher ps = {f, 1};
    pthread_t t;
    pthread_create(&t, NULL, push_later, &ps);
    void *v = NULL;
    size_t len;
    assert_int_equal(dt_store_queue_pop(f->s, "jobs", true, &v, &len), 0);
    assert_memory_equal(v, "x", 1);
    free(v);
    /* The one item is gone: a second blocking pop times out. */
    assert_int_equal(dt_store_queue_pop(b, "jobs", true, &v, &len), DT_ETIMEDOUT);
    pthread_join(t, NULL);
    dt_store_close(b);
}

/* An elastic agent's JOIN without a node rank (dt_store_join_any): slots
 * from 1 in join order, whoever joined first; a slot is never given twice
 * (a lost agent's stays lost, the next gets a new one, past nnodes too);
 * the member list shows them; a second JOIN on one connection and another
 * node count are refused with the coordinator's sentence. */
static void join_any_gives_fresh_slots(void **state)
{
    struct fx *f = *state;
    struct dt_store *b = client(f), *c = client(f), *d = client(f);
    int slot = -1, slot2 = -1;
    assert_int_equal(dt_store_join_any(b, 3, 1, "host-b", &slot), 0);
    assert_int_equal(slot, 1); /* before node 0: slot 0 is node 0's */
    assert_int_equal(dt_store_join(f->s, 0, 3, 1, "host-a"), 0);
    assert_int_equal(dt_store_join_any(c, 3, 2, "host-c", &slot2), 0);
    assert_int_equal(slot2, 2);
    struct dt_store_member m;
    assert_int_equal(state_of(f->s, 2, &m), DT_STORE_MEMBER_JOINED);
    assert_string_equal(m.host, "host-c");
    assert_int_equal(m.nproc, 2);
    dt_store_close(c); /* lost: its slot is not given again */
    int st = 0;
    for (int i = 0; i < 100 && st != DT_STORE_MEMBER_LOST; i++) {
        st = state_of(f->s, 2, NULL);
        usleep(10000);
    }
    assert_int_equal(st, DT_STORE_MEMBER_LOST);
    assert_int_equal(dt_store_join_any(d, 3, 1, "host-d", &slot), 0);
    assert_int_equal(slot, 3); /* past nnodes: an elastic job's slots are not node ranks */
    assert_int_equal(state_of(f->s, 3, &m), DT_STORE_MEMBER_JOINED);
    assert_string_equal(m.host, "host-d");
    assert_int_not_equal(dt_store_join_any(d, 3, 1, "host-d", &slot), 0);
    if (!strstr(dt_error_last(), "already joined as node 3"))
        fail_msg("unexpected error: %s", dt_error_last());
    struct dt_store *e = client(f);
    assert_int_not_equal(dt_store_join_any(e, 4, 1, "host-e", &slot), 0);
    if (!strstr(dt_error_last(), "the first agent to join said 3"))
        fail_msg("unexpected error: %s", dt_error_last());
    dt_store_close(e);
    dt_store_close(d);
    dt_store_close(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(join_lists_every_member, setup, teardown),
        cmocka_unit_test_setup_teardown(leaving_and_dropping_are_visible, setup, teardown),
        cmocka_unit_test_setup_teardown(join_any_gives_fresh_slots, setup, teardown),
        cmocka_unit_test_setup_teardown(a_lost_member_says_who_and_how, setup, teardown),
        cmocka_unit_test(a_silent_member_is_lost),
        cmocka_unit_test(liveness_sets_keepalive_and_user_timeout),
        cmocka_unit_test_setup_teardown(duplicate_node_rank_is_refused_with_who_holds_it, setup, teardown),
        cmocka_unit_test_setup_teardown(out_of_range_and_other_node_counts_are_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(join_before_the_token_closes_and_is_not_applied, setup, teardown),
        cmocka_unit_test_setup_teardown(queue_is_fifo_and_apart_from_keys, setup, teardown),
        cmocka_unit_test_setup_teardown(blocking_pop_waits_and_one_push_wakes_one, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
