"""Hydra callbacks that make a fault happen at a chosen moment of a sweep, inside Hydra's own sequence of jobs
(basic launcher: in the process that runs the sweep)."""
import os
import signal
from pathlib import Path

from hydra.experimental.callback import Callback

from experiments.store.sweepdir import STATE


class SignalSelf(Callback):
    """A signal to this process from inside Hydra's code between two jobs (after job `after_job` ends, before the
    next is composed): the moment a signal must wait for a safe place. Once the signal is sent, it writes the file
    `went_on`: Hydra's code went on instead of raising there."""

    def __init__(self, after_job: int, went_on: str, signum: str = "SIGTERM"):
        self.after_job, self.went_on, self.signum, self.ended = after_job, went_on, signal.Signals[signum], 0

    def on_job_end(self, config, job_return, **kwargs) -> None:
        self.ended += 1
        if self.ended == self.after_job:
            os.kill(os.getpid(), self.signum)
            Path(self.went_on).write_text("")


class HideSweepState(Callback):
    """Job `job` (0-based) finds no sweep state file (a shared file system that hiccups); it is back afterwards."""

    def __init__(self, job: int):
        self.job = job

    def _path(self, config) -> Path:
        return Path(config.hydra.sweep.dir) / STATE

    def on_job_start(self, config, **kwargs) -> None:
        if config.hydra.job.num == self.job:
            self._path(config).rename(self._path(config).with_suffix(".hidden"))

    def on_job_end(self, config, job_return, **kwargs) -> None:
        if config.hydra.job.num == self.job:
            self._path(config).with_suffix(".hidden").rename(self._path(config))
