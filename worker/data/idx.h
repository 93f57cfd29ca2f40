/* idx.h - IDX files (LeCun's MNIST format, gzip'd or not) and the Fashion-MNIST data set.
 *
 * An IDX file is a big-endian header (magic 0x000008NN: ubyte data, NN dims; one
 * int32 per dim) followed by the data in C order.  The reader checks the magic,
 * the dims the caller expects and that the data is all there, and names the
 * file in every error.  Decompression is bounded by the header: the buffer
 * grows only as bytes arrive, up to what the dims declare, and inflating stops
 * one byte past that (an error naming the offset).
 *
 * Not for normalisation or batching: see loader.h.
 */
#ifndef DT_IDX_H
#define DT_IDX_H

#include <stdint.h>

#define DT_IDX_MAX_DIMS 4

struct dt_idx {
    int ndim;
    int64_t dims[DT_IDX_MAX_DIMS];
    uint8_t *data; /* prod(dims) bytes */
};

/* Reads an IDX file of unsigned bytes with exactly `ndim` dims; `want_dims[i]`
 * > 0 pins dim i (e.g. 28x28 images), 0 accepts any size. */
int dt_data_idx_load(const char *path, int ndim, const int64_t *want_dims, struct dt_idx *out);
void dt_data_idx_release(struct dt_idx *x);

/* A labelled image set: n images of rows*cols bytes, labels in [0, classes). */
struct dt_dataset {
    int64_t n;
    int rows, cols, classes;
    uint8_t *images;
    uint8_t *labels;
};

/* Loads <dir>/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz and checks that
 * images and labels agree in count and that there is at least one example
 * (from both headers, before either file's data is inflated: a gzip bomb
 * costs its header), and that labels are in 0..9. */
int dt_data_load_fashion_mnist(const char *dir, int train, struct dt_dataset *out);
void dt_data_release(struct dt_dataset *d);

#endif
