/* agent_endpoint.h - a node's store endpoint: the TCPStore address its ranks
 * are given (MASTER_ADDR, MASTER_PORT), served by the node's agent on
 * loopback, open to the job's processes only, and carried to the
 * coordinator over one connection that presented the job token.
 *
 * Why: PyTorch's TCPStore client cannot present dtrain's job token, and
 * without a token anyone who reaches the coordinator's port could read and
 * write the job's store.  The endpoint asks the kernel who is connecting
 * instead (base/sock_owner.h): a connection is admitted only when the
 * client's socket belongs to this user and is held by a descendant of the
 * agent (a rank, or a process a rank started: a DataLoader worker), before
 * one byte of it is read.  Everything an admitted client sends goes to the
 * coordinator as a channel of the endpoint's connection (comm/store_wire.h,
 * launcher/coordinator/coord_channel.c), so the store's semantics are the
 * coordinator's own, WAIT wake-ups included, and the coordinator holds one
 * connection per node instead of one per rank.
 *
 * It listens on 127.0.0.1: the ranks of a node talk to their own node's
 * agent, so loopback suffices on every node, and nothing off the host (or in
 * another network namespace) can even connect.  When the coordinator is
 * lost, every client's connection is closed at once (their ranks fail
 * instead of waiting), and new ones are closed after one attempt, a second
 * at most, to reach it again.  Everything runs on a libuv loop on a thread of
 * its own, as the coordinator's does.
 *
 * Not for the store itself (the coordinator), nor for deciding which jobs
 * use it (agent_node.c).
 */
#ifndef DT_AGENT_ENDPOINT_H
#define DT_AGENT_ENDPOINT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct dt_agent_endpoint;

struct dt_agent_endpoint_config {
    const char *coord_host;    /* the coordinator, as this node's agent reaches it */
    int coord_port;
    const char *token;         /* the job token it presents; NULL: the coordinator runs with auth: none */
    int port;                  /* the port on 127.0.0.1; 0: the kernel picks one */
    const char *name;          /* this node in the coordinator's log lines: "node 3 (host-a)" */
    double connect_timeout_s;  /* reaching the coordinator at start; <= 0: 60 s */
    double liveness_s;         /* a coordinator host that went away is noticed in about this (0: the
                                  kernel's TCP timeouts); dt_store_liveness_fd */
    pid_t root;                /* descendants of this process are admitted; 0: this process's */
    bool coordinator_here;     /* the coordinator runs in this process and logs why it closes a
                                  rank's connection: the endpoint does not say it again */
};

/* Connects to the coordinator (retrying until connect_timeout_s), binds and
 * listens, and starts the loop's thread: clients may connect on return. */
int dt_agent_endpoint_start(const struct dt_agent_endpoint_config *cfg, struct dt_agent_endpoint **out);

/* The port listened on (127.0.0.1). */
int dt_agent_endpoint_port(const struct dt_agent_endpoint *e);

/* The coordinator was replaced (a fresh one at the same address for a
 * restart): drops the connection to the old one, with any client still on
 * it, and connects to the new one before returning. */
int dt_agent_endpoint_reconnect(struct dt_agent_endpoint *e, double timeout_s);

/* Connections admitted and refused so far.  Safe from any thread. */
void dt_agent_endpoint_counts(struct dt_agent_endpoint *e, unsigned long *admitted, unsigned long *refused);

/* Stops the loop, closes every connection, frees everything. */
void dt_agent_endpoint_stop(struct dt_agent_endpoint *e);

#endif
