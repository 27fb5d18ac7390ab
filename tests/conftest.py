"""Shared fixtures: composing the real config, and skipping GPU tests without a GPU."""
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from experiments.config import register

ROOT = Path(__file__).resolve().parent.parent
register()


@pytest.fixture
def make_cfg():
    """Compose the real config with overrides, as `python -m experiments.run` would."""
    def _compose(*overrides: str):
        with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
            return compose(config_name="config", overrides=list(overrides))
    return _compose


def _gpu_visible() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except ImportError:
        return False


def pytest_collection_modifyitems(config, items):
    if _gpu_visible():
        return
    skip = pytest.mark.skip(reason="no CUDA GPU visible")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
