"""Entry point: `python -m experiments.run -m framework=jax,torch model=lenet` (one MLflow run per point)."""
from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from experiments import job
from experiments.config import register

register()
log = logging.getLogger("nnbench")


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    start, hc = time.perf_counter(), HydraConfig.get()
    from experiments import tracking  # after Hydra has parsed the command line: mlflow is slow to import

    out = Path(hc.runtime.output_dir)
    if hc.mode == RunMode.MULTIRUN:  # the sweep callback checked every job and counted the points
        sweep = job.Sweep(Path(hc.sweep.dir))
    else:
        try:
            job.check(c := job.as_dict(cfg))
        except job.BadInput as e:
            sys.exit(f"nnbench: error: {e}")
        sweep = job.Sweep(out)
        sweep.start(points=len(job.plan(c, job.model_spec(c))))
    uri = tracking.store_uri(cfg.mlflow.tracking_uri)
    try:
        exp_id = tracking.open_store(uri, cfg.mlflow.experiment_name)
    except tracking.StoreUnavailable as e:
        if hc.mode != RunMode.MULTIRUN:
            sys.exit(f"nnbench: error: {e}")
        exp_id = None  # the store went away during the sweep: measure anyway, results stay on disk
        log.error("%s", e)

    def on_record(rec, directory):
        log.info("%s %s: %s", sweep.tick(), rec.run_name, job.summary(rec))
        try:
            if exp_id is None:
                raise tracking.StoreUnavailable("the store could not be opened when this job started")
            (directory / "mlflow_run_id").write_text(
                tracking.log_record(uri, exp_id, rec, directory, job.parent_run_id(sweep)))
        except Exception as e:  # the record is on disk already; the sweep goes on
            log.error("could not log %s to %s (%s); it is kept in %s: log it later with "
                      "`python -m experiments.upload %s`", rec.run_name, uri, e, directory, directory)

    recs = job.run_job(cfg, out, on_record)
    wall, measuring = time.perf_counter() - start, job.measuring_s(recs)
    log.info("job: %.2f s wall, %.2f s measuring, %.2f s fixed cost for %d points", wall, measuring,
             wall - measuring, len(recs))


if __name__ == "__main__":
    main()
