"""Open the MLflow UI on a store: `nnbench ui [--port 5000] [--uri URI] [--experiment nnbench]`.

For a local store (the default ./mlruns, or a sqlite --uri) it starts `mlflow ui` on 127.0.0.1, waits until it
answers, prints the runs table and the latest sweep's parent run (its description answers the comparison), both
in the "Model training" view, and serves until Ctrl-C. For a tracking server's URI it starts nothing: the server
has its own UI, and the same two links point at it.
"""
from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from experiments.cli.selection import add_uri
from experiments.common.errors import OK, BadInput
from experiments.common.options import positive
from experiments.store import view
from experiments.store.uris import UI_PORT, failure, readable, sqlite_path

READY_S = 120  # `mlflow ui` took 14-20 s to answer /health on 2 busy cores


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--port", type=port, default=UI_PORT, help="port on 127.0.0.1 (default %(default)s: the port the "
                                                              "links a sweep prints name)")
    add_uri(p)
    p.add_argument("--experiment", default="nnbench", help="MLflow experiment (default %(default)s)")


def port(text: str) -> int:
    n = positive("--port", str(UI_PORT), int, least=1, strict=False)(text)
    if n > 65535:
        raise argparse.ArgumentTypeError(f"--port {text} is past 65535: e.g. --port {UI_PORT}")
    return n


def run(a: argparse.Namespace) -> int:
    from experiments.store import tracking  # mlflow is slow to import: only after parsing

    uri = readable(a.uri)
    server = uri.startswith(("http://", "https://"))
    path = sqlite_path(uri)
    if not server and path is None:
        raise BadInput(f"nnbench ui serves a sqlite store or links a tracking server, not {uri}: pass --uri "
                       "sqlite:///PATH.db or http(s)://HOST:PORT")
    try:
        store = tracking.Store(uri)
        exp = store.open(a.experiment, "--uri")
        latest = store.latest_sweep(a.experiment)
    except tracking.StoreUnavailable as e:
        raise BadInput(str(e)) from None
    except Exception as e:
        raise BadInput(failure(uri, e, "--uri")) from None
    if server:
        links(uri, exp, latest, a.port)
        return OK
    if not port_free(a.port):
        raise BadInput(f"port {a.port} on 127.0.0.1 is in use: choose another with --port (e.g. --port {a.port + 1})")
    proc, log = start(uri, path, a.port)  # Ctrl-C and a kill raise in proc.wait(), as main() handles them
    try:
        links(uri, exp, latest, a.port)
        print("serving until Ctrl-C", flush=True)
        proc.wait()
        raise BadInput(f"mlflow ui stopped: {last_error(log)}")
    finally:  # Ctrl-C goes on up: one line and exit 130, as from every command, once the UI is stopped
        stop(proc)


def links(uri: str, experiment_id: str, latest, port: int) -> None:
    print(f"runs table: {view.run_link(experiment_id, uri, port=port)}")
    if latest is not None:
        link = view.run_link(experiment_id, uri, latest.info.run_id, port)
        print(f"latest sweep ({latest.info.run_name}): {link}")
    else:
        print("no sweep in this experiment yet: python -m experiments.run -m framework=jax,torch model=lenet")


def port_free(port: int) -> bool:
    """Whether `mlflow ui` can bind the port (as uvicorn binds: SO_REUSEADDR, so a server just stopped does not
    leave it looking busy)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def start(uri: str, path: Path, port: int) -> tuple[subprocess.Popen, Path]:
    """`mlflow ui` on 127.0.0.1 in its own session, one worker, no job runner (2 processes, not 15), answering."""
    log = Path(tempfile.mkstemp(prefix="nnbench-ui-", suffix=".log")[1])
    environ = os.environ | {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", "MLFLOW_DISABLE_TELEMETRY": "true"}
    # experiments created in the UI put their artifacts beside the sweeps', where a sqlite client can write them
    artifacts = (path.parent / "artifacts").resolve()
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri, "--host",
                                 "127.0.0.1", "--port", str(port), "--workers", "1", "--default-artifact-root",
                                 artifacts.as_uri()], env=environ, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    print(f"starting the MLflow UI on {uri} (log: {log}) ...", flush=True)
    deadline = time.monotonic() + READY_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:  # it exits 0 even when it could not bind: say why, from its log
            raise BadInput(f"mlflow ui stopped: {last_error(log)}")
        if healthy(port) and proc.poll() is None:
            return proc, log
        time.sleep(0.5)
    stop(proc)
    raise BadInput(f"mlflow ui did not answer on 127.0.0.1:{port} within {READY_S} s: see {log}")


def healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def last_error(log: Path) -> str:
    lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    return next((ln for ln in reversed(lines) if "rror" in ln), lines[-1] if lines else "no output") + f" ({log})"


def stop(proc: subprocess.Popen) -> None:
    """Stop `mlflow ui` and its server process (its own session)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
