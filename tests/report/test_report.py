"""Report data on synthetic runs: one line per variant at the right batch sizes, speedups (paired ones with their
interval and verdict), tables."""
import pandas as pd
import pytest

from experiments.common.protocol import STATS
from experiments.report import pages, tables
from experiments.store.select import filter_string

BASE = "torch-eager fp32"
# jax-jit fp32 measured paired against torch-eager fp32 at four batch sizes: its speedups (the baseline's time over
# its own: below 1, slower), each with a ±3% interval, and their verdicts; torch-compile fp32 measured unpaired.
PAIRED = {2: (0.66, "slower"), 8: (0.70, "slower"), 32: (0.99, "no change"), 128: (0.5, "slower")}


def fake_runs():
    """Rows shaped like mlflow.search_runs output: torch eager and jax jit, LeNet inference and training."""
    rows = []
    for fw, mode, scale in (("torch", "torch-eager", 1.0), ("jax", "jax-jit", 0.5)):
        for bs in (2, 8, 32, 128):
            row = {"run_id": f"{mode}-{bs}", "tags.mlflow.runName": f"lenet · {mode} · fp32 · bs{bs}",
                   "params.framework": fw, "params.mode": mode, "params.model": "lenet", "params.precision": "fp32",
                   "params.batch_size": str(bs), "params.device": "cpu", "tags.outcome": "ok",
                   "tags.mlflow.parentRunId": "p", "start_time": pd.Timestamp("2026-01-01")}
            for op, factor in (("inference", 1e-4), ("training", 5e-4)):
                if op == "training" and bs < 32:
                    continue
                med = factor * bs * scale
                row |= {f"metrics.{op}_{s}": med for s in STATS}
                row |= {f"metrics.{op}_p25_s": med * 0.9, f"metrics.{op}_p75_s": med * 1.1,
                        f"metrics.{op}_throughput_samples_per_s": bs / med}
            rows.append(row)
    rows.append({"run_id": "parent", "tags.mlflow.runName": "sweep", "tags.nnbench.sweep": "true"})
    return pd.DataFrame(rows)


def run(mode: str, bs: int, ms: float, **extra) -> dict:
    """A point run of lenet inference at `ms` per call, its interval ±2%."""
    med = ms * 1e-3
    return {"run_id": f"{mode}-{bs}", "tags.mlflow.runName": f"lenet · {mode} · fp32 · bs{bs}",
            "params.framework": mode.split("-")[0], "params.mode": mode, "params.model": "lenet",
            "params.precision": "fp32", "params.batch_size": str(bs), "params.device": "cpu",
            "start_time": pd.Timestamp("2026-01-01"), "metrics.inference_median_s": med,
            "metrics.inference_p25_s": med, "metrics.inference_p75_s": med, "metrics.inference_ci95_low_s": med / 1.02,
            "metrics.inference_ci95_high_s": med * 1.02, "metrics.inference_n_samples": 100, **extra}


def paired_runs() -> pd.DataFrame:
    """torch-eager fp32 (the baseline) and jax-jit fp32 measured paired, as the store writes them (tags design,
    variant, compared_with, inference_verdict, differs; metrics inference_speedup*): their medians alone would
    say 0.8×; torch-compile fp32 measured unpaired, 1.25× faster by its medians."""
    rows = []
    for bs, (speedup, verdict) in PAIRED.items():
        rows.append(run("torch-eager", bs, 1.0, **{"tags.design": "paired", "tags.variant": BASE,
                                                   "tags.compared_with": BASE, "tags.paired_baseline": "true"}))
        rows.append(run("jax-jit", bs, 1.25, **{
            "tags.design": "paired", "tags.variant": "jax-jit fp32", "tags.compared_with": BASE,
            "tags.inference_verdict": verdict, "tags.differs": "layout nhwc vs contiguous",
            "metrics.inference_speedup": speedup, "metrics.inference_speedup_ci95_low": speedup * 0.97,
            "metrics.inference_speedup_ci95_high": speedup * 1.03, "metrics.inference_speedup_trials": 5.0}))
        rows.append(run("torch-compile", bs, 0.8, **{"tags.design": "unpaired"}))
    return pd.DataFrame(rows)


def test_tidy_has_one_row_per_measured_op_and_drops_the_parent():
    t = tables.tidy(fake_runs())
    assert len(t) == 2 * (4 + 2)
    assert set(t["variant"]) == {"torch-eager fp32", "jax-jit fp32"} and "parent" not in set(t["run_id"])


