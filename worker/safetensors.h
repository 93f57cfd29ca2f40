/* safetensors.h - read and write the safetensors format (Hugging Face).
 *
 * Layout: u64 little-endian header length N, N bytes of JSON
 * {"__metadata__": {str: str}, name: {"dtype", "shape", "data_offsets": [b, e]}},
 * then the tensors' bytes (little-endian, C order).  The writer lays tensors out
 * as the reference writer does (dtype alignment descending, then name) and pads
 * the header with spaces to a multiple of 8; the reader rejects what the
 * reference reader rejects (offsets not contiguous, sizes that disagree with
 * the shape, trailing bytes, headers over 100 MB).
 *
 * Used for checkpoints (ckpt.h) and for the PyTorch fixtures of the tests.
 * Not for memory mapping or lazy loading: files are read whole.
 */
#ifndef DT_SAFETENSORS_H
#define DT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#define DT_ST_MAX_DIMS 8
#define DT_ST_MAX_NAME 256

struct dt_st_tensor {
    char name[DT_ST_MAX_NAME];
    char dtype[8];          /* "F32", "F64", "I64", ... */
    int ndim;
    int64_t shape[DT_ST_MAX_DIMS];
    size_t begin, end;      /* byte range within the data buffer */
    const void *data;       /* points into the file's buffer */
};

struct dt_safetensors {
    struct dt_st_tensor *tensors;
    int n;
    char **meta;            /* key, value, key, value, ... */
    int n_meta;
    uint8_t *file;          /* the whole file (NULL after DT_ST_HEADER_ONLY) */
    size_t file_len;
};

/* Bytes of one element of a dtype name, 0 when unknown. */
size_t dt_safetensors_dtype_size(const char *dtype);

/* Reads a regular file (a FIFO, device or directory is refused without
 * waiting on it): its size from fstat, then the header, whose layout must
 * describe exactly the bytes the file has before any data is read. */
int dt_safetensors_read(const char *path, struct dt_safetensors *out);

/* dt_safetensors_read with flags: DT_ST_NOFOLLOW refuses a symbolic link
 * at path (a file found in a run or checkpoint directory, base/fs.h);
 * DT_ST_HEADER_ONLY reads the header and checks its layout against the
 * file's size, and no data: out->file is NULL and no tensor's data is set
 * (what a listing needs to know a file is what it claims to be). */
#define DT_ST_NOFOLLOW 1u
#define DT_ST_HEADER_ONLY 2u
int dt_safetensors_read_with(const char *path, unsigned flags, struct dt_safetensors *out);

/* Parses a file already in memory; takes ownership of `buf` (malloc'd). */
int dt_safetensors_parse(const char *name, uint8_t *buf, size_t len, struct dt_safetensors *out);
void dt_safetensors_release(struct dt_safetensors *f);

/* NULL when absent. */
const struct dt_st_tensor *dt_safetensors_find(const struct dt_safetensors *f, const char *name);
const char *dt_safetensors_meta(const struct dt_safetensors *f, const char *key);

/* A tensor to write; `data` holds prod(shape) elements of `dtype`. */
struct dt_st_entry {
    const char *name;
    const char *dtype;
    int ndim;
    int64_t shape[DT_ST_MAX_DIMS];
    const void *data;
};

/* Writes to an open file descriptor (the caller fsyncs and renames);
 * meta is key, value pairs (n_meta pairs), may be NULL. */
int dt_safetensors_write_fd(int fd, const char *path, const struct dt_st_entry *e, int n,
                            const char *const *meta, int n_meta);

#endif
