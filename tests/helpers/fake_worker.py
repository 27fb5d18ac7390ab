"""Stand-in for `python -m experiments.measure.worker`: answers probes, measures one point per start, then misbehaves.

Run through a shim made by the `fake_python` fixture, as `runtime.python`. FAKE_FAULT says how it fails after its
one point: segv, oom (SIGKILL), raise, hang (`hang-once`: only the first worker to get there, FAKE_ONCE naming the file
that says one did); `early` dies before writing anything; `none` measures every point.
FAKE_BREAK_STORE names a file to overwrite with junk first (a store that breaks in the middle of a sweep).
FAKE_DELAY_S: seconds each point takes; FAKE_LONG_POINT=i: point i of the request takes ten minutes (a point an
interrupt is sure to find in progress). FAKE_MEDIAN_PER_BATCH=1: every sample is batch_size * 1e-4 s, so a run's
numbers say which point they came from (default: 1 ms). FAKE_FILL_DISK=PATH: once the job has saved the first
point, fill the disk holding PATH before measuring the next one (paired: as it prepares its first cell, once the
sweep has saved a point, so a later group's worker fills it; at once where the sweep does not write to that disk).

A profile request (profile=true) is answered with a made-up profile per op; its files hold the point's record.json
as the profiling worker found it (`record-before-profiling.json`: saved before any profiling starts). With
FAKE_PROFILE_FAULT=segv the profiling worker crashes instead.

A paired request (the paired sweep) is served on its socket: each prepared cell takes FAKE_DELAY_S (the i-th ten
minutes with FAKE_LONG_POINT=i), each burst answers five samples of the median; the worker misbehaves as FAKE_FAULT
says when asked to prepare its second cell (`early`, `hang`: its first), or where FAKE_FAULT_SIDE=<framework> names
another framework than its own, never. FAKE_SPEEDUP=<framework>:<factor>: that framework's worker is `factor` times
faster, and every paired worker's samples are off by up to ±0.25%, its own amount (from its pid): each trial's ratio
then differs a little, so two trials give a speedup an interval. FAKE_SLOWER=<factor> (set by an interpreter's shim:
an environment of its own): its paired workers are `factor` times slower, off by their own amount too. A paired
request with variants (set-ups served in one process) is answered a `Ready` per set-up and serves each the same.
FAKE_LOCKFILE=PATH: a paired worker holds PATH locked while it lives, as libtpu holds a TPU's, and stops with
libtpu's message where another worker holds it.
"""
import fcntl
import os
import random
import shutil
import signal
import sys
import time
from pathlib import Path

from experiments.common.protocol import CATEGORIES, OpProfile, OpResult, PointResult, ProfiledOp, Request

args = sys.argv[1:]  # -m experiments.measure.worker ...
if "--probe" in args:
    print("cpu")
    sys.exit(0)
request, results = Request.from_json(Path(args[2]).read_text()), Path(args[3])
fault = os.environ["FAKE_FAULT"]
VERSIONS = {f"{request.framework}_version": "0.fake"}  # what a real worker reports: its own framework's version
if "FAKE_BREAK_STORE" in os.environ:
    Path(os.environ["FAKE_BREAK_STORE"]).write_bytes(b"not a database" * 100)


def saved() -> bool:
    """Whether the job has saved its first point (its record.json in job/points/; this worker is job/process-<i>/)."""
    return any(next(d.glob("points/*/record.json"), None) for d in results.parents[:2])


def sweep_saved(disk: Path) -> bool:
    """Whether the sweep has saved a point (this paired worker is <sweep>/<job>/trials/trial-<n>/), or `disk` is one
    the sweep does not write to (a tracking server's): then it can fill at once."""
    other = disk.parent.stat().st_dev != results.parent.stat().st_dev
    return other or next(results.parents[3].glob("*/job-*/points/*/record.json"), None) is not None


def fill_disk(path: Path, wait: bool = True) -> None:
    """Wait until the job has saved a point (`wait`), then write junk until the disk is full."""
    for _ in range(1200 if wait else 0):
        if saved():
            break
        time.sleep(0.1)
    with open(path, "wb", buffering=0) as f:
        for chunk in (1 << 20, 1 << 12, 1):
            try:
                while True:
                    f.write(b"\0" * chunk)
            except OSError:
                pass




def profiled(batch: int, op: str) -> OpResult:
    """A made-up profile of one op (the op takes 1 ms: 0.05 ms per category, the rest overhead), and its files."""
    out = Path(request.profile_dir) / f"bs{batch}" / op
    out.mkdir(parents=True, exist_ok=True)
    for rec in results.parents[1].glob("points/*/record.json"):  # this worker is <job>/process-profile/
        if f'"batch_size": "{batch}"' in rec.read_text():
            shutil.copy(rec, out / "record-before-profiling.json")
    (out / "top.md").write_text("# fake\n")
    parts = dict.fromkeys(CATEGORIES, 5e-5) | {"other": 0.0, "overhead": 1e-3 - 5e-5 * (len(CATEGORIES) - 1)}
    return OpResult("ok", device="cpu", profile=OpProfile(1e-3, parts, [1e-3] * 5, [ProfiledOp("fake", "conv", 1, 1e-4)],
                                                          0.01))


