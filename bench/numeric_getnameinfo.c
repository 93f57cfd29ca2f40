/* numeric_getnameinfo.c - LD_PRELOAD shim for bench/rendezvous.sh: getnameinfo() answers numerically.
 *
 * PyTorch's libuv TCPStore server names every accepted peer with
 * getnameinfo() on its event-loop thread.  For "::ffff:127.0.0.1" that is a
 * reverse-DNS query to the machine's resolver, one per client, and a lost
 * query stalls the whole server for the resolver timeout (5 s here).  With
 * this shim the benchmark measures the store server, not the resolver, and
 * sends no DNS traffic.  Built by the benchmark (cc -shared); not part of dtrain.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <netdb.h>
#include <sys/socket.h>

typedef int (*gni_fn)(const struct sockaddr *, socklen_t, char *, socklen_t, char *, socklen_t, int);

int getnameinfo(const struct sockaddr *sa, socklen_t salen, char *host, socklen_t hostlen, char *serv,
                socklen_t servlen, int flags)
{
    static gni_fn real;
    if (!real)
        real = (gni_fn)dlsym(RTLD_NEXT, "getnameinfo");
    return real(sa, salen, host, hostlen, serv, servlen, flags | NI_NUMERICHOST | NI_NUMERICSERV);
}
