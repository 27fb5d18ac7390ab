"""What a Hydra job says when the harness itself fails: one line naming where its finished points are, and the
traceback only with NNBENCH_DEBUG=1."""
import logging

import pytest

from experiments.sweep import hydra_job


@pytest.mark.parametrize("debug", [False, True])
def test_a_harness_error_is_one_line_and_a_traceback_only_when_asked(tmp_path, caplog, monkeypatch, debug):
    monkeypatch.delenv("NNBENCH_DEBUG", raising=False)
    if debug:
        monkeypatch.setenv("NNBENCH_DEBUG", "1")
    with caplog.at_level(logging.ERROR, logger="nnbench"):
        try:
            raise ZeroDivisionError("float division by zero")
        except ZeroDivisionError as e:
            hydra_job.harness_error(tmp_path, e)
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0] == (f"job {tmp_path} stopped by a harness error (float division by zero); the points it "
                        f"finished are kept in {tmp_path}")
    assert len(lines) == (2 if debug else 1)
    assert not debug or "Traceback" in lines[1] and "ZeroDivisionError" in lines[1]


def test_the_entry_point_registers_the_schema_its_config_is_checked_against():
    from hydra.core.config_store import ConfigStore

    from experiments import run

    assert callable(run.main) and "schema.yaml" in ConfigStore.instance().repo