if request.profile_dir:
    if os.environ.get("FAKE_PROFILE_FAULT") == "segv":
        os.kill(os.getpid(), signal.SIGSEGV)
    for p in request.points:
        line = PointResult(p.batch_size, "cpu", VERSIONS, {op: profiled(p.batch_size, op) for op in p.ops})
        with open(results, "a") as f:
            f.write(line.to_json() + "\n")
    sys.exit(0)
def misbehave() -> None:
    print("about to fail:", fault, flush=True)
    if fault in ("segv", "early"):
        os.kill(os.getpid(), signal.SIGSEGV)
    if fault == "oom":
        os.kill(os.getpid(), signal.SIGKILL)
    if fault == "raise":
        raise RuntimeError("CUDA error: out of memory")
    if fault == "hang-once":
        if Path(os.environ["FAKE_ONCE"]).exists():
            return
        Path(os.environ["FAKE_ONCE"]).touch()
    time.sleep(120)


HELD = []  # the lock file, open while this worker lives


def hold(path: str) -> None:
    """Lock `path` for this process's life, as libtpu locks a TPU; exit as libtpu does where another process holds it."""
    f = open(path, "a")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print("Internal error when accessing libtpu multi-process lockfile", flush=True)
        sys.exit(1)
    HELD.append(f)


def serve_paired() -> None:
    """A paired worker's side of the socket: ready, prepare, burst, end; misbehaving as FAKE_FAULT says."""
    import socket

    from experiments.common.protocol import Burst, Command, Prepared, Ready

    me = os.environ.get("FAKE_FAULT_SIDE", request.framework) == request.framework
    speed, own = 1.0, 1 + random.Random(os.getpid()).uniform(-0.0025, 0.0025)
    if "FAKE_SPEEDUP" in os.environ:
        framework, factor = os.environ["FAKE_SPEEDUP"].split(":")
        speed = own / float(factor) if framework == request.framework else own
    if "FAKE_SLOWER" in os.environ:
        speed = float(os.environ["FAKE_SLOWER"]) * own
    good = 10**6 if fault == "none" or not me else 0 if fault in ("hang", "hang-once", "early") else 1
    if "FAKE_LOCKFILE" in os.environ:
        hold(os.environ["FAKE_LOCKFILE"])
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(request.paired)
        ready = Ready(VERSIONS, {"cpu_count_logical": 2.0}, 0.0, 1, 2).to_json().encode() + b"\n"
        sock.sendall(ready * (1 + len(request.variants)))
        prepared, batch = 0, 1
        for line in sock.makefile("rb"):
            command = Command.from_json(line)
            if command.do == "end":
                return
            if command.do == "prepare":
                if prepared >= good:
                    misbehave()
                disk = Path(os.environ.get("FAKE_FILL_DISK", ""))
                if "FAKE_FILL_DISK" in os.environ and prepared == 0 and sweep_saved(disk):
                    fill_disk(disk, wait=False)
                time.sleep(600 if str(prepared) == os.environ.get("FAKE_LONG_POINT")
                           else float(os.environ.get("FAKE_DELAY_S", "0")))
                prepared, batch = prepared + 1, command.batch_size
                sock.sendall(Prepared("ok", device="cpu", block=1).to_json().encode() + b"\n")
                continue
            median = (batch * 1e-4 if os.environ.get("FAKE_MEDIAN_PER_BATCH") else 0.001) * speed
            meter = {"busy_cpu_s": 0.0, "own_cpu_s": 0.0, "wall_s": command.seconds, "minor_faults": 0.0}
            sock.sendall(Burst([median] * 5, meter).to_json().encode() + b"\n")


if request.paired:
    serve_paired()
    sys.exit(0)
from tests.synthetic import ok_op  # only here: a paired worker, most of them, reports no OpResult (nor imports numpy)
for i, p in enumerate(request.points[:len(request.points) if fault == "none" else 0 if fault in ("hang", "early")
                                     else 1]):
    if i == 1 and "FAKE_FILL_DISK" in os.environ:
        fill_disk(Path(os.environ["FAKE_FILL_DISK"]))
    time.sleep(600 if str(i) == os.environ.get("FAKE_LONG_POINT") else float(os.environ.get("FAKE_DELAY_S", "0")))
    median = p.batch_size * 1e-4 if os.environ.get("FAKE_MEDIAN_PER_BATCH") else 0.001
    line = PointResult(p.batch_size, "cpu", VERSIONS, {op: ok_op(median, p.batch_size) for op in p.ops})
    with open(results, "a") as f:
        f.write(line.to_json() + "\n")
if fault == "none":
    sys.exit(0)
misbehave()
