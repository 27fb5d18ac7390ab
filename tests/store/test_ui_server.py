"""`nnbench ui`'s server side in-process: a port taken is seen before anything starts, the line of `mlflow ui`'s log
that says why it stopped, and a store that can't be read is one line naming --uri."""
import socket

import pytest

from experiments.common.errors import BadInput
from experiments.store import ui_server


def test_a_port_in_use_is_seen_and_a_free_one_is_free():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert not ui_server.port_free(port)
    assert ui_server.port_free(port)  # as uvicorn binds it: a server just stopped doesn't leave it busy


def test_the_last_error_of_the_log_says_why_it_stopped(tmp_path):
    log = tmp_path / "ui.log"
    log.write_text("INFO starting\nOSError: [Errno 98] address already in use\nINFO shutting down\n\n")
    assert ui_server.last_error(log) == f"OSError: [Errno 98] address already in use ({log})"
    log.write_text("")
    assert ui_server.last_error(log) == f"no output ({log})"


def test_a_store_that_cant_be_read_names_the_fix(tmp_path):
    (tmp_path / "not-a-db").write_text("this is no sqlite file")
    with pytest.raises(BadInput, match="--uri"):
        ui_server.opened(f"sqlite:///{tmp_path}/not-a-db", "nnbench")
