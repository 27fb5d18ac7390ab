"""A sweep's answer for its parent run, on synthetic runs whose answer is known: sentences, geometric means, the
description, the environment line; and report pages that escape what they embed."""
import math

import pandas as pd
import pytest

from experiments.stats.geomean import Evidence
from experiments.report import answer, pages, tables
from tests.report.test_report import BASE, PAIRED, fake_runs, paired_runs
from tests.helpers.judged import judged

TRIAL_BIAS = [-0.02, -0.01, 0.0, 0.01, 0.02]  # each trial's processes move every cell's log ratio alike


def crossing_runs() -> pd.DataFrame:
    """jax-jit 2× faster than torch-eager at bs2, as fast at bs8, 1.5× slower at bs128; intervals ±5% (bs8: ±30%)."""
    rows = []
    for mode, medians in (("torch-eager", {2: 2.0, 8: 4.0, 128: 6.0}), ("jax-jit", {2: 1.0, 8: 4.0, 128: 9.0})):
        for bs, ms in medians.items():
            med, width = ms * 1e-3, 1.3 if bs == 8 else 1.05
            rows.append({"run_id": f"{mode}-{bs}", "tags.mlflow.runName": f"lenet · {mode} · fp32 · bs{bs}",
                         "params.framework": mode.split("-")[0], "params.mode": mode, "params.model": "lenet",
                         "params.precision": "fp32", "params.batch_size": str(bs), "params.device": "cpu",
                         "start_time": pd.Timestamp("2026-01-01"), "metrics.inference_median_s": med,
                         "metrics.inference_p25_s": med, "metrics.inference_p75_s": med,
                         "metrics.inference_ci95_low_s": med / width, "metrics.inference_ci95_high_s": med * width,
                         "metrics.inference_n_samples": 100, "tags.device_name": "cpu", "tags.cpu_model": "EPYC",
                         "tags.jax_version" if mode.startswith("jax") else "tags.torch_version": "1.0",
                         "tags.nnbench_git_commit": "abcdef0123", "tags.unstable": "true" if bs == 8 else "false"})
    return pd.DataFrame(rows)


def test_one_sentence_per_model_and_op_gives_the_range_of_speedups():
    t = tables.tidy(crossing_runs())
    (line,) = answer.sentences(t, "torch-eager fp32")
    assert line == ("lenet inference: jax-jit fp32 is 2.00× faster than torch-eager fp32 at bs2 and 1.50× slower "
                    "at bs128 (1 of 3 within the noise)")
    (same_side,) = answer.sentences(tables.tidy(fake_runs()), "torch-eager fp32")[:1]
    assert same_side == "lenet inference: jax-jit fp32 is 2.00× faster than torch-eager fp32 at every batch size"


def test_geometric_means_are_the_parents_metrics():
    t = tables.tidy(crossing_runs())
    (variant, op, value), = answer.geomeans(t, "torch-eager fp32")
    assert (variant, op) == ("jax-jit fp32", "inference")
    assert value == pytest.approx(math.exp((math.log(2) + math.log(1) + math.log(6 / 9)) / 3))
    assert answer.metrics(t, "torch-eager fp32") == {
        "speedup_inference_jax-jit_fp32_vs_torch-eager_fp32": 1.101}  # 1.1006..., to 4 significant digits


def test_the_description_leads_with_the_answer_and_holds_the_table():
    runs = crossing_runs()
    note = answer.note(tables.tidy(runs), runs, "torch-eager fp32", "6 finished, 0 skipped, 0 failed",
                       ["report.md", "time_lenet_inference.png"])
    first, blank, header, *rest = note.splitlines()
    # plain: the runs table shows its first 50 characters raw; 2× faster at bs2, 1.5× slower at bs128: mixed
    assert first == ("jax-jit fp32 vs torch-eager fp32: inference mixed: 1.50× slower to 2.00× faster (unpaired, 3 "
                     "cells: 1 faster, 1 within the noise, 1 slower; geometric mean 1.10× faster)")
    assert header.startswith("| model ") and "95% re-run interval" in header  # the table right under the headline
    assert "| lenet   | inference |       8 | jax-jit fp32     | 4 ms     | 3.08 ms – 5.2 ms" in note
    assert "(1.00×)" not in note and "UNSTABLE" in note and "2 UNSTABLE" in note  # both bs8 points
    assert not any("unpaired" in line for line in note.splitlines() if line.startswith("|"))  # no paired row
    assert "Unpaired: where a speedup says so" not in note  # runs of old: no design tag
    assert "Environment: cpu (EPYC) · jax 1.0, torch 1.0 · nnbench abcdef0" in note
    assert "Artifacts: `report.md`, `time_lenet_inference.png`" in note


