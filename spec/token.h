/* token.h - the job token: the shared secret every client presents to the coordinator.
 *
 * 256 random bits written as 64 lowercase hex characters.  The launcher makes
 * one per job (or per node-0 agent of a one-node job) and passes it to ranks
 * and agents in the environment (DTRAIN_JOB_TOKEN) or a file a Kubernetes
 * Secret mounts (DTRAIN_JOB_TOKEN_FILE); it never appears on a command line,
 * where `ps` shows it to every user.  rendezvous.auth: none turns it off.
 *
 * Not for checking a token on the wire: the coordinator compares what a
 * client sends with the job's (launcher/coordinator).
 */
#ifndef DT_TOKEN_H
#define DT_TOKEN_H

#include <stdbool.h>

#define DT_TOKEN_LEN 64 /* hex characters; buffers hold DT_TOKEN_LEN + 1 */

/* A fresh token from the kernel's random source (getrandom). */
int dt_token_make(char out[DT_TOKEN_LEN + 1]);

/* 0 when t is 64 hex characters; else DT_EINVAL saying what a token is,
 * naming `where` it came from ("DTRAIN_JOB_TOKEN", a file path, ...). */
int dt_token_check(const char *t, const char *where);

/* The token in the first line of the file at `path`, checked.  The file
 * must be a regular file that neither group nor others may read (a token
 * anyone can read protects nothing): otherwise DT_EINVAL with a sentence
 * saying to run chmod 600 on it.  One exception, in a Kubernetes pod: a
 * Secret the kubelet made readable by the pod's fsGroup (owned by root or
 * this user, writable by nobody, its group one of this process's), so a
 * container that does not run as root reads it (token.c says why that
 * group is the pod's own). */
int dt_token_from_file(const char *path, char out[DT_TOKEN_LEN + 1]);

/* The token an agent was given: DTRAIN_JOB_TOKEN, else the file
 * DTRAIN_JOB_TOKEN_FILE names (read by dt_token_from_file).  *found is false
 * (and out "") when neither variable is set; that is not an error here. */
int dt_token_from_env(char out[DT_TOKEN_LEN + 1], bool *found);

#endif
