"""Stand-in for `python -m experiments.worker`: answers probes, measures one point per start, then misbehaves.

Run through a shim made by the `fake_python` fixture, as `runtime.python`. FAKE_FAULT says how it fails after its
one point: segv, oom (SIGKILL), raise, hang; `early` dies before writing anything; `none` measures every point.
FAKE_BREAK_STORE names a file to overwrite with junk first (a store that breaks in the middle of a sweep).
"""
import os
import signal
import sys
import time
from pathlib import Path

from experiments.protocol import PointResult, Request
from tests.helpers import ok_op

args = sys.argv[1:]  # -m experiments.worker ...
if "--probe" in args:
    print("cpu")
    sys.exit(0)
request = Request.from_json(Path(args[2]).read_text())
fault = os.environ["FAKE_FAULT"]
if "FAKE_BREAK_STORE" in os.environ:
    Path(os.environ["FAKE_BREAK_STORE"]).write_bytes(b"not a database" * 100)
for p in request.points[:len(request.points) if fault == "none" else 0 if fault in ("hang", "early") else 1]:
    line = PointResult(p.batch_size, "cpu", {"torch_version": "0.fake"}, {op: ok_op(0.001, p.batch_size)
                                                                             for op in p.ops})
    with open(args[3], "a") as f:
        f.write(line.to_json() + "\n")
if fault == "none":
    sys.exit(0)
print("about to fail:", fault, flush=True)
if fault in ("segv", "early"):
    os.kill(os.getpid(), signal.SIGSEGV)
if fault == "oom":
    os.kill(os.getpid(), signal.SIGKILL)
if fault == "raise":
    raise RuntimeError("CUDA error: out of memory")
time.sleep(120)
