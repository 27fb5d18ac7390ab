"""The machine check: a fixed loop's drift between windows, other processes' load, and what it says."""
import pytest

from experiments.measure.machine import MachineCheck, check, prior


def test_a_short_check_reads_the_machine():
    m = check(0.5)
    assert 1.0 <= m.window_spread and 0.0 <= m.window_sd < 5 and m.other_cores >= 0 and m.cores >= 1
    assert set(m.metrics()) >= {"machine_window_sd", "machine_window_spread", "machine_other_cores",
                                "machine_load_avg_1m", "machine_cores"}


@pytest.mark.parametrize("sd,other,noisy", [(0.01, 0.0, False), (0.31, 0.0, True), (0.01, 1.4, True)])
def test_the_console_says_plainly_when_the_machine_limits_precision(sd, other, noisy):
    m = MachineCheck(window_sd=sd, window_spread=1.0 + 3 * sd, other_cores=other, load_avg_1m=1.0, cores=2)
    assert m.noisy == noisy
    assert ("this machine itself limits precision" in m.line()) == noisy and m.line().startswith("machine check: ")


def test_the_stop_rules_prior_is_the_machines_drift_when_larger():
    quiet = MachineCheck(window_sd=0.02, window_spread=1.05, other_cores=0.0, load_avg_1m=0.1, cores=2)
    loud = MachineCheck(window_sd=0.3, window_spread=2.8, other_cores=1.4, load_avg_1m=5.0, cores=2)
    assert prior(None, 0.1) == 0.1 and prior(quiet, 0.1) == 0.1 and prior(loud, 0.1) == 0.3
