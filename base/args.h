/* args.h - values of the command-line options that the launcher and the
 * scheduler adapters both read: a duration in seconds (--grace-period) and a
 * list of ranks (--ranks).  The agents a scheduler starts get the same
 * option text the launcher got, so both ends must read it alike.  Without
 * --grace-period the job spec's grace_period applies (spec/jobspec.h).
 *
 * Not for option parsing itself (each command's own), nor for the job spec's
 * durations (spec/).
 */
#ifndef DT_ARGS_H
#define DT_ARGS_H

/* "3", "0.5" or "0.5s": more than 0, at most an hour.  Returns 0, or -1 and
 * leaves *out alone (the caller names the option in its usage error). */
int dt_args_seconds(const char *s, double *out);

/* Parses "0,2,5-7" into mask[0..world) (1 = listed).  DT_EINVAL names the
 * bad part: not a number, a rank past world - 1, a range that runs backwards. */
int dt_args_ranks(const char *list, int world, unsigned char *mask);

#endif
