"""`nnbench`: one command with subcommands, one error line format and one exit-code scheme."""
import sys

import pytest

from experiments.cli import COMMANDS, main
from tests.helpers import nnbench, run


def test_help_lists_every_command_with_one_line(tmp_path):
    r = run(["--help"], tmp_path, module="experiments")
    assert r.returncode == 0
    for name, (_, line) in COMMANDS.items():
        assert any(row.split() and row.split()[0] == name and line[:40] in row for row in r.stdout.splitlines()), name
    assert "python -m experiments.run -m" in r.stdout  # the sweep's own entry point is named


def test_help_does_not_import_the_commands():
    """`nnbench --help` stays instant: no command module (nor torch or mlflow) is imported to list them."""
    code = ("import sys\nfrom experiments.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m.startswith(('experiments.cli.', 'experiments.selfcheck.', "
            "'torch', 'jax', 'mlflow'))))")
    import subprocess
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize("argv,message", [
    (["nosuch"], "nnbench: error: no command 'nosuch': use one of "),
    (["compare", "--nosuch"], "nnbench compare: error: unrecognized arguments: --nosuch (see nnbench compare --help)"),
    (["export"], "nnbench export: error: the following arguments are required: --format"),
    (["upload"], "nnbench upload: error: the following arguments are required: directory"),
])
def test_bad_arguments_are_one_line_and_exit_2(capsys, argv, message):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(message), err


def test_a_command_error_is_one_line_with_its_name(tmp_path, capsys):
    assert main(["compare", "--uri", f"sqlite:///{tmp_path}/none.db"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("nnbench compare: error: no store at sqlite:///") and "run a sweep here first" in line
    assert not (tmp_path / "none.db").exists()


def test_console_script_and_module_form_agree(tmp_path):
    r = nnbench("sciml", [], tmp_path)
    assert r.returncode == 0 and r.stderr.strip() == "ok: 0 TIMING, 0 METADATA, 0 SAMPLES lines"
