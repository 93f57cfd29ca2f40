/* tbevents.c - TensorBoard event files (see tbevents.h).
 *
 * TFRecord framing, all integers little-endian:
 *   uint64 length | uint32 masked_crc32c(the 8 length bytes) | data[length] | uint32 masked_crc32c(data)
 *
 * data is a protobuf Event (tensorboard/compat/proto/event.proto), encoded by
 * hand.  A field starts with the key byte (field_number << 3 | wire_type);
 * wire type 0 = varint, 1 = 64-bit, 2 = length-delimited, 5 = 32-bit:
 *   Event   wall_time = 1 double  -> 0x09 + 8 bytes
 *           step      = 2 int64   -> 0x10 + varint
 *           file_version = 3 string -> 0x1a + varint length + bytes
 *           summary   = 5 Summary -> 0x2a + varint length + Summary
 *   Summary value     = 1 Value   -> 0x0a + varint length + Value
 *   Value   tag       = 1 string  -> 0x0a + varint length + bytes
 *           simple_value = 2 float -> 0x15 + 4 bytes
 * Zero-valued scalars are left out, as proto3 serializers do, so the bytes
 * equal google.protobuf's for the same message (trainer.md §9.2 has vectors).
 *
 * Not for reading event files back: tests use TensorBoard's own reader.
 */
#include "worker/tbevents.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"
#include "base/crc32c.h"
#include "base/clock.h"

#define BUF_SIZE (64 * 1024)
/* Largest record: 16 framing bytes + Event of at most 9 + 11 + 1 + 2 + 1 + 2 + (1 + 2 + tag + 5). */
#define MAX_RECORD (16 + 40 + DT_TB_MAX_TAG)

struct dt_tb_writer {
    int fd;
    int error;            /* first failure; sticky, so a full disk is reported once and clearly */
    double flush_secs, last_write;
    size_t len;
    unsigned char buf[BUF_SIZE];
    char path[4096];
};

/* ---- protobuf and framing primitives; each returns the new end pointer ---- */

static unsigned char *put_varint(unsigned char *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    *p++ = (unsigned char)v;
    return p;
}

