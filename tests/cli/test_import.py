"""`nnbench import`: saved TIMING/METADATA lines in, runs out, once per file."""
import pytest

from experiments import cli
from tests.helpers import runs


@pytest.mark.slow
def test_import_logs_a_file_once(tmp_path, capsys):
    """A saved TIMING output (here, the seed page's own kind of lines) becomes runs, and only once."""
    text = "".join(f"{line}\n" for line in (
        "METADATA\tLux device\tcpu", "METADATA\tJAX device\tcpu",
        "TIMING\tLux\tmlp_relu\tinference\t32\t0.0004", "TIMING\tLux\tmlp_relu\ttraining\t32\t0.0021",
        "TIMING\tJAX\tmlp_relu\tinference\t32\t0.0006"))
    (tmp_path / "seed.tsv").write_text(text)
    uri = f"sqlite:///{tmp_path}/store.db"
    args = ["import", str(tmp_path / "seed.tsv"), "--framework-map", "JAX=jax-jit", "--uri", uri]
    assert cli.main(args) == 0
    df = runs(uri)
    assert sorted(df["params.mode"]) == ["Lux", "jax-jit"] and set(df["tags.imported"]) == {"true"}
    lux = df[df["params.mode"] == "Lux"].iloc[0]
    assert lux["metrics.inference_median_s"] == 0.0004 and lux["metrics.training_median_s"] == 0.0021
    assert lux["params.framework"] == "external" and lux["params.device"] == "cpu"
    assert cli.main(args) == 0
    assert "was imported before (2 runs" in capsys.readouterr().out
    assert len(runs(uri)) == 2
