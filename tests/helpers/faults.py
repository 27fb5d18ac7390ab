"""Faults for the sweep tests: a sweep started as a terminal starts it, a tracking server that dies while a sweep
logs, a small disk that fills up, and the processes a sweep may have left behind."""
from __future__ import annotations

import contextlib
import http.client
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psutil

from tests import forked
from tests.helpers import unavailable, unchecked, user_env


def launch(args: list[str], cwd: Path, **extra_env: str) -> subprocess.Popen | forked.Started:
    """`python -m experiments.run ARGS` in its own process group, as a shell starts a command, its output in text
    pipes; as `run`, without its parity process unless `parity=` is given, and forked where a fresh interpreter would
    start alike."""
    env = user_env(**extra_env)
    if forked.starts_alike(env):
        return forked.Started("experiments.run", unchecked(args), cwd, env, subprocess.PIPE, subprocess.PIPE)
    return subprocess.Popen([sys.executable, "-m", "experiments.run", *unchecked(args)], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def wait_for(condition, what: str, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def processes_under(path: Path) -> list[psutil.Process]:
    """Live processes whose command line mentions `path` (a test's folder: its fake interpreter, its requests)."""
    out = []
    for p in psutil.process_iter(["cmdline", "status"]):
        with contextlib.suppress(psutil.Error):
            if p.info["status"] != psutil.STATUS_ZOMBIE and str(path) in " ".join(p.info["cmdline"] or []):
                out.append(p)
    return out


class KillingProxy:
    """An HTTP proxy in front of a real `mlflow server`. The `nth` request whose path contains `path_part` is not
    passed on: the server's process group is killed and the proxy stops listening, so from then on the sweep
    sees what a dead server looks like (connection refused)."""

    def __init__(self, upstream_port: int, server: subprocess.Popen, path_part: str, nth: int):
        self.upstream_port, self.server, self.path_part, self.left = upstream_port, server, path_part, nth
        self.lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def forward(self):
                proxy.forward(self)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = forward

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def forward(self, h: BaseHTTPRequestHandler) -> None:
        body = h.rfile.read(int(h.headers.get("Content-Length") or 0))
        with self.lock:
            if self.path_part in h.path:
                self.left -= 1
            kill = self.left == 0
        if kill:
            self.kill()
            h.close_connection = True
            return
        conn = http.client.HTTPConnection("127.0.0.1", self.upstream_port, timeout=60)
        conn.request(h.command, h.path, body, {k: v for k, v in h.headers.items() if k.lower() != "host"})
        resp = conn.getresponse()
        data = resp.read()
        h.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                h.send_header(k, v)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.server.pid, signal.SIGKILL)
        self.server.wait()
        threading.Thread(target=self.close, daemon=True).start()  # not from this handler: shutdown() waits for it

    def close(self) -> None:
        with self.lock:
            closed, self.closed = getattr(self, "closed", False), True
        if not closed:
            self.httpd.shutdown()
            self.httpd.server_close()


@contextlib.contextmanager
def small_disk(path: Path, size_mb: int):
    """A tmpfs of `size_mb` at `path`; `unavailable` where it can't be mounted (not root, no CAP_SYS_ADMIN)."""
    path.mkdir()
    if os.geteuid() != 0 or not shutil.which("mount"):
        unavailable("a small tmpfs", "mounting one needs root (CI runs as root)")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(path)], capture_output=True,
                       text=True)
    if r.returncode:
        unavailable("a small tmpfs", f"it can't be mounted here ({r.stderr.strip()}): needs CAP_SYS_ADMIN")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def remount_readonly(path: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(path)], check=True, capture_output=True)
