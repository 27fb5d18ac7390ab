"""The GPU check: says plainly when there is no GPU; on a GPU, every run of the README sweep is on it."""
import pytest

from experiments.selfcheck import gpucheck
from tests.helpers import nnbench


@pytest.mark.skipif(gpucheck.gpu_visible(), reason="a GPU is visible")
def test_without_a_gpu_it_runs_nothing_and_says_so(tmp_path):
    r = nnbench("gpucheck", ["--out", str(tmp_path)], tmp_path)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "nnbench gpucheck: error: no GPU visible (nvidia-smi -L lists none): nothing was run; run it on a machine with "
        "a GPU"]
    assert not list(tmp_path.iterdir())


@pytest.mark.gpu
@pytest.mark.slow
def test_readme_sweep_runs_on_the_gpu(tmp_path):
    r = nnbench("gpucheck", ["--only", "readme", "--out", str(tmp_path)], tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "1 of 1 sweeps ran every point on the GPU" in r.stdout
