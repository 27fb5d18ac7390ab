"""The worker: `python -m experiments.measure.worker REQUEST RESULTS` times one job's points with one framework,
or, for a profile request (`Request.profile_dir`), profiles them (experiments/measure/profile.py), or, for a paired
request (`Request.paired`), prepares ops and times bursts of them on the parent's commands (harness/pairs.py)
(`--probe FRAMEWORK SETUP` checks a set-up before a sweep; `--smoke FRAMEWORK` takes one LeNet training step).

It imports only the selected framework, writes one JSON line per finished point (so a crash loses
only the point in progress) and never talks to MLflow.
"""
from __future__ import annotations

import dataclasses
import mmap
import os
import socket
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy.ma  # noqa: F401  np.median imports it on its first call: not inside the first op's sampling window
import psutil

import models
from experiments.common.protocol import Burst, Command, OpResult, PointResult, Prepared, Ready, Request, Setup
from experiments.measure import flops, peaks, profile, stats, timing
from experiments.common.frameworks import traits
from experiments.measure.backends import Unavailable, Unsupported, load
from experiments.measure.environment import fingerprint, host_record, machine_record
from experiments.measure.meter import background_cores, meter, oversubscription, reset_high_water, resident


def pin(framework: str, threads: int | None) -> None:
    """framework.threads where a framework's threads follow CPU affinity (`Traits.pin_threads`: jax), before its
    backend starts: XLA sizes its CPU thread pool by the cores the process
    may run on and ignores its own thread flags. In jaxlib 0.10.2 on 2 cores, a jitted matmul and conv loop kept 4
    threads busy with XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1" as without it,
    and one thread (79 of 80 ticks) once the process could run on one core. So a jax worker runs on the first
    `threads` cores it may use (the fork server imports jax but starts no backend); its `configure` checks it."""
    if threads and traits(framework).pin_threads and hasattr(os, "sched_setaffinity"):
        cores = sorted(os.sched_getaffinity(0))
        if 0 < threads <= len(cores):
            os.sched_setaffinity(0, cores[:threads])


def cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def intra_op_threads(env: dict[str, str]) -> int:
    """The threads an op runs on: torch's intra-op threads (its record says), else XLA's pool, one per core."""
    return int(env["torch_num_threads"]) if "torch_num_threads" in env else cores()


def validate_device(step, out, configured: str) -> str:
    """The device the output lives on; a silent fallback to another device is an error, not a result."""
    actual = step.device_of(out)
    if actual.split(":")[0] != configured.split(":")[0]:
        raise RuntimeError(f"outputs live on {actual}, not on the configured {configured}")
    return actual


@dataclasses.dataclass(frozen=True)
class Workbench:
    """What each op of a request is measured with in this worker: the framework's backend, configured for the
    request's set-up (on `device`), and the request's model, declared for this framework."""

    backend: Any
    spec: models.ModelSpec
    req: Request
    device: str


def measure_op(bench: Workbench, op: str, batch: int, threads: int | None = None) -> OpResult:
    """One op, from building its model to its last sample; its peak memory counts from before the build.
    `threads`: the op's intra-op threads, flagged where they outnumbered the cores free while it was sampled."""
    backend, spec, req = bench.backend, bench.spec, bench.req
    backend.reset_peak_memory()
    rss, hwm = resident()
    base = rss if reset_high_water() else hwm
    try:
        step = backend.prepare(spec, op, batch, req.seed)
    except Unsupported as e:
        return OpResult("skipped", reason=str(e))
    seen: list[str] = []
    hits = backend.cache_hits()
    watch = timing.Watch(inspect=lambda o: seen.append(validate_device(step, o, bench.device)), meter=meter)
    m = timing.measure(step.fn, step.sync, req.budget, watch=watch, between_sd=req.between.get(op))
    peak = backend.peak_memory()
    d = m.meter
    busy = background_cores(d)
    return OpResult("ok", device=seen[0], measurement=m, stats=stats.summarize([m], batch), calls_per_block=m.block,
                    flops=counted(spec, req, op, batch), compiles=step.compiles() if step.compiles else None,
                    compile_cache_hits=backend.cache_hits() - hits if step.compiles else None,
                    page_faults_per_call=d["minor_faults"] / m.calls,
                    peak_mem_bytes=max(0, resident()[1] - base), device_peak_mem_bytes=peak,
                    background_cores=busy, threads=threads,
                    oversubscribed=oversubscription(req.framework, threads, cores(), busy, os.cpu_count()))


