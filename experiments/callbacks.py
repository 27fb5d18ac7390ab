"""Hydra callback: a sweep checks every job first, opens one parent run, and ends with its report."""
from __future__ import annotations

import logging
import sys
import tempfile
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from experiments import preflight
from experiments.sweep import Sweep, open_sweep

BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"
log = logging.getLogger("nnbench")


def job_configs(config: DictConfig) -> list[DictConfig]:
    """Compose every job of a basic-sweeper multirun, as the sweeper itself will."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser

    loader = GlobalHydra.instance().config_loader()
    params = [f"{k}={v}" for k, v in (config.hydra.sweeper.get("params") or {}).items()]
    overrides = OverridesParser.create(config_loader=loader).parse_overrides(
        params + list(config.hydra.overrides.task))
    jobs = [j for batch in BasicSweeper.split_arguments(overrides, None) for j in batch]
    return [loader.load_sweep_config(config, list(j)) for j in jobs]


class SweepCallback(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from experiments import tracking

        sweep_dir = Path(config.hydra.sweep.dir).resolve()
        overrides = " ".join(config.hydra.overrides.task)
        when = " ".join(sweep_dir.parts[-2:])  # Hydra's default sweep dir: multirun/<date>/<time>
        try:
            jobs = None
            if config.hydra.sweeper._target_ == BASIC_SWEEPER:
                jobs = preflight.jobs([preflight.as_dict(c) for c in job_configs(config)])
            state = open_sweep(sweep_dir, jobs, config.mlflow, f"sweep {when} · {overrides}",
                               {"overrides": overrides, "sweep_dir": str(sweep_dir)})
        except (preflight.BadInput, tracking.StoreUnavailable) as e:
            sys.exit(f"nnbench: error: {e}")
        log.info("sweep: %s jobs, %s points, parent run %s", state.jobs, state.points, state.parent_run_id)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from experiments import report, tracking

        state = Sweep(Path(config.hydra.sweep.dir)).read()
        uri, parent = state.uri, state.parent_run_id
        try:
            runs = tracking.search(uri, config.mlflow.experiment_name, f"tags.mlflow.parentRunId = '{parent}'")
            t = report.tidy(runs)
            with tempfile.TemporaryDirectory() as tmp:
                if not t.empty:
                    report.write(t, Path(tmp), config.report.baseline, title=f"nnbench sweep {parent}")
                    print(report.markdown(report.summary(t, config.report.baseline)))
                tracking.finish_parent(uri, parent, Path(tmp))
        except Exception as e:  # every point is on disk already; the report can be made later
            log.error("could not finish the sweep's report in %s (%s): the points are in %s; after "
                      "`python -m experiments.upload`, `python -m experiments.compare --sweep %s` makes it",
                      uri, e, config.hydra.sweep.dir, parent)
            return
        print(f"\n{len(runs)} runs under parent {parent} in {uri}")
        print(f"runs table (after `mlflow ui`, see README): {tracking.run_link(state.experiment_id)}")
