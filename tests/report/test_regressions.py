"""A point's runs along an axis: ordering (versions, dates, commits), the series, and the pages history writes."""
import numpy as np
import pandas as pd

from experiments.report import pages, regressions


def runs(values, per_value=2, levels=None):
    """tidy rows: one LeNet inference point, `per_value` runs per value of jax_version, in the order given."""
    rows = []
    for i, v in enumerate(values):
        for k in range(per_value):
            rows.append({"run_id": f"{v}-{k}", "model": "lenet", "op": "inference", "batch_size": 32,
                         "variant": "jax-jit fp32", "device": "cpu", "jax_version": v,
                         "median_s": (levels or {}).get(v, 1e-3), "start_time": pd.Timestamp(2026, 1, 1 + i)})
    return pd.DataFrame(rows)


def medians_of(levels):
    rng = np.random.default_rng(0)
    return lambda run_id, op: list(levels.get(run_id.split("-")[0], 1e-3) * rng.lognormal(0, 0.02, 5))


def test_versions_order_as_versions_and_other_values_as_they_first_ran():
    assert regressions.axis(runs(["0.10.0", "0.9.2", "0.10.10", "0.10.2"]), "jax_version") == [
        "0.9.2", "0.10.0", "0.10.2", "0.10.10"]
    assert regressions.axis(runs(["c3f", "a1b", "b2c"]), "jax_version") == ["c3f", "a1b", "b2c"]  # commits: as they ran


def test_the_series_gathers_every_run_and_process_of_a_value():
    t = runs(["0.10.1", "0.10.0"])
    s = regressions.series(t, "jax_version", medians_of({}))
    assert list(s["value"]) == ["0.10.0", "0.10.1"] and list(s["position"]) == [0, 1]
    assert list(s["runs"]) == [2, 2] and list(s["processes"]) == [10, 10]
    assert s["run_ids"].iloc[0] == "0.10.0-0,0.10.0-1"


def test_history_pages_hold_the_table_the_series_and_a_trend_plot(tmp_path):
    levels = {"0.10.2": 1.4e-3}
    t = runs(["0.10.0", "0.10.1", "0.10.2"])
    s = regressions.series(t, "jax_version", medians_of(levels))
    r = regressions.regressions(s)
    assert list(r["where"]) == ["0.10.2"] and list(r["verdict"]) == ["slower"]
    h = regressions.History(s, r, ["0.10.0", "0.10.1", "0.10.2"], "jax_version")
    files = {p.name for p in pages.write_history(h, tmp_path, "t")}
    assert {"report.md", "report.html", "regressions.csv", "series.csv", "trend_lenet_inference.png"} <= files
    assert "▲ 1.4" in (tmp_path / "report.md").read_text()
    assert pd.read_csv(tmp_path / "regressions.csv")["where"].astype(str).tolist() == ["0.10.2"]
