"""A user's own network: loading it (a file, an installed package's entry point), the one-line errors, both backends
preparing it, the parity check with a weight map, its FLOPs' source and the fork server's refusal. (A sweep of one
from the user's directory: tests/models/test_weights.py.)"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hydra.errors import HydraException

import models
from experiments.common.config import OPS, logged, register
from experiments.common.protocol import Point, Request, Setup
from experiments.measure import parity
from experiments.measure.backends import Unsupported, load
from experiments.measure.parity import counted
from experiments.sweep import hydra_errors, preflight
from tests.helpers import FORMAT, ROOT, budget

# A small MLP in both frameworks, the weight map from the Flax side's paths to the torch side's names.
MLP = '''
import functools
import torch
from flax import nnx
import models


class TorchMLP(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(32, width), torch.nn.Linear(width, 10)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class FlaxMLP(nnx.Module):
    def __init__(self, width, rngs):
        self.fc1, self.fc2 = nnx.Linear(32, width, rngs=rngs), nnx.Linear(width, 10, rngs=rngs)

    def __call__(self, x):
        return self.fc2(nnx.relu(self.fc1(x)))


WEIGHTS = {"fc1.kernel": "fc1.weight", "fc1.bias": "fc1.bias", "fc2.kernel": "fc2.weight", "fc2.bias": "fc2.bias"}


def build(width: int = 16, weights: str = "map"):
    # swapped: the biases swapped, the same shapes when width == 10: a map that loads and computes another
    # function; crossed: fc1's kernel read untransposed, which only a square kernel's shape would let through
    mapping = {"map": WEIGHTS, "none": None, "swapped": {**WEIGHTS, "fc1.bias": "fc2.bias", "fc2.bias": "fc1.bias"},
               "crossed": {**WEIGHTS, "fc1.kernel": ("fc1.weight", (0, 1))}}[weights]
    return models.Network(torch=functools.partial(TorchMLP, width), flax=lambda: FlaxMLP(width, nnx.Rngs(0)),
                          input=models.Array((32,)), target=models.Labels(10), loss="cross_entropy",
                          batch_sizes={"inference": (2, 8), "training": (8,)}, weights=mapping)
'''

# A conv net on images (torch NCHW, Flax NHWC) with BatchNorm, its running statistics mapped too; torch only
# when asked.
CONV = '''
import torch
from flax import nnx
import models


def torch_net():
    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                               torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 5))


class FlaxNet(nnx.Module):
    def __init__(self, rngs):
        self.conv = nnx.Conv(3, 4, (3, 3), padding=1, rngs=rngs)
        self.bn = nnx.BatchNorm(4, momentum=0.9, epsilon=1e-5, rngs=rngs)
        self.fc = nnx.Linear(4 * 6 * 6, 5, rngs=rngs)

    def __call__(self, x):
        h = nnx.relu(self.bn(self.conv(x)))
        return self.fc(h.transpose(0, 3, 1, 2).reshape(x.shape[0], -1))  # flattened as torch does: (c, h, w)


def build(torch_only: bool = False):
    weights = {"conv.kernel": "0.weight", "conv.bias": "0.bias", "bn.scale": "1.weight", "bn.bias": "1.bias",
               "bn.mean": "1.running_mean", "bn.var": "1.running_var", "fc.kernel": "4.weight", "fc.bias": "4.bias"}
    return models.Network(torch=torch_net, flax=None if torch_only else lambda: FlaxNet(nnx.Rngs(0)),
                          input=models.Image(6, 6, 3), target=models.Labels(5), loss="cross_entropy",
                          batch_sizes={"inference": (4,), "training": (4,)}, weights=None if torch_only else weights,
                          flops=(lambda op, batch: 1000 * batch) if torch_only else None)
'''

FLAX_ONLY = '''
from flax import nnx
import models


def build():
    return models.Network(flax=lambda: nnx.Linear(32, 10, rngs=nnx.Rngs(0)), input=models.Array((32,)),
                          target=models.Array((10,)), loss="sse", batch_sizes={"inference": (4,)})
'''

BAD = {
    "nobuild.py": "x = 1\n",
    "raises.py": "def build():\n    raise RuntimeError('width must be even\\nsecond line')\n",
    "notnet.py": "def build():\n    return {'torch': None}\n",
    "noinput.py": "import models\ndef build():\n    return models.Network(torch=object, loss='sse', batch_sizes={'inference': (1,)})\n",
    "noloss.py": ("import models\ndef build():\n    return models.Network(torch=object, input=models.Array((3,)), "
                  "batch_sizes={'inference': (1,)})\n"),
    "threads.py": "import threading, time\nthreading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
                  "def build():\n    pass\n",
    "badimport.py": "import no_such_module_here\n",
}


@pytest.fixture(scope="module")
def nets(tmp_path_factory):
    d = tmp_path_factory.mktemp("nets")
    for name, text in {"mlp.py": MLP, "conv.py": CONV, "flaxonly.py": FLAX_ONLY, **BAD}.items():
        (d / name).write_text(textwrap.dedent(text))
    return d


def network(nets, file: str, **keys) -> models.Network:
    return models.load("file", path=file, cwd=str(nets), **keys)


def test_ops_are_named_alike():
    assert models.OPS == OPS


def test_a_file_loads_with_its_source_and_both_counts(nets):
    net = network(nets, "mlp.py", width=12)
    assert net.name == "mlp" and net.source.kind == "file" and net.source.where == str(nets / "mlp.py")
    import hashlib

    assert net.source.version == hashlib.sha256((nets / "mlp.py").read_bytes()).hexdigest()[:16]
    assert net.params == {"torch": 32 * 12 + 12 + 12 * 10 + 10, "flax": 32 * 12 + 12 + 12 * 10 + 10}
    assert net.param_count() == net.params["torch"]
    x, y = net.make_batch(4, 0)
    assert x.shape == (4, 32) and y.dtype == np.int32 and y.max() < 10


@pytest.mark.parametrize("file,keys,message", [
    ("missing.py", {}, r"^model.path=missing.py: no such file \(.*missing.py\): give the path"),
    ("nobuild.py", {}, r"^nobuild.py has no build\(\): define build\(\*\*keys\)"),
    ("raises.py", {}, r"^raises.py: build\(\) raised RuntimeError: width must be even$"),
    ("notnet.py", {}, r"^notnet.py: build\(\) returned dict, not a models.Network"),
    ("noinput.py", {}, r"^noinput.py: the declaration has no input: add input=Image"),
    ("noloss.py", {}, r"^noloss.py: the declaration has no loss \(None\): add loss='sse'"),
    ("threads.py", {}, r"started a thread at import \(Thread-\d+ \(sleep\)\): start it inside build\(\)"),
    ("badimport.py", {}, r"badimport.py failed to import: ModuleNotFoundError: No module named 'no_such_module_here'"),
    ("mlp.py", {"depth": 3}, r"^mlp.py has no key depth; its keys: width, weights$"),
    ("mlp.py", {"weights": "crossed"}, r"^mlp: the weight map's fc1.kernel \(32, 16\) <- fc1.weight \(16, 32\) "
                                         r"reads as \(16, 32\): give its name alone, e.g. 'fc1.kernel': "
                                         r"'fc1.weight'$"),
    ("conv.py", {}, None),  # a control: the conv net loads
])
def test_bad_input_is_one_line_naming_the_fix(nets, file, keys, message):
    if message is None:
        assert network(nets, file, **keys).params["flax"] == network(nets, file, **keys).params["torch"]
        return
    with pytest.raises(ValueError, match=message) as e:
        network(nets, file, **keys)
    assert "\n" not in str(e.value)


def test_a_weight_map_naming_what_is_not_there(nets, tmp_path):
    (tmp_path / "typo.py").write_text((nets / "mlp.py").read_text().replace('"fc2.bias": "fc2.bias"}',
                                                                            '"fc2.bias": "fc2.bais"}'))
    with pytest.raises(ValueError, match=r"weight map names fc2.bais, not a parameter of the torch module "
                                         r"\(its parameters: fc1.bias, fc1.weight, fc2.bias, fc2.weight\)"):
        models.load("file", path=str(tmp_path / "typo.py"))
    (tmp_path / "short.py").write_text((nets / "mlp.py").read_text().replace('"fc2.bias": "fc2.bias"}', "}"))
    with pytest.raises(ValueError, match="leaves out flax parameters fc2.bias: map each one"):
        models.load("file", path=str(tmp_path / "short.py"))


def test_model_file_needs_its_path():
    with pytest.raises(ValueError, match="model=file needs model.path"):
        models.load("file")


@pytest.fixture
def package(tmp_path, monkeypatch):
    """An installed package with one network, as pip leaves it: a module and a dist-info with its entry point."""
    (tmp_path / "mynets_pkg.py").write_text(textwrap.dedent(MLP))
    info = tmp_path / "mynets-1.2.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mynets\nVersion: 1.2\n")
    (info / "entry_points.txt").write_text("[nnbench.models]\ntinymlp = mynets_pkg:build\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().repo["model"].pop("tinymlp.yaml", None)


def test_an_entry_point_is_a_model_option(package, make_cfg):
    assert "tinymlp" in models.installed() and "tinymlp" in models.names()
    net = models.load("tinymlp", width=8)
    assert net.name == "tinymlp" and net.source == models.Source("package", "mynets (mynets_pkg:build)", "1.2")
    register()  # as a sweep does at its start: now model=tinymlp composes, with its keys typed by their defaults
    c = preflight.typed(make_cfg("model=tinymlp", "model.width=24"))
    assert logged(c)["model"] == {"name": "tinymlp", "width": 24, "weights": "map"}
    assert preflight.job(c).spec.params == {"torch": 32 * 24 + 24 + 250, "flax": 32 * 24 + 24 + 250}
    with pytest.raises(HydraException) as e:
        make_cfg("model=tinymlp", "model.width=wide")
    assert "model.width must be an integer" in hydra_errors.explain(e.value)
    with pytest.raises(HydraException) as e:
        make_cfg("model=tinymlpp")
    assert "did you mean tinymlp?" in hydra_errors.explain(e.value)


def configured(fw: str, compile: bool):
    backend = load(fw)
    backend.configure(Setup("fp32", "cpu", compile=compile, memory_format=FORMAT[fw]))
    return backend


@pytest.mark.parametrize("fw", ["jax", "torch"])
def test_both_backends_prepare_a_network_as_the_dsl(nets, fw):
    """The same Step for a user's network: jax jitted through nnx.split + jax.jit (one compile), every op."""
    net, backend = network(nets, "mlp.py"), configured(fw, compile=fw == "jax")
    for op in OPS:
        step = backend.prepare(net, op, 4, 0)
        out = step.fn()
        step.sync(out)
        assert step.device_of(out) == "cpu"
        if op == "training":
            losses = [float(np.asarray(step.fn()[-1])) if fw == "jax" else step.fn()[-1].item() for _ in range(8)]
            assert losses[-1] < losses[0]
        if fw == "jax":
            assert step.compiles() == 1
    image = network(nets, "conv.py")  # an image reaches each side in its own layout (parity: the same function)
    assert tuple(backend.prepare(image, "inference", 4, 0).fn().shape) == (4, 5)


