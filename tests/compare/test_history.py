"""History's answer in-process, from a point's series with a known step (1.00 ms, then 1.40 ms at 0.10.2): the
verdict counted, --since, the JSON a script reads, the words printed and the pages written."""
import json

import numpy as np
import pandas as pd
import pytest

from experiments.common.errors import BadInput
from experiments.compare import history
from experiments.report import regressions

VALUES = ["0.10.0", "0.10.1", "0.10.2"]


@pytest.fixture(scope="module")
def judged():
    rows = [{"run_id": f"{v}-{k}", "model": "lenet", "op": "inference", "batch_size": 32, "variant": "jax-jit fp32",
             "device": "cpu", "jax_version": v, "median_s": 1e-3, "start_time": pd.Timestamp(2026, 1, 1 + i)}
            for i, v in enumerate(VALUES) for k in range(3)]
    rng = np.random.default_rng(0)
    level = {"0.10.2": 1.4e-3}
    s = regressions.series(pd.DataFrame(rows), "jax_version",
                           lambda run_id, op: list(level.get(run_id.split("-")[0], 1e-3) * rng.lognormal(0, 0.02, 5)))
    values = regressions.axis(pd.DataFrame(rows), "jax_version")
    return regressions.History(s, regressions.regressions(s, 0.05, 0.05), values, "jax_version")


def test_the_step_is_one_slower_change_since_its_value(judged):
    assert judged.values == VALUES
    assert history.slower(judged) == 1 and history.slower(judged, since="0.10.2") == 1
    assert history.slower(regressions.History(judged.series, judged.regressions.iloc[:0], VALUES, "x")) == 0


def test_the_json_holds_the_axis_the_change_and_each_value(judged):
    said = json.loads(history.as_json(judged))
    assert said["by"] == "jax_version" and said["values"] == VALUES
    (change,) = said["changes"]
    assert (change["where"], change["verdict"]) == ("0.10.2", "slower") and 1.3 < change["ratio"] < 1.5
    assert [p["value"] for p in said["points"]] == VALUES and "process_medians_s" not in said["points"][0]


def test_the_report_counts_and_says_its_verdicts_are_unpaired(judged):
    text = history.report(judged, 0.05, 0.05)
    assert text.startswith("1 points along jax_version: 0.10.0 → 0.10.1 → 0.10.2")
    assert "1 changes (1 slower, 0 faster) in 1 points (threshold 5%, false discovery rate 0.05)" in text
    assert "verdicts unpaired:" in text


def test_the_pages_are_written(judged, tmp_path):
    history.write(judged, tmp_path, "history jax_version")
    assert {"report.md", "regressions.csv", "series.csv"} <= {p.name for p in tmp_path.iterdir()}
    assert "history jax_version" in (tmp_path / "report.md").read_text()


def test_two_sweeps_without_a_shared_point_name_the_fix():
    a = pd.DataFrame([{"model": "lenet", "op": "inference", "batch_size": 32, "variant": "jax-jit fp32"}])
    b = a.assign(model="mlp_relu")
    with pytest.raises(BadInput, match="sweeps A and B share no point .*: select two sweeps of the same points"):
        history.between([a, b], ["A", "B"], "sqlite:///unused.db", 0.05, 0.05)
