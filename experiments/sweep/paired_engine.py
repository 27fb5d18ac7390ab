"""A cell's variants measured together, paired: the jobs of a sweep that differ only in what a comparison spans
(framework, precision, device, runtime) form a group, and the group's first job measures all of them on one machine,
as warm workers that take turns (`harness.pairs`); the group's other jobs find their points measured. Each job's
points are then read, judged against the group's baseline, saved and logged as an unpaired job's are (`sweep.points`,
`sweep.unpaired_engine`), once no worker measures. Parent side.

Hydra's jobs stay what they were (overrides, presets, launchers, `--cfg`); only who measures them changes. On a
cluster the group runs in its first job, on one node, so no ratio divides two machines."""
from __future__ import annotations

import dataclasses
import json
import logging
import math
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml
from omegaconf import OmegaConf

from experiments.common.config import EXTERNAL, VARIANT_KEYS, Config, logged
from experiments.common.job import Job
from experiments.common.protocol import Json, Measurement, OpResult, Point, PointResult, Ready
from experiments.harness import manager, pairs
from experiments.measure.environment import spec_record
from experiments.measure.reading import Paired
from experiments.measure.stats import summarize
from experiments.stats.geomean import Evidence
from experiments.stats.paired import PairedComparison, judge_pairs
from experiments.store import records
from experiments.store.sweepdir import PEAKS, Sweep, SweepState
from experiments.sweep import console, preflight, requeue, stopping, unpaired_engine
from experiments.sweep.points import Points

log = logging.getLogger("nnbench")

TRIALS = "trials"  # in the group's first job dir: every trial's cells, every burst (harness/pairs.py)
ANSWER = "evidence.json"  # in the same dir: each comparison's per-trial log ratios, for the sweep's answer


def spans(key: str) -> bool:
    """Whether a config key is one a comparison spans: a cell's variants may differ in it."""
    return key.split(".")[0] in VARIANT_KEYS


def paired(job: Job) -> bool:
    """Whether the job's points can be measured paired: nnbench's own worker (an external runner times itself)."""
    return job.config.bench.paired and job.config.framework.name != EXTERNAL


def cell_key(job: Job) -> str:
    """What a comparison holds fixed: the job's config without the keys a comparison spans."""
    config = {k: v for k, v in logged(job.config).items() if k not in VARIANT_KEYS}
    return json.dumps(config, sort_keys=True, default=str)


def plan(jobs: list[Job]) -> list[list[int]]:
    """The jobs measured together, by number, in sweep order: those that differ only in VARIANT_KEYS; an unpaired
    job alone."""
    groups: dict[str, list[int]] = {}
    for i, job in enumerate(jobs):
        groups.setdefault(cell_key(job) if paired(job) else f"alone {i}", []).append(i)
    return list(groups.values())


def measurements(job: Job) -> int:
    """What the progress counts for a job: paired, its cells times the trials; else its points times the workers."""
    if not paired(job):
        return len(job.points) * job.workers
    cells = sum(len(p.ops) for p in job.points)
    return cells * job.config.bench.processes + len(job.points) * job.config.profile


def sibling(config: dict, fingerprint: str | None, device: str | None = None) -> Job:
    """Another job of this one's group, from its config as the sweep logged it (a launcher's process has only its
    own job): validated as the door did, its points planned."""
    typed = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(Config), config))
    return dataclasses.replace(preflight.job(typed), fingerprint=fingerprint, device=device)


def labels(jobs: list[Job]) -> list[str]:
    """Each job's name in its group: its variant (`jax-jit fp32`), and where two share one, what tells them apart
    (`jax-jit fp32 runtime.python=/envs/a/bin/python`); where nothing does (an A/A comparison,
    `framework.threads=1,1`), its place among its namesakes (`jax-jit fp32 (2)`): a point is its cell's baseline
    by its name."""
    flat = [flat_variant(j) for j in jobs]
    keys = [k for k in (flat[0] if flat else ()) if len({f.get(k) for f in flat}) > 1]
    out = []
    for job, f in zip(jobs, flat):
        same = [j for j, g in zip(jobs, flat) if j.variant == job.variant]
        apart = [k for k in keys if len({flat_variant(j)[k] for j in same}) > 1]
        out.append(" ".join([job.variant, *(f"{k}={f[k]}" for k in apart)]))
    return [f"{name} ({out[:i].count(name) + 1})" if name in out[:i] else name for i, name in enumerate(out)]


