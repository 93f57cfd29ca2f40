/* test_resolve.c - the DTRAIN_HOSTS_FILE override: listed names win over the
 * system, other names still resolve, bad files are named with their line, and
 * the store client reaches a coordinator through a name only the file knows. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "comm/resolve.h"
#include "comm/store.h"
#include "launcher/coordinator/coordinator.h"
#include "spec/token.h"

static char path[64];

static void write_hosts(const char *text)
{
    snprintf(path, sizeof path, "/tmp/dtrain-hosts.XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    setenv("DTRAIN_HOSTS_FILE", path, 1);
}

static int cleanup(void **state)
{
    (void)state;
    unsetenv("DTRAIN_HOSTS_FILE");
    if (path[0])
        unlink(path);
    path[0] = 0;
    return 0;
}

/* The first address dt_resolve gives for host, as text ("" on failure). */
static int first_addr(const char *host, int family, char *out, size_t n)
{
    struct addrinfo hints = {.ai_family = family, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int g = dt_resolve(host, "29500", &hints, &res);
    out[0] = 0;
    if (g)
        return g;
    if (res->ai_family == AF_INET) {
        const struct sockaddr_in *a = (const void *)res->ai_addr;
        inet_ntop(AF_INET, &a->sin_addr, out, (socklen_t)n);
        assert_int_equal(ntohs(a->sin_port), 29500);
    } else {
        const struct sockaddr_in6 *a = (const void *)res->ai_addr;
        inet_ntop(AF_INET6, &a->sin6_addr, out, (socklen_t)n);
    }
    freeaddrinfo(res);
    return 0;
}

static void listed_names_and_aliases_win(void **state)
{
    (void)state;
    write_hosts("# pods of job fmnist\n"
                "127.0.0.7   fmnist-0.fmnist  fmnist-0   # node 0\n"
                "\n"
                "  127.0.0.8\tfmnist-1.fmnist\n"
                "::1 six.example\n");
    char a[64];
    assert_int_equal(first_addr("fmnist-0.fmnist", AF_UNSPEC, a, sizeof a), 0);
    assert_string_equal(a, "127.0.0.7");
    assert_int_equal(first_addr("FMNIST-0", AF_UNSPEC, a, sizeof a), 0);
    assert_string_equal(a, "127.0.0.7");
    assert_int_equal(first_addr("fmnist-1.fmnist", AF_INET, a, sizeof a), 0);
    assert_string_equal(a, "127.0.0.8");
    assert_int_equal(first_addr("six.example", AF_UNSPEC, a, sizeof a), 0);
    assert_string_equal(a, "::1");
    /* A name that only looks like a listed one is not it. */
    char found[64];
    assert_int_equal(dt_resolve_hosts_file(path, "fmnist-0.fmnist.default", found, sizeof found), 0);
    assert_int_equal(dt_resolve_hosts_file(path, "fmnist-1.fmnist", found, sizeof found), 1);
    assert_string_equal(found, "127.0.0.8");
}

static void other_names_go_to_the_system(void **state)
{
    (void)state;
    write_hosts("127.0.0.7 only-here\n");
    char a[64];
    assert_int_equal(first_addr("127.0.0.9", AF_INET, a, sizeof a), 0);
    assert_string_equal(a, "127.0.0.9");
    assert_int_equal(first_addr("localhost", AF_INET, a, sizeof a), 0);
    assert_string_equal(a, "127.0.0.1");
    unsetenv("DTRAIN_HOSTS_FILE");
    assert_int_equal(first_addr("127.0.0.5", AF_INET, a, sizeof a), 0);
    assert_string_equal(a, "127.0.0.5");
}

static void missing_file_is_named(void **state)
{
    (void)state;
    setenv("DTRAIN_HOSTS_FILE", "/nonexistent/dtrain-hosts", 1);
    char a[64];
    int g = first_addr("x", AF_UNSPEC, a, sizeof a);
    assert_int_equal(g, EAI_SYSTEM);
    const char *msg = dt_resolve_strerror(g);
    assert_non_null(strstr(msg, "DTRAIN_HOSTS_FILE names '/nonexistent/dtrain-hosts'"));
    assert_non_null(strstr(msg, "No such file"));
}

static void bad_line_is_named(void **state)
{
    (void)state;
    write_hosts("127.0.0.1 ok\nfmnist-0 127.0.0.1\n");
    char a[64];
    int g = first_addr("nothere", AF_UNSPEC, a, sizeof a);
    assert_int_equal(g, EAI_SYSTEM);
    char want[128];
    snprintf(want, sizeof want, "%s:2: 'fmnist-0' is not an IPv4 or IPv6 address", path);
    assert_non_null(strstr(dt_resolve_strerror(g), want));
    /* The store client passes the sentence on: "cannot resolve 'x': <file>:2: ..." */
    struct dt_store *s = NULL;
    struct dt_store_options o = {.host = "nothere", .port = 1, .timeout_s = 1};
    assert_int_equal(dt_store_connect(&o, &s), DT_ECONN);
    assert_non_null(strstr(dt_error_last(), "cannot resolve 'nothere'"));
    assert_non_null(strstr(dt_error_last(), want));
}

/* The hook in the store client: a coordinator reached by a name that only
 * the hosts file knows, as a pod reaches <job>-0.<service>. */
static void store_client_uses_the_override(void **state)
{
    (void)state;
    char token[65];
    struct dt_coord *c = NULL;
    assert_int_equal(dt_token_make(token), 0);
    struct dt_coord_config cfg = {.bind_host = "127.0.0.1", .token = token};
    assert_int_equal(dt_coord_start(&cfg, &c), 0);
    write_hosts("127.0.0.1 fmnist-0.fmnist.invalid\n");
    struct dt_store *s = NULL;
    struct dt_store_options o = {.host = "fmnist-0.fmnist.invalid", .port = dt_coord_port(c),
                                 .token = token, .timeout_s = 5};
    assert_int_equal(dt_store_connect(&o, &s), 0);
    assert_int_equal(dt_store_set(s, "k", "v", 1), 0);
    dt_store_close(s);
    dt_coord_stop(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(listed_names_and_aliases_win, cleanup),
        cmocka_unit_test_teardown(other_names_go_to_the_system, cleanup),
        cmocka_unit_test_teardown(missing_file_is_named, cleanup),
        cmocka_unit_test_teardown(bad_line_is_named, cleanup),
        cmocka_unit_test_teardown(store_client_uses_the_override, cleanup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