def test_a_framework_the_network_lacks_is_a_skip_with_the_reason(nets):
    net = network(nets, "conv.py", torch_only=True)
    with pytest.raises(Unsupported, match="conv declares no Flax NNX module \\(flax=...\\): only torch measures it"):
        configured("jax", compile=True).prepare(net, "inference", 4, 0)
    assert configured("torch", compile=False).prepare(net, "inference", 4, 0).fn().shape == (4, 5)


def test_parity_with_a_weight_map(nets):
    ok = parity.check(network(nets, "conv.py"))  # images: NCHW and NHWC; BatchNorm's running statistics mapped
    count = 3 * 4 * 9 + 4 + 2 * 4 + 4 * 6 * 6 * 5 + 5  # conv, BatchNorm's scale and bias, the classifier
    assert ok.status == "ok" and ok.worst < 1e-5 and ok.params == {"jax": count, "torch": count}, ok
    assert parity.check(network(nets, "mlp.py")).status == "ok"
    wrong = parity.check(network(nets, "mlp.py", width=10, weights="swapped"))
    assert wrong.status == "failed" and wrong.worst > 1e-3 and "differs by" in wrong.reason, wrong
    assert parity.check(network(nets, "mlp.py", weights="none")).status == "unchecked"
    alone = parity.check(network(nets, "conv.py", torch_only=True))
    assert alone.status == "unchecked" and "only torch" in alone.reason
    assert parity.Parity.from_json(ok.to_json()) == ok


