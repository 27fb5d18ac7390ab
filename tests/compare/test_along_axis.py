"""The one paired flow of `ab`, `versions` and `bisect`'s steps, in-process: a stopped sweep reads no verdicts, the
Markdown goes where asked, and the gate fails only a sweep that ended well with a slower cell."""
import signal

import pytest

from experiments.common.errors import LOST, OK
from experiments.compare import along_axis, paired
from experiments.stats.verdicts import Verdict
from tests.helpers.judged import judged


def cell(verdict: Verdict, speedup: float = 0.8) -> paired.CellVerdict:
    return paired.CellVerdict("lenet", "inference", 32, "torch-eager fp32", "jax-jit fp32",
                              judged(1 / speedup, 1 / (speedup * 1.05), 1 / (speedup * 0.95), verdict, 6), None, "",
                              "nnbench ab ...")


@pytest.fixture
def swept(monkeypatch, tmp_path):
    """paired.sweep and paired.verdicts as stand-ins: the code the sweep exits with, and what was asked of both."""
    asked = {}

    def sweep(overrides, directory, uri, experiment, parent=None, quiet=False):
        asked["sweep"] = (overrides, directory, uri, experiment, parent, quiet)
        return asked["code"]

    monkeypatch.setattr(paired, "sweep", sweep)
    monkeypatch.setattr(paired, "verdicts", lambda d: asked.setdefault("read", d) and [cell(Verdict.SLOWER)])
    return asked, along_axis.Along(("framework=jax,torch", "model=lenet"), tmp_path / "sweep", "sqlite:///x.db", "e",
                                   "parent-id", True)


def test_a_sweep_is_run_as_asked_and_its_verdicts_read(swept):
    asked, along = swept
    asked["code"] = OK
    code, rows = along_axis.compared(along)
    assert (code, [r.verdict for r in rows]) == (OK, [Verdict.SLOWER])
    assert asked["sweep"] == (list(along.overrides), along.out, "sqlite:///x.db", "e", "parent-id", True)
    assert asked["read"] == along.out


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_stopped_sweep_reads_no_verdicts(swept, signum):
    asked, along = swept
    asked["code"] = 128 + signum
    assert along_axis.compared(along) == (128 + signum, []) and "read" not in asked


@pytest.mark.parametrize("code,verdicts,fail,expected", [
    (OK, [Verdict.SLOWER], True, LOST),
    (OK, [Verdict.SLOWER], False, OK),  # no gate asked for
    (OK, [Verdict.FASTER, Verdict.SAME], True, OK),
    (LOST, [Verdict.SLOWER], True, LOST),  # the sweep's own failure first
    (2, [], True, 2),
])
def test_the_gate_fails_a_slower_cell_only_when_asked(capsys, code, verdicts, fail, expected):
    rows = [cell(v) for v in verdicts]
    assert along_axis.gate(code, rows, along_axis.Asked("nnbench ab x=a,b", fail_on_regression=fail), "ab") == expected
    err = capsys.readouterr().err
    assert ("nnbench ab: error: slower: lenet inference bs32" in err) == (code == OK and expected == LOST)


def test_the_markdown_is_appended_under_its_title(tmp_path):
    md = tmp_path / "summary.md"
    md.write_text("before\n")
    asked = along_axis.Asked("nnbench ab framework=jax,torch", markdown=md, threshold=0.1)
    along_axis.markdown([cell(Verdict.SLOWER)], asked)
    along_axis.markdown([cell(Verdict.SAME, 1.0)], asked, title="versions a b · paired")
    text = md.read_text()
    assert text.startswith("before\n### nnbench ab framework=jax,torch\n") and "### versions a b · paired" in text
    assert "±10%" in text and "**slower**" in text


def test_nothing_is_written_or_drafted_unless_asked(tmp_path):
    asked = along_axis.Asked("nnbench ab x=a,b")
    along_axis.markdown([cell(Verdict.SLOWER)], asked)
    along_axis.drafted([cell(Verdict.SLOWER)], tmp_path, asked)  # no --issue: compare.upstream is not even imported
    assert list(tmp_path.iterdir()) == []
