"""Processes and trials read far off under load, on medians whose answer is known: which are re-measured or set
aside, and which points are not measurable here."""
import math

from experiments.stats import outliers


def test_processes_ten_times_apart_are_unmeasured_with_the_reason():
    why = outliers.unmeasured([1e-3, 1.1e-3, 88e-3])
    assert why.startswith("its processes disagree 88×") and "1 ms to 88 ms" in why
    assert outliers.unmeasured([1e-3, 9.9e-3]) is None and outliers.unmeasured([1e-3]) is None


def test_a_far_trial_is_set_aside_only_where_other_processes_used_the_cpu():
    """The trials of a sweep's cell (mlp_batchnorm bs8 inference, jax against a 2-thread torch): in one of them a
    test run took a core, and torch read 400× slower in that trial alone."""
    logs = [math.log(r) for r in (0.815, 0.844, 0.83, 0.797, 0.002, 0.834)]
    ((i, why),) = outliers.far_trials(logs, [0.04, 0.04, 0.04, 0.08, 0.97, 0.03])
    assert i == 4 and why.startswith("its ratio 0.002 is 4") and "off its siblings' 0.83" in why and "0.97 cores" in why
    assert outliers.far_trials(logs, [0.0] * 6) == []  # quiet: whatever it read stays
    assert [i for i, _ in outliers.far_trials([-x for x in logs], [0.97] * 6)] == [4]  # either side slowed
    assert outliers.far_trials([0.0, 0.25, -0.2, 0.1], [0.9] * 4) == []  # trials 20-30% apart under load: drift
    assert outliers.far_trials(logs[3:5], [0.97, 0.97]) == []  # two trials: neither is the odd one out


def test_a_far_process_is_replaced_only_where_other_processes_used_the_cpu():
    medians = [1.0e-3, 1.1e-3, 0.95e-3, 1.05e-3, 88e-3]
    ((i, why),) = outliers.to_replace(medians, [0.0, 0.0, 0.0, 0.0, 1.17])
    assert i == 4 and why.startswith("its median 88 ms is 85.9× above its siblings' 1.025 ms") and "1.17 cores" in why
    assert outliers.to_replace(medians, [0.0] * 5) == []  # a quiet machine's drift stays
    # processes 20-70% apart under load are the machine's drift, not an outlier
    assert outliers.to_replace([1.0e-3, 1.2e-3, 1.7e-3, 1.1e-3, 1.4e-3], [0.5] * 5) == []
    # two processes: the loaded one, 3× away, goes
    assert [i for i, _ in outliers.to_replace([1e-3, 3e-3], [0.0, 0.9])] == [1]
    assert outliers.to_replace([1e-3], [2.0]) == []
    # far below its slowed siblings: the process the other program disturbed least stays
    assert outliers.to_replace([79e-3, 0.9e-3, 80e-3, 78e-3, 81e-3], [1.0] * 5) == []
