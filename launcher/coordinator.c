/* coordinator.c - starting and stopping the coordinator, its loop thread, the job token.
 *
 * dt_coord_start binds and listens on the caller's thread, so a port in use
 * or a bad address is an error the caller sees at once, then hands the loop
 * to a thread of its own.  dt_coord_stop wakes the loop through an async
 * handle; the loop closes every handle (each freed in its close callback),
 * uv_run returns, and the thread is joined before anything else is freed.
 *
 * Limits (struct dt_coord_config, 0 means the default):
 *   max_frame_bytes  64 MiB  one request
 *   max_key_bytes     8 KiB  one key, barrier name or token (as PyTorch's libuv server)
 *   max_value_bytes   8 MiB  one value (as PyTorch's libuv server)
 *   max_total_bytes   1 GiB  all keys and values, 64 bytes counted per key on top
 * A client that passes one is disconnected with a log line naming the limit.
 *
 * Not for serving requests (coordinator_ops.c) or connections (coordinator_conn.c).
 */
#include "launcher/coordinator_internal.h"
#include "spec/token.h"

#include "base/error.h"
#include "base/log.h"

#include <ctype.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#define DEFAULT_MAX_TOTAL ((size_t)1 << 30)
#define DEFAULT_MAX_WRITE_QUEUE ((size_t)256 << 20)

const char *coord_key_str(const uint8_t *key, size_t len, char buf[80])
{
    size_t n = len < 64 ? len : 64;
    for (size_t i = 0; i < n; i++)
        buf[i] = isprint(key[i]) && key[i] != '\'' ? (char)key[i] : '?';
    strcpy(buf + n, len > 64 ? "..." : "");
    return buf;
}

static void on_stop(uv_async_t *a)
{
    struct dt_coord *c = a->data;
    c->stopping = true;
    coord_close_all(c);
    uv_close((uv_handle_t *)&c->listener, NULL);
    uv_close((uv_handle_t *)&c->stop_async, NULL);
}

static void loop_main(void *arg)
{
    struct dt_coord *c = arg;
    uv_run(&c->loop, UV_RUN_DEFAULT);
}

static int resolve(const char *host, int port, struct sockaddr_storage *ss)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    struct addrinfo *res = NULL;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    int rc = getaddrinfo(host, ps, &hints, &res);
    if (rc != 0)
        return dt_error_set(DT_EINVAL, "coordinator address '%s': %s", host, gai_strerror(rc));
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    return 0;
}

static void apply_limits(struct dt_coord *c, const struct dt_coord_config *cfg)
{
    c->lim.max_frame_bytes = cfg->max_frame_bytes ? cfg->max_frame_bytes : DT_WIRE_DEFAULT_MAX_FRAME;
    c->lim.max_key_bytes = cfg->max_key_bytes ? cfg->max_key_bytes : DT_WIRE_DEFAULT_MAX_KEY;
    c->lim.max_value_bytes = cfg->max_value_bytes ? cfg->max_value_bytes : DT_WIRE_DEFAULT_MAX_VALUE;
    c->lim.max_keys = DT_WIRE_DEFAULT_MAX_KEYS;
    c->max_total_bytes = cfg->max_total_bytes ? cfg->max_total_bytes : DEFAULT_MAX_TOTAL;
    c->max_write_queue = DEFAULT_MAX_WRITE_QUEUE;
}

static void on_connection(uv_stream_t *server, int status)
{
    struct dt_coord *c = server->data;
    if (status < 0) {
        dt_log_warn("coordinator: accepting a connection failed: %s", uv_strerror(status));
        return;
    }
    if (coord_conn_accept(c) != 0)
        dt_log_warn("coordinator: %s", dt_error_last());
}

