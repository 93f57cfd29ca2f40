/* agent_records.h - what the agents of a job write to each other in the
 * coordinator's store: every key, the typed record its value holds, and one
 * encoder and one decoder for each (agent_records.c).
 *
 *   key                          record                   written by            read by
 *   dtrain/run_id                the run id, as is        node 0                the others
 *   dtrain/abort                 dt_agent__rec_abort      the first node to end the job (COMPARE_SET)
 *   dtrain/fail/<k>              dt_agent__rec_fail       the node of round k's first failure
 *   dtrain/failinfo/<k>/<node>   dt_agent__rec_failinfo   that node             node 0, for summary.json
 *   dtrain/ranks/<node>          dt_agent__rec_rank ...   each node, leaving    node 0, for summary.json
 *   dtrain/end/<k>               a counter (ADD), no text: nodes whose ranks of round k are gone
 *   dtrain/hb/<node>             dt_agent__rec_hb         node 0                that node's watchdog
 *   rounds node 0 forms (an elastic job's, and a fixed-size job's with
 *   restarts, agent_elastic.c; node: the slot, a fixed-size job's node rank):
 *   dtrain/incarnation/<node>    a counter (ADD): the agents that joined as that node so far
 *   dtrain/joins                 a counter (ADD): the agents that joined the job so far
 *   dtrain/round/<k>             dt_agent__rec_round      node 0                every agent
 *   dtrain/latest                a round number           node 0                an agent that comes late
 *   dtrain/change/<k>            a sentence, as is        node 0                every agent
 *   dtrain/end/<k>/<slot>        dt_agent__rec_slot_end   each node of round k  node 0
 *   dtrain/verdict/<k>           dt_agent__rec_verdict    node 0                the others
 *
 * k is the round, the attempt number every node shares (DTRAIN_RESTART_COUNT).
 * A round record names its nodes by slot in node-rank order, each with the
 * incarnation that takes part (the count in dtrain/incarnation/<slot> right
 * after its agent joined), so a round can be formed again from other agents
 * (a membership change; a lost node replaced by a new agent), and an agent
 * of an earlier incarnation that comes back (a partitioned host) finds its
 * place taken instead of running beside its replacement.
 *
 * Values are text a person can read with `dtrain` store tools: numbers in
 * decimal separated by one space, wall-clock seconds with 6 decimals (each
 * agent's monotonic clock is its own), a sentence last on its line or on a
 * line of its own (a line break inside one is written as a space).  Any
 * client that holds the job token can write any key, so the decoders take
 * hostile input: every number is checked for syntax and range, every count
 * against what follows, nothing is read past the value's length, and a record
 * that is not one an agent writes is refused with DT_EPROTO and a sentence
 * naming the byte where it goes wrong.
 *
 * Not for the store's wire protocol (comm/store_wire.h) nor for when each
 * record is written and read (agent_rounds.h).
 */
#ifndef DT_AGENT_RECORDS_H
#define DT_AGENT_RECORDS_H

#include "launcher/agent/agent.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* --- keys ---------------------------------------------------------------- */

#define DT_AGENT__KEY_RUN_ID "dtrain/run_id"
#define DT_AGENT__KEY_ABORT "dtrain/abort"
#define DT_AGENT__KEY_LATEST "dtrain/latest"
#define DT_AGENT__KEY_JOINS "dtrain/joins"
#define DT_AGENT__KEY_MAX 64

enum dt_agent__key {
    DT_AGENT__K_FAIL,     /* dtrain/fail/<k> */
    DT_AGENT__K_FAILINFO, /* dtrain/failinfo/<k>/<node> */
    DT_AGENT__K_RANKS,    /* dtrain/ranks/<node> */
    DT_AGENT__K_END,      /* dtrain/end/<k> */
    DT_AGENT__K_HB,       /* dtrain/hb/<node> */
    DT_AGENT__K_ROUND,    /* dtrain/round/<k> */
    DT_AGENT__K_CHANGE,   /* dtrain/change/<k> */
    DT_AGENT__K_SLOT_END, /* dtrain/end/<k>/<node> */
    DT_AGENT__K_VERDICT,  /* dtrain/verdict/<k> */
    DT_AGENT__K_INCARNATION, /* dtrain/incarnation/<node> */
};

/* The key into out (DT_AGENT__KEY_MAX bytes); k or node unused by some. */
const char *dt_agent__key(char *out, enum dt_agent__key which, int k, int node);

/* --- the encoders' buffer ------------------------------------------------ */

struct dt_agent__text {
    char *p; /* NUL-terminated */
    size_t len, cap;
};
void dt_agent__text_free(struct dt_agent__text *t);

/* --- records ------------------------------------------------------------- */

/* dtrain/abort: "<status> <why>".  Every agent ends the job with status. */
struct dt_agent__rec_abort {
    int status; /* 0-255 */
    char why[600];
};

/* dtrain/fail/<k>: "<rank> <wstatus> <node> <hung>".  Round k's first
 * failure, wherever it ran; hung: the watchdog declared it (then wstatus is
 * its SIGKILL's, even before that is reaped). */
