"""`hydra/launcher=slurm` (conf/hydra/launcher/slurm.yaml): hydra-submitit-launcher's SLURM launcher, where a job
that ends without a result costs only its own points. It runs in the process that runs the sweep and waits for
its jobs; the jobs unpickle it on the nodes.

A job's result is the pickle submitit writes when the job returns. A job killed from outside (past SLURM's grace
time after a cancel, by the kernel's OOM killer, with its node) writes none, and submitit raises for it
(`UncompletedJobError`); Hydra's basic sweeper would then raise too and skip the sweep's end, leaving its parent
run RUNNING. Here such a job is one logged line and an empty return: the sweep waits for its other jobs, then
ends, counting that job's missing points as lost. A requeued job writes its result only in its last run, so the
sweep waits across requeues.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Sequence

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, filter_overrides
from omegaconf import OmegaConf

try:
    from hydra_plugins.hydra_submitit_launcher import config, submitit_launcher
except ImportError:  # no [slurm] extra: Hydra imports every plugin module at start, so no warning here
    submitit_launcher = None

log = logging.getLogger("nnbench")


class SlurmLauncher(submitit_launcher.SlurmLauncher if submitit_launcher else object):
    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        """As hydra-submitit-launcher 1.2's `launch`, but each job's missing result is caught."""
        import submitit  # the plugin's own lazy import: Hydra lists launchers without importing submitit

        from submitit.core.utils import FailedJobError, UncompletedJobError

        assert self.config is not None
        init_keys = {"max_num_timeout", "python"}  # executor arguments (python: in the plugin's later releases)
        executor = submitit.AutoExecutor(cluster=self._EXECUTOR, folder=self.params["submitit_folder"],
                                         **{f"{self._EXECUTOR}_{k}": v for k, v in self.params.items()
                                            if k in init_keys})
        shared = set(OmegaConf.structured(config.BaseQueueConf).keys())
        executor.update_parameters(**{k if k in shared else f"{self._EXECUTOR}_{k}": v
                                      for k, v in self.params.items() if k not in init_keys | {"submitit_folder"}})
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        if "mode" in self.config.hydra.sweep:
            os.chmod(sweep_dir, mode=int(str(self.config.hydra.sweep.mode), 8))
        params = []
        for idx, overrides in enumerate(job_overrides, start=initial_job_idx):
            log.info("\t#%d : %s", idx, " ".join(filter_overrides(overrides)))
            params.append((list(overrides), "hydra.sweep.dir", idx, f"job_id_for_{idx}", Singleton.get_state()))
        jobs = executor.map_array(self, *zip(*params))
        out = []
        for job, overrides in zip(jobs, job_overrides):
            try:
                out.append(job.results()[0])
            except (UncompletedJobError, FailedJobError):  # killed from outside: its points are missing at the end
                log.error("SLURM job %s ended without a result (state %s): its points count as lost; its log: %s",
                          job.job_id, job.state, job.paths.stdout)
                out.append(JobReturn(overrides=list(overrides), status=JobStatus.COMPLETED, _return_value=None))
        return out
