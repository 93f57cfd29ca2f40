/* test_safetensors.c - the safetensors writer byte for byte against the
 * reference implementation's vectors, and the reader's refusals, among them
 * the inputs tests/fuzz/fuzz_safetensors.c found. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "worker/safetensors.h"

/* Writes entries to a temp file and returns its bytes (malloc'd). */
static uint8_t *write_mem(const struct dt_st_entry *e, int n, const char *const *meta, int n_meta, size_t *len)
{
    char path[] = "/tmp/dtrain-st-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(dt_safetensors_write_fd(fd, path, e, n, meta, n_meta), 0);
    off_t size = lseek(fd, 0, SEEK_END);
    uint8_t *buf = malloc((size_t)size);
    assert_int_equal(pread(fd, buf, (size_t)size, 0), size);
    close(fd);
    unlink(path);
    *len = (size_t)size;
    return buf;
}

static void reference_vectors(void **state)
{
    (void)state;
    /* safetensors/src/tensor.rs: "attn.0", F32 [1,2,3], 0..5 -> 64-byte header, 96-byte file. */
    float v[6] = {0, 1, 2, 3, 4, 5};
    struct dt_st_entry e = {"attn.0", "F32", 3, {1, 2, 3}, v};
    size_t len;
    uint8_t *b = write_mem(&e, 1, NULL, 0, &len);
    const char *hdr = "{\"attn.0\":{\"dtype\":\"F32\",\"shape\":[1,2,3],\"data_offsets\":[0,24]}}";
    assert_int_equal(len, 96);
    assert_int_equal(b[0], 64);
    assert_memory_equal(b + 8, hdr, 64);
    assert_memory_equal(b + 72, v, 24);
    free(b);
    /* "attn0", [1,1,2,3]: 65 bytes of JSON padded with 7 spaces to 72. */
    struct dt_st_entry e2 = {"attn0", "F32", 4, {1, 1, 2, 3}, v};
    b = write_mem(&e2, 1, NULL, 0, &len);
    assert_int_equal(b[0], 72);
    assert_memory_equal(b + 8 + 65, "       ", 7);
    free(b);
    /* Empty with {"framework":"pt"}: N = 40. */
    const char *meta[2] = {"framework", "pt"};
    b = write_mem(NULL, 0, meta, 1, &len);
    assert_int_equal(b[0], 40);
    assert_memory_equal(b + 8, "{\"__metadata__\":{\"framework\":\"pt\"}}     ", 40);
    free(b);
    /* Empty: {} and 6 spaces. */
    b = write_mem(NULL, 0, NULL, 0, &len);
    assert_int_equal(b[0], 8);
    assert_memory_equal(b + 8, "{}      ", 8);
    free(b);
}

static void round_trip_orders_by_alignment_then_name(void **state)
{
    (void)state;
    float f[2] = {1.5f, -2};
    double d[1] = {0.1};
    int64_t i[3] = {-1, 0, 7};
    struct dt_st_entry e[3] = {
        {"b.f", "F32", 1, {2}, f}, {"a.f", "F32", 0, {0}, f}, {"z.d", "F64", 1, {1}, d}};
    e[1].ndim = 1;
    e[1].shape[0] = 1;
    struct dt_st_entry all[4] = {e[0], e[1], e[2], {"i", "I64", 1, {3}, i}};
    const char *meta[4] = {"step", "42", "quote", "a\"b\\c"};
    size_t len;
    uint8_t *b = write_mem(all, 4, meta, 2, &len);
    struct dt_safetensors st;
    assert_int_equal(dt_safetensors_parse("mem", b, len, &st), 0);
    assert_string_equal(dt_safetensors_meta(&st, "step"), "42");
    assert_string_equal(dt_safetensors_meta(&st, "quote"), "a\"b\\c");
    const struct dt_st_tensor *zd = dt_safetensors_find(&st, "z.d"), *ii = dt_safetensors_find(&st, "i");
    const struct dt_st_tensor *af = dt_safetensors_find(&st, "a.f");
    assert_non_null(zd);
    assert_non_null(ii);
    /* 8-byte dtypes first (i before z.d by name), then the F32s by name. */
    assert_int_equal(ii->begin, 0);
    assert_int_equal(zd->begin, 24);
    assert_int_equal(af->begin, 32);
    assert_memory_equal(ii->data, i, sizeof i);
    assert_true(*(const double *)zd->data == 0.1);
    assert_int_equal(dt_safetensors_find(&st, "b.f")->shape[0], 2);
    dt_safetensors_release(&st);
}