def test_report_pages_escape_what_they_embed(tmp_path):
    pages.write(tables.tidy(fake_runs()), tmp_path, title="nnbench: params.model = '<script>alert(1)</script>'")
    page = (tmp_path / "report.html").read_text()
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_a_speedup_between_frameworks_not_shown_to_compute_the_same_function_is_marked():
    """Parity unchecked on one side: every jax-vs-torch speedup carries the mark and the legend says why; with
    parity ok on both sides, or no parity tag at all (runs written before the check), nothing is marked."""
    runs = crossing_runs()
    runs["tags.parity"] = ["ok" if r.startswith("torch") else "unchecked" for r in runs["run_id"]]
    t = tables.tidy(runs)
    note = answer.note(t, runs, "torch-eager fp32", "6 finished", [])
    assert note.splitlines()[0].startswith("jax-jit fp32 vs torch-eager fp32: inference mixed: ")
    assert note.splitlines()[0].endswith("geometric mean 1.10× faster) †")
    assert answer.sentences(t, "torch-eager fp32")[0].endswith("(1 of 3 within the noise) †")
    assert "| 2.00× †" in note and tables.UNSHOWN_LEGEND in note
    runs["tags.parity"] = "ok"
    for shown in (runs, crossing_runs()):
        note = answer.note(tables.tidy(shown), shown, "torch-eager fp32", "6 finished", [])
        assert tables.UNSHOWN not in note


def test_an_op_left_without_a_number_and_oversubscribed_threads_are_said():
    runs = crossing_runs()
    runs.loc[runs["run_id"] == "torch-eager-2", "tags.oversubscribed"] = "true"
    far = runs.index[runs["run_id"] == "jax-jit-128"]
    runs.loc[far, "metrics.inference_median_s"] = float("nan")
    runs.loc[far, "tags.unmeasured_reason_inference"] = "its processes disagree 63× (0.95 ms to 60 ms)"
    note = answer.note(tables.tidy(runs), runs, "torch-eager fp32", "6 finished", [])
    assert "1 OVERSUBSCRIBED" in note and "OVERSUBSCRIBED: its threads outnumbered the cores free" in note
    assert ("Unmeasured on this machine: lenet · jax-jit · fp32 · bs128 inference: its processes disagree 63× "
            "(0.95 ms to 60 ms).") in note
    assert "| lenet   | inference |     128 | jax-jit" not in note  # no number for it in the table


def evidence(group: str = "lenet") -> list[Evidence]:
    """jax-jit fp32's trials against the baseline, five per cell, each trial's bias the same on every cell."""
    return [Evidence(group, "lenet", "inference", bs, "jax-jit fp32", BASE, list(range(5)),
                     [-math.log(speedup) + b for b in TRIAL_BIAS], judged(1 / speedup, verdict=verdict))
            for bs, (speedup, verdict) in PAIRED.items()]


def test_a_paired_headline_gives_the_geometric_mean_its_interval_and_the_cells_verdicts():
    """The geometric mean of the four speedups is 0.6915 (1.45× slower); the trials' shared bias gives its interval
    (Student's t over five trial means: [1.42, 1.47] slower); three cells are slower, one no change. The unpaired
    variant follows, from its medians."""
    runs = paired_runs()
    t = tables.tidy(runs)
    line = answer.headline(t, BASE, evidence())
    assert line == ("jax-jit fp32 vs torch-eager fp32: inference 1.45× slower [1.42, 1.47] (geometric mean of 4 "
                    "cells: 3 slower, 1 no change); torch-compile fp32 vs torch-eager fp32: inference 1.25× faster "
                    "(unpaired, 4 cells: 4 faster, geometric mean)")
    (paired, unpaired) = answer.overall(t, BASE, evidence())
    assert paired.paired and paired.verdicts == {"slower": 3, "no change": 1} and paired.shown
    assert paired.low < paired.speedup < paired.high and not unpaired.paired and math.isnan(unpaired.low)


def test_cells_that_go_both_ways_make_a_mixed_headline_with_their_range():
    """Three cells 0.61-0.89× (slower) and one 22× (faster): their geometric mean reads 1.73× faster, against three
    of the four; the headline says mixed, names the range of the cells, and gives the mean only beside the count."""
    cells = [Evidence("lenet", "lenet", "inference", bs, "jax-jit fp32", BASE, list(range(5)),
                      [-math.log(speedup) + b for b in TRIAL_BIAS], judged(1 / speedup, verdict=verdict))
             for bs, speedup, verdict in ((2, 0.61, "slower"), (8, 0.75, "slower"), (32, 0.89, "slower"),
                                          (128, 22.0, "faster"))]
    t = tables.tidy(paired_runs())
    (mixed, _) = answer.overall(t, BASE, cells)
    assert mixed.mixed and mixed.speedup == pytest.approx(1.73, abs=0.01)
    assert answer.headline(t, BASE, cells).startswith(
        "jax-jit fp32 vs torch-eager fp32: inference mixed: 1.64× slower to 22.00× faster (4 cells: 3 slower, "
        "1 faster; geometric mean 1.73× faster [")
    (same_way, _) = answer.overall(t, BASE, evidence())
    assert not same_way.mixed and same_way.words().endswith("(geometric mean of 4 cells: 3 slower, 1 no change)")


