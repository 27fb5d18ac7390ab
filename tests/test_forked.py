"""The suite's commands run forked from a process that imported their libraries (tests/forked.py): each gives what a
fresh `python -m` gives."""
import json

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
