"""The bare loop devicecheck holds the harness against (selfcheck.bareloop.blocks): synced, every call waits for its
result; pipelined, a block's calls are dispatched back to back and only the last is waited for."""
import pytest

from experiments.selfcheck import bareloop


@pytest.mark.parametrize("pipelined,syncs_per_block", [(False, 5), (True, 1)])
def test_a_block_syncs_each_call_or_only_its_last(monkeypatch, pipelined, syncs_per_block):
    monkeypatch.setattr(bareloop, "SECONDS", 0.0)  # the fewest blocks it times: five
    calls, syncs = [], []
    per_call = bareloop.blocks(lambda: calls.append(1) or len(calls), syncs.append, 4, pipelined)
    assert len(per_call) == 5 and len(calls) == 20 and all(t > 0 for t in per_call)
    # synced: each of the block's 4 calls, then its last again; pipelined: its last only
    assert len(syncs) == 5 * syncs_per_block and syncs[-1] == 20