def counted(spec: models.Model, req: Request, op: str, batch: int) -> int | None:
    """FLOPs of one call: the model's own count (its layers, or a network's declaration), else the one the sweep's
    parity process counted with one framework for both (experiments/measure/parity.py)."""
    own = flops.flops(spec, op, batch)
    return own if own is not None else req.flops.get(f"{op}:{batch}")


def environment(backend, s: Setup) -> dict[str, str]:
    """The allow-listed record of this process, once the backend is configured (its fingerprint is resume's key)."""
    return host_record() | {"precision_policy": f"{s.precision}/tf32-{'on' if s.tf32 else 'off'}"} \
        | backend.environment()


def main(request_path: str, results_path: str) -> int:
    req = Request.from_json(Path(request_path).read_text())
    pin(req.framework, req.setup.threads)
    backend = load(req.framework)
    try:
        device = backend.configure(req.setup)
    except Unavailable as e:
        print(f"nnbench: error: {e}", file=sys.stderr)
        return 3
    req = dataclasses.replace(req, budget=timing.resolved(req.budget, device))  # bench.sync=auto, on this device
    env, machine = environment(backend, req.setup) | {"sync_policy": req.budget.sync}, machine_record()
    peak = calibrated(backend, req, env)
    spec = models.declared(**req.model)  # built here for this framework only: no other side is imported
    startup: float | None = time.time() - psutil.Process().create_time()  # a spawn's imports; a fork's set-up only
    threads = intra_op_threads(env)
    bench = Workbench(backend, spec, req, device)
    if req.paired:
        return paired(bench, Ready(env, machine, startup, threads, cores(), peak))
    with open(results_path, "a") as f:
        for point in req.points:
            # each op's model and state are freed before the next op is built
            if req.profile_dir:
                where = Path(req.profile_dir) / f"bs{point.batch_size}"
                ops = {op: profile.profile_op(backend, spec, req, op, point.batch_size, where / op) for op in point.ops}
            else:
                ops = {op: measure_op(bench, op, point.batch_size, threads) for op in point.ops}
            f.write(PointResult(point.batch_size, device, env, ops, peak, machine=machine,
                                startup_s=startup).to_json() + "\n")
            f.flush()
            startup = None
    return 0


def calibrated(backend, req: Request, env: dict[str, str]) -> float | None:
    """The peak TFLOP/s of this framework and set-up, from the sweep's cache of calibrated peaks or measured here."""
    if not req.peaks or req.profile_dir:
        return None
    calibrate = partial(peaks.calibrate, backend.matmul, budget=peaks.within(req.budget))
    return peaks.calibrated(Path(req.peaks), env, req.framework, calibrate)


def served(bench: Workbench, ready: Ready) -> list[tuple[Workbench, Ready]]:
    """Each set-up a paired worker serves, configured in turn: the request's own (`bench`, `ready`), then each of its
    `variants`, with its own environment record and peak (variants sharing one process: harness/designs.py)."""
    out = [(bench, ready)]
    for setup in bench.req.variants:
        req = dataclasses.replace(bench.req, setup=setup, variants=())
        device = bench.backend.configure(setup)
        env = environment(bench.backend, setup) | {"sync_policy": req.budget.sync}
        out.append((Workbench(bench.backend, bench.spec, req, device),
                    dataclasses.replace(ready, environment=env, peak_tflops=calibrated(bench.backend, req, env))))
    return out


def prepare(bench: Workbench, command: Command):
    """One op of a paired request, as a timed worker prepares it: build, first call (the device check), warm-up,
    block length, FLOPs and the memory it took. (the Step, its Prepared), or (None, a skipped Prepared) where the op
    can't run here."""
    backend, spec, req = bench.backend, bench.spec, bench.req
    op, batch = command.op, command.batch_size
    backend.reset_peak_memory()
    rss, hwm = resident()
    base = rss if reset_high_water() else hwm
    try:
        step = backend.prepare(spec, op, batch, req.seed)
    except Unsupported as e:
        return None, Prepared("skipped", reason=str(e))
    seen: list[str] = []
    hits = backend.cache_hits()
    first, warmup, block = timing.start(step.fn, step.sync, req.budget,
                                        inspect=lambda o: seen.append(validate_device(step, o, bench.device)))
    peak = backend.peak_memory()
    ready = Prepared("ok", device=seen[0], first_call_s=first, warmup_s=warmup, block=block,
                     flops=counted(spec, req, op, batch), peak_mem_bytes=max(0, resident()[1] - base),
                     device_peak_mem_bytes=peak)
    if step.compiles:
        ready.compiles, ready.compile_cache_hits = step.compiles(), backend.cache_hits() - hits
    return step, ready


