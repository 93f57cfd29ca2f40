/* resolve.c - getaddrinfo with the DTRAIN_HOSTS_FILE override (see resolve.h).
 *
 * The file is read on every call: it is small, lookups happen a handful of
 * times per process (connecting to the coordinator), and a test may write it
 * while agents are already waiting for a name, as cluster DNS learns a pod's
 * address only once the pod is running.
 *
 * Not for caching, reverse lookups or anything /etc/nsswitch.conf configures.
 */
#include "comm/resolve.h"

#include "base/error.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define HOSTS_FILE_ENV "DTRAIN_HOSTS_FILE"

static int is_address(const char *s)
{
    unsigned char buf[sizeof(struct in6_addr)];
    return inet_pton(AF_INET, s, buf) == 1 || inet_pton(AF_INET6, s, buf) == 1;
}

/* One line of the file: 1 and addr set when it names `name`, 0 otherwise,
 * DT_EINVAL for a line whose first field is not an address. */
static int match_line(char *line, const char *path, int lineno, const char *name, char *addr,
                      size_t addr_size)
{
    char *hash = strchr(line, '#');
    if (hash)
        *hash = 0;
    char *save = NULL;
    const char *first = strtok_r(line, " \t\r\n", &save);
    if (!first)
        return 0;
    if (!is_address(first))
        return dt_error_set(DT_EINVAL, "%s:%d: '%.64s' is not an IPv4 or IPv6 address (%s lines are "
                                       "\"ADDRESS NAME [ALIASES...]\", as in /etc/hosts)",
                            path, lineno, first, HOSTS_FILE_ENV);
    for (const char *n = strtok_r(NULL, " \t\r\n", &save); n; n = strtok_r(NULL, " \t\r\n", &save)) {
        if (strcasecmp(n, name) == 0) {
            if (strlen(first) >= addr_size)
                return dt_error_set(DT_EINVAL, "%s:%d: address '%s' is too long", path, lineno, first);
            memcpy(addr, first, strlen(first) + 1);
            return 1;
        }
    }
    return 0;
}

int dt_resolve_hosts_file(const char *path, const char *name, char *addr, size_t addr_size)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return dt_error_set_errno(errno == ENOENT ? DT_ENOTFOUND : DT_EIO, errno,
                                  "%s names '%s', which cannot be read", HOSTS_FILE_ENV, path);
    char *line = NULL;
    size_t cap = 0;
    int lineno = 0, rc = 0;
    while (rc == 0 && getline(&line, &cap, f) >= 0)
        rc = match_line(line, path, ++lineno, name, addr, addr_size);
    if (rc == 0 && ferror(f))
        rc = dt_error_set(DT_EIO, "reading %s '%s' failed", HOSTS_FILE_ENV, path);
    free(line);
    fclose(f);
    return rc;
}

int dt_resolve(const char *host, const char *service, const struct addrinfo *hints, struct addrinfo **res)
{
    const char *path = getenv(HOSTS_FILE_ENV);
    char addr[INET6_ADDRSTRLEN + 1];
    struct addrinfo h = {0};
    if (hints)
        h = *hints;
    if (host && path && *path) {
        int rc = dt_resolve_hosts_file(path, host, addr, sizeof addr);
        if (rc < 0) {
            errno = EINVAL;
            return EAI_SYSTEM;
        }
        if (rc == 1) {
            host = addr;
            h.ai_flags |= AI_NUMERICHOST;
        }
    }
    int g = getaddrinfo(host, service, &h, res);
    if (g == EAI_SYSTEM) /* so dt_resolve_strerror() never shows an older message */
        dt_error_set_errno(DT_EIO, errno, "resolving '%s'", host ? host : "");
    return g;
}

const char *dt_resolve_strerror(int code)
{
    /* A copy, so callers may pass it straight to dt_error_set(), which
     * overwrites the message it came from. */
    static _Thread_local char copy[512];
    if (code == EAI_SYSTEM) {
        snprintf(copy, sizeof copy, "%s", dt_error_last());
        return copy;
    }
    return gai_strerror(code);
}
