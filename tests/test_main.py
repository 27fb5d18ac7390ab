"""`python -m experiments` (experiments/__main__.py) in-process: it hands over to the command, and a Ctrl-C while the
command's modules load is the one line every command says on one, and exit 130, not a traceback."""
import sys
import types

import experiments.__main__ as entry


class Loading(types.ModuleType):
    """experiments.cli as it is mid-import when a Ctrl-C lands."""

    def __getattr__(self, name):
        raise KeyboardInterrupt


def test_it_hands_over_to_the_command(monkeypatch):
    import experiments.cli

    monkeypatch.setattr(experiments.cli, "main", lambda: 7)
    assert entry.main() == 7


def test_a_ctrl_c_while_loading_is_one_line_and_130(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "experiments.cli", Loading("experiments.cli"))
    monkeypatch.setattr(sys, "argv", ["nnbench", "history", "--by", "jax_version"])
    assert entry.main() == 130
    assert capsys.readouterr().err == "nnbench history: error: interrupted (Ctrl-C): what was finished is kept\n"
