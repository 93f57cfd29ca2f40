/* run_rdzv.h - where one `dtrain run` stands among the nodes of its job, from torchrun's flags.
 *
 * torchrun's rendezvous flags (--nnodes, --node-rank, --master-addr,
 * --master-port, --rdzv-backend, --rdzv-endpoint, --rdzv-id, --rdzv-conf,
 * --standalone) read as torchrun reads them, and turned into dtrain's
 * placement: one node (the job runs here as `dtrain launch` runs it), or
 * this node's part of several (run as `dtrain agent` runs it: node 0 hosts
 * the coordinator, which is the rendezvous endpoint and the ranks' store).
 * Also the job token every node must share, and the node rank of a c10d
 * rendezvous of a fixed node count, which the nodes take in turn.
 *
 * Not for the options themselves (cmd_run.c) or running the node (cli_plan.c).
 */
#ifndef DT_CLI_RUN_RDZV_H
#define DT_CLI_RUN_RDZV_H

#include "launcher/cli/cli.h"
#include "spec/token.h"

#include <stdbool.h>

/* The flags as given (NULL: not given, neither on the command line nor as PET_*). */
struct dt_cli__rdzv_flags {
    const char *nnodes, *backend, *endpoint, *id, *conf, *node_rank, *master_addr, *master_port;
    bool standalone;
    bool local_scheduler; /* scheduler: local (the others place the nodes themselves) */
};

/* The --rdzv-conf keys dtrain reads (NULL: not given); the others are said once. */
struct dt_cli__rdzv_conf {
    const char *join_timeout, *last_call_timeout, *timeout;
    int is_host; /* -1: not given */
};

struct dt_cli__rdzv {
    int nmin, nmax;         /* --nnodes */
    bool several;           /* this node's part of a job of several nodes (scheduler local) */
    bool elastic;           /* MIN < MAX, or c10d: the rounds number the nodes */
    bool hosting;           /* this node hosts the coordinator (node 0) */
    bool take_node_rank;    /* c10d of a fixed count: the node rank is taken at the coordinator */
    bool one_machine;       /* several nodes at a loopback address: all of them processes of this machine */
    int node_rank;          /* -1: the elastic rounds (or take_node_rank) say */
    char host[256];         /* where agents and ranks reach the coordinator */
    int port;               /* its port (0 for one node: the kernel's choice, or rendezvous.port) */
    bool port_given;        /* one node: --master-port or the endpoint's port named it */
    const char *bind;       /* node 0: the address the coordinator listens on */
    const char *backend;    /* "static" or "c10d", as resolved */
    const char *run_id;     /* --rdzv-id, or NULL */
    struct dt_cli__rdzv_conf conf;
    int lock_fd;            /* held while this process hosts (several processes of one machine) */
};

/* Reads the flags into r, deciding which node hosts.  DT_EXIT_REFUSED after
 * a usage error (a sentence naming the flag), else 0. */
int dt_cli__rdzv_resolve(const struct dt_cli__rdzv_flags *f, struct dt_cli__rdzv *r);

/* The job token of a job of several nodes: --token-file, DTRAIN_JOB_TOKEN or
 * DTRAIN_JOB_TOKEN_FILE, or the default file (dt_cli__token_default), which
 * the first node makes when the nodes are all on this machine (one_machine);
 * none of them is DT_EINVAL with one sentence saying how to share one. */
int dt_cli__rdzv_token(const char *token_file, bool one_machine, char out[DT_TOKEN_LEN + 1]);

/* $XDG_CONFIG_HOME/dtrain/job-token, else ~/.config/dtrain/job-token. */
int dt_cli__token_default(char *path, size_t size);

/* A c10d rendezvous of a fixed node count: the node rank this node takes at
 * the coordinator (1, 2, ... in the order the nodes come; node 0 hosts). */
int dt_cli__rdzv_take_node_rank(struct dt_cli__rdzv *r, const char *token, double timeout_s);

void dt_cli__rdzv_release(struct dt_cli__rdzv *r);

#endif