def flat_variant(job: Job) -> dict[str, str]:
    """The job's values of the keys a comparison spans, flattened (`runtime.python`)."""
    c = logged(job.config)
    out = {}
    for key in VARIANT_KEYS:
        value = c.get(key)
        items = value.items() if isinstance(value, dict) else [("", value)]
        out |= {f"{key}.{k}" if k else key: str(v) for k, v in items}
    python = c["runtime"].get("python")
    if python:  # an environment `nnbench versions` built: its spec (jax==0.10.1), not its path
        out["runtime.python"] = spec_record(Path(python).parent.parent).get("env_spec", python)
    return out


def baseline(jobs: list[Job], wanted: str) -> int:
    """The group's baseline: the first job of the variant `report.baseline` names, else the first job."""
    return next((i for i, j in enumerate(jobs) if j.variant == wanted), 0)


def design(job: Job) -> pairs.Design:
    b = job.config.bench
    return pairs.Design(b.burst_s, b.rounds, b.processes, max(b.max_processes, b.processes), seed=job.config.seed,
                        paired_design=str(b.paired_design))


class Group:
    """A group's jobs measured paired: their sides and labels, their cells, what each side is compared with (the
    baseline, or along `report.along` the side before it), and what each job's points got."""

    def __init__(self, jobs: list[Job], collectors: list[Points], directory: Path, caches: list[Path | None],
                 peaks: Path | None, overrides: list[str] = ()):
        self.jobs, self.collectors, self.directory, self.overrides = jobs, collectors, directory, list(overrides)
        self.live = [i for i, j in enumerate(jobs) if unpaired_engine.lacks(j) is None]  # the jobs with a worker
        live = [jobs[i] for i in self.live]
        self.names, self.bases = labels(live), bases(live, jobs[0].config.report)
        self.sides = [warm(pairs.Side.of(j, name, caches[i], peaks)) for i, j, name in zip(self.live, live, self.names)]
        every = [c for j in live for c in pairs.cells_of(j.points)]
        wanted = {(p.batch_size, op) for c in collectors for p in c.job.points for op in p.ops}  # resume may leave some
        self.cells = [c for c in dict.fromkeys(every) if (c.batch_size, c.op) in wanted]
        c = jobs[0].config
        self.threshold, self.alpha, self.target = c.report.threshold, c.report.alpha, c.bench.target_ratio_ci
        self.plan = pairs.plan(self.sides, str(c.bench.paired_design))  # the Session's: which sides share a worker
        self.looks = design(jobs[0]).looks  # a cell is judged after each of its trials from the first look on

    def pairs_on(self, c: pairs.Compared) -> list[tuple[int, int]]:
        """The (side, its base) compared on a cell: both measured it."""
        return [(s, b) for s, b in enumerate(self.bases) if s != b and c.skipped(s) is None and c.skipped(b) is None]

    def judged(self, compared: list[pairs.Compared]) -> dict[tuple[int, int], PairedComparison]:
        """Every side's comparison with its base on every cell, judged together: (side, cell) -> verdict."""
        keys = [(s, b, i) for i, c in enumerate(compared) for s, b in self.pairs_on(c)]
        verdicts = judge_pairs([compared[i].log_ratios(s, b) for s, b, i in keys], self.threshold, self.alpha,
                               self.looks, [compared[i].floor(s, b) for s, b, i in keys])
        return {(s, i): v for (s, _, i), v in zip(keys, verdicts)}

    def settled(self, compared: list[pairs.Compared]) -> list[bool]:
        """A cell needs more trials while a comparison on it is inconclusive or measured less precisely than
        ±target_ratio_ci (`PairedComparison.precision`); not for one whose side failed on it (that side sits the cell
        out: more trials can't settle it)."""
        judged = self.judged(compared)
        return [all(judged[(s, i)].conclusive and judged[(s, i)].precision <= self.target for s, b in self.pairs_on(c)
                    if not {s, b} & c.failed()) for i, c in enumerate(compared)]

    def keep(self, compared: list[pairs.Compared], interrupted: str | None = None) -> None:
        """Each job's points from the trials, judged against their base, passed on to its collector (saved as
        interrupted where a signal cut the trials short); the comparisons' trial log ratios in `ANSWER`."""
        judged = self.judged(compared)
        where = {c.cell: i for i, c in enumerate(compared)}
        readies = [next((t.turns[s].ready for c in compared for t in c.trials if t.turns and t.turns[s].ready), None)
                   for s in range(len(self.sides))]
        answer, profiled = Answer(), self.to_profile(judged)
        for s, j in enumerate(self.live):
            collector = self.collectors[j]
            framework = str(collector.job.config.framework.name)
            for i, point in enumerate(collector.job.points):
                mine = [(op, where[cell]) for op in point.ops if (cell := pairs.Cell(point.batch_size, op)) in where]
                collector.results[i] = results(point, [compared[c] for _, c in mine], s, framework)
                ops = {op: judged[(s, c)] for op, c in mine if (s, c) in judged}
                collector.paired[i] = self.paired(s, ops, readies, point.batch_size)
                collector.changed[i] = {op for op, c in mine if (s, c) in profiled}
                collector.cut(i, interrupted) if interrupted else collector.measured_all(i)
            answer.cells += [self.evidence(s, c, judged[(s, i)]) for i, c in enumerate(compared)
                             if (s, i) in judged and judged[(s, i)].pairs]
        (self.directory.parent / ANSWER).write_text(answer.to_json())
        console.set_aside(answer.cells)

    def to_profile(self, judged: dict[tuple[int, int], PairedComparison]) -> set[tuple[int, int]]:
        """With report.profile_changed, (side, cell) of both sides of every comparison judged slower or faster."""
        if not self.jobs[0].config.report.profile_changed:
            return set()
        return {(side, i) for (s, i), c in judged.items() if c.verdict.changed for side in (s, self.bases[s])}

    def paired(self, s: int, ops: dict[str, PairedComparison], readies: list[Ready | None], batch_size: int) -> Paired:
        b = self.bases[s]
        if s == b:
            return Paired(self.names[s], self.names[b], design=self.plan.name)
        job = self.jobs[self.live[s]]
        return Paired(self.names[s], self.names[b], {op: c for op, c in ops.items() if c.pairs},
                      differences(readies[s], job, readies[b], self.jobs[self.live[b]]),
                      {op: repro(self.overrides, pairs.Cell(batch_size, op)) for op in ops}, self.plan.design(s, b))

    def evidence(self, s: int, c: pairs.Compared, judged: PairedComparison) -> Evidence:
        b = self.bases[s]
        trials = c.used(s, b)
        return Evidence(str(self.directory.parent), records.model_name(self.jobs[0]), c.cell.op, c.cell.batch_size,
                        self.names[s], self.names[b], [t.index for t in trials], [t.log_ratio(s, b) for t in trials],
                        judged, [f"trial {t.index}: {why}" for t, why in c.set_aside(s, b)])


