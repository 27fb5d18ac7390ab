"""Synthetic results, as a worker reports them. Light to import: the stand-in worker (tests/helpers/fake_worker.py),
started for every probe, fork server and worker of a stand-in sweep, imports it rather than tests.helpers (models,
the config, omegaconf: twice its CPU at each start)."""
from experiments.common.protocol import Measurement, OpResult
from experiments.measure.stats import summarize


def ok_op(median: float, batch: int, samples: list[float] | None = None) -> OpResult:
    """A measured op with known samples (default: six at `median`), as the worker reports it."""
    m = Measurement(samples or [median] * 6, block=1, first_call_s=0.01, stop_reason="ci", elapsed_s=0.1)
    return OpResult("ok", device="cpu", measurement=m, stats=summarize([m], batch), calls_per_block=m.block)
