/* run_dir.h - the run id and the directory that holds one run's logs and summary.
 *
 * A run id is "<UTC date>-<UTC time>-<6 random hex digits>": sortable by
 * start time in `ls`, unique among jobs started in the same second.  The run
 * directory is <log_dir>/<name>-<run id>/.  The launcher's node 0 makes it
 * (exclusively, so two launches never share one); the agents of other nodes,
 * and adapters that must say where it will be (Slurm, mpirun's agents), name
 * it by the same rule.
 *
 * A run directory is private to its user: made DT_RUN_DIR_MODE (0700), and
 * the files dtrain creates in it DT_RUN_DIR_FILE_MODE (0600), since whatever
 * a rank prints (paths, data, a token it echoes) lands there.  To share a
 * run, chmod it afterwards.
 *
 * Not for what goes inside (the agent writes attempt_<k>/ and summary.json).
 */
#ifndef DT_RUN_DIR_H
#define DT_RUN_DIR_H

#include <stddef.h>

#define DT_RUN_ID_MAX 32
#define DT_RUN_DIR_MODE 0700      /* the run directory and its attempt_<k>/ */
#define DT_RUN_DIR_FILE_MODE 0600 /* logs, reports, summary.json */

/* Makes a fresh run id into out (at least DT_RUN_ID_MAX bytes). */
int dt_run_dir_make_id(char *out, size_t size);

/* <log_dir>/<name>-<run_id>, absolute when log_dir is relative (so ranks
 * that change directory still find it); DT_EINVAL when it does not fit. */
int dt_run_dir_path(const char *log_dir, const char *name, const char *run_id, char *path, size_t size);

/* Creates log_dir (and its parents) if needed, then a new run directory in
 * it; writes the run id and the directory's path (as dt_run_dir_path). */
int dt_run_dir_create(const char *log_dir, const char *name, char *run_id, size_t id_size, char *path,
                      size_t path_size);

/* The run directory of a run id every node of a multi-node job shares:
 * created if missing, used as it is if another node made it first. */
int dt_run_dir_open(const char *log_dir, const char *name, const char *run_id, char *path, size_t path_size);

#endif
