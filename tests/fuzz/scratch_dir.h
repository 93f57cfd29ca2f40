/* scratch_dir.h - a private directory for the fuzz targets whose reader takes
 * a path (a run directory) rather than a buffer.
 *
 * The input is cut at each form feed (0x0c, which no JSON text needs) into
 * parts; part i becomes the file names[i] of the directory, and an empty or
 * missing part means that file is absent, so "no summary.json" is fuzzed too.
 * A target that grows one file over several calls appends with scratch_put.
 * The directory is made once per process, in $TMPDIR or else /dev/shm (a
 * file written and removed on every run costs a disk's journal otherwise:
 * ten times fewer runs a second), and removed at a clean exit; a crash
 * leaves it, holding the files of the input that crashed.
 *
 * Not a fuzz target (the Makefile builds only tests/fuzz/fuzz_*.c) and not
 * for anything but tests: it aborts on any file system error.
 */
#ifndef DT_FUZZ_SCRATCH_DIR_H
#define DT_FUZZ_SCRATCH_DIR_H

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char scratch[256];

static void scratch_remove(void)
{
    DIR *d = opendir(scratch);
    struct dirent *e;
    char path[512];
    while (d && (e = readdir(d)))
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
            snprintf(path, sizeof path, "%s/%s", scratch, e->d_name);
            unlink(path);
        }
    if (d)
        closedir(d);
    rmdir(scratch);
}

static const char *scratch_dir(void)
{
    if (!scratch[0]) {
        const char *tmp = getenv("TMPDIR");
        if (!tmp || !*tmp)
            tmp = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
        snprintf(scratch, sizeof scratch, "%s/dt-fuzz-XXXXXX", tmp);
        if (!mkdtemp(scratch))
            abort();
        atexit(scratch_remove);
    }
    return scratch;
}

/* Writes data to the file `name` with fopen's mode: "wb" truncates in
 * place (the same inode), "ab" appends as a flushing writer does. */
static void scratch_put(const char *name, const uint8_t *data, size_t size, const char *mode)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", scratch_dir(), name);
    FILE *f = fopen(path, mode);
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0)
        abort();
}

/* An empty part removes the file. */
static void scratch_write(const char *name, const uint8_t *data, size_t size)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", scratch_dir(), name);
    if (size == 0)
        unlink(path);
    else
        scratch_put(name, data, size, "wb");
}

/* Writes the parts of data as names[0..n); returns the directory. */
static const char *scratch_files(const uint8_t *data, size_t size, const char *const *names, int n)
{
    const uint8_t *p = data, *end = data + size;
    for (int i = 0; i < n; i++) {
        const uint8_t *ff = p < end ? memchr(p, '\f', (size_t)(end - p)) : NULL;
        const uint8_t *stop = ff ? ff : end;
        scratch_write(names[i], p, (size_t)(stop - p));
        p = ff ? ff + 1 : end;
    }
    return scratch_dir();
}

#endif
