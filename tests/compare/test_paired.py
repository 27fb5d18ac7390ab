"""A paired comparison's cells as `--json` and the tables give them, from typed judgements: the fields of
`nnbench.paired/1` (docs/comparing.md#the-json) and the table's columns, without a sweep."""
import json

import pytest

from experiments.compare import paired
from experiments.stats.paired import COLUMNS, judge_pairs

# nnbench.paired/1's fields of a cell, as docs/comparing.md lists them (`mde` added since, which keeps the schema)
FIELDS = {"model", "op", "batch_size", "variant", "baseline", "ratio", "interval", "speedup", "low", "high", "verdict",
          "trials", "run_id", "differs", "repro", "profile", "mde"}


def cells() -> list[paired.CellVerdict]:
    slow, once = judge_pairs([[0.05, 0.07, 0.06, 0.08, 0.04], [0.1]], 0.03, 0.05)
    return [paired.CellVerdict("lenet", "inference", bs, "torch-eager fp32", "jax-jit fp32", c, None, "nothing else",
                               "python -m experiments.run -m ...") for bs, c in ((2, slow), (8, once))]


def test_the_json_keeps_its_schema_and_fields_and_says_null_where_one_trial_knows_nothing():
    slow, once = cells()
    said = json.loads(paired.as_json([slow, once], command="ab", axis="framework"))
    assert said["schema"] == paired.SCHEMA == "nnbench.paired/1" and said["axis"] == "framework"
    first, second = said["cells"]
    assert set(first) == set(second) == FIELDS
    assert first["verdict"] == "slower" and first["trials"] == 5 and first["ratio"] == slow.ratio
    assert first["speedup"] == pytest.approx(1 / first["ratio"]) and first["low"] < first["speedup"] < first["high"] < 1
    assert second["interval"] == [None, None] and second["low"] is None and second["mde"] is None
    assert paired.answer([slow], command="ab") == json.loads(paired.as_json([slow], command="ab"))


def test_the_table_has_a_column_per_statistic_of_the_judgement():
    text = paired.table(cells())
    header = next(line for line in text.splitlines() if line.startswith("| model"))
    assert [h.strip() for h in header.strip("|").split("|")][-len(COLUMNS):] == list(COLUMNS)
    assert "| slower " in text and f"×{cells()[0].judged.mde:.3f}" in text
