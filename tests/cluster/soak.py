"""Soak: many quick sweeps into one tracking server on PostgreSQL, several at once, then count what arrived.

    python tests/cluster/soak.py --minutes 20 --parallel 4 [--uri URI] [--real] [--json soak.json]

Without --uri it starts its own server with tests/cluster/tracking.sh (PostgreSQL 15, `mlflow server --workers 1`)
in a state dir of its own, and stops it at the end. Each sweep is `framework=torch model=lenet,mlp_relu
ops=[inference] bench=quick` (10 points in 2 jobs) measured by the fake worker (tests/helpers/fake_worker.py, whose
numbers say which point they belong to), so the store, not the CPU, is what is soaked; --real measures with real
workers instead. New sweeps start until the time is up; then it waits for those running. It reports points
expected, FINISHED, lost, RUNNING and duplicated (over every run, deleted ones too), the server's peak RSS (its
process tree, sampled each second), the store's size per point (PostgreSQL's database and the artifact dir), and
how loaded the machine was meanwhile. Goal: 0 lost, 0 RUNNING, 0 duplicated. A benchmark, not a test: it asserts
nothing; its exit code is 1 when the goal is missed.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]
SWEEP = ["-m", "framework=torch", "model=lenet,mlp_relu", "ops=[inference]", "bench=quick"]
POINTS = 10  # lenet's 4 inference batch sizes and mlp_relu's 6


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=20.0, help="how long new sweeps start (default 20)")
    p.add_argument("--parallel", type=int, default=4, help="sweeps at once (default 4)")
    p.add_argument("--uri", help="a tracking server to soak (default: start one with tracking.sh)")
    p.add_argument("--real", action="store_true", help="real workers instead of the fake one")
    p.add_argument("--json", type=Path, help="also write the figures here")
    a = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="nnbench-soak-"))
    server = Server(work / "tracking") if a.uri is None else None
    uri = a.uri or server.up()
    try:
        figures = soak(uri, work, a.minutes * 60, a.parallel, a.real, server)
    finally:
        if server:
            server.down()
    print(table(figures))
    if a.json:
        a.json.write_text(json.dumps(figures, indent=1))
    ok = figures["lost"] == figures["running"] == figures["duplicated"] == 0
    return 0 if ok else 1


class Server:
    """tracking.sh's server in a state dir of its own (under /tmp: the postgres user must reach it)."""

    def __init__(self, state: Path):
        self.env = {**os.environ, "PYTHON": sys.executable, "NNBENCH_TRACKING_DIR": str(state)}
        self.state = state

    def script(self, command: str) -> str:
        r = subprocess.run(["bash", str(ROOT / "tests" / "cluster" / "tracking.sh"), command], env=self.env,
                           capture_output=True, text=True, timeout=300)
        if r.returncode:
            sys.exit(f"soak: tracking.sh {command} failed: {r.stderr.strip()[-2000:]}")
        return r.stdout.strip()

    def up(self) -> str:
        self.state.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(self.state.parent, 0o755)
        return self.script("up").splitlines()[-1]

    def down(self) -> None:
        self.script("down")

    def rss(self) -> int:
        """The MLflow server's process tree's resident memory, bytes (PostgreSQL's not counted)."""
        try:
            proc = psutil.Process(int((self.state / "mlflow.pid").read_text()))
            return sum(p.memory_info().rss for p in [proc, *proc.children(recursive=True)])
        except (psutil.Error, OSError, ValueError):
            return 0

    def store_bytes(self) -> tuple[int, int]:
        """PostgreSQL's database mlflow and the artifact dir, bytes."""
        import psycopg  # the [server] extra

        port = (self.state / "pg.port").read_text().strip()
        with psycopg.connect(f"postgresql://postgres@127.0.0.1:{port}/mlflow") as con:
            db = con.execute("SELECT pg_database_size('mlflow')").fetchone()[0]
        art = sum(f.stat().st_size for f in (self.state / "artifacts").rglob("*") if f.is_file())
        return db, art