# Overrides a cell's repro leaves out: it sets the point itself, and a fixed sweep dir or parent would clash.
NOT_IN_REPRO = ("batch_size", "ops", "resume", "mlflow.parent_run_id", "hydra.")


def repro(overrides: list[str], cell: pairs.Cell) -> str:
    """The command that measures just this cell again, paired as this sweep did (its overrides, the one batch size
    and op), quoted for any shell: `python -m experiments.run -m framework=jax,torch model=lenet batch_size=32
    'ops=[inference]'`."""
    kept = [o for o in overrides if not o.lstrip("+~").split("=", 1)[0].startswith(NOT_IN_REPRO)]
    return shlex.join(["python", "-m", "experiments.run", "-m", *kept, f"batch_size={cell.batch_size}",
                       f"ops=[{cell.op}]"])


def bases(jobs: list[Job], report) -> list[int]:
    """What each job is compared with, by index (its own: a baseline): with `report.along` unset, the first job of
    the variant `report.baseline` names (else the first job); along a key, the job before it along that key, the
    other keys a comparison spans the same."""
    if not report.along:
        base = baseline(jobs, report.baseline)
        return [base] * len(jobs)
    flat = [flat_variant(j) for j in jobs]
    others = [tuple(v for k, v in f.items() if not along(k, report.along)) for f in flat]
    return [max((j for j in range(i) if others[j] == key), default=i) for i, key in enumerate(others)]


def along(key: str, axis: str) -> bool:
    """Whether the flattened key is the axis or lies under it (`framework.compile` under `framework.compile`)."""
    return key == axis or key.startswith(axis + ".")


# A paired worker's warm-up before a cell's rounds: the preset's calls (warmup_calls), for at most this long. Its
# bursts then take turns with the other variants' for the rounds, whose median ignores what warm-up is left.
PAIRED_WARMUP_S = 0.05


