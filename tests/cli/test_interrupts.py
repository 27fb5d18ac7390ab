"""No interrupt is lost: a Ctrl-C anywhere in a command (at random moments, inside a gc callback where Python drops
what a handler raises, after the command has ended) is one line and exit 130, a SIGTERM one line and exit 143."""
from __future__ import annotations

import random
import signal

import pytest

from tests.helpers.interrupts import AFTER_THE_END, IN_A_GC_CALLBACK, WHILE_LOADING, interrupted

MOMENTS = 3  # random moments per command: each run is killed within its first seconds


def ctrl_c(command: str, how: str = "Ctrl-C") -> list[str]:
    """What stderr says, and nothing else: one line."""
    return [f"nnbench {command}: error: interrupted ({how}): what was finished is kept"]


@pytest.mark.parametrize("argv,within_s", [
    # jax and torch at work in this process: imports, compiles, the first round
    pytest.param(["agree", "--quick"], 6.0, marks=pytest.mark.slow),
    (["check", "--seconds", "30"], 3.0),  # a pure-Python loop in this process
])
def test_ctrl_c_at_random_moments_is_one_line_and_130(argv, within_s):
    for at in sorted(random.uniform(0.3, within_s) for _ in range(MOMENTS)):
        code, err, _ = interrupted(argv, at)
        assert (code, err) == (130, ctrl_c(argv[0])), f"SIGINT {at:.2f} s in"


@pytest.mark.slow
def test_a_ctrl_c_inside_a_gc_callback_stops_agree():
    """Where jax's gc callback once swallowed it, and agree ran all its rounds and exited 0."""
    code, err, out = interrupted(["jax", "agree", "--quick"], None, program=IN_A_GC_CALLBACK)
    assert (code, err) == (130, ctrl_c("agree"))
    assert "max |ratio-1|" not in out  # stopped where it was, not after its rounds


def test_a_ctrl_c_inside_a_gc_callback_is_honoured_and_not_printed_where_it_raises_at_once():
    code, err, _ = interrupted(["experiments.selfcheck.check", "check", "--seconds", "0.4"], None,
                               program=IN_A_GC_CALLBACK)
    assert (code, err) == (130, ctrl_c("check"))  # no "Exception ignored in: <function strike>"


def test_a_ctrl_c_while_the_command_loads_is_one_line_and_130():
    """Before the command has installed its handler (a Ctrl-C in its first fraction of a second)."""
    code, err, out = interrupted(["check", "--seconds", "30"], None, program=WHILE_LOADING)
    assert (code, err, out) == (130, ctrl_c("check"), "")


@pytest.mark.parametrize("when", ["returned", "atexit"])
def test_a_ctrl_c_after_the_command_ended_is_one_line_and_130(when):
    code, err, out = interrupted([when, "check", "--seconds", "0.4"], None, program=AFTER_THE_END)
    assert (code, err) == (130, ctrl_c("check"))
    assert out.splitlines()[-1].startswith("machine check: ")  # it had ended, its last line said


def test_sigterm_is_one_line_and_143():
    code, err, _ = interrupted(["check", "--seconds", "30"], 1.0, signal.SIGTERM)
    assert (code, err) == (143, ctrl_c("check", "SIGTERM"))
