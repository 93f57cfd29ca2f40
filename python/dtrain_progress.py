"""dtrain_progress.py - report a training script's progress to dtrain (docs/progress.md).

Standard library only: copy this file next to your script, or put dtrain's python/ folder on
PYTHONPATH.  Under dtrain (a `command:` job, `dtrain run`) each rank's environment names a
file for its progress rows (DTRAIN_METRICS_FILE); this module appends one JSON object per
line to it.  dtrain turns rank 0's rows into the live progress line, `dtrain status`'s step,
metrics.jsonl (`dtrain report`) and TensorBoard scalars, and every rank's rows into
heartbeats: a rank that wrote a row and then none for rendezvous.heartbeat_timeout is
declared hung.  Before such a rank is killed dtrain asks it, with DTRAIN_TRACEBACK_SIGNAL,
where each of its threads is: Progress registers Python's faulthandler for that signal, to
DTRAIN_TRACEBACK_FILE, and the failure report shows the dump.

Outside dtrain (no DTRAIN_METRICS_FILE) every call does nothing, so the same script runs
under torchrun or plain python.

    from dtrain_progress import Progress

    progress = Progress(total_steps=1000)
    for step in range(1, 1001):
        loss = train_step()
        progress.step(step, loss=loss.item(), lr=sched.get_last_lr()[0])
    with progress.pause("checkpoint"):   # a phase with no steps: not a hang
        save_checkpoint()
    progress.close()
"""

import contextlib
import faulthandler
import json
import math
import os
import signal
import sys
import threading

__all__ = ["Progress", "enabled"]

_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./-")


def enabled():
    """True when this process runs under dtrain, which reads its progress rows."""
    return bool(os.environ.get("DTRAIN_METRICS_FILE"))


def _number(name, value):
    """value as a float for JSON (a tensor or numpy scalar through float()); None for NaN and
    infinities, which JSON cannot hold."""
    if isinstance(value, bool) or not hasattr(value, "__float__"):
        raise TypeError("dtrain_progress: %r must be a number, not %s" % (name, type(value).__name__))
    value = float(value)
    return value if math.isfinite(value) else None


def _count(name, value):
    if isinstance(value, bool) or not hasattr(value, "__index__") or int(value) < 0:
        raise ValueError("dtrain_progress: %r must be a whole number >= 0, got %r" % (name, value))
    return int(value)


def _check_name(name):
    if not (isinstance(name, str) and 0 < len(name) <= 64 and set(name) <= _NAME_CHARS):
        raise ValueError("dtrain_progress: the figure name %r is not 1 to 64 of A-Z a-z 0-9 _ . / -" % (name,))


class Progress:
    """One rank's progress rows.  Every method is a no-op outside dtrain; arguments are
    checked either way, so a mistake shows up before the job runs under dtrain."""

    def __init__(self, total_steps=None, tracebacks=True):
        self.total_steps = None if total_steps is None else _count("total_steps", total_steps)
        self._fd = None
        self._last_step = None
        self._lock = threading.Lock()
        self._trace_file = None
        path = os.environ.get("DTRAIN_METRICS_FILE")
        if not path:
            return
        try:
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as e:
            print("dtrain_progress: cannot open %s: %s; no progress rows" % (path, e), file=sys.stderr)
        if tracebacks:
            self._register_tracebacks()

    @property
    def enabled(self):
        return self._fd is not None

    def _register_tracebacks(self):
        """faulthandler for dtrain's signal: on it every thread's stack goes to the file dtrain
        reads, from the signal handler itself (no GIL needed, so a thread stuck in C answers)."""
        name, path = os.environ.get("DTRAIN_TRACEBACK_SIGNAL"), os.environ.get("DTRAIN_TRACEBACK_FILE")
        if not name or not path:
            return
        try:
            signum = signal.Signals[name]
            self._trace_file = open(path, "a")  # kept open: faulthandler writes to its descriptor
            faulthandler.register(signum, file=self._trace_file, all_threads=True, chain=False)
        except (KeyError, OSError, RuntimeError, ValueError) as e:
            print("dtrain_progress: no tracebacks on %s to %s: %s" % (name, path, e), file=sys.stderr)

    def _write(self, row):
        if self._fd is None:
            return
        data = (json.dumps(row, separators=(", ", ": "), allow_nan=False) + "\n").encode()
        with self._lock:
            try:
                os.write(self._fd, data)  # one write: O_APPEND keeps a row whole
            except OSError as e:
                print("dtrain_progress: writing a progress row failed: %s; no more rows" % e, file=sys.stderr)
                os.close(self._fd)
                self._fd = None

    def step(self, step, **figures):
        """Reports that this rank is at optimizer step `step` (a count), with any figures:
        loss, lr, samples_per_s, tokens_per_s, epoch, test_loss, test_accuracy, or names of
        your own.  Each call is also this rank's heartbeat."""
        row = {"step": _count("step", step)}
        self._last_step = row["step"]
        if self.total_steps is not None:
            row["total_steps"] = self.total_steps
        for name, value in figures.items():
            _check_name(name)
            row[name] = _count(name, value) if name == "total_steps" else _number(name, value)
        self._write(row)

    def heartbeat(self, step):
        """Alive at `step`, without figures: for a long stretch between two steps."""
        self._last_step = _count("step", step)
        self._write({"step": self._last_step})

    @contextlib.contextmanager
    def pause(self, why="pause"):
        """A phase without steps (a checkpoint, an evaluation): the watchdog does not count its
        silence.  Leaving the block, or the next step(), ends the pause."""
        self._write({"pause": str(why)})
        try:
            yield
        finally:
            if self._last_step is not None:
                self._write({"step": self._last_step})

    def close(self):
        """This rank reports no more steps: its silence from here on is not a hang."""
        self._write({"pause": "done"})
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
