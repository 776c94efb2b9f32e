"""Stopping training on a signal without losing the updates since the last checkpoint.

SIGTERM is what preemption sends before it kills (Kubernetes, Slurm, spot and preemptible
VMs give a grace period); SIGINT is Ctrl-C. While the trainer's loop runs, either is only
noted: the loop asks after every update, saves a checkpoint of the step it is at and stops
(`errors.Stopped`, exit status 128 + the signal). A seeded run resumed from that checkpoint
skips the batches it trained on, so it ends as an uninterrupted run would. The wait is one
update (or, where one worker's signal must reach the others, one update more). An evaluation
runs after its step's checkpoint is saved, so a signal cuts it short at once (a resume
evaluates that step again), except in a multi-worker job, whose evaluation is a collective
every worker must finish.
"""

from __future__ import annotations

import contextlib
import signal
import threading

import tensorflow as tf

from t2t_keras.training.distribution import is_multi_worker

NAMES = {signal.SIGTERM: "SIGTERM", signal.SIGINT: "Ctrl-C"}


class StopNow(Exception):
    """A signal arrived inside `StopSignals.interruptible`."""


class StopSignals:
    """A context in which SIGTERM and SIGINT are noted instead of ending the process (in the
    main thread; elsewhere Python delivers no signals, and nothing changes)."""

    def __init__(self, strategy: tf.distribute.Strategy):
        self.strategy = strategy
        self.received = None  # the first signal's number
        self._interruptible = False
        self._previous = {}

    def __enter__(self) -> "StopSignals":
        if threading.current_thread() is threading.main_thread():
            self._previous = {signum: signal.signal(signum, self._note) for signum in NAMES}
        return self

    def __exit__(self, *exception) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def _note(self, signum, frame) -> None:
        self.received = self.received or signum
        if self._interruptible:
            raise StopNow()

    @contextlib.contextmanager
    def interruptible(self):
        """A stretch of work a signal may cut short (raising `StopNow`): one whose results a
        resume computes again. Single-worker jobs only (see the module docstring)."""
        self._interruptible = not is_multi_worker(self.strategy)
        try:
            if self.received and self._interruptible:
                raise StopNow()
            yield
        finally:
            self._interruptible = False

    def requested(self) -> int | None:
        """The signal to stop for: this process's, or in a multi-worker job any worker's (every
        worker asks after the same update, so they all save that step and stop together)."""
        if not is_multi_worker(self.strategy):
            return self.received
        mine = tf.constant([self.received or 0])
        everyone = self.strategy.gather(self.strategy.run(lambda: mine), axis=0).numpy()
        return int(everyone.max()) or None


def describe(signum: int) -> str:
    return NAMES.get(signum, f"signal {signum}")


def exit_status(signum: int) -> int:
    """128 + the signal's number, as shells report a process the signal ended: 143, 130."""
    return 128 + signum
