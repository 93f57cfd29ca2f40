/* sock_owner.h - the kernel's word on who is at the other end of a TCP
 * connection of this host: the owner (uid) and inode of the client's socket,
 * and which process holds that socket open.
 *
 * SO_PEERCRED answers only for Unix sockets; for TCP the kernel answers an
 * exact NETLINK_SOCK_DIAG lookup of the connection's four-tuple with the
 * client socket's uid and inode (found only when the client is a socket of
 * this host and network namespace), and /proc/<pid>/fd names the process
 * that holds that inode.  A node's store endpoint (launcher/agent/
 * agent_endpoint.c) admits a connection only when the holder is a process of
 * the job: a descendant of the agent, which forks every rank; the
 * coordinator (launcher/coordinator/coord_gate.c) counts a refused client
 * against the job only when it is one.
 *
 * Not for sockets of other hosts (there is no answer for them: the lookup
 * fails and the caller refuses), nor for Unix sockets.
 */
#ifndef DT_SOCK_OWNER_H
#define DT_SOCK_OWNER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* For the connected socket `fd` (the server's end): the uid owning the
 * client's end and its inode.  False when the client is not a socket of this
 * host and network namespace, or the kernel has no sock_diag. */
bool dt_sock_owner(int fd, uint32_t *uid, uint32_t *ino);

/* Whether process `pid` holds socket inode `ino` open. */
bool dt_sock_held_by(pid_t pid, uint32_t ino);

/* Most processes a tree walk looks at: a job's tree is far smaller. */
#define DT_SOCK_TREE_MAX 4096

/* Whether a descendant of `root` (children, their children, ..., not root
 * itself) holds socket inode `ino` open; its pid in *holder (may be NULL).
 * The walk reads /proc/<pid>/task/<tid>/children and each process's fd
 * directory, so it costs the tree's processes and descriptors, not the
 * host's. */
bool dt_sock_held_below(pid_t root, uint32_t ino, pid_t *holder);

/* Any process of this host that holds socket inode `ino` and whose fd
 * directory we may read, or -1: a scan of all of /proc, for naming a
 * refused client in a message, not for deciding. */
pid_t dt_sock_holder(uint32_t ino);

#endif
