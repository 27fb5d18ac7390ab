"""Open the MLflow UI on a store: `nnbench ui [--port 5000] [--uri URI] [--experiment nnbench]`.

For a local store (the default ./mlruns, or a sqlite --uri) it starts `mlflow ui` on 127.0.0.1, waits until it
answers, prints the runs table and the latest sweep's parent run (its description answers the comparison), both
in the "Model training" view, and serves until Ctrl-C. For a tracking server's URI it starts nothing: the server
has its own UI, and the same two links point at it.
"""
from __future__ import annotations

import argparse

from experiments.cli.selection import add_uri
from experiments.common.errors import OK, BadInput
from experiments.common.options import positive
from experiments.store import ui_server, view
from experiments.store.uris import UI_PORT, readable, sqlite_path


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
    uri = readable(a.uri)
    server = uri.startswith(("http://", "https://"))
    path = sqlite_path(uri)
    if not server and path is None:
        raise BadInput(f"nnbench ui serves a sqlite store or links a tracking server, not {uri}: pass --uri "
                       "sqlite:///PATH.db or http(s)://HOST:PORT")
    exp, latest = ui_server.opened(uri, a.experiment)
    if server:
        links(uri, exp, latest, a.port)
        return OK
    if not ui_server.port_free(a.port):
        raise BadInput(f"port {a.port} on 127.0.0.1 is in use: choose another with --port (e.g. --port {a.port + 1})")
    proc, log = ui_server.start(uri, path, a.port)  # Ctrl-C and a kill raise in proc.wait(), as main() handles them
    try:
        links(uri, exp, latest, a.port)
        print("serving until Ctrl-C", flush=True)
        proc.wait()
        raise BadInput(f"mlflow ui stopped: {ui_server.last_error(log)}")
    finally:  # Ctrl-C goes on up: one line and exit 130, as from every command, once the UI is stopped
        ui_server.stop(proc)


def links(uri: str, experiment_id: str, latest, port: int) -> None:
    print(f"runs table: {view.run_link(experiment_id, uri, port=port)}")
    if latest is not None:
        link = view.run_link(experiment_id, uri, latest.info.run_id, port)
        print(f"latest sweep ({latest.info.run_name}): {link}")
    else:
        print("no sweep in this experiment yet: python -m experiments.run -m framework=jax,torch model=lenet")
