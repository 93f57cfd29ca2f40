/* fs.h - the file-system steps every layer takes: make a directory with its
 * parents, find a program on PATH, name this executable, open a file for
 * reading only when it is a regular one, and replace a file so that a
 * reader never sees half of it.
 *
 * Errors name the path and what it was for (`what`: "log directory",
 * "checkpoint directory", ...), so a user reads a sentence, not an errno.
 * Not for the formats written into the files (their modules do that).
 */
#ifndef DT_FS_H
#define DT_FS_H

#include <fcntl.h>
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

/* Whether dt_fs_open_read follows a symbolic link at the path's last name:
 * a path the user gave (a spec, a data set, a Hugging Face cache, whose
 * files are links) is followed; a file dtrain finds in a run or checkpoint
 * directory by its name is not, since whoever can write that directory
 * (a shared log_dir: its run directories are anyone's) could point the
 * name at another file of the reader's. */
enum dt_fs_links { DT_FS_FOLLOW, DT_FS_NOFOLLOW };

/* Opens `path` (relative to the directory dfd, or AT_FDCWD: a reader that
 * checked a run directory's owner opens its files from that descriptor, so
 * the directory it checked is the one it reads) for reading when it is a
 * regular file, and only then; every reader of a file someone else may have
 * planted opens it here.  The
 * name is checked first (lstat, or stat when following links), so a FIFO,
 * a device, a socket or a directory is refused without being opened: a
 * FIFO's open(2) would wait for a writer forever, a device's may do
 * something.  The open itself is O_NONBLOCK (and O_NOFOLLOW when not
 * following), then fstat'd: it must be the regular file that was checked
 * (same device and inode), so a name swapped in between is refused as
 * well.  Returns the descriptor (O_CLOEXEC, blocking again; its fstat in
 * *st when st is not NULL) or a negative DT_E* with a sentence naming the
 * path and what it is: DT_ENOTFOUND when there is nothing there, DT_EINVAL
 * for a link not followed or anything but a regular file, DT_EIO for the
 * system's other refusals. */
int dt_fs_open_read(int dfd, const char *path, enum dt_fs_links links, struct stat *st);

/* The regular file `path` read whole through dt_fs_open_read (relative to
 * dfd as there), at most max_bytes and up to the size fstat gave: a file that
 * grows meanwhile is cut there, one that shrinks is read as it is now.
 * *text is malloc'd and NUL-terminated, *len its length.  Messages name the
 * file as dir_shown/path when dfd is a directory's descriptor (dir_shown
 * names it), else as path. */
int dt_fs_read_whole(int dfd, const char *dir_shown, const char *path, enum dt_fs_links links, size_t max_bytes,
                     char **text, size_t *len);

/* What a file's mode says it is, for messages: "a FIFO", "a directory",
 * "a symbolic link", ... */
const char *dt_fs_kind(mode_t mode);

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