def test_the_paired_answer_names_its_metrics_and_slower_cells_and_the_design():
    runs = paired_runs()
    t = tables.tidy(runs)
    m = answer.metrics(t, BASE, evidence())
    name = "speedup_inference_jax-jit_fp32_vs_torch-eager_fp32"
    assert {k: v for k, v in m.items() if k.startswith(name)} == {
        name: 0.6915, f"{name}_ci95_low": 0.6781, f"{name}_ci95_high": 0.7052}
    cells = {k: v for k, v in m.items() if "_bs" in k}
    assert cells == {f"speedup_inference_bs{bs}_lenet_jax-jit_fp32_vs_torch-eager_fp32": pytest.approx(speedup)
                     for bs, (speedup, _) in PAIRED.items()}
    assert m["speedup_inference_torch-compile_fp32_vs_torch-eager_fp32"] == 1.25
    assert "speedup_inference_torch-compile_fp32_vs_torch-eager_fp32_ci95_low" not in m  # unpaired: no interval
    assert answer.slower(t, BASE) == ["lenet inference bs2 jax-jit fp32 1.52× slower [1.47, 1.56]",
                                      "lenet inference bs8 jax-jit fp32 1.43× slower [1.39, 1.47]",
                                      "lenet inference bs128 jax-jit fp32 2.00× slower [1.94, 2.06]"]
    assert answer.sentences(t, BASE)[0] == ("lenet inference: jax-jit fp32 is 1.01× (bs32) to 2.00× (bs128) slower "
                                            "than torch-eager fp32 (1 of 4 no change)")
    note = answer.note(t, runs, BASE, "12 finished", [], evidence())
    assert note.splitlines()[0] == answer.headline(t, BASE, evidence())
    assert "Paired: each cell's variants took turns" in note and "- jax-jit fp32: layout nhwc vs contiguous" in note
    assert "Unpaired: where a speedup says so" in note


def test_the_design_says_how_each_variant_took_turns_with_the_baseline():
    """The points' tag `paired_design` (a device one process at a time may open): the description says how the cell's
    variants took turns, and per variant which way; points without it (bursts, or a store's older points) say it once,
    as before."""
    runs = paired_runs()
    lines = answer.design(runs, BASE)
    assert [ln for ln in lines if ln.startswith("- ")] == ["- jax-jit fp32: layout nhwc vs contiguous"]
    jax, base = runs["tags.variant"] == "jax-jit fp32", runs["tags.paired_baseline"] == "true"
    runs.loc[jax | base, "tags.paired_design"] = "alternating"
    first, *rest = answer.design(runs, BASE)
    assert "ran as whole workers one after another in each trial" in first and "short bursts" not in first
    assert "- jax-jit fp32 (alternating): layout nhwc vs contiguous" in rest
    runs.loc[jax, "tags.paired_design"], runs.loc[base, "tags.paired_design"] = "in-process", "bursts+in-process"
    first, *rest = answer.design(runs, BASE)
    assert "short bursts of warm workers" in first and "inside one warm worker" in first
    assert "- jax-jit fp32 (in-process): layout nhwc vs contiguous" in rest


def test_metric_names_that_hold_long_interpreter_paths_stay_within_what_mlflow_takes():
    """Variants along runtime.python are labelled by their interpreters' paths: two long ones that differ only in
    the middle give distinct names of at most 250 characters, which keep their start, their end and their suffix."""
    label = "torch-eager fp32 runtime.python=/home/runner/work/an-organisation-s-project/an-organisation-s-project/{}" \
            "/.venv/bin/python"
    base, heads = label.format("base"), [label.format(side) for side in ("head", "head-rebased")]
    names = [answer.metric_name(h, op, base, suffix) for h in heads for op in ("inference", "inference_bs32_lenet")
             for suffix in ("", "_ci95_low", "_ci95_high")]
    assert len(set(names)) == len(names) and max(map(len, names)) <= 250
    assert len(f"speedup_inference_{heads[0]}_vs_{base}") > 250
    assert all(n.startswith("speedup_inference") and n.removesuffix("_ci95_low").removesuffix("_ci95_high")
               .endswith("bin/python") for n in names)
    assert answer.metric_name("jax-jit fp32", "inference", "torch-eager fp32", "_ci95_low") == (
        "speedup_inference_jax-jit_fp32_vs_torch-eager_fp32_ci95_low")  # a short name stays whole


def test_each_paired_cell_gives_the_parent_its_minimum_detectable_effect():
    from experiments.stats.paired import judge_pairs

    logs = [0.05, 0.07, 0.06, 0.08, 0.04]
    (c,) = judge_pairs([logs], 0.03, 0.05)
    e = Evidence("lenet", "lenet", "inference", 32, "jax-jit fp32", BASE, list(range(5)), logs, c)
    m = answer.metrics(tables.tidy(paired_runs()), BASE, [e])
    assert m["speedup_inference_bs32_lenet_jax-jit_fp32_vs_torch-eager_fp32_mde"] == float(f"{c.mde:.4g}") >= 1.03
