"""One Hydra job: check the input, measure its points in a fresh child, keep the results on disk, log them."""
from __future__ import annotations

import functools
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Callable

from omegaconf import DictConfig, OmegaConf

import models
from experiments import records

ROOT = Path(__file__).resolve().parent.parent
FRAMEWORK_PACKAGES = {"jax": ("jax", "flax", "optax"), "torch": ("torch",)}


class BadInput(Exception):
    """Input the user must fix; shown as one line, nothing is written to the store."""


def as_dict(cfg: DictConfig) -> dict:
    """The resolved job config as plain data, without Hydra's own node."""
    return OmegaConf.to_container(OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"]),
                                  resolve=True, enum_to_str=True)


def model_spec(cfg: dict):
    keys = {k: v for k, v in cfg["model"].items() if k != "name"}
    try:
        return models.load(cfg["model"]["name"], **keys)
    except (ValueError, TypeError) as e:
        raise BadInput(str(e)) from None


def interpreter(cfg: dict) -> str:
    return cfg["runtime"]["python"] or sys.executable


def check(cfg: dict) -> None:
    """Everything that can be known wrong before measuring; raises BadInput naming the fix."""
    python = interpreter(cfg)
    if not os.access(python, os.X_OK):
        raise BadInput(f"runtime.python={python} is not an executable interpreter: give the path of a venv's "
                       "bin/python, or runtime.python=null")
    bs = cfg["batch_size"]
    if bs is not None and bs <= 0:
        raise BadInput(f"batch_size must be a positive integer (got {bs}): use e.g. batch_size=32, "
                       "or batch_size=null for the model's seed lists")
    if cfg["repeat"] < 0:
        raise BadInput(f"repeat is a replicate index (got {cfg['repeat']}): use e.g. repeat=0,1,2")
    if not cfg["ops"]:
        raise BadInput("ops is empty: use e.g. ops=[inference,training] (ops: inference, training, grad)")
    fw = cfg["framework"]["name"]
    missing = [p for p in FRAMEWORK_PACKAGES[fw] if importlib.util.find_spec(p) is None]
    if missing and python == sys.executable:
        raise BadInput(f"framework={fw} needs {', '.join(missing)}, not installed for {python}: "
                       f"pip install {' '.join(missing)} (see README)")
    model_spec(cfg)
    if cfg["device"] == "gpu" or python != sys.executable:
        problem = probe(python, fw, cfg["precision"]["name"], cfg["device"])
        if problem:
            raise BadInput(problem if python == sys.executable else
                           f"runtime.python={python} cannot measure framework={fw} ({problem}): build that "
                           "environment with `python -m experiments.venv DIR PACKAGE==VERSION ...` (see README)")


@functools.cache
def probe(python: str, framework: str, precision: str, device: str) -> str | None:
    """Ask a child whether the framework gives this device and precision; None if it does."""
    r = subprocess.run([python, "-m", "experiments.worker", "--probe", framework, precision, device],
                       cwd=ROOT, capture_output=True, text=True, env=child_env())
    if r.returncode == 0:
        return None
    return r.stdout.strip() or (r.stderr.strip().splitlines() or [f"probe exited with {r.returncode}"])[-1]


def plan(cfg: dict, spec) -> list[dict]:
    """The points of a job: one per batch size, each with the ops that the seed measures at that size."""
    ops = list(dict.fromkeys(cfg["ops"]))
    if cfg["batch_size"] is not None:
        return [{"batch_size": cfg["batch_size"], "ops": ops}]
    lists = spec.batch_sizes
    sizes = sorted({b for op in ops for b in lists.get(op, ())})
    # An op without seed sizes still runs at every size, so its skip reason is recorded, not lost.
    return [{"batch_size": b, "ops": [op for op in ops if b in lists.get(op, ()) or not lists.get(op)]}
            for b in sizes]


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"  # never take 75% of a shared GPU
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def _exit_reason(rc: int) -> str:
    if rc < 0:
        name = signal.Signals(-rc).name
        hint = " (likely out of memory)" if -rc == signal.SIGKILL else ""
        return f"child killed by {name}{hint}"
    return f"child exited with code {rc}"


def run_child(spec: dict, job_dir: Path, timeout_s: float, python: str = sys.executable,
              on_result: Callable[[dict], None] = lambda r: None) -> list[dict]:
    """Measure all points, one child at a time; a crash or timeout fails only the point it happened in.

    Each result is handed to `on_result` as soon as the child writes it.
    """
    results_path = job_dir / "results.jsonl"
    results_path.unlink(missing_ok=True)
    points, out, attempt = spec["points"], [], 0

    def take(result: dict) -> None:
        out.append(result)
        on_result(result)

    while len(out) < len(points):
        attempt += 1
        spec_path = job_dir / f"spec-{attempt}.json"
        spec_path.write_text(json.dumps({**spec, "points": points[len(out):]}, indent=1))
        stderr_path = job_dir / f"child-{attempt}.log"
        offset = results_path.stat().st_size if results_path.exists() else 0
        with open(stderr_path, "w") as err:
            proc = subprocess.Popen([python, "-m", "experiments.worker", str(spec_path), str(results_path)],
                                    cwd=ROOT, env=child_env(), stdout=err, stderr=subprocess.STDOUT,
                                    start_new_session=True)
            reason = _watch(proc, results_path, offset, timeout_s, take)
        if len(out) < len(points):
            tail = stderr_path.read_text(errors="replace")[-3000:]
            take({"batch_size": points[len(out)]["batch_size"], "failed": reason or "child ended without a result",
                  "stderr_tail": tail})
    return out


