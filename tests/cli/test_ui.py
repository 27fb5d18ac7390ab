"""`nnbench ui`: the MLflow UI on a local store, or the links on a tracking server; a busy port is one line."""
import socket

import pytest

from experiments import cli
from tests.helpers import free_port, nnbench, serve, with_store


def make_store(tmp_path):
    """A store with the nnbench experiment and no sweep yet, as `open_store` leaves it."""
    from experiments.store import tracking

    uri = f"sqlite:///{with_store(tmp_path)}/mlruns/mlflow.db"
    return uri, tracking.Store(uri).open("nnbench")


def test_no_store_is_one_line(tmp_path, capsys):
    assert cli.main(["ui", "--uri", f"sqlite:///{tmp_path}/none.db"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("nnbench ui: error: no store at sqlite:///") and "run a sweep here first" in line
    assert not (tmp_path / "none.db").exists()


def test_a_busy_port_is_one_line_that_names_port(tmp_path, capsys):
    uri, _ = make_store(tmp_path)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert cli.main(["ui", "--uri", uri, "--port", str(port)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == f"nnbench ui: error: port {port} on 127.0.0.1 is in use: choose another with --port " \
                   f"(e.g. --port {port + 1})"


@pytest.mark.slow
def test_a_tracking_server_gets_its_own_links_and_nothing_started(tmp_path):
    port = free_port()
    server = serve(f"sqlite:///{with_store(tmp_path, 'server.db')}/server.db", port, tmp_path / "art")
    try:
        r = nnbench("ui", ["--uri", f"http://127.0.0.1:{port}"], tmp_path)
    finally:
        import os
        os.killpg(server.pid, 15)
        server.wait(timeout=30)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert lines[0] == (f"runs table: http://127.0.0.1:{port}/#/experiments/1/runs?workflowType=machine_learning"
                        "&viewStateShareKey=nnbench")
    assert lines[1].startswith("no sweep in this experiment yet") and "serving" not in r.stdout


@pytest.mark.slow
def test_ctrl_c_stops_the_ui_and_its_server_even_started_with_sigint_ignored(tmp_path):
    """A shell starts background jobs with SIGINT ignored; Ctrl-C (SIGINT to the process) still stops `nnbench ui`
    and the MLflow server it started, at once and with exit code 0."""
    import os
    import signal
    import subprocess
    import sys

    uri, _ = make_store(tmp_path)
    port = free_port()
    ui = subprocess.Popen([sys.executable, "-m", "experiments", "ui", "--uri", uri, "--port", str(port)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        assert ui.stdout.readline().startswith("starting the MLflow UI")
        assert ui.stdout.readline().startswith("runs table: ")  # printed once the UI answers
        os.kill(ui.pid, signal.SIGINT)
        assert ui.wait(timeout=60) == 130
        assert ui.stderr.read().strip().startswith("nnbench ui: error: interrupted")
    finally:
        if ui.poll() is None:
            os.killpg(ui.pid, signal.SIGKILL)
    with socket.socket() as s:  # the server is gone: its port is free again
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
