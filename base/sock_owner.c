/* sock_owner.c - who holds the client's end of a TCP connection of this
 * host (sock_owner.h).
 *
 * The lookup is exact (no NLM_F_DUMP): the kernel finds the one socket with
 * the connection's addresses and ports, the client's as the source, in this
 * network namespace, and answers with its uid and inode, or with nothing.
 * Not for deciding anything by itself: the caller says what an owner may do.
 */
#include "base/sock_owner.h"

#include <dirent.h>
#include <inttypes.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* sock_diag wants the client's end: its address as the source. */
static bool diag_id(struct inet_diag_req_v2 *q, const struct sockaddr_storage *peer,
                    const struct sockaddr_storage *me)
{
    const struct sockaddr_in6 *p6 = (const void *)peer, *m6 = (const void *)me;
    if (peer->ss_family == AF_INET && me->ss_family == AF_INET) {
        const struct sockaddr_in *p4 = (const void *)peer, *m4 = (const void *)me;
        q->sdiag_family = AF_INET;
        q->id.idiag_sport = p4->sin_port;
        q->id.idiag_dport = m4->sin_port;
        memcpy(q->id.idiag_src, &p4->sin_addr, 4);
        memcpy(q->id.idiag_dst, &m4->sin_addr, 4);
        return true;
    }
    if (peer->ss_family != AF_INET6 || me->ss_family != AF_INET6)
        return false;
    q->id.idiag_sport = p6->sin6_port;
    q->id.idiag_dport = m6->sin6_port;
    /* A v4 client of a dual-stack listener has an AF_INET socket. */
    bool mapped = IN6_IS_ADDR_V4MAPPED(&p6->sin6_addr) && IN6_IS_ADDR_V4MAPPED(&m6->sin6_addr);
    q->sdiag_family = mapped ? AF_INET : AF_INET6;
    memcpy(q->id.idiag_src, mapped ? &p6->sin6_addr.s6_addr[12] : (const void *)&p6->sin6_addr,
           mapped ? 4 : 16);
    memcpy(q->id.idiag_dst, mapped ? &m6->sin6_addr.s6_addr[12] : (const void *)&m6->sin6_addr,
           mapped ? 4 : 16);
    return true;
}

bool dt_sock_owner(int fd, uint32_t *uid, uint32_t *ino)
{
    struct sockaddr_storage me, peer;
    socklen_t ml = sizeof me, pl = sizeof peer;
    if (getsockname(fd, (struct sockaddr *)&me, &ml) || getpeername(fd, (struct sockaddr *)&peer, &pl))
        return false;
    struct {
        struct nlmsghdr nh;
        struct inet_diag_req_v2 r;
    } q;
    memset(&q, 0, sizeof q);
    q.nh.nlmsg_len = sizeof q;
    q.nh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
    q.nh.nlmsg_flags = NLM_F_REQUEST; /* no NLM_F_DUMP: one exact lookup */
    q.r.sdiag_protocol = IPPROTO_TCP;
    q.r.idiag_states = ~0u;
    q.r.id.idiag_cookie[0] = q.r.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
    if (!diag_id(&q.r, &peer, &me))
        return false;
    int nl = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    if (nl < 0)
        return false;
    union {
        struct nlmsghdr nh;
        char b[1024];
    } a;
    /* The kernel answers within send(): the reply is queued when it returns. */
    ssize_t n = send(nl, &q, sizeof q, 0) == (ssize_t)sizeof q ? recv(nl, &a, sizeof a, MSG_DONTWAIT) : -1;
    close(nl);
    if (n < (ssize_t)NLMSG_LENGTH(sizeof(struct inet_diag_msg)) || a.nh.nlmsg_type != SOCK_DIAG_BY_FAMILY)
        return false;
    const struct inet_diag_msg *m = NLMSG_DATA(&a.nh);
    if (m->idiag_state == TCP_LISTEN || m->idiag_inode == 0)
        return false;
    *uid = m->idiag_uid;
    *ino = m->idiag_inode;
    return true;
}

bool dt_sock_held_by(pid_t pid, uint32_t ino)
{
    char path[64], want[40], got[40];
    snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
    int wn = snprintf(want, sizeof want, "socket:[%" PRIu32 "]", ino);
    DIR *d = opendir(path);
    if (!d)
        return false;
    bool found = false;
    struct dirent *de;
    while (!found && (de = readdir(d)) != NULL) {
        ssize_t k = de->d_name[0] == '.' ? -1 : readlinkat(dirfd(d), de->d_name, got, sizeof got);
        found = k == wn && memcmp(got, want, (size_t)wn) == 0;
    }
    closedir(d);
    return found;
}

/* Appends the children of every thread of `pid` (a child belongs to the
 * thread that forked it). */
static size_t add_children(pid_t pid, pid_t *list, size_t n)
{
    char path[96];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    if (!d)
        return n;
    struct dirent *de;
    while (n < DT_SOCK_TREE_MAX && (de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "/proc/%d/task/%.20s/children", (int)pid, de->d_name);
        FILE *f = fopen(path, "re");
        long child;
        while (f && n < DT_SOCK_TREE_MAX && fscanf(f, "%ld", &child) == 1)
            list[n++] = (pid_t)child;
        if (f)
            fclose(f);
    }
    closedir(d);
    return n;
}

bool dt_sock_held_below(pid_t root, uint32_t ino, pid_t *holder)
{
    pid_t *list = malloc(DT_SOCK_TREE_MAX * sizeof *list);
    if (!list)
        return false;
    size_t n = add_children(root, list, 0);
    bool found = false;
    size_t i = 0;
    for (; i < n && !found; i++) {
        found = dt_sock_held_by(list[i], ino);
        if (!found)
            n = add_children(list[i], list, n);
    }
    if (found && holder)
        *holder = list[i - 1];
    free(list);
    return found;
}

pid_t dt_sock_holder(uint32_t ino)
{
    DIR *d = opendir("/proc");
    if (!d)
        return -1;
    pid_t found = -1;
    struct dirent *de;
    while (found < 0 && (de = readdir(d)) != NULL) {
        char *end;
        long pid = strtol(de->d_name, &end, 10);
        if (*end == 0 && pid > 0 && dt_sock_held_by((pid_t)pid, ino))
            found = (pid_t)pid;
    }
    closedir(d);
    return found;
}