def warm(side: pairs.Side) -> pairs.Side:
    budget = dataclasses.replace(side.request.budget, warmup_s=min(side.request.budget.warmup_s, PAIRED_WARMUP_S))
    return dataclasses.replace(side, request=dataclasses.replace(side.request, budget=budget))


@dataclass
class Answer(Json):
    """A group's comparisons trial by trial, in its first job's dir (`ANSWER`): the sweep's end reads every group's
    for the geometric means' intervals (`stats.geomean`)."""

    cells: list[Evidence] = field(default_factory=list)

    @classmethod
    def read_all(cls, sweep_dir: Path) -> list[Evidence]:
        return [e for path in sorted(sweep_dir.glob(f"**/{ANSWER}")) for e in cls.from_json(path.read_text()).cells]


# What a comparison states where it differs between a variant and its baseline, besides the variant's name: the
# name, and how it is read from a side (its worker's record, or its job).
LIKE = (("threads", lambda r, j: r.threads), ("precision policy", lambda r, j: r.environment.get("precision_policy")),
        ("sync", lambda r, j: r.environment.get("sync_policy")), ("host", lambda r, j: r.environment.get("host")),
        ("device", lambda r, j: r.environment.get("device_name")), ("allocator", lambda r, j: j.config.runtime.allocator),
        ("layout", lambda r, j: j.config.framework.memory_format),
        ("compile mode", lambda r, j: j.config.framework.compile_mode))


def differences(ready: Ready | None, job: Job, base_ready: Ready | None, base: Job) -> tuple[str, ...]:
    """What differs between a variant and its baseline besides the variant itself, e.g. `layout nhwc vs contiguous`;
    and a speedup between two frameworks not shown to compute the same function."""
    out = []
    if ready is not None and base_ready is not None:
        for name, read in LIKE:
            a, b = read(ready, job), read(base_ready, base)
            if str(a) != str(b):
                out.append(f"{name} {a} vs {b}")
    if job.config.framework.name != base.config.framework.name and job.tags.get("parity") != "ok":
        out.append(f"parity {job.tags.get('parity', 'unchecked')}: not shown to compute the same function")
    return tuple(out)


def measure(members: list[tuple[Job, Path]], state: SweepState, sweep: Sweep, in_launcher: bool) -> list[Points]:
    """The group's jobs (each with its dir), measured paired, then profiled (profile=true) and logged: each job's
    points in its collector. Nothing raises but an interrupt, after what was measured is saved and logged."""
    collectors = []
    for job, directory in members:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "config.yaml").write_text(yaml.safe_dump(logged(job.config), sort_keys=False))
        collectors.append(Points(job, directory, state, sweep, in_launcher, ticks=False))
    jobs = [job for job, _ in members]
    caches = [state.compile_cache(sweep.directory, job) for job in jobs]
    try:
        if any(job.points for job in jobs):
            run_group(jobs, collectors, members[0][1].parent, caches, sweep.directory / PEAKS, state.overrides)
        for collector, cache in zip(collectors, caches):
            collector.spent = collector.workers_spent()
            if collector.waiting:
                profile(collector, cache)
    finally:
        for collector in collectors:
            collector.log_queued()
    return collectors


def profile(collector: Points, cache: Path | None) -> None:
    """One more worker profiles the job's saved points (profile=true; report.profile_changed: the cells judged
    changed), as an unpaired job's does; what it cost, its start included, in one line."""
    start, names = time.perf_counter(), ", ".join(k.record.run_name for k in collector.waiting)
    measure_one, server = unpaired_engine.measurer(collector.job, collector.job_dir, cache)
    try:
        unpaired_engine.profile(collector, measure_one)
    finally:
        if server is not None:
            manager.done(server)
        log.info("profiled %s in %.1f s wall, the worker's start included", names, time.perf_counter() - start)


def run_group(jobs: list[Job], collectors: list[Points], out: Path, caches: list[Path | None],
              peaks: Path | None, overrides: list[str] = ()) -> Group:
    """Measure the group's jobs paired and pass each job's points on to its collector: read, judged against the
    baseline, saved, then profiled and logged. A signal keeps what the trials measured: every point saved as
    interrupted, then Signalled is raised; where SLURM runs the job again, nothing is saved (its next run measures
    the group from the start, as it does the points an unpaired job had in progress)."""
    group = Group(jobs, collectors, out / TRIALS, caches, peaks, overrides)
    for i in (i for i, j in enumerate(jobs) if i not in group.live):
        collectors[i].skip_all(unpaired_engine.lacks(jobs[i]))
    if not group.cells:
        return group
    session = pairs.Session(group.sides, group.cells, design(jobs[0]), group.directory, on_trial=progress(group),
                            checkpoint=stopping.raise_pending)
    try:
        session.run(group.settled)
    except stopping.Signalled as e:
        if not (collectors[0].in_launcher and requeue.runs_again(e.signum)):  # else left to the job's next run (SLURM)
            group.keep(session.compared, interrupted=f"interrupted by {e} while the cell's trials ran")
        raise
    group.keep(session.compared)
    return group


