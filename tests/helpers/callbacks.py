"""A Hydra callback that sends this process a signal from inside Hydra's own code between two jobs (after job
`after_job` ends, before the next is composed): the moment a signal must wait for a safe place. Once the signal
is sent, it writes the file `went_on`: Hydra's code went on instead of raising there."""
import os
import signal
from pathlib import Path

from hydra.experimental.callback import Callback


class SignalSelf(Callback):
    def __init__(self, after_job: int, went_on: str, signum: str = "SIGTERM"):
        self.after_job, self.went_on, self.signum, self.ended = after_job, went_on, signal.Signals[signum], 0

    def on_job_end(self, config, job_return, **kwargs) -> None:
        self.ended += 1
        if self.ended == self.after_job:
            os.kill(os.getpid(), self.signum)
            Path(self.went_on).write_text("")