def soak(uri: str, work: Path, seconds: float, parallel: int, real: bool, server: Server | None) -> dict:
    fake = work / "fake-python"
    fake.write_text(f'#!/bin/sh\nexec {sys.executable} {ROOT / "tests" / "helpers" / "fake_worker.py"} "$@"\n')
    fake.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"} | {
        "PYTHONPATH": str(ROOT), "MLFLOW_TRACKING_URI": uri, "FAKE_FAULT": "none", "FAKE_MEDIAN_PER_BATCH": "1"}
    args = SWEEP + ([] if real else [f"runtime.python={fake}"])
    sampled = {"rss": [], "load": [], "others_cpu": []}
    stop = threading.Event()

    def sample() -> None:
        mine = psutil.Process()
        while not stop.wait(1.0):
            sampled["rss"].append(server.rss() if server else 0)
            sampled["load"].append(os.getloadavg()[0])
            ours = {mine.pid, *(c.pid for c in mine.children(recursive=True))}
            if server:
                ours |= {p.pid for p in server_tree(server)}
            busy = 0.0
            for proc in psutil.process_iter(["cpu_percent"]):
                if proc.pid not in ours:
                    busy += proc.info["cpu_percent"] or 0.0
            sampled["others_cpu"].append(busy / 100)

    before = server.store_bytes() if server else (0, 0)  # an empty store: MLflow's schema
    threading.Thread(target=sample, daemon=True).start()
    start, done, running, n = time.monotonic(), [], [], 0
    while running or time.monotonic() - start < seconds:
        while len(running) < parallel and time.monotonic() - start < seconds:
            cwd = work / "sweeps" / f"{n:04d}"
            cwd.mkdir(parents=True)
            out = open(cwd / "console.txt", "w")
            running.append((subprocess.Popen([sys.executable, "-m", "experiments.run", *args], cwd=cwd, env=env,
                                             stdout=out, stderr=subprocess.STDOUT), cwd, out))
            n += 1
        time.sleep(1.0)
        for proc, cwd, out in [r for r in running if r[0].poll() is not None]:
            out.close()
            running.remove((proc, cwd, out))
            done.append(ended(proc.returncode, cwd))
    stop.set()
    wall = time.monotonic() - start
    figures = count(uri, done)
    figures |= {"minutes": round(wall / 60, 1), "parallel": parallel, "workers": "real" if real else "fake",
                "server_peak_rss_mb": round(max(sampled["rss"], default=0) / 2**20, 1),
                "load_avg_1m_mean": round(sum(sampled["load"]) / max(len(sampled["load"]), 1), 2),
                "load_avg_1m_max": round(max(sampled["load"], default=0), 2),
                "other_processes_cores_mean": round(sum(sampled["others_cpu"]) / max(len(sampled["others_cpu"]), 1),
                                                    2),
                "cores": psutil.cpu_count()}
    if server:
        db, art = (after - b for after, b in zip(server.store_bytes(), before))
        points = max(figures["finished"], 1)  # the sweeps' parent runs and reports are shared out among them
        figures |= {"db_mb": round(db / 2**20, 1), "artifacts_mb": round(art / 2**20, 1),
                    "db_empty_mb": round(before[0] / 2**20, 1),
                    "db_kb_per_point": round(db / points / 1024, 1),
                    "artifacts_kb_per_point": round(art / points / 1024, 1)}
    return figures


def server_tree(server: Server) -> list[psutil.Process]:
    """The MLflow server's processes and PostgreSQL's (its postmaster and backends)."""
    out = []
    for pid_file in (server.state / "mlflow.pid", server.state / "pg" / "postmaster.pid"):
        try:
            proc = psutil.Process(int(pid_file.read_text().split()[0]))
            out += [proc, *proc.children(recursive=True)]
        except (psutil.Error, OSError, ValueError, IndexError):
            pass
    return out


def ended(code: int, cwd: Path) -> dict:
    """One sweep: its exit code, last line and parent run (from its console)."""
    lines = (cwd / "console.txt").read_text(errors="replace").strip().splitlines()
    parent = next((ln.split("runs under parent ")[1].split()[0] for ln in lines if "runs under parent " in ln), None)
    return {"dir": str(cwd), "code": code, "last": lines[-1] if lines else "", "parent": parent}


def count(uri: str, sweeps: list[dict]) -> dict:
    """Every run in the store (deleted ones too) against the points the sweeps planned."""
    from mlflow.entities import ViewType
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("nnbench")
    runs, token = [], None
    while True:
        page = client.search_runs([exp.experiment_id], run_view_type=ViewType.ALL, max_results=5000,
                                  page_token=token)
        runs += page
        if not (token := page.token):
            break
    points = [r for r in runs if "batch_size" in r.data.params]
    def key(r) -> tuple:
        return r.data.tags.get("mlflow.parentRunId"), r.data.params["model"], r.data.params["batch_size"]

    per_point = Counter(key(r) for r in points)
    parents = {s["parent"] for s in sweeps if s["parent"]}
    finished = {key(r) for r in points if r.info.status == "FINISHED" and r.info.lifecycle_stage == "active"
                and r.data.tags.get("mlflow.parentRunId") in parents}
    expected = POINTS * len(sweeps)
    return {"sweeps": len(sweeps), "sweeps_exit_0": sum(s["code"] == 0 for s in sweeps),
            "sweeps_without_parent": sum(s["parent"] is None for s in sweeps),
            "failed_sweeps": [s for s in sweeps if s["code"] != 0][:5],
            "expected": expected, "finished": len(finished), "lost": expected - len(finished),
            "running": sum(r.info.status == "RUNNING" for r in runs),
            "duplicated": sum(n - 1 for n in per_point.values()),
            "point_runs": len(points), "parent_runs": len(runs) - len(points)}


def table(f: dict) -> str:
    rows = [("sweeps (exit 0)", f"{f['sweeps']} ({f['sweeps_exit_0']})"), ("points expected", f["expected"]),
            ("FINISHED", f["finished"]), ("lost", f["lost"]), ("RUNNING", f["running"]),
            ("duplicated", f["duplicated"]), ("server peak RSS", f"{f['server_peak_rss_mb']} MB")]
    if "db_kb_per_point" in f:
        rows += [("store per point", f"{f['db_kb_per_point']} KB database + {f['artifacts_kb_per_point']} KB "
                                     f"artifacts ({f['db_mb']} MB + {f['artifacts_mb']} MB in all, over an empty "
                                     f"database of {f['db_empty_mb']} MB)")]
    rows += [("wall", f"{f['minutes']} min, {f['parallel']} sweeps at once, {f['workers']} workers"),
             ("machine load", f"load average {f['load_avg_1m_mean']} mean, {f['load_avg_1m_max']} max on "
                              f"{f['cores']} cores; other processes used {f['other_processes_cores_mean']} cores")]
    width = max(len(k) for k, _ in rows)
    out = "\n".join(f"{k:<{width}}  {v}" for k, v in rows)
    for s in f["failed_sweeps"]:
        out += f"\nexit {s['code']} in {s['dir']}: {s['last']}"
    return out


if __name__ == "__main__":
    sys.exit(main())
