"""The MLflow UI served on a sqlite store (`nnbench ui`): `mlflow ui` started on 127.0.0.1 in a session of its own
(one worker, no job runner: 2 processes, not 15), waited for until it answers, and stopped with its server. Parent
side; it runs MLflow as a process and imports none of it."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from experiments.common.errors import BadInput
from experiments.store.uris import failure

READY_S = 120  # `mlflow ui` took 14-20 s to answer /health on 2 busy cores


def opened(uri: str, experiment: str):
    """The experiment's id in the store and its latest sweep's run (None: none yet); BadInput naming the fix for a
    store that can't be read."""
    from experiments.store import tracking  # mlflow is slow to import: only after parsing

    try:
        store = tracking.Store(uri)
        return store.open(experiment, "--uri"), store.latest_sweep(experiment)
    except tracking.StoreUnavailable as e:
        raise BadInput(str(e)) from None
    except Exception as e:
        raise BadInput(failure(uri, e, "--uri")) from None


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
