"""Hydra callback: before a sweep's first job, check every job's config and create the store once."""
from __future__ import annotations

import sys
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from experiments import job

BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"


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

        if config.hydra.sweeper._target_ == BASIC_SWEEPER:
            try:
                for cfg in job_configs(config):
                    job.check(job.as_dict(cfg))
            except job.BadInput as e:
                sys.exit(f"nnbench: error: {e}")
        tracking.prepare_store(tracking.store_uri(config.mlflow.tracking_uri), config.mlflow.experiment_name)
