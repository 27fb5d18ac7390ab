"""What jax's backend says without opening a device (jax_backend.plugged: a probe beside a TPU one process may
hold), and XLA's FLOP count read from either shape of cost analysis."""
from experiments.common.devices import Present
from experiments.measure.backends import jax_backend


def test_a_tpu_is_seen_only_with_its_plugin(monkeypatch):
    monkeypatch.delenv("TPU_LIBRARY_PATH", raising=False)
    monkeypatch.setattr(jax_backend.importlib.util, "find_spec", lambda name: None)
    assert jax_backend.plugged(Present())["tpu"] == "no TPU"
    assert jax_backend.plugged(Present(("TPU v5 lite",)))["tpu"] == "no TPU plugin (libtpu) installed"
    monkeypatch.setenv("TPU_LIBRARY_PATH", "/opt/libtpu.so")
    said = jax_backend.plugged(Present(("TPU v5 lite",)))
    assert said == {"tpu": None, "gpu": "not looked for beside a TPU", "cpu": None}


def test_the_flop_count_from_either_shape_of_cost_analysis():
    assert jax_backend.cost_flops({"flops": 2.0e6}) == 2_000_000
    assert jax_backend.cost_flops([{"flops": 3.0}]) == 3  # before jax 0.10: one dict per program
