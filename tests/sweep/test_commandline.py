"""The command line, validated before Hydra runs: every job composed by Hydra's own loader and typed at the door, or
one BadInput line naming the fix; the print-only flags run nothing."""
import pytest

from experiments.common.errors import BadInput
from experiments.store.sweepdir import STATE
from experiments.sweep import commandline, paired_engine


@pytest.mark.slow
def test_a_sweep_is_its_jobs_typed_validated_and_probed(tmp_path):
    v = commandline.explained(["-m", "framework=jax,torch", "model=lenet", "ops=[inference]", "bench=quick",
                               f"hydra.sweep.dir={tmp_path / 's'}", f"mlflow.tracking_uri=sqlite:///{tmp_path}/m.db"])
    assert v.uri == f"sqlite:///{tmp_path}/m.db"
    assert [(j.mode, j.config.bench.processes) for j in v.jobs] == [("jax-jit", 1), ("torch-eager", 1)]
    assert all(j.fingerprint for j in v.jobs)  # each interpreter was asked whether it can measure
    assert paired_engine.plan(v.jobs) == [[0, 1]]  # one cell's two variants: measured together, by job 0


@pytest.mark.parametrize("argv,message", [
    (["-m", "--cfg", "job"], "give one of --run, --multirun (-m), --cfg, --info and --shell-completion"),
    (["--resolve"], "--resolve goes with --cfg or --help"),
    (["+batchsize=32"], "unknown key 'batchsize': did you mean batch_size?"),
    (["+runtime.alocator=glibc"], "unknown key 'runtime.alocator': did you mean runtime.allocator?"),
    (["-m", "mlflow.experiment_name=a,b"], "a sweep logs to one store: sweep mlflow.* in separate sweeps"),
    (["--nosuch"], "unrecognized arguments: --nosuch (see python -m experiments.run --help)"),
])
def test_bad_input_is_one_line_naming_the_fix(argv, message):
    with pytest.raises(BadInput, match=message.replace("(", r"\(").replace(")", r"\)").replace("?", r"\?")):
        commandline.explained(argv)


def test_a_dir_that_holds_another_sweep_is_refused_before_anything_runs(tmp_path):
    (tmp_path / STATE).write_text("{}")
    with pytest.raises(BadInput, match="already holds another sweep"):
        commandline.explained(["-m", f"hydra.sweep.dir={tmp_path}", "model=lenet"])


def test_the_print_only_flags_run_nothing():
    assert commandline.explained(["--cfg", "job"]) is None and commandline.explained(["--help"]) is None
