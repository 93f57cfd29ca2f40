/* fs.h - the file-system steps every layer takes: make a directory with its
 * parents, find a program on PATH, name this executable, open a file for
 * reading only when it is a regular file, and replace a file so that a
 * reader never sees half of it.
 *
 * Errors name the path and what it was for (`what`: "log directory",
 * "checkpoint directory", ...), so a user reads a sentence, not an errno.
 * Not for the formats written into the files (their modules do that).
 */
#ifndef DT_FS_H
#define DT_FS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/types.h>

/* mkdir -p: every missing directory of `path` with `mode` (before umask).
 * DT_EIO "cannot create the <what> <dir>: <reason>" naming the first that failed. */
int dt_fs_mkdir_p(const char *path, mode_t mode, const char *what);

/* True when `prog` runs: a path (with a '/') that is executable, or a name
 * found executable in a directory of $PATH (default /usr/local/bin:/usr/bin:/bin). */
bool dt_fs_on_path(const char *prog);

/* This executable's path (/proc/self/exe), or "dtrain" when it cannot be read,
 * as ranks and agents run it (`<self> worker`, `<self> agent`). */
void dt_fs_self_path(char *out, size_t size);

/* Opens `path` (relative to the directory dfd, or AT_FDCWD) for reading,
 * only when it is a regular file: opened O_NOFOLLOW|O_NONBLOCK, so neither a
 * symlink at its last component is followed nor a FIFO waits for a writer,
 * then fstat'd and refused unless regular, so that a FIFO, device, socket or
 * directory planted under a file's name neither hangs nor feeds the reader.
 * Returns the descriptor (O_CLOEXEC, blocking again) with *st filled (st may
 * be NULL), or a negative DT_E* code naming path: DT_ENOTFOUND when there is
 * no such name.  Readers of files that someone else could plant (a shared
 * log directory's run files) open through here. */
int dt_fs_open_regular(int dfd, const char *path, struct stat *st);

/* Writes `path` whole or not at all: `write` fills a temporary file beside it
 * (.<name>.tmp in the same directory, hidden from listings), which then
 * replaces `path` by rename(2); on any error the temporary file is removed
 * and `path` is untouched.  With `durable` the data and the directory entry
 * are fsync'd too, so a power cut leaves the old file or the new one
 * (checkpoints).  `write` returns 0 or a negative DT_E* code with the error
 * set; a write error the stream reports is turned into one naming the file
 * and the system's reason (ENOSPC, EFBIG, EIO).
 *
 * Nothing planted in the directory is written through: the temporary file is
 * created with O_CREAT|O_EXCL|O_NOFOLLOW, and rename(2) replaces a symlink at
 * `path` itself, not its target.  A name already at the temporary name is a
 * crashed writer's leftover (or was planted): it is unlinked (a link, not
 * what it points to) and the create is tried once more; a leftover that
 * cannot be removed fails the write.  So each path has one writer at a time
 * (dtrain never writes one path from two processes at once).  The file is
 * created 0666 less the umask, as fopen(3) creates files: the directory's
 * mode decides who else may read it. */
typedef int (*dt_fs_write_fn)(void *ctx, FILE *f);
int dt_fs_write_atomic(const char *path, bool durable, dt_fs_write_fn write, void *ctx);

/* fsync of a directory, so a rename inside it survives a crash. */
int dt_fs_sync_dir(const char *dir);

#endif