static int parse_text(const char *json, size_t data_len)
{
    size_t n = strlen(json), len = 8 + n + data_len;
    uint8_t *b = calloc(1, len);
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)((uint64_t)n >> (8 * i));
    memcpy(b + 8, json, n);
    struct dt_safetensors st;
    int rc = dt_safetensors_parse("bad.safetensors", b, len, &st);
    if (rc == 0)
        dt_safetensors_release(&st);
    return rc;
}

static void reader_refuses_bad_files(void **state)
{
    (void)state;
    assert_int_equal(parse_text("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8), 0);
    /* size disagrees with shape */
    assert_int_equal(parse_text("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "bad.safetensors"));
    /* not contiguous */
    assert_int_equal(parse_text("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8), DT_EINVAL);
    /* trailing bytes */
    assert_int_equal(parse_text("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 12), DT_EINVAL);
    /* unknown dtype, broken JSON */
    assert_int_equal(parse_text("{\"a\":{\"dtype\":\"X9\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8), DT_EINVAL);
    assert_int_equal(parse_text("{\"a\":{\"dtype\":\"F32\",\"shape\":[2", 8), DT_EINVAL);
    /* header length beyond the file, and over 100 MB */
    uint8_t *b = calloc(1, 16);
    b[0] = 200;
    struct dt_safetensors st;
    assert_int_equal(dt_safetensors_parse("short", b, 16, &st), DT_EINVAL);
    b = calloc(1, 16);
    b[4] = 1; /* 2^32 */
    assert_int_equal(dt_safetensors_parse("huge", b, 16, &st), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "100 MB"));
    assert_int_equal(dt_safetensors_read("/nonexistent/x.safetensors", &st), DT_ENOTFOUND);
}

/* Refused with a message naming the file and containing `why`. */
static void refused(const char *json, size_t data_len, const char *why)
{
    assert_int_equal(parse_text(json, data_len), DT_EINVAL);
    assert_non_null(strstr(dt_error_last(), "bad.safetensors"));
    if (!strstr(dt_error_last(), why))
        fail_msg("wanted '%s' in: %s", why, dt_error_last());
}

/* A header that parses, whose metadata "k" decodes to want. */
static void meta_k_is(const char *header, const char *want)
{
    size_t n = strlen(header);
    uint8_t *b = calloc(1, 8 + n); /* the parser owns and frees it */
    b[0] = (uint8_t)n;
    memcpy(b + 8, header, n);
    struct dt_safetensors st;
    assert_int_equal(dt_safetensors_parse("ok", b, 8 + n, &st), 0);
    assert_string_equal(dt_safetensors_meta(&st, "k"), want);
    dt_safetensors_release(&st);
}

/* Inputs fuzz_safetensors found or that stand next to them; each was a read
 * past the buffer, undefined behaviour, or a file accepted that must not be. */
static void reader_survives_fuzzed_headers(void **state)
{
    (void)state;
    /* The file ends inside a number: strtoll read past the buffer's end. */
    refused("{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0", 0, "']' expected");
    refused("{\"a\":{\"dtype\":\"U8\",\"shape\":[", 0, "']' expected");
    refused("{\"a\":{\"shape\":[-1]}}", 0, "non-negative integer");
    refused("{\"a\":{\"shape\":[+2]}}", 0, "invalid token near '+'");
    refused("{\"a\":{\"shape\":[99999999999999999999]}}", 0, "too big integer");
    /* 2^62 x 4 floats is 2^66 bytes, 0 once wrapped to 64 bits, which an
     * empty range matched. */
    refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4],\"data_offsets\":[0,0]}}", 0,
            "more than 2^64 bytes");
    /* A u-escape takes exactly 4 hex digits (sscanf took signs, spaces, 0x,
     * and ran strlen over the rest of the file). */
    refused("{\"__metadata__\":{\"k\":\"\\u+123\"}}", 0, "invalid escape");
    refused("{\"__metadata__\":{\"k\":\"\\u 123\"}}", 0, "invalid escape");
    refused("{\"__metadata__\":{\"k\":\"\\u0x12\"}}", 0, "invalid escape");
    refused("{}x", 0, "end of file expected");
    refused("{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0,0]}}", 0, "data_offsets needs 2");
    /* No tensors at all: memcpy from a NULL array (UBSan). */
    assert_int_equal(parse_text("{}   ", 0), 0);

    meta_k_is("{\"__metadata__\":{\"k\":\"caf\\u00e9\\u2603\"}}", "caf\xc3\xa9\xe2\x98\x83");
}

/* Names and metadata are C strings: a NUL decoded into one cut it short
 * silently ("a\u0000b" was tensor "a").  Refused, raw or escaped, with the
 * byte of the file where its string ends.  Surrogate pairs are one character
 * (they were written as two 3-byte sequences, which are not UTF-8). */
static void nul_in_a_string_is_refused(void **state)
{
    (void)state;
    const char *nul = "\\u0000 (a NUL character) is not allowed";
    refused("{\"a\\u0000b\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}", 0, nul);
    refused("{\"a\\u0000b\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}", 0, "at byte 18");
    refused("{\"__metadata__\":{\"k\\u0000\":\"v\"}}", 0, nul);
    refused("{\"__metadata__\":{\"k\":\"v\\u0000x\"}}", 0, nul);
    refused("{\"__metadata__\":{\"k\":\"v\\u0000x\"}}", 0, "at byte 38");
    refused("{\"__metadata__\":{\"k\":\"\\ud800\"}}", 0, "invalid Unicode '\\uD800'");
    refused("{\"__metadata__\":{\"k\":\"\\udc00\"}}", 0, "invalid Unicode '\\uDC00'");
    refused("{\"__metadata__\":{\"k\":\"\\q\"}}", 0, "invalid escape");
    refused("{\"__metadata__\":{\"k\":\"\t\"}}", 0, "control character 0x9");
    /* A raw NUL byte, and one behind a backslash (which stood for itself). */
    static const char raw[2][32] = {"{\"__metadata__\":{\"k\":\"v\0\"}}", "{\"__metadata__\":{\"k\":\"v\\\0\"}}"};
    static const char *const why[2] = {"control character 0x0", "invalid escape"};
    for (int i = 0; i < 2; i++) {
        size_t len = 23 + (size_t)i + 4; /* the NUL is at 23 + i, then "}} */
        uint8_t *b = calloc(1, 8 + len); /* the parser owns and frees it */
        b[0] = (uint8_t)len;
        memcpy(b + 8, raw[i], len);
        struct dt_safetensors st;
        assert_int_equal(dt_safetensors_parse("nul.safetensors", b, 8 + len, &st), DT_EINVAL);
        assert_non_null(strstr(dt_error_last(), "nul.safetensors"));
        if (!strstr(dt_error_last(), why[i]))
            fail_msg("%s", dt_error_last());
    }
    meta_k_is("{\"__metadata__\":{\"k\":\"\\ud83d\\ude00\"}}", "\xf0\x9f\x98\x80");
}

/* JSON that is no safetensors header: each refused with the tensor or key
 * it is about (jansson's tree has no places).  Duplicate names are refused
 * at any level, as the reference's serde structs refuse them. */
static void header_shape_is_checked(void **state)
{
    (void)state;
    refused("[]", 0, "header: expected an object");
    refused("{\"a\":1}", 0, "tensor 'a': expected an object");
    refused("{\"a\":{\"dtype\":\"X9\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
            "tensor 'a': unknown dtype X9");
    refused("{\"a\":{\"dtype\":7,\"data_offsets\":[0,8]}}", 8, "tensor 'a': unknown dtype");
    refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}", 8,
            "tensor 'a': unknown tensor field \"x\"");
    refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, "tensor 'a' without dtype or data_offsets");
    refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,2],\"data_offsets\":[0,8]}}", 8,
            "tensor 'a': shape: more than 8 entries");
    refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", 8,
            "tensor 'a': shape[0]: expected a non-negative integer");
    refused("{\"a\":{\"dtype\":\"F32\",\"shape\":2,\"data_offsets\":[0,8]}}", 8,
            "tensor 'a': shape: expected an array");
    refused("{\"__metadata__\":{\"k\":1}}", 0, "__metadata__: \"k\": expected a string");
    refused("{\"__metadata__\":[]}", 0, "__metadata__: expected an object of strings");
    refused(
        "{\"a\":{\"dtype\":\"U8\",\"data_offsets\":[0,0]},\"a\":{\"dtype\":\"U8\",\"data_offsets\":[0,0]}}",
        0, "duplicate object key");
    refused("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0, "duplicate object key");
    char name[300];
    snprintf(name, sizeof name, "{\"%0256d\":{}}", 0);
    refused(name, 0, "tensor name too long (256 bytes, at most 255)");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(reference_vectors),
        cmocka_unit_test(round_trip_orders_by_alignment_then_name),
        cmocka_unit_test(reader_refuses_bad_files),
        cmocka_unit_test(reader_survives_fuzzed_headers),
        cmocka_unit_test(nul_in_a_string_is_refused),
        cmocka_unit_test(header_shape_is_checked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
