/* hostlist.h - dtrain's own parser of Slurm hostlist expressions (SLURM_JOB_NODELIST).
 *
 * A hostlist is host expressions separated by commas; each is literal text
 * and bracket groups, a group being a comma list of numbers and ranges:
 *
 *   node[01-04,07]         node01 node02 node03 node04 node07   (the low bound's width pads)
 *   a[1-2],b,c[008-010]    a1 a2 b c008 c009 c010
 *   rack[0-1]_blade[0-1]   rack0_blade0 rack0_blade1 rack1_blade0 rack1_blade1
 *   gpu[1-2]-ib            gpu1-ib gpu2-ib
 *
 * Hosts come out in the order Slurm gives them (SLURM_NODEID order), so the
 * first host is node 0.  Malformed input is an error naming the column and
 * what is wrong; nothing is guessed.  Agents need no `scontrol` in the job.
 *
 * Not for compressing host names back into an expression, or for resolving them.
 */
#ifndef DT_HOSTLIST_H
#define DT_HOSTLIST_H

#include <stddef.h>

#define DT_HOSTLIST_NAME_MAX 255    /* a host name longer than this is an error */
#define DT_HOSTLIST_MAX_HOSTS 65536 /* more hosts than this is an error (no job is that large) */

struct dt_hostlist {
    char **hosts; /* n names, each malloc'd */
    int n;
};

/* Expands expr into out (zeroed on entry; free it with dt_hostlist_free).
 * Returns 0, or DT_EINVAL with "hostlist \"...\": column C: <what>", or DT_ENOMEM. */
int dt_hostlist_expand(const char *expr, struct dt_hostlist *out);
void dt_hostlist_free(struct dt_hostlist *hl);

/* The index-th host (0-based) of expr into out; an index past the end is
 * DT_EINVAL naming how many hosts there are. */
int dt_hostlist_nth(const char *expr, int index, char *out, size_t size);

#endif
