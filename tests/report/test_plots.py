"""The figures (report.plots) drawn from plain data: a run's samples, each op's PNG; a point with nothing to draw
(no FLOP count for MFU, no speedup but the baseline's) gets no file."""
import pandas as pd

from experiments.report import plots

PNG = b"\x89PNG"


def test_a_runs_samples_are_one_png_with_a_row_per_op(tmp_path):
    samples = {"inference": {"samples_s": [1e-3, 1.1e-3, 0.9e-3] * 5, "block": 4},
               "training": {"samples_s": [3e-3] * 8, "block": 1, "processes": [{}, {}]}}
    path = plots.plot_samples(samples, tmp_path / "samples.png")
    assert path.read_bytes().startswith(PNG)


def test_nothing_to_draw_is_no_file(tmp_path):
    t = pd.DataFrame([{"model": "lenet", "op": "inference", "batch_size": b, "variant": "jax-jit fp32",
                       "label": "jax-jit fp32", "device": "cpu", "run_id": f"r{b}", "mode": "jax-jit",
                       "precision": "fp32", "framework": "jax", "median_s": 1e-3 * b, "p25_s": 0.9e-3 * b,
                       "p75_s": 1.1e-3 * b, "ci95_low_s": 0.95e-3 * b, "ci95_high_s": 1.05e-3 * b, "n_samples": 30,
                       "mfu": None} for b in (8, 32)])
    assert plots.plot_lines(t, "lenet", "inference", tmp_path / "mfu.png", y="mfu") is None
    assert plots.plot_lines(t, "lenet", "inference", tmp_path / "t.png").read_bytes().startswith(PNG)
    assert not (tmp_path / "mfu.png").exists()
