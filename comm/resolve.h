/* resolve.h - name resolution with a hosts override that dtrain reads itself.
 *
 * DTRAIN_HOSTS_FILE names a file in /etc/hosts format ("ADDRESS NAME
 * [ALIASES...]", '#' starts a comment).  A name listed there resolves to its
 * address without asking the system; any other name goes to getaddrinfo(3) as
 * usual.  This lets a test stand in for cluster DNS without root: the
 * Kubernetes simulation maps each pod's name (<job>-0.<service>) to loopback,
 * the way the cluster's DNS maps it to the pod's IP.
 *
 * Not for reverse lookups, service names or search domains: names match the
 * file exactly (case-insensitively, as DNS names do).
 */
#ifndef DT_RESOLVE_H
#define DT_RESOLVE_H

#include <netdb.h>

/* getaddrinfo(3) with the override first: returns 0 or an EAI_* code.  A
 * DTRAIN_HOSTS_FILE that cannot be read, or has a line whose address is not
 * an IPv4/IPv6 address, gives EAI_SYSTEM with dt_error_last() saying which
 * file and line.  Free *res with freeaddrinfo(). */
int dt_resolve(const char *host, const char *service, const struct addrinfo *hints, struct addrinfo **res);

/* A sentence for a dt_resolve() result: a copy of dt_error_last() for
 * EAI_SYSTEM (safe to pass to dt_error_set()), gai_strerror() otherwise. */
const char *dt_resolve_strerror(int code);

/* Looks `name` up in the hosts file at `path` only: 1 and the address
 * copied to addr (addr_size bytes), 0 when the file does not list it, or a
 * negative DT_E* code for a file that cannot be read or a bad line. */
int dt_resolve_hosts_file(const char *path, const char *name, char *addr, size_t addr_size);

#endif
