"""Hydra callback: a sweep opens the store and one parent run for its validated jobs, and ends with its report.

Hydra turns an exception in a callback into a warning and goes on (hydra/_internal/callbacks.py, `_notify`), so
nothing may escape here as an Exception: a failure at the start stops the sweep with one line and exit 2, and a
failure at the end leaves a message and a non-zero exit (SystemExit passes through Hydra).
"""
from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from experiments.common.errors import BadInput, fail, first_line
from experiments.harness import manager
from experiments.store import uris
from experiments.store.sweepdir import Sweep, SweepTaken
from experiments.sweep import commandline, ending, preflight, stopping
from experiments.sweep.opening import ParentRun, open_sweep

log = logging.getLogger("nnbench")
BASIC_LAUNCHER = "hydra._internal.core_plugins.basic_launcher.BasicLauncher"


class SweepCallback(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        stopping.checkpoint()  # a signal while Hydra started: nothing is written yet
        sweep_dir = Path(config.hydra.sweep.dir).resolve()
        overrides = list(config.hydra.overrides.task)
        try:
            validated = commandline.VALIDATED
            if validated is None:  # not started through `python -m experiments.run`: validate here
                jobs = None
                if config.hydra.sweeper._target_ == commandline.BASIC_SWEEPER:
                    jobs = preflight.jobs([preflight.typed(c) for c in commandline.job_configs(config)])
                uri = uris.validate(config.mlflow.tracking_uri, config.mlflow.experiment_name)
                validated = commandline.Validated(jobs, uri)
            parent = ParentRun.of(overrides, sweep_dir, time.time(), config.mlflow.parent_run_id)
            state = open_sweep(sweep_dir, validated.jobs, validated.uri, config.mlflow.experiment_name, parent,
                               overrides)
        except (BadInput, SweepTaken) as e:
            fail(str(e))
        except Exception as e:  # StoreUnavailable, or anything unexpected: the sweep must not go on without it
            fail(first_line(e))
        log.info("sweep: %s jobs, %s points, parent run %s", state.jobs, state.points, state.parent_run_id)
        manager.keep()  # the groups this process measures (Hydra's basic launcher) share their fork servers
        launcher = str(config.hydra.launcher.get("_target_", ""))
        if launcher != BASIC_LAUNCHER:
            stopping.at_once()  # the jobs run in the launcher's processes; this process only waits on them
        if "submitit" in launcher and "Local" in launcher and config.hydra.sweeper.get("max_batch_size") is None:
            log.warning("submitit_local starts every job at once, and timing processes on the same cores slow each "
                        "other: add hydra.sweeper.max_batch_size=1 to measure one job at a time")

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        stopping.checkpoint()  # a signal after the last job: the sweep ends as interrupted
        stopping.defer()  # from here a signal waits: the report and the parent's status are written whole
        ending.end(Sweep(Path(config.hydra.sweep.dir).resolve()), config.report)