struct dt_agent__rec_fail {
    int rank, wstatus, node;
    bool hung;
};

/* dtrain/failinfo/<k>/<node>: "<rank> <wstatus> <node> <n_tail> <time> <hung>
 * <hung step> <detected> <oom killer> <final> <traceback lines left out>\n"
 * then host, error file, error message, hang reason and hang report a line
 * each, then n_tail stderr lines, then the error's traceback and the hung
 * rank's threads' traceback, each as "<n>\n" and n lines.  f holds them
 * (f.node, f.host: where it ran); f.attempt, f.time_s and f.hang_detected_s
 * are not in the record: the times travel as time_unix and detected_unix. */
struct dt_agent__rec_failinfo {
    struct dt_agent_failure f;
    double time_unix, detected_unix;
};

/* dtrain/ranks/<node>: one line per rank and round, "<round> <rank> <pid>
 * <exited> <wstatus> <stopped by agent> <spawn> <exit>" (times wall-clock;
 * exit 0 while not exited). */
struct dt_agent__rec_rank {
    int round, rank, pid;
    bool exited, stopped;
    int wstatus;
    double spawn_unix, exit_unix;
};

/* dtrain/hb/<node>: "<seq>\n" then "<rank> <step> <age>\n" per rank that has
 * sent a heartbeat; age: seconds since it arrived, on node 0's clock as it
 * wrote the record (agent_hb_relay.c). */
struct dt_agent__rec_hb_entry {
    int rank;
    int64_t step;
    double age_s;
};
struct dt_agent__rec_hb {
    unsigned long long seq;
    int n;                                /* entries in e */
    struct dt_agent__rec_hb_entry *e;     /* the caller's array */
};

/* dtrain/round/<k>: "<restarts> <n> <slot>:<incarnation> ..." (n of them).
 * Round k's nodes, node rank i being slots[i] as joined by its incarns[i]-th
 * agent; restarts: those counted against max_restarts so far. */
struct dt_agent__rec_round {
    int restarts, n;
    int *slots;   /* the caller's array */
    int *incarns; /* the caller's array, each at least 1 */
};

/* dtrain/end/<k>/<slot>: "0" when every rank of that node exited 0 by itself, "1" otherwise. */
struct dt_agent__rec_slot_end {
    bool finished;
};

/* dtrain/verdict/<k>: "next" (round k+1 follows) or "done <status>". */
struct dt_agent__rec_verdict {
    bool next;
    int status; /* done: 0-255 */
};

/* Encoders append to out (0, or DT_ENOMEM); decoders read v[0..len) whole
 * (0, or DT_EPROTO with why in dt_error_last()). */
int dt_agent__rec_abort_encode(const struct dt_agent__rec_abort *r, struct dt_agent__text *out);
int dt_agent__rec_abort_decode(const char *v, size_t len, struct dt_agent__rec_abort *r);
int dt_agent__rec_fail_encode(const struct dt_agent__rec_fail *r, struct dt_agent__text *out);
int dt_agent__rec_fail_decode(const char *v, size_t len, struct dt_agent__rec_fail *r);
int dt_agent__rec_failinfo_encode(const struct dt_agent__rec_failinfo *r, struct dt_agent__text *out);
int dt_agent__rec_failinfo_decode(const char *v, size_t len, struct dt_agent__rec_failinfo *r);
/* n records, a line each. */
int dt_agent__rec_ranks_encode(const struct dt_agent__rec_rank *r, int n, struct dt_agent__text *out);
/* Into *r (malloc'd, *n of them; NULL when none). */
int dt_agent__rec_ranks_decode(const char *v, size_t len, struct dt_agent__rec_rank **r, int *n);
int dt_agent__rec_hb_encode(const struct dt_agent__rec_hb *r, struct dt_agent__text *out);
/* r->e holds cap entries; more is refused. */
int dt_agent__rec_hb_decode(const char *v, size_t len, int cap, struct dt_agent__rec_hb *r);
int dt_agent__rec_round_encode(const struct dt_agent__rec_round *r, struct dt_agent__text *out);
/* r->slots and r->incarns hold cap entries; a round of more nodes, or a slot twice, is refused. */
int dt_agent__rec_round_decode(const char *v, size_t len, int cap, struct dt_agent__rec_round *r);
int dt_agent__rec_slot_end_encode(const struct dt_agent__rec_slot_end *r, struct dt_agent__text *out);
int dt_agent__rec_slot_end_decode(const char *v, size_t len, struct dt_agent__rec_slot_end *r);
int dt_agent__rec_verdict_encode(const struct dt_agent__rec_verdict *r, struct dt_agent__text *out);
int dt_agent__rec_verdict_decode(const char *v, size_t len, struct dt_agent__rec_verdict *r);
/* dtrain/latest: a round number, 0 .. max. */
int dt_agent__rec_round_number_encode(int k, struct dt_agent__text *out);
int dt_agent__rec_round_number_decode(const char *v, size_t len, int max, int *k);

#endif