def test_flops_come_from_one_source_for_both_frameworks(nets):
    mlp = network(nets, "mlp.py", width=16)
    c = counted(mlp, "inference", 8)
    assert c.source == "torch" and c.flops == 2 * 8 * (32 * 16 + 16 * 10)
    assert counted(network(nets, "conv.py", torch_only=True), "training", 4).source == "declared"
    xla = counted(network(nets, "flaxonly.py"), "inference", 4)
    assert xla.source == "xla" and xla.flops >= 2 * 4 * 32 * 10  # XLA adds the bias adds


def test_the_fork_server_refuses_a_network_that_starts_a_thread(nets, tmp_path):
    request = tmp_path / "request.json"
    setup = Setup("fp32", "cpu", memory_format="contiguous")
    request.write_text(Request("torch", setup, {"name": "file", "path": str(nets / "threads.py")}, 0, budget("quick"),
                               (Point(2, ("inference",)),)).to_json())
    server = subprocess.Popen([sys.executable, "-m", "experiments.measure.server", "torch"], cwd=ROOT, text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert json.loads(server.stdout.readline()) == {"ready": True}
        server.stdin.write(json.dumps({"request": str(request), "results": str(tmp_path / "r"),
                                       "log": str(tmp_path / "log")}) + "\n")
        server.stdin.flush()
        answer = json.loads(server.stdout.readline())
    finally:
        server.stdin.close()
        server.wait(30)
    assert "pid" not in answer and "threads.py started a thread at import" in answer["problem"]
