"""The suite's commands run forked from a process that imported the parent's modules (tests/helpers/forked.py): each
gives what a fresh `python -m` gives."""
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
