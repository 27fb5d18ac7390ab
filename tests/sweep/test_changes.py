"""A paired sweep's points read back from its dir (sweep.changes): each compared point found with the point it was
compared with, in the same cell (same batch size and fixed config), and no profile change where none was profiled."""
from experiments.store import sweepdir
from experiments.store.records import Record
from experiments.sweep import changes


def point(job, variant: str, compared_with: str | None, batch: int = 32, model: str = "lenet"):
    tags = {"variant": variant} | ({"compared_with": compared_with, "inference_verdict": "slower"} if compared_with
                                   else {})
    rec = Record(f"{model} bs{batch} {variant}", f"{model}-{variant}-bs{batch}", "ok",
                 {"model": model, "batch_size": str(batch), "ops": "inference"}, {"inference_median_s": 1e-3}, tags,
                 config={"model": {"name": model}, "framework": {"name": variant}})
    d = sweepdir.point_dir(job, rec.slug)
    rec.save(d)
    return d


def test_each_compared_point_is_found_with_its_own_cells_baseline(tmp_path):
    leader = tmp_path / "sweep" / "0"
    a32, b32 = point(sweepdir.job_dir(leader, 0), "jax", None), point(sweepdir.job_dir(leader, 1), "torch", "jax")
    a8 = point(sweepdir.job_dir(leader, 0), "jax", None, batch=8)
    b8 = point(sweepdir.job_dir(leader, 1), "torch", "jax", batch=8)
    other = point(sweepdir.job_dir(leader, 2), "torch", "jax", model="mlp_relu")  # its cell has no jax point
    loaded = changes.points(tmp_path / "sweep")
    assert set(loaded) == {a32, b32, a8, b8, other}
    assert changes.bases(loaded) == {b32: a32, b8: a8}
    assert changes.change(a32, b32, "inference") is None  # neither side profiled
    assert changes.said(tmp_path / "sweep") == []