def results(point: Point, compared: list[pairs.Compared], side: int, framework: str) -> list[PointResult]:
    """Side `side`'s point as its trials measured it: one PointResult per trial (a fresh process), each holding the
    ops of the point's cells that the trial measured; a trial in which this side's worker failed fails the point,
    but for a first hang on a cell (`Compared.failed`)."""
    out = []
    for index in sorted({t.index for c in compared for t in c.trials}):
        ops, failed = {}, None
        for c in compared:
            t = next((t for t in c.trials if t.index == index), None)
            if t is None or (t.failure is not None and t.failed_side not in (side, None)):
                continue  # not in this trial, or another side's worker failed: nothing of this side's
            if t.failure is not None:
                if c.retried(t):
                    continue  # a hang that a fresh worker gets to measure again (kept in its trial's file)
                failed = t
                break
            if t.turns[side].prepared is not None:  # else it sat the cell out (its worker failed on it before)
                ops[c.cell.op] = op_result(t.turns[side], point.batch_size, framework, t.background_cores())
        if failed is not None:
            out.append(PointResult(point.batch_size, failure=failed.failure, stderr_tail=failed.stderr_tail))
        elif ops:
            ready = next(t.turns[side].ready for c in compared for t in c.trials if t.index == index and t.turns)
            out.append(PointResult(point.batch_size, next(iter(ops.values())).device or "n/a", ready.environment, ops,
                                   ready.peak_tflops, machine=ready.machine, startup_s=ready.startup_s))
    return out


def op_result(turn: pairs.Turn, batch: int, framework: str, other_cores: float) -> OpResult:
    """One side's turn at a cell as a timed worker's op result: its bursts' samples as one process's, with the
    preparation's first call, warm-up, FLOPs and memory, and the other processes' CPU use over the rounds."""
    p = turn.prepared
    if p is None or p.status != "ok":
        return OpResult("skipped", reason=p.reason if p else "not prepared")
    meter = {k: sum(b.meter.get(k, 0.0) for b in turn.bursts) for k in turn.bursts[0].meter}
    sampling = meter.get("wall_s", 0.0)
    m = Measurement([x for b in turn.bursts for x in b.samples_s], p.block, p.first_call_s, "rounds",
                    p.first_call_s + p.warmup_s + sampling, meter, p.warmup_s, sampling)
    compiles = turn.bursts[-1].compiles if turn.bursts[-1].compiles is not None else p.compiles
    return OpResult("ok", device=p.device, measurement=m, stats=summarize([m], batch), calls_per_block=p.block,
                    flops=p.flops, compiles=compiles, compile_cache_hits=p.compile_cache_hits,
                    page_faults_per_call=meter.get("minor_faults", 0.0) / max(m.calls, 1),
                    peak_mem_bytes=p.peak_mem_bytes, device_peak_mem_bytes=p.device_peak_mem_bytes,
                    background_cores=other_cores, threads=turn.ready.threads if turn.ready else None,
                    oversubscribed=turn.oversubscribed(framework, other_cores))


def progress(group: Group):
    """A console line per trial and cell: each variant's median in it (the workers are stopped meanwhile)."""
    model = records.model_name(group.jobs[0])

    def said(c: pairs.Compared, t: pairs.Trial) -> None:
        tick = group.collectors[group.live[0]].tick(len(group.sides))
        medians = [f"{group.names[s]} {float(np.median([x for b in turn.bursts for x in b.samples_s])) * 1e3:.4g} ms"
                   for s, turn in enumerate(t.turns) if turn.ok]
        again = " (a fresh worker tries the cell again)" if c.retried(t) else ""
        what = f"FAILED: {t.failure}{again}" if t.failure else ", ".join(medians) or "skipped"
        log.info("%s %s %s bs%d, trial %d: %s", tick, model, c.cell.op, c.cell.batch_size, t.index + 1, what)
    return said
