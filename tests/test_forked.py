"""The suite's commands run forked from a process that imported their libraries (tests/forked.py): each gives what a
fresh `python -m` gives."""
import contextlib
import json
import os
import threading
import time

import psutil
import pytest

from tests.helpers import run


@pytest.mark.slow
@pytest.mark.parametrize("args", [["model=lenett"], ["--cfg", "job", "model=mlp_relu", "batch_size=7"],
                                  ["-m", "framework=tf"]])
def test_a_forked_command_gives_what_a_fresh_one_gives(tmp_path, args):
    forked, fresh = (run(args, tmp_path, fresh=f) for f in (False, True))
    assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
    assert forked.stdout or forked.returncode == 2
    assert list(tmp_path.iterdir()) == []  # the command's folder is its working directory: nothing written there


@pytest.mark.slow
def test_a_forked_command_searches_a_fresh_path_and_imports_nnbench_itself(tmp_path, monkeypatch):
    """A forked command does not search what a test added to this process's path (an environment's site-packages
    hold other networks), and each imports nnbench anew: values drawn at import differ from command to command."""
    (tmp_path / "extra").mkdir()
    monkeypatch.syspath_prepend(str(tmp_path / "extra"))
    (tmp_path / "probe.py").write_text("import json, sys\nfrom experiments.common import config\n"
                                       "print(json.dumps([sys.path, config.UNIQUE]))\n")
    (path, tag), (path_again, tag_again), (fresh, _) = (
        json.loads(run([], tmp_path, module="probe", fresh=f).stdout) for f in (False, False, True))
    assert path == path_again == fresh
    assert tag != tag_again


SWEEPER = """import sys
from experiments.common.child import run_to_end
quiet = sys.argv[1] == "quiet"
r = run_to_end([sys.executable, "-m", "experiments.run", *sys.argv[2:]], stdout=sys.stderr if quiet else None)
print("the sweep exited", r.returncode)
"""


@pytest.mark.slow
@pytest.mark.parametrize("args", [["loud", "--cfg", "job", "model=mlp_relu", "batch_size=7"],
                                  ["quiet", "--cfg", "job", "model=mlp_relu"], ["loud", "-m", "model=lenett"]])
def test_a_sweep_a_forked_command_starts_is_forked_and_gives_what_a_fresh_one_gives(tmp_path, args):
    """A command's sweep (`run_to_end`: nnbench ab, versions, bisect, ...) is forked from the same server, no fresh
    interpreter: its lines land in the command's output, in their order, and its exit code reaches the command."""
    (tmp_path / "sweeper.py").write_text(SWEEPER)
    started, done = [], threading.Event()

    def watch():  # this process's descendants (the fork server's children too) that run the sweep's module fresh
        while not done.is_set():
            for p in psutil.Process().children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    if "experiments.run" in p.cmdline():
                        started.append(p.cmdline())
            time.sleep(0.02)

    results = []
    for fresh in (False, True):
        watcher = threading.Thread(target=watch)
        watcher.start()
        results.append((run(args, tmp_path, module="sweeper", fresh=fresh), len(started)))
        done.set()
        watcher.join()
        done.clear()
    (forked, none), (fresh, some) = results
    assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
    assert forked.stdout.endswith(f"the sweep exited {2 if 'model=lenett' in args else 0}\n"), forked.stdout
    assert none == 0 and some > 0, started  # and the watcher sees a fresh one


def test_a_command_a_test_starts_gets_what_the_door_found_unless_its_environment_differs(monkeypatch):
    """Inside a test (pytest sets PYTEST_CURRENT_TEST in each), after this process's libraries set what they set as
    they run, a command gets what a door found probing this interpreter; one whose environment changes what a probe
    reads (here: the GPUs it sees) is passed nothing."""
    from experiments.sweep import preflight
    from tests import forked, helpers

    monkeypatch.setattr(helpers, "door_found", lambda: "found")  # not the probes themselves: a second of CPU each
    test = os.environ["PYTEST_CURRENT_TEST"]
    libraries_set = {"TF_CPP_MIN_LOG_LEVEL": "1", "TPU_SKIP_MDS_QUERY": "1", "GIT_PYTHON_REFRESH": "quiet",
                     "_MLFLOW_TELEMETRY_SESSION_ID": "0f1e", "TORCHINDUCTOR_CACHE_DIR": "/tmp/torchinductor_x"}
    with forked.session_environ():  # not what earlier tests of this process left
        os.environ.update(libraries_set, PYTEST_CURRENT_TEST=test)  # as jax, mlflow and torch's compiler, and pytest
        assert helpers.user_env(MLFLOW_TRACKING_URI="sqlite:///x.db").get(preflight.FOUND) == "found"
        gpus = os.environ.get("CUDA_VISIBLE_DEVICES", "") + "9"
        assert preflight.FOUND not in helpers.user_env(CUDA_VISIBLE_DEVICES=gpus)
