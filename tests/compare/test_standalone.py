"""The standalone script a report draft ships (`python repro.py`), its command line in-process: two interpreters,
rounds and a burst length, each with its default."""
import sys

import pytest

from experiments.compare import standalone


def test_its_options_and_their_defaults(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["repro.py", "--help"])
    with pytest.raises(SystemExit) as e:
        standalone.main()
    text = " ".join(capsys.readouterr().out.split())
    assert e.value.code == 0 and text.startswith("usage: repro.py")
    for said in ("--python-a", "--python-b", "bursts per side (default 30)", "a burst's length (default 50)"):
        assert said in text
    assert "--serve" not in text  # a side's own process, started by the script
