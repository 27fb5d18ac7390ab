"""One op exported as a worker builds it (`python -m experiments.measure.step_export`), in-process: the files a
script with the framework alone loads, or one line saying why there are none."""
import json

from experiments.common.protocol import Export, Setup
from experiments.measure import step_export

FP32 = Setup("fp32", "cpu", compile=True, memory_format="nhwc")


def test_a_jax_step_is_written_as_its_program_and_its_arguments(tmp_path, capsys):
    e = Export("jax", FP32, {"name": "mlp_relu"}, 0, "inference", 2, str(tmp_path / "a"))
    assert step_export.main(e.to_json()) == 0
    files = capsys.readouterr().out.split()
    assert files == [str(tmp_path / "a.jax"), str(tmp_path / "a.npz")]
    assert all((tmp_path / f).stat().st_size > 0 for f in ("a.jax", "a.npz"))


def test_a_backend_that_exports_nothing_says_so_in_one_line(tmp_path, capsys):
    e = Export("numpy", Setup("fp32", "cpu"), {"name": "mlp_relu"}, 0, "inference", 2, str(tmp_path / "a"))
    assert step_export.main(json.dumps(json.loads(e.to_json()))) == 3
    said = capsys.readouterr()
    assert said.out == "" and said.err == "Unsupported: the numpy backend exports no step\n"
    assert not list(tmp_path.iterdir())