/* Everything up to listen(); on failure the caller unwinds with uv_close. */
static int bind_listen(struct dt_coord *c, const struct dt_coord_config *cfg)
{
    struct sockaddr_storage ss;
    const char *host = cfg->bind_host && *cfg->bind_host ? cfg->bind_host : "0.0.0.0";
    int rc = resolve(host, cfg->port, &ss);
    if (rc)
        return rc;
    int e = uv_tcp_bind(&c->listener, (const struct sockaddr *)&ss, 0);
    if (e == 0)
        e = uv_listen((uv_stream_t *)&c->listener, 65535, on_connection);
    if (e != 0)
        return dt_error_set(DT_EIO, "coordinator cannot listen on %s:%d: %s", host, cfg->port,
                            uv_strerror(e));
    struct sockaddr_storage got;
    int len = sizeof got;
    uv_tcp_getsockname(&c->listener, (struct sockaddr *)&got, &len);
    c->port = ntohs(got.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&got)->sin6_port
                                              : ((struct sockaddr_in *)&got)->sin_port);
    return 0;
}

static void unwind(struct dt_coord *c)
{
    uv_close((uv_handle_t *)&c->listener, NULL);
    uv_close((uv_handle_t *)&c->stop_async, NULL);
    uv_run(&c->loop, UV_RUN_DEFAULT);
    uv_loop_close(&c->loop);
    kv_free(&c->kv);
    pthread_mutex_destroy(&c->hb_lock);
    free(c->scratch);
    free(c);
}

int dt_coord_start(const struct dt_coord_config *cfg, struct dt_coord **out)
{
    *out = NULL;
    if (cfg->token && dt_token_check(cfg->token, "the coordinator's configuration") != 0)
        return DT_EINVAL;
    struct dt_coord *c = calloc(1, sizeof *c);
    if (c) {
        c->scratch_cap = (size_t)256 << 10;
        c->scratch = malloc(c->scratch_cap);
    }
    if (!c || !c->scratch || kv_init(&c->kv) != 0) {
        if (c)
            free(c->scratch);
        free(c);
        return dt_error_set(DT_ENOMEM, "coordinator: out of memory");
    }
    apply_limits(c, cfg);
    c->auth = cfg->token != NULL;
    if (c->auth)
        memcpy(c->token, cfg->token, 65);
    pthread_mutex_init(&c->hb_lock, NULL);
    uv_loop_init(&c->loop);
    uv_tcp_init(&c->loop, &c->listener);
    uv_async_init(&c->loop, &c->stop_async, on_stop);
    c->listener.data = c;
    c->stop_async.data = c;
    int rc = bind_listen(c, cfg);
    if (rc == 0 && uv_thread_create(&c->thread, loop_main, c) != 0)
        rc = dt_error_set(DT_EIO, "coordinator: cannot start its thread");
    if (rc) {
        unwind(c);
        return rc;
    }
    c->thread_started = true;
    if (!c->auth)
        dt_log_info("coordinator: auth: none - any client that reaches port %d may use the store",
                    c->port);
    *out = c;
    return 0;
}

int dt_coord_port(const struct dt_coord *c) { return c->port; }

int dt_coord_heartbeat(struct dt_coord *c, int rank, int64_t *step, double *when_s)
{
    int rc = DT_ENOTFOUND;
    pthread_mutex_lock(&c->hb_lock);
    if (rank >= 0 && (size_t)rank < c->hb_cap && c->hb[rank].seen) {
        *step = c->hb[rank].step;
        if (when_s)
            *when_s = c->hb[rank].when_s;
        rc = 0;
    }
    pthread_mutex_unlock(&c->hb_lock);
    if (rc)
        dt_error_set(rc, "rank %d has not sent a heartbeat", rank);
    return rc;
}

void dt_coord_stop(struct dt_coord *c)
{
    if (!c)
        return;
    uv_async_send(&c->stop_async);
    uv_thread_join(&c->thread);
    uv_loop_close(&c->loop);
    barrier_free_all(c);
    queue_free_all(c);
    member_free_all(c);
    kv_free(&c->kv);
    free(c->mget.keys);
    free(c->mget.reply);
    pthread_mutex_destroy(&c->hb_lock);
    free(c->hb);
    free(c->scratch);
    free(c);
}
