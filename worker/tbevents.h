/* tbevents.h - a TensorBoard event file writer for scalars.
 *
 * Writes events.out.tfevents.<time>.<host> in a directory: a TFRecord stream
 * (see crc32c.h and tbevents.c for the byte layout) whose first record is the
 * Event{file_version = "brain.Event:2"} and each later record one
 * Event{wall_time, step, summary{value{tag, simple_value}}}, the records
 * torch.utils.tensorboard's add_scalar writes.  TensorBoard, tensorboardX's
 * readers and tf.data read the file as it grows.
 *
 * Cost: records are encoded straight into a buffer allocated at open; the
 * buffer goes to the file when it fills, when flush_secs have passed since the
 * last write (checked at each scalar), on dt_tb_flush and at close.  A scalar
 * allocates nothing and makes no system call in the common case.
 *
 * Not thread-safe: one writer belongs to one thread (the trainer's rank 0).
 * Not for images, histograms or graphs.
 */
#ifndef DT_TBEVENTS_H
#define DT_TBEVENTS_H

#include <stdint.h>

#define DT_TB_MAX_TAG 512 /* bytes; longer tags are refused */

struct dt_tb_writer;

/* Creates <dir>/events.out.tfevents.<unix time, 10 digits>.<hostname>; if a
 * file of that name exists (a restart within the same second), ".1", ".2"...
 * is appended.  The file_version event is written and flushed at once. */
int dt_tb_open(const char *dir, struct dt_tb_writer **out);

/* Creates exactly `path` (truncating it) and stamps the file_version event
 * with wall_time (seconds since the epoch); for tests and tools. */
int dt_tb_open_file(const char *path, double wall_time, struct dt_tb_writer **out);

/* The file being written. */
const char *dt_tb_path(const struct dt_tb_writer *w);

/* Longest time, in seconds, that a record waits in the buffer (default 10;
 * TensorBoard re-reads files every 5 s).  0 writes every record at once. */
void dt_tb_set_flush_secs(struct dt_tb_writer *w, double secs);

/* Appends a scalar stamped with the current time. */
int dt_tb_scalar(struct dt_tb_writer *w, const char *tag, int64_t step, float value);

/* Appends a scalar with a given wall time (seconds since the epoch). */
int dt_tb_scalar_at(struct dt_tb_writer *w, const char *tag, int64_t step, float value, double wall_time);

/* Appends n scalars of one step (tags[i], values[i]); a NaN or infinite
 * value is left out, as metrics.jsonl writes it as null.  A NULL writer is
 * fine and does nothing, so a rank without TensorBoard needs no test. */
int dt_tb_scalars(struct dt_tb_writer *w, int64_t step, const char *const *tags, const double *values, int n);

/* Writes out what is buffered. */
int dt_tb_flush(struct dt_tb_writer *w);

/* Flushes, closes and frees (NULL is fine); returns the first error seen. */
int dt_tb_close(struct dt_tb_writer *w);

#endif
