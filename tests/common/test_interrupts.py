"""The handler every command shares: a signal is noted first, raised at once or at a checkpoint, never lost where
Python drops what a handler raises; a second one raises at once; a signal after the end is only noted."""
from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import threading

import pytest

from experiments.common import child, interrupts


@pytest.fixture
def handled():
    """The handler installed, as `nnbench` installs it; whatever reached Python's unraisable hook meanwhile."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("only the main thread handles signals")
    dropped: list = []
    before, sys.unraisablehook = sys.unraisablehook, dropped.append
    try:
        with interrupts.handled():
            yield dropped
    finally:
        sys.unraisablehook = before


def kill(signum: int = signal.SIGINT) -> None:
    """A signal to this process; its handler runs before the next line."""
    os.kill(os.getpid(), signum)


def test_a_signal_raises_at_once_by_default(handled):
    with pytest.raises(interrupts.Interrupted) as e:
        kill(signal.SIGTERM)
    assert isinstance(e.value, KeyboardInterrupt) and e.value.signum == signal.SIGTERM


def test_a_deferred_signal_waits_for_a_checkpoint_and_a_second_one_raises_at_once(handled):
    with interrupts.in_mode("deferred"):
        kill()
        assert interrupts.pending() == signal.SIGINT  # noted, not raised
        with pytest.raises(interrupts.Interrupted):
            kill()
    with pytest.raises(interrupts.Interrupted) as e:
        interrupts.checkpoint()
    assert e.value.signum == signal.SIGINT


def test_the_end_of_a_deferred_block_is_a_checkpoint(handled):
    with pytest.raises(interrupts.Interrupted):
        with interrupts.deferred():
            kill()
            assert interrupts.pending()


def test_a_raise_dropped_in_a_gc_callback_is_not_printed_and_the_next_checkpoint_raises_it(handled):
    def strike(phase, info):
        if phase == "start":
            kill()

    gc.callbacks.append(strike)
    try:
        gc.collect()  # the handler raises inside the callback, and Python drops it
    finally:
        gc.callbacks.remove(strike)
    assert handled == [] and interrupts.pending() == signal.SIGINT
    with pytest.raises(interrupts.Interrupted):
        interrupts.checkpoint()


def test_other_dropped_exceptions_are_still_said(handled):
    def fault(phase, info):
        raise ValueError("a callback's own fault")

    gc.callbacks.append(fault)
    try:
        gc.collect()
    finally:
        gc.callbacks.remove(fault)
    assert handled and all(isinstance(u.exc_value, ValueError) for u in handled)


def test_once_the_command_has_ended_signals_are_only_noted(handled):
    assert interrupts.closing() is None
    kill()
    kill()  # a second one too: the process is exiting, and its end says it
    assert interrupts.pending() == signal.SIGINT and interrupts.closing() is None


def test_the_handlers_before_are_back_after_a_command():
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("only the main thread handles signals")
    before = [signal.getsignal(s) for s in interrupts.SIGNALS], sys.unraisablehook
    with interrupts.handled():
        assert signal.getsignal(signal.SIGINT) is not before[0][0]
    assert ([signal.getsignal(s) for s in interrupts.SIGNALS], sys.unraisablehook) == before


def test_a_sweep_run_as_a_child_gets_a_signal_whose_raise_was_dropped(handled, monkeypatch):
    """The raise dropped (here: never made), the signal noted: the child gets it within a poll and ends, and the
    interrupt goes on up."""
    monkeypatch.setattr(interrupts, "_received", signal.SIGINT)
    with pytest.raises(interrupts.Interrupted):
        child.run_to_end([sys.executable, "-c", "import time; time.sleep(60)"])
