"""`--markdown`'s report as GitHub renders it (markdown-it-py, CommonMark with GitHub's tables): the changed cells
as an HTML table, each with its ratio, interval and smallest change seen, the command that measures it again, one
line for the rest, short enough for a job summary. The cells are the README's (lenet, framework=jax,torch), their
verdicts typed as a paired sweep reads them back."""
import pytest
from markdown_it import MarkdownIt

from experiments.compare import paired
from experiments.harness.pairs import Cell
from experiments.stats.verdicts import Verdict
from experiments.sweep.paired_engine import repro
from tests.helpers.judged import judged

OVERRIDES = ["framework=jax,torch", "model=lenet", "report.along=framework"]
THRESHOLD = 0.03
# (op, batch, speedup of torch over jax and its interval, verdict): three cells faster, one slower, two unchanged
VERDICTS = [("inference", 2, 2.10, 1.95, 2.26, Verdict.FASTER), ("inference", 8, 1.52, 1.41, 1.64, Verdict.FASTER),
            ("inference", 32, 1.33, 1.27, 1.39, Verdict.FASTER), ("inference", 128, 1.01, 0.99, 1.02, Verdict.SAME),
            ("training", 32, 0.78, 0.74, 0.82, Verdict.SLOWER), ("training", 128, 0.98, 0.90, 1.07,
                                                                  Verdict.INCONCLUSIVE)]


def row(op: str, batch: int, speedup: float, low: float, high: float, verdict: Verdict) -> paired.CellVerdict:
    mde = max(1 + THRESHOLD, (high / low) ** 0.5)  # as the judge gives it, from the interval's half-width
    return paired.CellVerdict("lenet", op, batch, "torch-eager fp32", "jax-jit fp32",
                              judged(1 / speedup, 1 / high, 1 / low, verdict, mde=mde), None, "nothing else",
                              repro(OVERRIDES, Cell(batch, op)))


@pytest.fixture
def rendered():
    rows = [row(*v) for v in VERDICTS]
    text = paired.markdown(rows, "nnbench ab framework=jax,torch model=lenet", THRESHOLD)
    return rows, text, MarkdownIt("commonmark").enable("table").parse(text)


def cells_of(tokens) -> list[list[str]]:
    """The table body's rows, each cell's inline text."""
    rows, inside = [], False
    for i, t in enumerate(tokens):
        inside = {"tbody_open": True, "tbody_close": False}.get(t.type, inside)
        if inside and t.type == "tr_open":
            rows.append([])
        if inside and t.type == "td_open":
            rows[-1].append(tokens[i + 1].content)
    return rows


def test_the_changed_cells_render_as_a_table_with_their_numbers(rendered):
    rows, text, tokens = rendered
    assert [t.type for t in tokens].count("table_open") == 1
    changed = [r for r in rows if r.verdict.changed]
    body = cells_of(tokens)
    assert [b[0] for b in body] == [f"{r.model} {r.op} bs{r.batch_size}" for r in changed]
    for r, b in zip(changed, body):
        low, high = r.interval()
        seen = r.judged.mde - 1
        assert b[2:] == [f"{r.ratio:.3f}", f"[{low:.3f}, {high:.3f}]", f"**{r.verdict}**", f"{seen:.1%}"], b
        assert low < r.ratio < high and seen >= THRESHOLD
    assert "<table>" in MarkdownIt("commonmark").enable("table").render(text)


def test_each_changed_cell_has_its_command_and_the_rest_one_line(rendered):
    rows, text, tokens = rendered
    code = [c.content for t in tokens if t.type == "inline" for c in t.children if c.type == "code_inline"]
    changed = [r for r in rows if r.verdict.changed]
    assert code == [r.repro for r in changed]
    assert all(f"batch_size={r.batch_size} 'ops=[{r.op}]'" in r.repro and "hydra." not in r.repro for r in changed)
    rest = [t.content for t in tokens if t.type == "inline" and "cells changed" in t.content]
    assert rest == ["4 of 6 cells changed beyond ±3%; the rest: 1 no change, 1 inconclusive (paired: each B against "
                    "its A on one machine)."]
    assert len(text.splitlines()) <= 40


def test_nothing_changed_is_one_line_and_no_table():
    text = paired.markdown([row("inference", 128, 1.0, 0.99, 1.01, Verdict.SAME)], "t", THRESHOLD)
    tokens = MarkdownIt("commonmark").enable("table").parse(text)
    assert "table_open" not in [t.type for t in tokens]
    assert [t.content for t in tokens if t.type == "inline"][-1].startswith("None of 1 cells changed beyond ±3%; "
                                                                              "the rest: 1 no change")
