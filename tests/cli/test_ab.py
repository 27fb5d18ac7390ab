"""`nnbench ab`: bad input is one line and exit 2 before anything is measured; two values of an axis compared paired
end to end, every burst kept."""
import json

import pytest

from experiments.cli import main
from experiments.harness.pairs import PAIR, PairResult


@pytest.mark.parametrize("argv,message", [
    (["framework.compile=true"], "'framework.compile=true' gives 0 values: nnbench ab compares two"),
    (["framework=jax,torch,external"], "gives 3 values: nnbench ab compares two"),
    (["framework=jax,torch", "framework=jax"], "framework is the axis compared: set it only in AXIS=A,B"),
    (["framework=external,torch", "external.name=Reference",
      "external.command='python runners/reference_runner.py --model {model}'"],
     "framework=external can't be paired: its runner times itself"),
    (["framework.compile=true,false", "model=nosuch"], "unknown model 'nosuch' (choose dscnn, file, gpt_tiny, lenet,"),
    (["framework.compile=true,false", "--pairs", "3", "--max-pairs", "2"], "max_pairs at least pairs"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, argv, message):
    assert main(["ab", *argv]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("nnbench ab: error: ") and message in line, line


@pytest.mark.slow
def test_two_values_are_compared_paired_and_every_burst_is_kept(tmp_path, capsys):
    """An A/A comparison (framework.threads=1 on both sides) of a tiny point: a ratio, an interval, a verdict."""
    argv = ["ab", "framework.threads=1,1", "framework=torch", "model=mlp_relu", "batch_size=2", "ops=[inference]",
            "--pairs", "2", "--max-pairs", "2", "--rounds", "3", "--burst-ms", "5", "--json", "--out", str(tmp_path)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    (row,) = json.loads(out)
    assert row["op"] == "inference" and row["batch_size"] == 2 and row["pairs"] == 2 and row["skipped"] is None
    assert row["ci_low"] <= row["ratio"] <= row["ci_high"] and row["verdict"] in ("no change", "inconclusive")
    assert set(row["oversubscribed"]) <= {"A", "B"}  # per side: in how many pairs, and the hint
    files = sorted(tmp_path.glob(f"job-0/bs2-inference/pair-*/{PAIR}"))
    assert len(files) == 2
    for f in files:
        pair = PairResult.from_json(f.read_text())
        assert pair.ok and len(pair.a_bursts) == len(pair.b_bursts) == 3 and pair.a.threads == pair.b.threads == 1
