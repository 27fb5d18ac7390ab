"""Entry point: `python -m experiments.run -m framework=jax,torch model=lenet` (one MLflow run per point).

Every job is validated before Hydra starts (bad input: one line, exit 2, nothing written). Ctrl-C or SIGTERM
stops the worker, keeps what it finished and exits 130 or 143; the last line counts the points. The sweep's
machinery is in `experiments/sweep/`; the other commands are `nnbench` (`python -m experiments`).
"""
from __future__ import annotations

import atexit
import sys

import hydra
from omegaconf import DictConfig

from experiments.common.config import register
from experiments.sweep import commandline, ending, hydra_job, stopping

register()


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> None:
    hydra_job.run(cfg)


if __name__ == "__main__":
    stopping.install()
    atexit.register(stopping.ignore)  # runs last: the end of Python's teardown, where a signal would kill outright
    try:
        register(commandline.pythons(sys.argv[1:]))  # a network installed only in the sweep's environments
        commandline.VALIDATED = commandline.validate(sys.argv[1:])
        stopping.defer()  # Hydra runs the jobs here: a signal waits for a safe place
        main()
    except stopping.Stop as e:
        sys.exit(ending.stopped(e))