def test_time_series_has_one_line_per_variant_at_the_seed_batch_sizes():
    t = tables.tidy(fake_runs())
    inf = tables.series(t, "lenet", "inference")
    assert sorted(inf) == ["jax-jit fp32", "torch-eager fp32"]
    for d in inf.values():
        assert list(d["batch_size"]) == [2, 8, 32, 128]
        assert (d["lo"] <= d["y"]).all() and (d["y"] <= d["hi"]).all()
    train = tables.series(t, "lenet", "training")
    assert all(list(d["batch_size"]) == [32, 128] for d in train.values())
    assert list(train["torch-eager fp32"]["y"]) == pytest.approx([5e-4 * 32, 5e-4 * 128])


def test_replicate_runs_fold_into_a_point_with_its_parity_and_flags():
    """A point's runs (repeat=0,1,...) fold into one row: its parity "ok" where every run says ok or none has the
    tag, else "failed" where one failed, else "unchecked"; a flag set where any run has it."""
    cases = {2: (["ok", "ok"], "ok"), 8: ([None, None], "ok"), 32: (["ok", None], "unchecked"),
             128: (["ok", "failed"], "failed"), 512: (["unchecked", "ok"], "unchecked")}
    runs = pd.DataFrame([run("jax-jit", bs, ms, run_id=f"{bs}-{i}", **{"tags.parity": parity,
                                                                    "tags.noisy": "true" if bs == 8 and i else "false"})
                         for bs, (parities, _) in cases.items() for i, (parity, ms) in
                         enumerate(zip(parities, (1.0, 3.0)))])
    p = tables.points(tables.tidy(runs)).set_index("batch_size")
    assert p["parity"].to_dict() == {bs: want for bs, (_, want) in cases.items()}
    assert p["noisy"].to_dict() == {bs: bs == 8 for bs in cases} and not p["unstable"].any()
    assert p["runs"].eq(2).all() and p["median_s"].eq(2e-3).all() and p["run_id"][2] == "2-0,2-1"


def test_throughput_series_is_batch_over_time():
    t = tables.tidy(fake_runs())
    d = tables.series(t, "lenet", "inference", y="throughput_samples_per_s")["jax-jit fp32"]
    assert list(d["y"]) == pytest.approx([bs / (1e-4 * bs * 0.5) for bs in (2, 8, 32, 128)])
    assert (d["lo"] <= d["y"]).all() and (d["y"] <= d["hi"]).all()


def test_speedups_against_the_baseline():
    s = tables.speedups(tables.tidy(fake_runs()), "torch-eager fp32")
    assert set(s[s["variant"] == "jax-jit fp32"]["speedup"].round(6)) == {2.0}
    assert set(s[s["variant"] == "torch-eager fp32"]["speedup"]) == {1.0}


def test_write_makes_every_file(tmp_path):
    files = pages.write(tables.tidy(fake_runs()), tmp_path)
    assert {"report.md", "report.html", "summary.csv", "speedup.png", "time_lenet_inference.png",
            "time_lenet_training.png", "throughput_lenet_inference.png"} <= set(files)
    assert "data:image/png;base64," in (tmp_path / "report.html").read_text()
    csv = pd.read_csv(tmp_path / "summary.csv")
    assert len(csv) == 12 and csv["speedup_vs_torch-eager_fp32"].max() == pytest.approx(2.0)


def test_missing_baseline_leaves_out_the_speedup_chart(tmp_path):
    files = pages.write(tables.tidy(fake_runs()), tmp_path, baseline="torch-compile bf16")
    assert "speedup.png" not in files and "baseline torch-compile bf16 is not in this selection" in (
        tmp_path / "report.md").read_text()


def test_filter_string_maps_params_and_tags():
    assert filter_string(["model=lenet", "torch_version=2.13.0"], None, None) == (
        "params.model = 'lenet' and tags.torch_version = '2.13.0'")
    assert filter_string([], "metrics.inference_median_s < 0.01", "abc") == (
        "tags.mlflow.parentRunId = 'abc' and metrics.inference_median_s < 0.01")
    with pytest.raises(ValueError, match="not key=value"):
        filter_string(["lenet"], None, None)


def profiled_runs():
    """fake_runs with training bs32 and bs128 profiled: jax spends 3 ms more in the optimizer at bs128."""
    df = fake_runs()
    for i, r in df.iterrows():
        if r.get("params.mode") and r["params.batch_size"] in ("32", "128"):
            jax, big = r["params.mode"] == "jax-jit", r["params.batch_size"] == "128"
            for p, ms in {"conv": 2.0, "optimizer": 4.0 if jax and big else 1.0, "overhead": 0.5}.items():
                df.loc[i, f"metrics.training_time_{p}_s"] = ms * 1e-3
            df.loc[i, "metrics.training_profile_wall_s"] = (7.5 if jax and big else 4.5) * 1e-3
    return df


