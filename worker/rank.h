/* rank.h - where a rank starts: one rank of the bundled trainer, from the
 * environment its agent gave it to the exit status it ends with.
 *
 * `dtrain worker job.yaml` (launcher/cli/cmd_worker.c) is the command; this
 * is the rank: torchrun's variables read and checked, the job spec loaded,
 * the store connections (one for the communicator's bootstrap, one for the
 * heartbeat), the communicator, the trainer, and on a failure the report in
 * PyTorch's TORCHELASTIC_ERROR_FILE format that the agent quotes.
 *
 * Not for the training itself (trainer.h) or for learning a rank's place
 * from MPI's launcher (scheduler-adapters/mpirun/mpirun.h, which the command
 * calls first: a layer above this one).
 */
#ifndef DT_RANK_H
#define DT_RANK_H

/* The exit status of a rank that stopped on SIGUSR1 after a checkpoint
 * (EX_TEMPFAIL, "try again later"): the batch script requeues the job. */
#define DT_RANK_EXIT_REQUEUE 75

/* OpenBLAS may have picked kernels far below this CPU (kernels.h): runs argv
 * (this process's command line) again through /proc/self/exe with
 * OPENBLAS_CORETYPE set.  exec keeps the pid, so the agent supervising the
 * rank sees no difference.  Returns only when there is nothing to fix or the
 * exec failed (said as a warning). */
void dt_rank_fix_blas(char *const argv[]);

/* Runs one rank of the job at spec_path to its end.  Without WORLD_SIZE in
 * the environment it trains as a single process in $DTRAIN_RUN_DIR or the
 * current directory.  Returns the process's exit status: 0, 1 after a
 * failure (said on stderr and in the error file), or DT_RANK_EXIT_REQUEUE. */
int dt_rank_main(const char *spec_path);

/* A rank that failed before dt_rank_main (dt_error_last() says why): says so
 * on stderr and in the error file as dt_rank_main would; returns 1. */
int dt_rank_fail(int rank);

#endif