def _watch(proc: subprocess.Popen, results: Path, offset: int, timeout_s: float,
           take: Callable[[dict], None]) -> str | None:
    """Pass on new results while the child runs; each point gets timeout_s from the end of the previous one."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            rc = proc.wait(timeout=0.5)
        except subprocess.TimeoutExpired:
            rc = None
        lines, offset = _new_lines(results, offset)
        for line in lines:
            take(line)
            deadline = time.monotonic() + timeout_s
        if rc is not None:
            return None if rc == 0 else _exit_reason(rc)
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return f"timed out: no result within bench.timeout_s={timeout_s:g} s"


def _new_lines(path: Path, offset: int) -> tuple[list[dict], int]:
    """Complete lines written since `offset`, and the offset after them: the child may be writing the next one.

    Polling reads only the new bytes, so the parent stays off the cores while the child measures.
    """
    if not path.exists():
        return [], offset
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read()
    end = data.rfind(b"\n") + 1
    return [json.loads(line) for line in data[:end].splitlines() if line.strip()], offset + end


def run_job(cfg: DictConfig, job_dir: Path,
            on_record: Callable[[records.Record, Path], None] = lambda r, d: None) -> list[records.Record]:
    """Measure every point of the job; each record is saved in its directory, then handed to `on_record`.

    Measurement faults become failed records; nothing raises.
    """
    c = as_dict(cfg)
    spec = model_spec(c)
    points = plan(c, spec)
    job_dir.mkdir(parents=True, exist_ok=True)
    (job_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    child_spec = {"framework": c["framework"]["name"], "compile": c["framework"]["compile"],
                  "model": c["model"],
                  "precision": c["precision"]["name"], "tf32": c["precision"]["tf32"],
                  "device": c["device"], "seed": c["seed"], "bench": c["bench"], "points": points}
    recs: list[records.Record] = []

    def record(result: dict) -> None:
        rec = records.build(c, points[len(recs)], result, spec.param_count())
        directory = job_dir / "points" / rec.slug
        rec.save(directory)
        if "samples.json" in rec.files:
            from experiments import report  # matplotlib: only once there is something to draw

            report.plot_samples(json.loads(rec.files["samples.json"]), directory / "samples.png")
        recs.append(rec)
        on_record(rec, directory)

    try:
        run_child(child_spec, job_dir, c["bench"]["timeout_s"], interpreter(c), record)
    except Exception:  # a harness bug must not stop the sweep either
        reason = traceback.format_exc()
        for p in points[len(recs):]:
            record({"batch_size": p["batch_size"], "failed": "harness error", "stderr_tail": reason})
    return recs


def summary(rec: records.Record) -> str:
    """One readable line per point for the console."""
    if rec.outcome == "failed":
        return "FAILED: " + rec.tags["failure_reason"].splitlines()[0]
    parts = []
    for op in ("inference", "training", "grad"):
        if f"{op}_median_s" in rec.metrics:
            m = rec.metrics
            parts.append(f"{op} {m[f'{op}_median_s'] * 1e3:.3f} ms "
                         f"[{m[f'{op}_ci95_low_s'] * 1e3:.3f}, {m[f'{op}_ci95_high_s'] * 1e3:.3f}]")
        elif f"skip_reason_{op}" in rec.tags:
            parts.append(f"{op} skipped ({rec.tags[f'skip_reason_{op}']})")
    return "; ".join(parts)


class Sweep:
    """What a sweep's jobs share, through a file in the sweep dir: works with any launcher, on any host."""

    def __init__(self, directory: Path):
        self.state = directory / "nnbench-sweep.json"
        self.progress = directory / "nnbench-progress.log"

    def start(self, **state) -> None:
        self.state.parent.mkdir(parents=True, exist_ok=True)
        self.state.write_text(json.dumps({"start": time.time(), **state}))
        self.progress.write_text("")

    def read(self) -> dict:
        return json.loads(self.state.read_text()) if self.state.exists() else {}

    def tick(self) -> str:
        """Count one finished point; '[done/total, ETA]' for the console."""
        with open(self.progress, "a") as f:
            f.write(".")
        state, done = self.read(), self.progress.stat().st_size
        total = state.get("points", done)
        eta = (time.time() - state.get("start", time.time())) / done * max(total - done, 0)
        return f"[{done}/{total}, ETA {int(eta) // 60}:{int(eta) % 60:02d}]"


def parent_run_id(sweep: Sweep | None) -> str | None:
    """The sweep's parent run: from the sweep dir, else from the environment (hosts without a shared disk)."""
    return (sweep.read().get("parent_run_id") if sweep else None) or os.environ.get("NNBENCH_PARENT_RUN_ID")


def measuring_s(recs: list[records.Record]) -> float:
    """Time spent inside the timing harness (first calls and warm-up included), from the samples files."""
    return sum(op["elapsed_s"] for r in recs if "samples.json" in r.files
               for op in json.loads(r.files["samples.json"]).values())