static size_t varint_len(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static unsigned char *put_le(unsigned char *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        *p++ = (unsigned char)(v >> (8 * i));
    return p;
}

static unsigned char *put_double(unsigned char *p, double d)
{
    uint64_t bits;
    memcpy(&bits, &d, sizeof bits);
    return put_le(p, bits, 8);
}

static unsigned char *put_bytes(unsigned char *p, const void *s, size_t n)
{
    memcpy(p, s, n);
    return p + n;
}

/* Frames the Event already encoded at rec + 12 (len bytes) in place. */
static size_t frame(unsigned char *rec, size_t len)
{
    put_le(rec, len, 8);
    put_le(rec + 8, dt_crc32c_mask(dt_crc32c(0, rec, 8)), 4);
    put_le(rec + 12 + len, dt_crc32c_mask(dt_crc32c(0, rec + 12, len)), 4);
    return 16 + len;
}

/* Event head shared by every record: wall_time and (if not 0) step. */
static unsigned char *put_event_head(unsigned char *p, double wall_time, int64_t step)
{
    if (wall_time != 0) {
        *p++ = 0x09;
        p = put_double(p, wall_time);
    }
    if (step != 0) {
        *p++ = 0x10;
        p = put_varint(p, (uint64_t)step);
    }
    return p;
}

/* ---- buffer ---- */

static int write_all(struct dt_tb_writer *w, const unsigned char *p, size_t n)
{
    while (n > 0) {
        ssize_t k = write(w->fd, p, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return w->error = dt_error_set_errno(DT_EIO, errno, "writing %s", w->path);
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

int dt_tb_flush(struct dt_tb_writer *w)
{
    if (!w)
        return 0;
    if (w->error)
        return dt_error_set(w->error, "%s: an earlier write failed", w->path);
    int rc = w->len ? write_all(w, w->buf, w->len) : 0;
    w->len = 0;
    w->last_write = dt_clock_s();
    return rc;
}

/* Room for one more record, flushing first if the buffer is too full. */
static int reserve(struct dt_tb_writer *w)
{
    if (w->error)
        return dt_error_set(w->error, "%s: an earlier write failed", w->path);
    return w->len + MAX_RECORD > BUF_SIZE ? dt_tb_flush(w) : 0;
}

static int file_version(struct dt_tb_writer *w, double wall_time)
{
    static const char version[] = "brain.Event:2";
    unsigned char *rec = w->buf + w->len, *p = rec + 12;
    p = put_event_head(p, wall_time, 0);
    *p++ = 0x1a;
    p = put_varint(p, sizeof version - 1);
    p = put_bytes(p, version, sizeof version - 1);
    w->len += frame(rec, (size_t)(p - rec - 12));
    return dt_tb_flush(w);
}

int dt_tb_scalar_at(struct dt_tb_writer *w, const char *tag, int64_t step, float value, double wall_time)
{
    size_t tag_len = strlen(tag);
    if (tag_len == 0 || tag_len > DT_TB_MAX_TAG)
        return dt_error_set(DT_EINVAL, "TensorBoard tag of %zu bytes (1 to %d allowed)", tag_len, DT_TB_MAX_TAG);
    int rc = reserve(w);
    if (rc)
        return rc;
    size_t value_len = 1 + varint_len(tag_len) + tag_len + 5;
    size_t summary_len = 1 + varint_len(value_len) + value_len;
    unsigned char *rec = w->buf + w->len, *p = rec + 12;
    uint32_t vbits;
    memcpy(&vbits, &value, sizeof vbits);
    p = put_event_head(p, wall_time, step);
    *p++ = 0x2a; /* Event.summary */
    p = put_varint(p, summary_len);
    *p++ = 0x0a; /* Summary.value */
    p = put_varint(p, value_len);
    *p++ = 0x0a; /* Value.tag */
    p = put_varint(p, tag_len);
    p = put_bytes(p, tag, tag_len);
    *p++ = 0x15; /* Value.simple_value */
    p = put_le(p, vbits, 4);
    w->len += frame(rec, (size_t)(p - rec - 12));
    if (dt_clock_s() - w->last_write >= w->flush_secs)
        return dt_tb_flush(w);
    return 0;
}

int dt_tb_scalar(struct dt_tb_writer *w, const char *tag, int64_t step, float value)
{
    return dt_tb_scalar_at(w, tag, step, value, dt_clock_wall_s());
}

int dt_tb_scalars(struct dt_tb_writer *w, int64_t step, const char *const *tags, const double *values, int n)
{
    if (!w)
        return 0;
    double now = dt_clock_wall_s();
    for (int i = 0; i < n; i++) {
        int rc = isfinite(values[i]) ? dt_tb_scalar_at(w, tags[i], step, (float)values[i], now) : 0;
        if (rc)
            return rc;
    }
    return 0;
}

/* ---- files ---- */

static int open_at(const char *path, int flags, double wall_time, struct dt_tb_writer **out)
{
    struct dt_tb_writer *w = calloc(1, sizeof *w);
    if (!w)
        return dt_error_set(DT_ENOMEM, "no memory for a TensorBoard writer");
    snprintf(w->path, sizeof w->path, "%s", path);
    w->flush_secs = 10;
    /* The name is predictable (time and host): a symlink there is refused, not followed. */
    w->fd = open(path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | flags, 0644);
    if (w->fd < 0) {
        int e = errno;
        free(w);
        return e == EEXIST ? DT_ENOTFOUND /* caller tries the next name */
                           : dt_error_set_errno(DT_EIO, e, "cannot create %s", path);
    }
    int rc = file_version(w, wall_time);
    if (rc) {
        close(w->fd);
        free(w);
        return rc;
    }
    *out = w;
    return 0;
}

int dt_tb_open_file(const char *path, double wall_time, struct dt_tb_writer **out)
{
    return open_at(path, O_TRUNC, wall_time, out);
}

int dt_tb_open(const char *dir, struct dt_tb_writer **out)
{
    char host[256] = "localhost", path[4096];
    double now = dt_clock_wall_s();
    if (gethostname(host, sizeof host - 1) != 0)
        snprintf(host, sizeof host, "localhost");
    for (int n = 0; n < 100; n++) {
        int len = snprintf(path, sizeof path, "%s/events.out.tfevents.%010lld.%s", dir, (long long)now, host);
        if (n > 0)
            len += snprintf(path + len, sizeof path - (size_t)len, ".%d", n);
        if (len >= (int)sizeof path)
            return dt_error_set(DT_EINVAL, "event file path in %s is too long", dir);
        int rc = open_at(path, O_EXCL, now, out);
        if (rc != DT_ENOTFOUND)
            return rc;
    }
    return dt_error_set(DT_EIO, "%s: 100 event files for this second already exist", dir);
}

const char *dt_tb_path(const struct dt_tb_writer *w)
{
    return w->path;
}

void dt_tb_set_flush_secs(struct dt_tb_writer *w, double secs)
{
    w->flush_secs = secs;
}

int dt_tb_close(struct dt_tb_writer *w)
{
    if (!w)
        return 0;
    int rc = w->error ? w->error : dt_tb_flush(w);
    if (close(w->fd) != 0 && !rc)
        rc = dt_error_set_errno(DT_EIO, errno, "closing %s", w->path);
    free(w);
    return rc;
}
