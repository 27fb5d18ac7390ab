"""A file of seed 000's lines as records: one per framework, model and batch size, its variant mapped (nnbench's, or
an external framework's own name), tagged with the file it came from."""
import pytest

from experiments.store import imported_lines

LINES = "\n".join([
    "METADATA\tJAX device\tcpu", "METADATA\tLux device\tcpu",
    "TIMING\tJAX\tlenet\tinference\t32\t0.00123", "TIMING\tJAX\tlenet\ttraining\t32\t0.004",
    "TIMING\tJAX\tlenet\tinference\t128\t0.003", "TIMING\tLux\tlenet\tinference\t32\t0.002", ""])


def test_one_record_per_framework_model_and_batch():
    recs = imported_lines.records_of(LINES, {"JAX": "jax-jit"}, "fp32", "abc123", "timings.txt")
    by = {(r.params["framework"], r.params["batch_size"]): r for r in recs}
    assert set(by) == {("jax", "32"), ("jax", "128"), ("external", "32")}
    jax32 = by[("jax", "32")]
    assert jax32.params["ops"] == "inference,training" and jax32.params["compile"] == "true"
    assert jax32.metrics["inference_median_s"] == pytest.approx(0.00123)
    assert jax32.tags | {"imported": "true", "import_sha256": "abc123", "import_file": "timings.txt",
                         "imported_name": "JAX"} == jax32.tags
    assert by[("external", "32")].tags["imported_name"] == "Lux"  # not an nnbench variant: its own name


def test_an_unknown_operation_names_the_fix():
    with pytest.raises(ValueError, match="operation 'predict' is not one of .*: fix the file's TIMING lines"):
        imported_lines.records_of("TIMING\tJAX\tlenet\tpredict\t32\t0.001\n", {}, "fp32", "x", "f.txt")