def test_breakdown_and_the_part_that_differs_most(tmp_path):
    t = tables.tidy(profiled_runs())
    b = tables.breakdown(t)
    assert len(b) == 4 and list(b["variant"][:2]) == ["torch-eager fp32", "jax-jit fp32"]  # the baseline first
    assert b["time_norm_s"].fillna(0).eq(0).all()
    assert tables.differences(b) == [
        "torch-eager vs jax-jit, lenet training bs32: convolution 2 vs 2 ms (step 4.5 vs 4.5 ms)",
        "torch-eager vs jax-jit, lenet training bs128: optimizer update 1 vs 4 ms (step 4.5 vs 7.5 ms)"]
    files = pages.write(t, tmp_path)
    assert {"breakdown.csv", "breakdown_lenet_training_bs32.png", "breakdown_lenet_training_bs128.png"} <= set(files)
    md = (tmp_path / "report.md").read_text()
    assert "## Where one step's time goes" in md and "optimizer update 1 vs 4 ms" in md
    assert "breakdown.csv" not in pages.write(tables.tidy(fake_runs()), tmp_path / "plain")


def test_paired_rows_carry_their_interval_and_verdict_in_the_tables():
    """speedups takes a paired point's own speedup, interval and verdict (not its medians' 0.8); the Markdown shows
    the interval, parentheses where the verdict is neither slower nor faster, and `unpaired` on the rows of a table
    that has both."""
    t = tables.tidy(paired_runs())
    s = tables.speedups(t, BASE).set_index(["variant", "batch_size"])
    jax = s.loc["jax-jit fp32"]
    assert list(jax["speedup"]) == [0.66, 0.70, 0.99, 0.5] and jax["paired"].all()
    assert list(jax["speedup_low"]) == pytest.approx([x * 0.97 for x in (0.66, 0.70, 0.99, 0.5)])
    assert list(jax["sure"]) == [True, True, False, True] and list(jax["verdict"]) == [v for _, v in PAIRED.values()]
    assert s.loc["torch-compile fp32", "speedup"].tolist() == pytest.approx([1.25] * 4)
    assert not s.loc["torch-compile fp32", "paired"].any() and s.loc[BASE, "paired"].all()
    summary = tables.summary(t, BASE).set_index(["variant", "batch_size"])
    assert summary.loc[("jax-jit fp32", 32), "speedup_vs_torch-eager_fp32"] == 0.99
    assert summary.loc[("jax-jit fp32", 32), "speedup_high"] == pytest.approx(0.99 * 1.03)
    assert bool(summary.loc[("jax-jit fp32", 32), "speedup_paired"]) and not summary.loc[("jax-jit fp32", 32),
                                                                                          "speedup_sure"]
    md = tables.markdown(tables.summary(t, BASE))
    cells = {(line.split("|")[3].strip(), line.split("|")[4].strip()): line.split("|")[-3].strip()
             for line in md.splitlines()[2:]}
    assert cells[("2", "jax-jit fp32")] == "0.66× [0.64, 0.68]"
    assert cells[("32", "jax-jit fp32")] == "(0.99×) [0.96, 1.02]"  # no change: in parentheses
    assert cells[("2", "torch-compile fp32")] == "1.25× unpaired" and cells[("2", BASE)] == "1.00×"
    alone = tables.summary(t[t["variant"] != "torch-compile fp32"], BASE)
    assert "unpaired" not in tables.markdown(alone)  # every speedup paired: no marker


def test_a_paired_report_keeps_each_speedups_interval(tmp_path):
    """report.md shows a paired speedup's interval; summary.csv keeps its bounds and whether it was paired."""
    t = tables.tidy(paired_runs())
    assert t.loc[t["variant"] == "jax-jit fp32", "paired_speedup_trials"].tolist() == [5.0] * 4
    pages.write(t, tmp_path, BASE)
    assert "0.66× [0.64, 0.68]" in (tmp_path / "report.md").read_text()
    csv = pd.read_csv(tmp_path / "summary.csv").set_index(["variant", "batch_size"])
    assert csv.loc[("jax-jit fp32", 128), "speedup_low"] == pytest.approx(0.485)
    assert csv.loc[("jax-jit fp32", 128), "speedup_paired"] and not csv.loc[("torch-compile fp32", 128),
                                                                             "speedup_paired"]


def test_a_variant_timed_synced_and_pipelined_is_two_lines_not_replicates():
    """bench.sync=synced,pipelined: each policy's points stay apart, named by it; a variant timed one way keeps its
    name (jax pipelined on a TPU beside torch synced on the CPU)."""
    runs = pd.DataFrame([run("jax-jit", 128, 0.59, **{"params.sync": "synced"}),
                         run("jax-jit", 128, 0.14, **{"params.sync": "pipelined", "run_id": "jax-jit-128-p"}),
                         run("torch-eager", 128, 2.5, **{"params.sync": "synced"})])
    assert sorted(tables.points(tables.tidy(runs))["variant"]) == ["jax-jit fp32 pipelined", "jax-jit fp32 synced",
                                                                  "torch-eager fp32"]
