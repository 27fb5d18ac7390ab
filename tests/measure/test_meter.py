"""What the worker reads of the machine, as it comes: a sandbox's /proc (gVisor: no VmHWM, a /proc/stat of zeros,
a load of 0.00) reads as unknown, never as a crash or as other processes' load."""
from __future__ import annotations

import psutil

from experiments.measure import meter
from experiments.measure.machine import MachineCheck

GVISOR_STATUS = "Name:\tpython\nVmSize:\t  812340 kB\nVmData:\t  402112 kB\nVmRSS:\t  204800 kB\nThreads:\t4\n"


def test_the_high_water_mark_comes_from_getrusage_where_status_has_none(monkeypatch):
    fields = meter.status_fields(GVISOR_STATUS)
    assert fields == {"VmSize": 812340 * 1024, "VmData": 402112 * 1024, "VmRSS": 204800 * 1024}
    rss, hwm = meter.resident(fields)
    assert rss == 204800 * 1024 and hwm > 0  # this process's ru_maxrss
    assert meter.resident({"VmRSS": 2048, "VmHWM": 4096}) == (2048, 4096)
    monkeypatch.setattr(meter, "status", lambda: fields)
    assert meter.reset_high_water() is False  # nothing to reset: getrusage's mark stays


def test_cpu_counters_that_read_zero_are_unknown_not_busy(monkeypatch):
    zeros = psutil.cpu_times()._replace(**{f: 0.0 for f in psutil.cpu_times()._fields})
    monkeypatch.setattr(psutil, "cpu_times", lambda percpu=False: zeros)
    assert meter.cpu_times() is None and "busy_cpu_s" not in meter.meter() and meter.load_average() is None
    assert meter.background_cores({"own_cpu_s": 0.1, "wall_s": 1.0, "minor_faults": 0}) is None
    assert meter.background_cores({"busy_cpu_s": 1.6, "own_cpu_s": 0.1, "wall_s": 1.0}) == 1.5


def test_a_load_average_that_counts_no_process_is_unknown():
    assert meter.first_load("0.52 0.58 0.59 2/412 9876\n") == 0.52
    assert meter.first_load("0.00 0.00 0.00 0/0 0\n") is None and meter.first_load("") is None


def test_unknown_load_neither_oversubscribes_nor_makes_the_machine_noisy():
    assert meter.oversubscription("torch", 2, 2, None, 2) is None
    assert meter.oversubscription("torch", 13, 2, None, 2) == (
        "13 intra-op threads on 2 cores: set torch's intra-op threads (framework.threads, torch.set_num_threads) to 2")
    check = MachineCheck(window_sd=0.01, window_spread=1.02, other_cores=None, load_avg_1m=None, cores=13)
    assert not check.noisy and "machine_other_cores" not in check.metrics()
    assert "other processes' CPU use unknown" in check.line() and "load unknown" in check.line()


def test_nnbench_check_says_unknown_where_the_machine_hides_its_counters(monkeypatch, capsys):
    from types import SimpleNamespace

    from experiments.selfcheck import check as command  # the command that prints a MachineCheck line by line

    hidden = MachineCheck(window_sd=0.01, window_spread=1.02, other_cores=None, load_avg_1m=None, cores=13)
    monkeypatch.setattr(command, "check", lambda seconds: hidden)
    assert command.run(SimpleNamespace(seconds=0.4, json=False)) == 0
    out = capsys.readouterr().out
    assert "other processes: unknown (/proc/stat reads 0) (noisy above 0.2); load average unknown" in out
