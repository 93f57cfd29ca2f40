/* fuzz_coord_preauth.c - libFuzzer target for the coordinator's gate, the
 * state machine every connection goes through before it has presented the
 * job token (launcher/coordinator/coord_gate.c).
 *
 * Feeds arbitrary bytes to dt_coord__gate_step the way coord_server.c does:
 * once as a single read, and once in pieces whose sizes come from the input
 * (a slow or adversarial sender), keeping the unused tail as the server
 * keeps it.  Checks that
 *   - both feedings take the same decisions (bytes used, reply, outcome);
 *   - a connection never buffers more than DT_COORD__PREAUTH_FRAME bytes
 *     before its handshake is finished, and the gate never asks for more;
 *   - only VALIDATE and AUTH are ever accepted, VALIDATE first;
 *   - the handshake finishes only when the input holds the job token.
 * Half the inputs run with auth: none (no token), where VALIDATE alone
 * finishes the handshake.
 *
 * Not a test of what authenticated requests do (fuzz_store_wire.c,
 * tests/unit/test_coordinator.c).
 */
#include "base/error.h"
#include "launcher/coordinator/coordinator_internal.h"

#include <stdlib.h>
#include <string.h>

static const char token[65] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/* One decision of the gate, to compare the two feedings. */
struct step {
    int rc; /* 0 or the error code (an incomplete request is not a decision) */
    size_t used;
    int reply;
};

#define MAX_STEPS 64

struct run {
    struct step steps[MAX_STEPS];
    int n;
    struct dt_coord__gate g;
};

static bool done(const struct dt_coord__gate *g)
{
    return g->validated && g->authed;
}

/* Serves requests from buf[0..len) until the gate needs more bytes, closes
 * the connection, or the handshake is done; returns the bytes used, or
 * SIZE_MAX once closed or done. */
static size_t serve(struct run *r, const char *tok, const uint8_t *buf, size_t len,
                    struct dt_wire_progress *pg)
{
    size_t off = 0;
    while (off < len && r->n < MAX_STEPS) {
        if (done(&r->g) && buf[off] != DT_WIRE_AUTH)
            return SIZE_MAX; /* the store's requests: not the gate's */
        if (pg->need > len - off)
            return off;
        bool validated = r->g.validated;
        struct step s = {.rc = 0};
        s.rc = dt_coord__gate_step(&r->g, tok, buf + off, len - off, pg, &s.used, &s.reply);
        if (s.rc == DT_WIRE_INCOMPLETE) {
            if (pg->need <= len - off || pg->need > DT_COORD__PREAUTH_FRAME)
                abort();
            return off;
        }
        r->steps[r->n++] = s;
        if (s.rc < 0)
            return SIZE_MAX;
        uint8_t op = buf[off];
        if (s.used == 0 || s.used > len - off || (op != DT_WIRE_VALIDATE && op != DT_WIRE_AUTH) ||
            (op == DT_WIRE_AUTH && !validated) || (op == DT_WIRE_VALIDATE && validated))
            abort();
        memset(pg, 0, sizeof *pg);
        off += s.used;
    }
    return r->n < MAX_STEPS ? off : SIZE_MAX;
}

static void whole(struct run *r, const char *tok, const uint8_t *data, size_t size)
{
    struct dt_wire_progress pg = {0};
    serve(r, tok, data, size, &pg);
}

/* Pieces of 1..16 bytes, sizes taken from the input's own bytes. */
static void pieces(struct run *r, const char *tok, const uint8_t *data, size_t size)
{
    uint8_t tail[DT_COORD__PREAUTH_FRAME + 16];
    size_t have = 0, at = 0;
    struct dt_wire_progress pg = {0};
    while (at < size) {
        size_t n = 1 + data[at] % 16;
        if (n > size - at)
            n = size - at;
        memcpy(tail + have, data + at, n);
        have += n;
        at += n;
        size_t used = serve(r, tok, tail, have, &pg);
        if (used == SIZE_MAX)
            return;
        memmove(tail, tail + used, have - used);
        have -= used;
        if (have >= DT_COORD__PREAUTH_FRAME) /* the server never keeps this much */
            abort();
    }
}

static bool same(const struct run *a, const struct run *b)
{
    if (a->n != b->n || a->g.validated != b->g.validated || a->g.authed != b->g.authed)
        return false;
    for (int i = 0; i < a->n; i++)
        if (a->steps[i].rc != b->steps[i].rc || a->steps[i].used != b->steps[i].used ||
            a->steps[i].reply != b->steps[i].reply)
            return false;
    return true;
}

static bool holds_token(const uint8_t *data, size_t size)
{
    return size >= 64 && memmem(data, size, token, 64) != NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    const char *tok = data[0] & 1 ? NULL : token;
    struct run a = {.g.authed = tok == NULL}, b = {.g.authed = tok == NULL};
    whole(&a, tok, data + 1, size - 1);
    pieces(&b, tok, data + 1, size - 1);
    if (!same(&a, &b))
        abort();
    if (tok && a.g.authed && !holds_token(data + 1, size - 1))
        abort();
    dt_error_clear();
    return 0;
}