def shifted(layout: int) -> tuple[bytearray, mmap.mmap]:
    """Memory taken before an op is built, sized by `layout`, so that its buffers land elsewhere: up to 64 KiB of
    the heap (in 16-byte steps: the small and medium blocks after it move, and their place within a page) and up to
    16 MiB of address space that is never touched (the large blocks mmap'd after it move by whole pages). A worker
    forked by a fork server starts from the server's memory image, so without this its buffers land at the same
    addresses in every trial, and that layout's luck is a bias its trials share: on a quiet 2-core machine the
    workers of one of two fork servers of the same interpreter ran torch mlp_relu bs128 inference 6.4% apart from the
    other's in every trial (2% at bs512, 6% at bs32); with a layout drawn per cell, 0.2-1.6% (docs/evidence.md)."""
    return bytearray(16 * (layout % 4096)), mmap.mmap(-1, mmap.PAGESIZE * (1 + (layout // 4096) % 4096))


def paired(bench: Workbench, ready: Ready) -> int:
    """Serve a paired request: answer `Ready` for each set-up served, then per command prepare an op of one set-up
    (`Prepared`; another cell's ops are freed first), time one `Burst` of it, or end. Between commands the worker
    waits in a read (the parent also stops it, threads and all, while another worker runs). A worker serving several
    set-ups configures each before its command: its precision policy holds for that set-up's calls alone."""
    try:
        benches = served(bench, ready)
    except Unavailable as e:
        print(f"nnbench: error: {e}", file=sys.stderr)
        return 3
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(bench.req.paired)
        commands = sock.makefile("rb")
        sock.sendall(b"".join(r.to_json().encode() + b"\n" for _, r in benches))
        steps, padding, cell = {}, {}, None  # set-up -> (its Step, its Prepared) and its padding, of the last cell
        for line in commands:
            command = Command.from_json(line)
            if command.do == "end":
                break
            mine = benches[command.variant][0]
            if len(benches) > 1:
                mine.backend.configure(mine.req.setup)
            if command.do == "prepare":
                if (command.batch_size, command.op) != cell:  # the previous cell's models, state and padding freed
                    steps, padding, cell = {}, {}, (command.batch_size, command.op)
                steps.pop(command.variant, None)  # and this set-up's op before it is built again
                padding[command.variant] = None
                padding[command.variant] = shifted(command.layout)  # held while the op is measured
                steps[command.variant] = prepare(mine, command)
                sock.sendall(steps[command.variant][1].to_json().encode() + b"\n")
                continue
            sock.sendall(burst(*steps[command.variant], command.seconds, mine.req.budget.sync).to_json().encode()
                         + b"\n")
    return 0


def burst(step, prepared: Prepared, seconds: float, sync_policy: str) -> Burst:
    """One burst of a prepared op: blocks of calls for about `seconds` (synced or pipelined: `bench.sync`), and the
    change of `meter()` over them."""
    before = meter()
    samples = timing.burst(step.fn, step.sync, prepared.block, seconds, sync_policy=sync_policy)
    after = meter()
    compiles = step.compiles() if step.compiles else None
    return Burst(samples, {k: after[k] - before[k] for k in after}, compiles)


def smoke(framework: str) -> int:
    """Build LeNet and take one training step (an inference call where the backend has no training) with the
    framework's default set-up on the CPU: nnbench's model code works with the framework as this interpreter has it
    (`nnbench versions` asks each environment it builds)."""
    try:
        backend = load(framework)
        backend.configure(traits(framework).smoke)
        try:
            step = backend.prepare(models.load("lenet"), "training", 2, 0)
        except Unsupported:
            step = backend.prepare(models.load("lenet"), "inference", 2, 0)
        step.sync(step.fn())
    except Exception as e:  # whatever the framework raises: one line for the one who built the environment
        print(f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:300]}")
        return 3
    return 0


def probe(framework: str, setup: str) -> int:
    """Check that the framework imports and can run this set-up, before a sweep writes anything; print the device
    and the environment's fingerprint (what the worker will record)."""
    try:
        s = Setup.from_json(setup)
        pin(framework, s.threads)
        backend = load(framework)
        print(backend.probe(s))  # a device only one process may hold stays closed: a worker may need it
        print(fingerprint(environment(backend, s)))
    except ImportError as e:
        print(f"{e} (in {sys.executable}): install it (pip install -e . in that environment)")
        return 3
    except Unavailable as e:
        print(e)
        return 3
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "--probe":
        sys.exit(probe(*sys.argv[2:4]))
    if sys.argv[1] == "--smoke":
        sys.exit(smoke(sys.argv[2]))
    sys.exit(main(*sys.argv[1:3]))
