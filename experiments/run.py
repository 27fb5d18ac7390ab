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

from experiments import job, preflight, records
from experiments.config import register
from experiments.sweep import PEAKS, Sweep, open_sweep

register()
log = logging.getLogger("nnbench")


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    start, hc = time.perf_counter(), HydraConfig.get()
    from experiments import tracking  # after Hydra has parsed the command line: mlflow is slow to import

    out = Path(hc.runtime.output_dir)
    sweep_dir = Path(hc.sweep.dir) if hc.mode == RunMode.MULTIRUN else out
    try:  # a sweep's callback has checked every job and opened the store; a single run does it here
        if hc.mode == RunMode.MULTIRUN:
            this, state = preflight.check(preflight.as_dict(cfg)), Sweep(sweep_dir).read()
        else:
            (this,) = preflight.jobs([preflight.as_dict(cfg)])
            state = open_sweep(out, [this], cfg.mlflow)
    except (preflight.BadInput, tracking.StoreUnavailable) as e:
        sys.exit(f"nnbench: error: {e}")

    def on_measured(point, process, result, rec, directory):
        tick, n = Sweep(sweep_dir).tick(), cfg.bench.processes
        if rec is None:
            return log.info("%s %s: process %d of %d %s", tick, records.run_name(this.cfg, point), process + 1, n,
                            f"FAILED: {result.failure}" if result.failure else "measured")
        log.info("%s %s: %s", tick, rec.run_name, job.summary(rec))
        try:
            (directory / "mlflow_run_id").write_text(
                tracking.log_record(state.uri, state.experiment_id, rec, directory, state.parent_run_id))
        except Exception as e:  # the record is on disk already; the sweep goes on
            log.error("could not log %s to %s (%s); it is kept in %s: log it later with "
                      "`python -m experiments.upload %s`", rec.run_name, state.uri, e, directory, directory)

    recs = job.run_job(this, out, on_measured, sweep_dir / PEAKS)
    times = job.JobTimes(time.perf_counter() - start, job.measuring_s(recs), len(recs))
    (out / job.TIMES).write_text(times.to_json())
    log.info("job: %.2f s wall, %.2f s measuring, %.2f s fixed cost for %d points", times.wall_s, times.measuring_s,
             times.fixed_s, times.points)


if __name__ == "__main__":
    main()
